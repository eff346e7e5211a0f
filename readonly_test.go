package bloomkv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/errorfs"
)

// readOnly returns options for a read-only open through fsys (nil: the OS).
func readOnly(fsys vfs.FS) *Options {
	o := smallOptions()
	o.ReadOnly, o.FS = true, fsys
	return o
}

// TestReadOnlyChangesNothing opens a store with flushed and unflushed
// writes, leftover files and a torn WAL tail read-only, on a file system
// where every change fails: every write is readable, every write call
// returns ErrReadOnly, and the directory is byte for byte as before.
func TestReadOnlyChangesNothing(t *testing.T) {
	dir := brickStore(t, 400)
	db := mustOpen(t, dir, smallOptions())
	for i := 400; i < 500; i++ { // in the WAL only
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	mustDo(t, db.Delete(faultKey(7)))
	wal := filepath.Join(dir, base.WALFileName(db.logNum))
	mustDo(t, db.Close())
	f, err := os.OpenFile(wal, os.O_WRONLY|os.O_APPEND, 0)
	mustDo(t, err)
	_, err = f.Write([]byte{1, 2, 3}) // a torn tail
	mustDo(t, errors.Join(err, f.Close()))
	before := dirHash(t, dir)

	ro := errorfs.New(vfs.Default)
	ro.SetFault(errorfs.Fault{Ops: vfs.OpCreate | vfs.OpWrite | vfs.OpSync | vfs.OpTruncate | vfs.OpRemove |
		vfs.OpRename | vfs.OpLink | vfs.OpMkdir | vfs.OpSyncDir | vfs.OpCommit, Sticky: true, Err: syscall.EROFS})
	db, err = Open(dir, readOnly(ro))
	mustDo(t, err)
	for i := range 500 {
		v, err := db.Get(faultKey(i))
		if i == 7 {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted key: %q, %v", v, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("key %d: %q, %v", i, v, err)
		}
	}
	oneWrite := NewBatch()
	oneWrite.Put([]byte("x"), []byte("y"))
	for name, call := range map[string]func() error{
		"Put":     func() error { return db.Put([]byte("x"), []byte("y")) },
		"Delete":  func() error { return db.Delete([]byte("x")) },
		"Flush":   db.Flush,
		"Compact": db.Compact,
		// An empty batch writes nothing, but a write it is: its answer
		// says whether writes are taken.
		"Write(empty)":     func() error { return db.Write(NewBatch()) },
		"WriteSync(empty)": func() error { return db.WriteSync(NewBatch()) },
		"Write(nil)":       func() error { return db.Write(nil) },
		// A range deletion would first rotate the memtable the replay
		// filled (more than 1/16 of it), and rotating creates a WAL.
		"DeleteRange": func() error { return db.DeleteRange(faultKey(0), faultKey(10)) },
		"Write":       func() error { return db.Write(oneWrite) },
		"WriteSync":   func() error { return db.WriteSync(oneWrite) },
		"CompareAndSet": func() error {
			_, err := db.CompareAndSet(faultKey(1), faultValue(1), []byte("new"))
			return err
		},
		"CompareAndSet(absent)": func() error { _, err := db.CompareAndSet([]byte("x"), nil, []byte("y")); return err },
		"Update": func() error {
			return db.Update(func(txn *Txn) error {
				if _, err := txn.Get(faultKey(2)); err != nil {
					return err
				}
				return txn.DeleteRange(faultKey(0), faultKey(10))
			})
		},
	} {
		if err := call(); !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s = %v, want ErrReadOnly", name, err)
		}
	}
	// Refused, they changed nothing in memory either.
	for _, i := range []int{0, 1, 2, 9} {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("key %d after the refused writes: %q, %v", i, v, err)
		}
	}
	if _, err := db.Get([]byte("x")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused write is visible: %v", err)
	}
	if err := db.Sync(); err != nil {
		t.Errorf("Sync = %v: nothing to sync", err)
	}
	if err := db.WaitForCompactions(context.Background()); err != nil {
		t.Errorf("WaitForCompactions = %v", err)
	}
	if rep, err := db.Verify(context.Background()); err != nil || !rep.OK() {
		t.Errorf("Verify: %v\n%v", err, rep)
	}
	mustDo(t, db.Close())
	if ro.Fired() != 0 {
		t.Fatalf("the read-only open tried %d changes", ro.Fired())
	}
	if dirHash(t, dir) != before {
		t.Fatal("the read-only open changed the directory")
	}
}

// TestReadOnlySharing: read-only opens share a store; a writer excludes
// them and they exclude a writer.
func TestReadOnlySharing(t *testing.T) {
	dir := brickStore(t, 40)
	a, err := Open(dir, readOnly(nil))
	mustDo(t, err)
	b, err := Open(dir, readOnly(nil))
	mustDo(t, err)
	if _, err := Open(dir, smallOptions()); !errors.Is(err, ErrLocked) {
		t.Fatalf("writer Open beside readers = %v, want ErrLocked", err)
	}
	rep, err := VerifyDir(context.Background(), nil, dir)
	if err != nil || !rep.OK() {
		t.Fatalf("VerifyDir beside readers: %v\n%v", err, rep)
	}
	mustDo(t, errors.Join(a.Close(), b.Close()))
	w := mustOpen(t, dir, smallOptions())
	if _, err := Open(dir, readOnly(nil)); !errors.Is(err, ErrLocked) {
		t.Fatalf("read-only Open beside a writer = %v, want ErrLocked", err)
	}
	mustDo(t, w.Close())
}

// TestReadOnlyNotAStore: a read-only open never creates a store.
func TestReadOnlyNotAStore(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, readOnly(nil)); !errors.Is(err, ErrNotStore) {
		t.Fatalf("read-only Open of an empty directory = %v, want ErrNotStore", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("it created %v", entries)
	}
	if _, err := Open(filepath.Join(dir, "missing"), readOnly(nil)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only Open of a missing directory = %v", err)
	}
}
