package bloomkv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
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
// and ValueSize return was taken while the segment holding it was still
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
				case 0, 1:
					v, err = db.Get(key(i))
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
