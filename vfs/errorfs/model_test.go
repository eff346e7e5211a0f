package errorfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/bloomkv/bloomkv/vfs"
)

// faultModel predicts, independently of Faulty, which operations a Fault
// fails: the Nth operation that matches its kinds and name pattern, and
// with Sticky every matching one after it.
type faultModel struct {
	fault   Fault
	matched int
}

func (m *faultModel) fails(op vfs.Op, base string) bool {
	if m.fault.Ops&op == 0 {
		return false
	}
	if m.fault.Name != "" {
		if ok, _ := filepath.Match(m.fault.Name, base); !ok {
			return false
		}
	}
	m.matched++
	nth := max(m.fault.Nth, 1)
	return m.matched == nth || m.fault.Sticky && m.matched > nth
}

var (
	modelFiles = []string{"000001.wal", "000002.seg", "MANIFEST"}
	modelNames = []string{"", "*.wal", "*.seg", "MANIFEST", "nothing"}
	modelOps   = []vfs.Op{vfs.OpWrite, vfs.OpSync, vfs.OpRead, vfs.OpStat, vfs.OpSyncDir}
)

func randomFault(r *rand.Rand) Fault {
	f := Fault{
		Name:   modelNames[r.IntN(len(modelNames))],
		Nth:    r.IntN(7),
		Sticky: r.IntN(2) == 0,
		Short:  r.IntN(2) == 0,
		Err:    []error{syscall.EIO, syscall.ENOSPC}[r.IntN(2)],
	}
	for f.Ops == 0 {
		for _, op := range modelOps {
			if r.IntN(3) == 0 {
				f.Ops |= op
			}
		}
	}
	return f
}

// TestFaultyMatchesModel runs random operation sequences under random
// faults and checks each outcome against faultModel: which operations
// fail, with which error, what Count and Fired report, and — through
// the FS underneath (in memory), past Faulty — the bytes each file ends up holding (a short
// failing write leaves the first half of its buffer, any other failing
// write nothing).
func TestFaultyMatchesModel(t *testing.T) {
	for seed := range uint64(150) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			runModel(t, r, randomFault(r))
		})
	}
}

func runModel(t *testing.T, r *rand.Rand, fault Fault) {
	mem, dir := memDir(t)
	fs := New(mem)
	files := make([]vfs.File, len(modelFiles))
	want := make([][]byte, len(modelFiles))
	for i, name := range modelFiles {
		f, err := fs.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	before := map[vfs.Op]int{}
	for _, op := range modelOps {
		before[op] = fs.Count(op)
	}
	fs.SetFault(fault)
	model := faultModel{fault: fault}
	counts, fired := map[vfs.Op]int{}, 0
	for step := range 40 {
		op, i := modelOps[r.IntN(len(modelOps))], r.IntN(len(files))
		counts[op]++
		base := modelFiles[i]
		if op == vfs.OpSyncDir {
			base = filepath.Base(dir) // Faulty matches the directory's own name
		}
		wantFail := model.fails(op, base)
		if wantFail {
			fired++
		}
		buf := bytes.Repeat([]byte{byte('a' + step%26)}, 1+r.IntN(9))
		n, err := doModelOp(fs, files[i], op, filepath.Join(dir, modelFiles[i]), dir, buf)
		if wantFail != (err != nil) {
			t.Fatalf("step %d %v on %s (fault %+v): err %v, want failure %v", step, op, modelFiles[i], fault, err, wantFail)
		}
		if err != nil && !errors.Is(err, fault.Err) {
			t.Fatalf("step %d %v: %v, want %v", step, op, err, fault.Err)
		}
		if op == vfs.OpWrite {
			want[i] = append(want[i], buf[:expectWritten(len(buf), wantFail, fault.Short)]...)
			if n != expectWritten(len(buf), wantFail, fault.Short) {
				t.Fatalf("step %d: wrote %d of %d bytes (fail %v, short %v)", step, n, len(buf), wantFail, fault.Short)
			}
		}
	}
	for _, op := range modelOps {
		if got := fs.Count(op) - before[op]; got != counts[op] {
			t.Errorf("Count(%v) = %d, want %d", op, got, counts[op])
		}
	}
	if fs.Fired() != fired {
		t.Errorf("Fired = %d, want %d", fs.Fired(), fired)
	}
	for i, name := range modelFiles {
		got, err := readFile(mem, filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want[i]) {
			t.Errorf("%s holds %q (%v), want %q", name, got, err, want[i])
		}
	}
}

// doModelOp performs op on f (or, for Stat, name; for SyncDir, dir).
func doModelOp(fs *FS, f vfs.File, op vfs.Op, name, dir string, buf []byte) (int, error) {
	switch op {
	case vfs.OpWrite:
		return f.Write(buf)
	case vfs.OpSync:
		return 0, f.Sync()
	case vfs.OpRead:
		_, err := f.ReadAt(make([]byte, 1), 0)
		if err == io.EOF {
			err = nil // the file may still be empty: not a fault
		}
		return 0, err
	case vfs.OpStat:
		_, err := fs.Stat(name)
		return 0, err
	default:
		return 0, fs.SyncDir(dir)
	}
}

func expectWritten(n int, fail, short bool) int {
	switch {
	case !fail:
		return n
	case short && n > 1:
		return n / 2
	default:
		return 0
	}
}

// TestFaultyRearm checks that SetFault restarts the count for Nth and
// that Clear stops all failures, as a test that fails step k, then k+1,
// on one Faulty relies on.
func TestFaultyRearm(t *testing.T) {
	mem, dir := memDir(t)
	fs := New(mem)
	f, err := fs.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syncs := func(n int) (failed []int) {
		for i := 1; i <= n; i++ {
			if f.Sync() != nil {
				failed = append(failed, i)
			}
		}
		return failed
	}
	fs.SetFault(Fault{Ops: vfs.OpSync, Nth: 2})
	if got := fmt.Sprint(syncs(3)); got != "[2]" {
		t.Fatalf("first arming failed syncs %s, want [2]", got)
	}
	fs.SetFault(Fault{Ops: vfs.OpSync, Nth: 2, Sticky: true})
	if got := fmt.Sprint(syncs(3)); got != "[2 3]" {
		t.Fatalf("re-armed fault failed syncs %s, want [2 3]", got)
	}
	fs.Clear()
	if got := syncs(3); got != nil || fs.Count(vfs.OpSync) != 9 {
		t.Fatalf("after Clear: failed %v, Count %d; want none, 9", got, fs.Count(vfs.OpSync))
	}
}

// TestFaultyConcurrentRearm arms and clears faults while four goroutines
// write: run under -race it checks the locking; the counts check that no
// operation is lost or counted twice.
func TestFaultyConcurrentRearm(t *testing.T) {
	mem, dir := memDir(t)
	fs := New(mem)
	const writers, writes = 4, 200
	var wg sync.WaitGroup
	done := make(chan struct{})
	var failures [writers]int
	for g := range writers {
		f, err := fs.Create(filepath.Join(dir, fmt.Sprint(g)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range writes {
				if _, err := f.Write([]byte("x")); err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						t.Errorf("write: %v, want ENOSPC", err)
					}
					failures[g]++
				}
			}
		}()
	}
	go func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			fs.SetFault(Fault{Ops: vfs.OpWrite, Nth: i % 5, Err: syscall.ENOSPC})
			fs.Clear()
		}
	}()
	wg.Wait()
	close(done)
	if fs.Count(vfs.OpWrite) != writers*writes {
		t.Fatalf("Count(vfs.OpWrite) = %d, want %d", fs.Count(vfs.OpWrite), writers*writes)
	}
	var size int64
	for g := range writers {
		fi, err := mem.Stat(filepath.Join(dir, fmt.Sprint(g)))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(writes-failures[g]) {
			t.Errorf("file %d holds %d bytes; %d writes of 1 byte, %d failed", g, fi.Size(), writes, failures[g])
		}
		size += fi.Size()
	}
	t.Logf("%d of %d writes failed", writers*writes-int(size), writers*writes)
}

// ExampleFS_Count shows the usual loop: count the operations a
// workload performs, then run it again once per operation, failing that
// one, and check what the workload makes of each failure.
func ExampleFS_Count() {
	dir, _ := os.MkdirTemp("", "vfs-example")
	defer os.RemoveAll(dir)
	// workload writes a file in two parts and syncs it, as a WAL append does.
	workload := func(fs vfs.FS, name string) error {
		f, err := fs.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		defer f.Close()
		for _, part := range []string{"header", "body"} {
			if _, err := f.Write([]byte(part)); err != nil {
				return err
			}
		}
		return f.Sync()
	}
	counter := New(vfs.Default)
	_ = workload(counter, "count")
	steps := counter.Count(vfs.OpWrite | vfs.OpSync)
	for k := 1; k <= steps; k++ {
		fs := New(vfs.Default)
		fs.SetFault(Fault{Ops: vfs.OpWrite | vfs.OpSync, Nth: k, Err: syscall.ENOSPC})
		err := workload(fs, fmt.Sprint("run", k))
		var pe *os.PathError
		if errors.As(err, &pe) {
			fmt.Printf("step %d of %d: %s %s: ENOSPC %v\n", k, steps, pe.Op, filepath.Base(pe.Path), errors.Is(err, syscall.ENOSPC))
		}
	}
	// Output:
	// step 1 of 3: injected write run1: ENOSPC true
	// step 2 of 3: injected write run2: ENOSPC true
	// step 3 of 3: injected sync run3: ENOSPC true
}
