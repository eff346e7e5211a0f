//go:build unix

package bloomkv

// Tests for a hostile store directory: files of the store replaced by
// what is not a regular file, and entries bearing a store file's name
// that the store did not make. Open and VerifyDir must answer with an
// error in bounded time (never wait on a named pipe or read a device
// without end) and change nothing; a successful Open must remove only
// what is its own.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/vfs"
)

// hostileStore makes a closed store with a live segment and a live WAL
// that holds writes, and returns it with its manifest's state.
func hostileStore(t *testing.T) (string, manifest.State) {
	t.Helper()
	dir := t.TempDir()
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	for i := range 200 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
		if i == 100 {
			mustDo(t, db.Flush())
		}
	}
	mustDo(t, db.Close())
	st, err := manifest.ReadState(vfs.Default, filepath.Join(dir, base.ManifestName))
	mustDo(t, err)
	if len(st.Segments) == 0 || st.LogNum == 0 {
		t.Fatalf("store without a live segment or WAL: %+v", st)
	}
	return dir, st
}

// lstatHash hashes dir's entries without following links or opening
// anything but regular files (dirHash would block on a named pipe).
func lstatHash(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	mustDo(t, err)
	h := sha256.New()
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		mustDo(t, err)
		fmt.Fprintf(h, "%s %v %d\n", e.Name(), fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			mustDo(t, err)
			h.Write(b)
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestOpenNonRegularStoreFile replaces each kind of store file with a
// named pipe and with links to /dev/zero and /dev/null. Open (read-write
// and read-only) and VerifyDir used to wait forever on the pipe, read
// /dev/zero without end as a WAL, and take /dev/null for an empty WAL,
// dropping the writes the WAL held; each must now refuse the file at once
// (vfs.ErrNotRegular; VerifyDir reports a live segment or WAL it cannot
// open as corruption) and leave the directory as it was.
func TestOpenNonRegularStoreFile(t *testing.T) {
	kinds := []struct {
		name string
		make func(path string) error
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"devzero", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"devnull", func(p string) error { return os.Symlink("/dev/null", p) }},
	}
	files := []struct {
		name string
		of   func(manifest.State) string
	}{
		{"segment", func(st manifest.State) string { return base.SegmentFileName(st.Segments[0].FileNum) }},
		{"wal", func(st manifest.State) string { return base.WALFileName(st.LogNum) }},
		{"manifest", func(manifest.State) string { return base.ManifestName }},
		{"lock", func(manifest.State) string { return base.LockName }},
	}
	ops := []struct {
		name string
		run  func(dir string) error
	}{
		{"Open", func(dir string) error {
			db, err := Open(dir, smallOptions())
			if err == nil {
				db.Close()
			}
			return err
		}},
		{"ReadOnly", func(dir string) error {
			o := smallOptions()
			o.ReadOnly = true
			db, err := Open(dir, o)
			if err == nil {
				db.Close()
			}
			return err
		}},
		{"VerifyDir", func(dir string) error {
			rep, err := VerifyDir(context.Background(), nil, dir)
			if err == nil {
				err = rep.Err()
			}
			return err
		}},
	}
	for _, k := range kinds {
		if k.name != "fifo" {
			if _, err := os.Stat("/" + filepath.Join("dev", k.name[3:])); err != nil {
				t.Logf("skipping %s: %v", k.name, err)
				continue
			}
		}
		for _, f := range files {
			for _, op := range ops {
				t.Run(k.name+"/"+f.name+"/"+op.name, func(t *testing.T) {
					dir, st := hostileStore(t)
					path := filepath.Join(dir, f.of(st))
					mustDo(t, os.Remove(path))
					mustDo(t, k.make(path))
					before := lstatHash(t, dir)
					done := make(chan error, 1)
					go func() { done <- op.run(dir) }()
					var err error
					select {
					case err = <-done:
					case <-time.After(10 * time.Second):
						if k.name == "fifo" { // let the blocked open go
							if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
								w.Close()
							}
						}
						t.Fatalf("%s did not return within 10 s", op.name)
					}
					want := vfs.ErrNotRegular
					if op.name == "VerifyDir" && (f.name == "segment" || f.name == "wal") {
						want = ErrCorrupt
					}
					if !errors.Is(err, want) {
						t.Errorf("%s: %v, want an error matching %v", op.name, err, want)
					}
					if lstatHash(t, dir) != before {
						t.Errorf("%s changed the directory", op.name)
					}
				})
			}
		}
	}
}

// TestOpenLeavesForeignEntries puts a directory, a named pipe and a
// symbolic link to a directory under names of files a successful Open
// removes (an orphan segment, a WAL below the log number). Open used to
// remove the first two as its own leftovers; the store makes only regular
// files, so they are someone else's, and stay.
func TestOpenLeavesForeignEntries(t *testing.T) {
	dir, st := hostileStore(t)
	live := map[uint64]bool{}
	for _, s := range st.Segments {
		live[s.FileNum] = true
	}
	var free []uint64 // numbers below the log number that name no file
	for n := uint64(1); n < st.LogNum && len(free) < 3; n++ {
		_, errSeg := os.Lstat(filepath.Join(dir, base.SegmentFileName(n)))
		_, errWAL := os.Lstat(filepath.Join(dir, base.WALFileName(n)))
		if !live[n] && os.IsNotExist(errSeg) && os.IsNotExist(errWAL) {
			free = append(free, n)
		}
	}
	if len(free) < 3 {
		t.Skipf("no three free file numbers below the log number %d", st.LogNum)
	}
	foreign := map[string]func(string) error{
		base.SegmentFileName(free[0]): func(p string) error { return os.Mkdir(p, 0o755) },
		base.WALFileName(free[1]):     func(p string) error { return syscall.Mkfifo(p, 0o644) },
		base.SegmentFileName(free[2]): func(p string) error { return os.Symlink(t.TempDir(), p) },
	}
	for name, mk := range foreign {
		mustDo(t, mk(filepath.Join(dir, name)))
	}
	rep, err := VerifyDir(context.Background(), nil, dir)
	mustDo(t, err)
	for _, n := range rep.Notes {
		if foreign[n.File] != nil && strings.Contains(n.Message, "Open removes it") {
			t.Errorf("VerifyDir says Open removes %s: %s", n.File, n.Message)
		}
	}
	db := mustOpen(t, dir, smallOptions())
	mustDo(t, db.Close())
	for name := range foreign {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Open removed %s, which is not a regular file: %v", name, err)
		}
	}
	checkAll(t, dir, 200)
}

// TestOpenNewDirNonRegularManifestTmp: a directory holding only a
// MANIFEST.tmp that is a named pipe is not an interrupted store creation.
// Open used to wait on the pipe, reading it to tell; it must refuse the
// directory at once with ErrNotStore and leave it as it was.
func TestOpenNewDirNonRegularManifestTmp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, base.ManifestTmpName)
	mustDo(t, syscall.Mkfifo(path, 0o644))
	before := lstatHash(t, dir)
	done := make(chan error, 1)
	go func() {
		db, err := Open(dir, smallOptions())
		if err == nil {
			db.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotStore) {
			t.Errorf("Open: %v, want ErrNotStore", err)
		}
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("Open did not return within 10 s")
	}
	if lstatHash(t, dir) != before {
		t.Error("Open changed the directory")
	}
}
