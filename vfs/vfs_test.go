package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func TestOSFS(t *testing.T) {
	dir := t.TempDir()
	fs := Default
	name := filepath.Join(dir, "a")
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(name); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Create of an existing file: %v, want ErrExist", err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Truncate(4), f.Close(), fs.SyncDir(dir)); err != nil {
		t.Fatal(err)
	}
	if err := fs.Link(name, filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Link(name, filepath.Join(dir, "b")); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Link onto an existing name: %v", err)
	}
	if err := fs.Rename(filepath.Join(dir, "b"), filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
	names, err := fs.List(dir)
	if err != nil || fmt.Sprint(names) != "[a c]" {
		t.Fatalf("List = %v, %v", names, err)
	}
	r, err := fs.Open(filepath.Join(dir, "c"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	if string(b) != "hell" {
		t.Fatalf("read %q after Truncate(4)", b)
	}
	if _, ok := Fd(r); !ok {
		t.Fatal("an OS file has no Fd")
	}
	r.Close()
	if err := fs.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stat after Remove: %v", err)
	}
}

func TestLockExcludes(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	l, err := Default.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Default.Lock(name); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	l.Close()
	l, err = Default.Lock(name)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	l.Close()
}

func TestFaultyNth(t *testing.T) {
	tests := []struct {
		name   string
		fault  Fault
		writes int
		failed []int // 1-based writes that fail
	}{
		{"third", Fault{Ops: OpWrite, Nth: 3}, 5, []int{3}},
		{"first by default", Fault{Ops: OpWrite}, 3, []int{1}},
		{"sticky", Fault{Ops: OpWrite, Nth: 2, Sticky: true}, 4, []int{2, 3, 4}},
		{"other op", Fault{Ops: OpSync}, 3, nil},
		{"name matches", Fault{Ops: OpAny, Name: "*.wal", Nth: 1}, 2, []int{1}},
		{"name differs", Fault{Ops: OpAny, Name: "*.seg"}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := NewFaulty(Default)
			f, err := fs.Create(filepath.Join(t.TempDir(), "000001.wal"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fs.SetFault(tc.fault)
			var failed []int
			for i := 1; i <= tc.writes; i++ {
				if _, err := f.Write([]byte("x")); err != nil {
					if !errors.Is(err, syscall.EIO) {
						t.Fatalf("write %d: %v, want EIO", i, err)
					}
					failed = append(failed, i)
				}
			}
			if fmt.Sprint(failed) != fmt.Sprint(tc.failed) {
				t.Fatalf("failed writes %v, want %v", failed, tc.failed)
			}
			if fs.Fired() != len(tc.failed) || fs.Count(OpWrite) != tc.writes {
				t.Fatalf("Fired %d, Count %d", fs.Fired(), fs.Count(OpWrite))
			}
		})
	}
}

func TestFaultyShortWriteENOSPC(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaulty(Default)
	name := filepath.Join(dir, "f")
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	fs.SetFault(Fault{Ops: OpWrite, Err: syscall.ENOSPC, Short: true})
	n, err := f.Write([]byte("abcdefgh"))
	if n != 4 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("short write: n=%d err=%v; want 4, ENOSPC", n, err)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Path != name {
		t.Fatalf("error %v does not name the file", err)
	}
	f.Close()
	b, _ := os.ReadFile(name)
	if string(b) != "abcd" {
		t.Fatalf("file holds %q, want the first half", b)
	}
}

func TestFaultyEveryOp(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaulty(Default)
	f, _ := fs.Create(filepath.Join(dir, "a"))
	f.Write([]byte("data"))
	f.Close()
	calls := map[Op]func() error{
		OpCreate:  func() error { _, err := fs.Create(filepath.Join(dir, "n")); return err },
		OpOpen:    func() error { _, err := fs.Open(filepath.Join(dir, "a")); return err },
		OpRemove:  func() error { return fs.Remove(filepath.Join(dir, "zz")) },
		OpRename:  func() error { return fs.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "a")) },
		OpLink:    func() error { return fs.Link(filepath.Join(dir, "a"), filepath.Join(dir, "l")) },
		OpList:    func() error { _, err := fs.List(dir); return err },
		OpMkdir:   func() error { return fs.MkdirAll(dir) },
		OpSyncDir: func() error { return fs.SyncDir(dir) },
		OpLock:    func() error { _, err := fs.Lock(filepath.Join(dir, "LOCK")); return err },
		OpStat:    func() error { _, err := fs.Stat(dir); return err },
		OpCommit:  func() error { return Check(fs, OpCommit, "MANIFEST") },
		OpRead: func() error {
			r, _ := Default.Open(filepath.Join(dir, "a"))
			defer r.Close()
			ff := &faultyFile{File: r, fs: fs, name: "a"}
			_, err := ff.ReadAt(make([]byte, 1), 0)
			return err
		},
		OpTruncate: func() error {
			w, _ := Default.OpenReadWrite(filepath.Join(dir, "a"))
			defer w.Close()
			ff := &faultyFile{File: w, fs: fs, name: "a"}
			return ff.Truncate(1)
		},
	}
	for op, call := range calls {
		fs.SetFault(Fault{Ops: op, Err: syscall.EIO})
		if err := call(); !errors.Is(err, syscall.EIO) {
			t.Errorf("%v: %v, want injected EIO", op, err)
		}
	}
	if Check(Default, OpCommit, "MANIFEST") != nil {
		t.Error("Check on the OS file system injected a fault")
	}
}

func TestFaultyConcurrent(t *testing.T) {
	fs := NewFaulty(Default)
	dir := t.TempDir()
	fs.SetFault(Fault{Ops: OpWrite, Nth: 50})
	var wg sync.WaitGroup
	var mu sync.Mutex
	fails := 0
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := fs.Create(filepath.Join(dir, fmt.Sprint(g)))
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for range 25 {
				if _, err := f.Write([]byte("x")); err != nil {
					mu.Lock()
					fails++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if fails != 1 || fs.Count(OpWrite) != 100 {
		t.Fatalf("%d failures and %d writes counted; want exactly 1 and 100", fails, fs.Count(OpWrite))
	}
}

func TestFdThroughFaulty(t *testing.T) {
	fs := NewFaulty(Default)
	f, err := fs.Create(filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := Fd(f); !ok {
		t.Fatal("a Faulty file over an OS file has no Fd")
	}
}

func ExampleFaulty() {
	dir, _ := os.MkdirTemp("", "vfs-example")
	defer os.RemoveAll(dir)
	fs := NewFaulty(Default)
	fs.SetFault(Fault{Ops: OpSync, Name: "*.wal", Err: syscall.ENOSPC})
	f, _ := fs.Create(filepath.Join(dir, "000001.wal"))
	defer f.Close()
	_, werr := f.Write([]byte("record"))
	serr := f.Sync()
	fmt.Println(werr, errors.Is(serr, syscall.ENOSPC))
	// Output: <nil> true
}
