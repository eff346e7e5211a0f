package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
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

// TestOSMissing checks the OS file system on names that do not exist:
// SyncDir really opens the directory, and neither Open nor OpenReadWrite
// creates the file (WAL recovery must not conjure up an empty log).
func TestOSMissing(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name string
		call func() error
	}{
		{"SyncDir", func() error { return Default.SyncDir(missing) }},
		{"Open", func() error { _, err := Default.Open(missing); return err }},
		{"OpenReadWrite", func() error { _, err := Default.OpenReadWrite(missing); return err }},
		{"Remove", func() error { return Default.Remove(missing) }},
		{"Rename", func() error { return Default.Rename(missing, filepath.Join(dir, "x")) }},
		{"List", func() error { _, err := Default.List(missing); return err }},
		{"Lock in a missing directory", func() error { _, err := Default.Lock(filepath.Join(missing, "LOCK")); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%v, want ErrNotExist", err)
			}
			if names, err := Default.List(dir); err != nil || len(names) != 0 {
				t.Fatalf("directory holds %v (%v) afterwards, want nothing", names, err)
			}
		})
	}
}

// TestSyncDir syncs a directory after each kind of change it has to make
// durable, and checks that the changes are there and the call reaches
// the OS through a Faulty.
func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	fs := NewFaulty(Default)
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
	if fs.Count(OpSyncDir) != len(steps) {
		t.Fatalf("Count(OpSyncDir) = %d, want %d", fs.Count(OpSyncDir), len(steps))
	}
}

// TestLockTable checks that a held lock excludes every other Lock in the
// same process — through the OS file system or a Faulty over it — since
// flock belongs to the open file description, and that closing frees it.
func TestLockTable(t *testing.T) {
	tests := []struct {
		name          string
		first, second FS
	}{
		{"os, os", Default, Default},
		{"os, faulty", Default, NewFaulty(Default)},
		{"faulty, os", NewFaulty(Default), Default},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), "LOCK")
			l, err := tc.first.Lock(name)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // a refused Lock must not disturb the holder
				if l2, err := tc.second.Lock(name); !errors.Is(err, ErrLocked) {
					if l2 != nil {
						l2.Close()
					}
					t.Fatalf("second Lock: %v, want ErrLocked", err)
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
type opaqueFile struct{ File }

func TestFdOpaque(t *testing.T) {
	f, err := Default.Create(filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, _ := f.(*os.File)
	tests := []struct {
		name   string
		file   File
		wantOK bool
	}{
		{"os", f, true},
		{"faulty over os", &faultyFile{File: f}, true},
		{"faulty over faulty over os", &faultyFile{File: &faultyFile{File: f}}, true},
		{"opaque", opaqueFile{f}, false},
		{"faulty over opaque", &faultyFile{File: opaqueFile{f}}, false},
	}
	for _, tc := range tests {
		fd, ok := Fd(tc.file)
		if ok != tc.wantOK || ok && fd != want.Fd() {
			t.Errorf("%s: Fd = %d, %v; want %d, %v", tc.name, fd, ok, want.Fd(), tc.wantOK)
		}
	}
}

func TestBootID(t *testing.T) {
	id := BootID(Default)
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err == nil && id == ([16]byte{}) {
		t.Fatal("Linux exposes a boot ID, but BootID(Default) is zero")
	}
	if BootID(NewFaulty(Default)) != id {
		t.Fatal("Faulty does not pass the boot ID through")
	}
}

// TestLockShared: shared holders coexist; an exclusive holder excludes
// them and they exclude it; a missing file is not created.
func TestLockShared(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	if _, err := Default.LockShared(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LockShared of a missing file = %v", err)
	}
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("LockShared created the file")
	}
	ex, err := Default.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Default.LockShared(name); !errors.Is(err, ErrLocked) {
		t.Fatalf("LockShared under an exclusive lock = %v", err)
	}
	ex.Close()
	a, err := Default.LockShared(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Default.LockShared(name)
	if err != nil {
		t.Fatalf("second shared lock: %v", err)
	}
	if _, err := Default.Lock(name); !errors.Is(err, ErrLocked) {
		t.Fatalf("Lock under shared locks = %v", err)
	}
	a.Close()
	b.Close()
	ex, err = Default.Lock(name)
	if err != nil {
		t.Fatalf("Lock after the shared holders left: %v", err)
	}
	ex.Close()
}
