package bloomkv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/bloomkv/bloomkv/internal/invariants"
)

// lifetimeValue is version ver of key i: the key's name and version in a
// header, then incompressible bytes derived from both, so that a value
// read from the wrong place (another key, another version's freed block,
// an unmapped page) cannot pass for the right one.
func lifetimeValue(i int, ver uint64, size int) []byte {
	v := make([]byte, size)
	copy(v, fmt.Sprintf("key%05d", i))
	binary.LittleEndian.PutUint64(v[8:], ver)
	rng := rand.New(rand.NewPCG(uint64(i), ver))
	for j := 16; j+8 <= size; j += 8 {
		binary.LittleEndian.PutUint64(v[j:], rng.Uint64())
	}
	return v
}

// TestGetCopiesBeforeRelease pins down that the value Get, Snapshot.Get
// and ValueSize return, and the value GetFunc passes, was taken while the segment holding it was still
// mapped. Readers Get keys whose segments a writer keeps replacing (tiny
// memtables, fan-in 2, uncompressed values read straight from the file
// mapping), so a segment is often unmapped the moment its last reader
// releases it. Copying after that release crashed the process, or
// returned another key's value with a nil error, within a second. In an
// invariants build (-tags invariants) such a copy faults on the first Get.
func TestGetCopiesBeforeRelease(t *testing.T) {
	const keys, valueSize = 2000, 4 << 10
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	o := &Options{MemtableSize: 256 << 10, CompactionFanIn: 2, DisableCompression: true}
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "key%05d", i) }
	for i := range keys {
		if err := db.Put(key(i), lifetimeValue(i, 0, valueSize)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(who string, i int, v []byte) error {
		if len(v) != valueSize || !bytes.Equal(v[:8], key(i)) {
			return fmt.Errorf("%s(key%05d) = %d bytes starting %q", who, i, len(v), v[:min(len(v), 8)])
		}
		ver := binary.LittleEndian.Uint64(v[8:])
		if want := lifetimeValue(i, ver, valueSize); !bytes.Equal(v, want) {
			return fmt.Errorf("%s(key%05d): version %d's header with other bytes", who, i, ver)
		}
		return nil
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, 4)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				i := rng.IntN(keys)
				var v []byte
				var err error
				who := "Get"
				switch n % 3 {
				case 0:
					v, err = db.Get(key(i))
				case 1:
					// GetFunc's value is checked in place: a use of
					// it after the read state's release is what the
					// invariants build must catch.
					who = "GetFunc"
					err = db.GetFunc(key(i), func(v []byte) error { return check(who, i, v) })
					v = lifetimeValue(i, 0, valueSize)
				case 2:
					who = "Snapshot.Get"
					var s *Snapshot
					if s, err = db.NewSnapshot(); err == nil {
						v, err = s.Get(key(i))
						s.Close()
					}
				}
				if err == nil {
					err = check(who, i, v)
				}
				if err == nil {
					var size int
					if size, err = db.ValueSize(key(i)); err == nil && size != valueSize {
						err = fmt.Errorf("ValueSize(key%05d) = %d", i, size)
					}
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var werr error
	for n := range rounds * keys {
		i := rng.IntN(keys)
		if werr = db.Put(key(i), lifetimeValue(i, uint64(n+1), valueSize)); werr != nil {
			break
		}
	}
	close(done)
	wg.Wait()
	close(errc)
	err := errors.Join(werr, <-errc)
	if err != nil {
		t.Fatal(err)
	}
	if st := db.Stats(); st.Compactions == 0 {
		t.Fatalf("no compaction ran: the test did not replace segments under its readers (%+v)", st)
	}
}

func TestGetFunc(t *testing.T) {
	db := mustOpen(t, t.TempDir(), &Options{MemtableSize: 64 << 10})
	defer db.Close()
	for i := range 3000 { // several segments and a memtable
		if err := db.Put(fmt.Appendf(nil, "k%05d", i), fmt.Appendf(nil, "v%05d-%s", i, bytes.Repeat([]byte{'x'}, i%200))); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := db.NewSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if err := db.Put([]byte("k00007"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 7, 1234, 2999} {
		k := fmt.Appendf(nil, "k%05d", i)
		want, err := db.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := db.GetFunc(k, func(v []byte) error { got = bytes.Clone(v); return nil }); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("GetFunc(%s) saw %q, %v; Get returns %q", k, got, err, want)
		}
		old, _ := snap.Get(k)
		if err := snap.GetFunc(k, func(v []byte) error { got = bytes.Clone(v); return nil }); err != nil || !bytes.Equal(got, old) {
			t.Fatalf("Snapshot.GetFunc(%s) saw %q, %v; Snapshot.Get returns %q", k, got, err, old)
		}
	}
	called := false
	if err := db.GetFunc([]byte("absent"), func([]byte) error { called = true; return nil }); !errors.Is(err, ErrNotFound) || called {
		t.Fatalf("GetFunc of an absent key: %v, fn called %v", err, called)
	}
	errStop := errors.New("stop")
	if err := db.GetFunc([]byte("k00001"), func([]byte) error { return errStop }); err != errStop {
		t.Fatalf("GetFunc returned %v, not fn's error", err)
	}
	if err := db.GetFunc(nil, func([]byte) error { return nil }); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("GetFunc(nil key): %v", err)
	}
	snap.Close()
	if err := snap.GetFunc([]byte("k00001"), func([]byte) error { return nil }); !errors.Is(err, ErrSnapshotReleased) {
		t.Fatalf("GetFunc on a released snapshot: %v", err)
	}
	db.Close()
	if err := db.GetFunc([]byte("k00001"), func([]byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetFunc after Close: %v", err)
	}
}

// TestGetFuncKeptValueFaults checks the invariants build's promise for
// GetFunc: a value kept past fn's return and read later kills the process
// at once, rather than reading memory a compaction may have unmapped. The
// read runs in a child process, which must die of the fault.
func TestGetFuncKeptValueFaults(t *testing.T) {
	storeFaultTest(t, "BLOOMKV_GETFUNC_CHILD", false, "read a value kept past GetFunc", func(t *testing.T, db *DB) []byte {
		var kept []byte
		mustDo(t, db.GetFunc([]byte("a"), func(v []byte) error { kept = v; return nil }))
		return kept
	})
}

// storeFaultTest is the frame of the tests that a slice the store
// returned faults when read after the call that ends it. The parent, in
// an invariants build where expired regions are protected, writes a store
// (the keys "a" and "b", flushed to a segment if flush) and runs the test
// again in a child process, which must die of a memory fault. The child
// (env names the store's directory) opens the store, takes the slice from
// ended, which also ends its lifetime, and reads it.
func storeFaultTest(t *testing.T, env string, flush bool, what string, ended func(t *testing.T, db *DB) []byte) {
	if dir := os.Getenv(env); dir != "" {
		b := ended(t, mustOpen(t, dir, nil))
		println(what+":", bytes.Clone(b)[0]) // must fault
		os.Exit(0)
	}
	if !invariants.Enabled {
		t.Skip("needs -tags invariants")
	}
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("expired regions are poisoned, not protected, without mmap")
	}
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	for _, k := range []string{"a", "b"} {
		mustDo(t, db.Put([]byte(k), []byte("value")))
	}
	if flush {
		mustDo(t, db.Flush())
	}
	mustDo(t, db.Close())
	childMustFault(t, t.Name(), env, dir, what)
}

// childMustFault runs test again in a child process, with the environment
// variable env set to val, and fails t unless the child dies of a memory
// fault; what says what the child did, for the message if it does not.
func childMustFault(t *testing.T, test, env, val, what string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env+"="+val)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child %s and exited normally:\n%s", what, out)
	}
	if !strings.Contains(string(out), "unexpected fault address") && !strings.Contains(string(out), "SIGSEGV") {
		t.Fatalf("child failed, but not with a memory fault: %v\n%s", err, out)
	}
}

// TestKeyAfterRefusedMoveFaults checks that a positioning call that
// cannot move (the DB was closed under the iterator) still ends the Key
// and Value the iterator returned before, as every positioning call does:
// in the invariants build a read of them afterwards faults, in a child
// process, which must die of it.
func TestKeyAfterRefusedMoveFaults(t *testing.T) {
	storeFaultTest(t, "BLOOMKV_REFUSED_CHILD", false, "read a key after a refused move", func(t *testing.T, db *DB) []byte {
		it, err := db.NewIterator(nil)
		if err != nil || !it.First() {
			t.Fatal("no first key:", err)
		}
		k := it.Key()
		mustDo(t, db.Close())
		if it.Next() {
			t.Fatal("Next moved on a closed DB")
		}
		return k
	})
}

// TestValueAfterIteratorCloseFaults: Close ends the Key and Value an
// Iterator returned last, as a positioning call does (LIFETIMES.md): after
// it the iterator no longer holds the read state, and the segment behind
// a value may be unmapped by the next compaction. In an invariants build
// a value kept past Close and read later must fault at once, in a child
// process, instead of reading plausible bytes until a compaction happens
// to unmap them.
func TestValueAfterIteratorCloseFaults(t *testing.T) {
	storeFaultTest(t, "BLOOMKV_ITER_CLOSE_CHILD", true, "read a value after the iterator's Close", func(t *testing.T, db *DB) []byte {
		it, err := db.NewIterator(nil)
		if err != nil || !it.First() {
			t.Fatal("no first key:", err)
		}
		v := it.Value()
		mustDo(t, it.Close())
		return v
	})
}
