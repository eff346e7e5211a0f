package errorfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/memfs"
)

func TestFaultyNth(t *testing.T) {
	tests := []struct {
		name   string
		fault  Fault
		writes int
		failed []int // 1-based writes that fail
	}{
		{"third", Fault{Ops: vfs.OpWrite, Nth: 3}, 5, []int{3}},
		{"first by default", Fault{Ops: vfs.OpWrite}, 3, []int{1}},
		{"sticky", Fault{Ops: vfs.OpWrite, Nth: 2, Sticky: true}, 4, []int{2, 3, 4}},
		{"other op", Fault{Ops: vfs.OpSync}, 3, nil},
		{"name matches", Fault{Ops: vfs.OpAny, Name: "*.wal", Nth: 1}, 2, []int{1}},
		{"name differs", Fault{Ops: vfs.OpAny, Name: "*.seg"}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem, dir := memDir(t)
			fs := New(mem)
			f, err := fs.Create(filepath.Join(dir, "000001.wal"))
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
			if fs.Fired() != len(tc.failed) || fs.Count(vfs.OpWrite) != tc.writes {
				t.Fatalf("Fired %d, Count %d", fs.Fired(), fs.Count(vfs.OpWrite))
			}
		})
	}
}

func TestFaultyShortWriteENOSPC(t *testing.T) {
	mem, dir := memDir(t)
	fs := New(mem)
	name := filepath.Join(dir, "f")
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	fs.SetFault(Fault{Ops: vfs.OpWrite, Err: syscall.ENOSPC, Short: true})
	n, err := f.Write([]byte("abcdefgh"))
	if n != 4 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("short write: n=%d err=%v; want 4, ENOSPC", n, err)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Path != name {
		t.Fatalf("error %v does not name the file", err)
	}
	f.Close()
	b, _ := readFile(mem, name)
	if string(b) != "abcd" {
		t.Fatalf("file holds %q, want the first half", b)
	}
}

func TestFaultyEveryOp(t *testing.T) {
	mem, dir := memDir(t)
	fs := New(mem)
	f, _ := fs.Create(filepath.Join(dir, "a"))
	f.Write([]byte("data"))
	f.Close()
	calls := map[vfs.Op]func() error{
		vfs.OpCreate:  func() error { _, err := fs.Create(filepath.Join(dir, "n")); return err },
		vfs.OpOpen:    func() error { _, err := fs.Open(filepath.Join(dir, "a")); return err },
		vfs.OpRemove:  func() error { return fs.Remove(filepath.Join(dir, "zz")) },
		vfs.OpRename:  func() error { return fs.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "a")) },
		vfs.OpLink:    func() error { return fs.Link(filepath.Join(dir, "a"), filepath.Join(dir, "l")) },
		vfs.OpList:    func() error { _, err := fs.List(dir); return err },
		vfs.OpMkdir:   func() error { return fs.MkdirAll(dir) },
		vfs.OpSyncDir: func() error { return fs.SyncDir(dir) },
		vfs.OpLock:    func() error { _, err := fs.Lock(filepath.Join(dir, "LOCK")); return err },
		vfs.OpStat:    func() error { _, err := fs.Stat(dir); return err },
		vfs.OpCommit:  func() error { return vfs.Bypass(fs, vfs.OpCommit, "MANIFEST") },
		vfs.OpMap:     func() error { return vfs.Bypass(fs, vfs.OpMap, "000001.seg") },
		vfs.OpRead: func() error {
			r, _ := mem.Open(filepath.Join(dir, "a"))
			defer r.Close()
			ff := &faultyFile{File: r, fs: fs, name: "a"}
			_, err := ff.ReadAt(make([]byte, 1), 0)
			return err
		},
		vfs.OpTruncate: func() error {
			w, _ := mem.OpenReadWrite(filepath.Join(dir, "a"))
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
	if vfs.Bypass(vfs.Default, vfs.OpCommit, "MANIFEST") != nil {
		t.Error("Check on the OS file system injected a fault")
	}
}

func TestFaultyConcurrent(t *testing.T) {
	mem, dir := memDir(t)
	fs := New(mem)
	fs.SetFault(Fault{Ops: vfs.OpWrite, Nth: 50})
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
	if fails != 1 || fs.Count(vfs.OpWrite) != 100 {
		t.Fatalf("%d failures and %d writes counted; want exactly 1 and 100", fails, fs.Count(vfs.OpWrite))
	}
}

func TestFdThroughFaulty(t *testing.T) {
	fs := New(vfs.Default)
	f, err := fs.Create(filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := vfs.Fd(f); !ok {
		t.Fatal("a Faulty file over an OS file has no vfs.Fd")
	}
}

func ExampleFS() {
	dir, _ := os.MkdirTemp("", "vfs-example")
	defer os.RemoveAll(dir)
	fs := New(vfs.Default)
	fs.SetFault(Fault{Ops: vfs.OpSync, Name: "*.wal", Err: syscall.ENOSPC})
	f, _ := fs.Create(filepath.Join(dir, "000001.wal"))
	defer f.Close()
	_, werr := f.Write([]byte("record"))
	serr := f.Sync()
	fmt.Println(werr, errors.Is(serr, syscall.ENOSPC))
	// Output: <nil> true
}

// TestSyncDir syncs a directory after each kind of change it has to make
// durable, and checks that the changes are there and the call reaches
// the OS through a Faulty.
func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	fs := New(vfs.Default)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	f, err := fs.Create(a)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func() error{
		f.Close,
		func() error { return fs.Rename(a, b) },
		func() error { return fs.Link(b, a) },
		func() error { return fs.Remove(b) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if err := fs.SyncDir(dir); err != nil {
			t.Fatalf("SyncDir after step %d: %v", i, err)
		}
	}
	if names, err := fs.List(dir); err != nil || fmt.Sprint(names) != "[a]" {
		t.Fatalf("List = %v, %v; want [a]", names, err)
	}
	if fs.Count(vfs.OpSyncDir) != len(steps) {
		t.Fatalf("Count(vfs.OpSyncDir) = %d, want %d", fs.Count(vfs.OpSyncDir), len(steps))
	}
}

// TestLockTable checks that a held lock excludes every other Lock in the
// same process — through the OS file system or a Faulty over it — since
// flock belongs to the open file description, and that closing frees it.
func TestLockTable(t *testing.T) {
	tests := []struct {
		name          string
		first, second vfs.FS
	}{
		{"os, os", vfs.Default, vfs.Default},
		{"os, faulty", vfs.Default, New(vfs.Default)},
		{"faulty, os", New(vfs.Default), vfs.Default},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), "LOCK")
			l, err := tc.first.Lock(name)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // a refused Lock must not disturb the holder
				if l2, err := tc.second.Lock(name); !errors.Is(err, vfs.ErrLocked) {
					if l2 != nil {
						l2.Close()
					}
					t.Fatalf("second Lock: %v, want vfs.ErrLocked", err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l, err = tc.second.Lock(name)
			if err != nil {
				t.Fatalf("Lock after release: %v", err)
			}
			l.Close()
		})
	}
}

// opaqueFile hides the descriptor of the file it wraps, as a file of an
// in-memory or remote file system would have none.
type opaqueFile struct{ vfs.File }

func TestFdOpaque(t *testing.T) {
	f, err := vfs.Default.Create(filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, _ := f.(*os.File)
	tests := []struct {
		name   string
		file   vfs.File
		wantOK bool
	}{
		{"os", f, true},
		{"faulty over os", &faultyFile{File: f}, true},
		{"faulty over faulty over os", &faultyFile{File: &faultyFile{File: f}}, true},
		{"opaque", opaqueFile{f}, false},
		{"faulty over opaque", &faultyFile{File: opaqueFile{f}}, false},
	}
	for _, tc := range tests {
		fd, ok := vfs.Fd(tc.file)
		if ok != tc.wantOK || ok && fd != want.Fd() {
			t.Errorf("%s: vfs.Fd = %d, %v; want %d, %v", tc.name, fd, ok, want.Fd(), tc.wantOK)
		}
	}
}

// TestBootIDThrough: an FS passes the boot ID of the FS it wraps through
// (the half of the vfs package's TestBootID that names the wrapper).
func TestBootIDThrough(t *testing.T) {
	if vfs.BootID(New(vfs.Default)) != vfs.BootID(vfs.Default) {
		t.Fatal("Faulty does not pass the boot ID through")
	}
}

// memDir returns an in-memory file system holding one empty directory,
// for the tests whose files need not be real.
func memDir(t *testing.T) (*memfs.FS, string) {
	t.Helper()
	mem := memfs.New()
	if err := mem.MkdirAll("/test"); err != nil {
		t.Fatal(err)
	}
	return mem, "/test"
}

// readFile returns the content of the file name in fsys.
func readFile(fsys vfs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
