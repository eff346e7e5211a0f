package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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

func TestBootID(t *testing.T) {
	id := BootID(Default)
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err == nil && id == ([16]byte{}) {
		t.Fatal("Linux exposes a boot ID, but BootID(Default) is zero")
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
