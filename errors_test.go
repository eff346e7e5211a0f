package bloomkv

import (
	"bytes"
	"context"
	"errors"
	"github.com/bloomkv/bloomkv/internal/base"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantMessage checks the error rule of doc.go on an error about damage to
// file: exactly one "bloomkv:" prefix, at the start; the file named by
// its base name and never by its path in dir; ErrCorrupt and a
// *CorruptError still found in the chain.
func wantMessage(t *testing.T, what string, err error, dir, file string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	msg := err.Error()
	if n := strings.Count(msg, "bloomkv:"); n != 1 || !strings.HasPrefix(msg, "bloomkv: ") {
		t.Errorf("%s: %q has %d \"bloomkv:\" prefixes, want one at the start", what, msg, n)
	}
	if !strings.Contains(msg, file) || strings.Contains(msg, dir) {
		t.Errorf("%s: %q should name %s by its base name, not by its path in %s", what, msg, file, dir)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("%s: %q does not match ErrCorrupt", what, msg)
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != file {
		t.Errorf("%s: %q: CorruptError %+v, want one naming %s", what, msg, ce, file)
	}
}

// TestErrorMessages provokes damage through every way a user meets it:
// Get, an iterator, Open, Verify and VerifyDir, and the writes refused
// after a compaction hit the damage.
func TestErrorMessages(t *testing.T) {
	fx := newCorruptFixture(t)
	block0 := fx.layout.regions[0] // data block 0, which holds corruptKey(0)
	bad := bytes.Clone(fx.segData)
	bad[block0.start+2] ^= 1

	t.Run("Get, iterator, Verify", func(t *testing.T) {
		dir := fx.copyStore(t, map[string][]byte{fx.seg: bad})
		db := mustOpen(t, dir, corruptOptions(false))
		defer db.Close()
		_, err := db.Get([]byte(corruptKey(0)))
		wantMessage(t, "Get", err, dir, fx.seg)

		snap, err := db.NewSnapshot()
		mustDo(t, err)
		_, err = snap.Get([]byte(corruptKey(0)))
		wantMessage(t, "Snapshot.Get", err, dir, fx.seg)
		mustDo(t, snap.Close())

		it, err := db.NewIterator(nil)
		mustDo(t, err)
		for range it.All() {
		}
		wantMessage(t, "Iterator.Error", it.Error(), dir, fx.seg)
		wantMessage(t, "Iterator.Close", it.Close(), dir, fx.seg)

		rep, err := db.Verify(context.Background())
		mustDo(t, err)
		wantMessage(t, "Verify", rep.Err(), dir, fx.seg)

		if err := db.Compact(); err == nil {
			t.Fatal("Compact read the damaged block without an error")
		}
		err = db.Put([]byte("k"), []byte("v"))
		if !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Put after the failed compaction: %v, want ErrReadOnly", err)
		}
		wantMessage(t, "Put after a failed compaction", err, dir, fx.seg)
		if !strings.HasPrefix(err.Error(), "bloomkv: read-only: ") {
			t.Errorf("Put after a failed compaction: %q, want the ErrReadOnly text first", err)
		}
	})

	t.Run("VerifyDir", func(t *testing.T) {
		dir := fx.copyStore(t, map[string][]byte{fx.seg: bad})
		rep, err := VerifyDir(context.Background(), nil, dir)
		mustDo(t, err)
		wantMessage(t, "VerifyDir", rep.Err(), dir, fx.seg)
		intact := fx.copyStore(t, nil)
		if rep, err := VerifyDir(context.Background(), nil, intact); err != nil || rep.Err() != nil {
			t.Fatalf("VerifyDir of an intact store: %v, %v", rep.Err(), err)
		}
	})

	t.Run("Open/WAL", func(t *testing.T) {
		w := bytes.Clone(fx.walData)
		w[fx.walRecs[1]+walRecordHeaderLen+2] ^= 1 // a payload byte of a record before the last
		dir := fx.copyStore(t, map[string][]byte{fx.wal: w})
		_, err := Open(dir, corruptOptions(false))
		wantMessage(t, "Open", err, dir, fx.wal)
	})

	t.Run("Open/manifest", func(t *testing.T) {
		dir := fx.copyStore(t, nil)
		m, err := os.ReadFile(filepath.Join(dir, base.ManifestName))
		mustDo(t, err)
		mustDo(t, os.WriteFile(filepath.Join(dir, base.ManifestName), m[:100], 0o644))
		_, err = Open(dir, corruptOptions(false))
		wantMessage(t, "Open", err, dir, base.ManifestName)
	})

	t.Run("Open/segment size", func(t *testing.T) {
		dir := fx.copyStore(t, map[string][]byte{fx.seg: fx.segData[:len(fx.segData)-1]})
		_, err := Open(dir, corruptOptions(false))
		wantMessage(t, "Open", err, dir, fx.seg)
	})

	t.Run("Open/segment footer", func(t *testing.T) {
		b := bytes.Clone(fx.segData)
		b[len(b)-3] ^= 1
		dir := fx.copyStore(t, map[string][]byte{fx.seg: b})
		_, err := Open(dir, corruptOptions(false))
		wantMessage(t, "Open", err, dir, fx.seg)
	})

	t.Run("Compact", func(t *testing.T) {
		dir := fx.copyStore(t, map[string][]byte{fx.seg: bad})
		db := mustOpen(t, dir, corruptOptions(false))
		defer db.Close()
		wantMessage(t, "Compact", db.Compact(), dir, fx.seg)
	})
}

// The sentinels read sensibly when returned bare: one prefix, no colon at
// the end.
func TestSentinelTexts(t *testing.T) {
	for _, err := range []error{ErrNotFound, ErrClosed, ErrLocked, ErrCorrupt, ErrNotStore, ErrEmptyKey,
		ErrKeyTooLarge, ErrValueTooLarge, ErrBatchTooLarge, ErrReadOnly, ErrInvalidOptions,
		ErrSnapshotReleased, ErrIteratorClosed, ErrCheckpointExists} {
		msg := err.Error()
		if !strings.HasPrefix(msg, "bloomkv: ") || strings.Count(msg, "bloomkv:") != 1 || strings.HasSuffix(msg, ":") {
			t.Errorf("sentinel %q", msg)
		}
	}
}

// A closed Iterator is inert: every positioning call returns false and
// Error says ErrIteratorClosed; Close returned the iteration's error and
// a second Close returns ErrIteratorClosed, as a DB's second Close returns
// ErrClosed.
func TestIteratorClosed(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	for i := range 10 {
		mustDo(t, db.Put([]byte{byte('a' + i)}, []byte("v")))
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	if !it.First() || it.Error() != nil {
		t.Fatalf("First on a fresh iterator: %v", it.Error())
	}
	mustDo(t, it.Close())
	if it.Valid() || it.Key() != nil || it.Value() != nil {
		t.Fatal("a closed iterator is still at a key")
	}
	for name, move := range map[string]func() bool{
		"First": it.First, "Last": it.Last, "Next": it.Next, "Prev": it.Prev,
		"Seek":   func() bool { return it.Seek([]byte("c")) },
		"SeekLT": func() bool { return it.SeekLT([]byte("c")) },
	} {
		if move() {
			t.Errorf("%s on a closed iterator returned true", name)
		}
		if err := it.Error(); !errors.Is(err, ErrIteratorClosed) {
			t.Errorf("Error after %s on a closed iterator = %v, want ErrIteratorClosed", name, err)
		}
	}
	for range it.All() {
		t.Fatal("All yields on a closed iterator")
	}
	if err := it.Close(); !errors.Is(err, ErrIteratorClosed) || !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrIteratorClosed (an ErrClosed)", err)
	}

}

// TestEdgeErrors pins down the edges of the API: each refusal is
// documented, matches its sentinel, and says "bloomkv:" exactly once.
func TestEdgeErrors(t *testing.T) {
	one := func(what string, err error, want ...error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		msg := err.Error()
		if strings.Count(msg, "bloomkv:") != 1 || !strings.HasPrefix(msg, "bloomkv: ") {
			t.Errorf("%s: %q, want exactly one \"bloomkv:\" prefix, at the start", what, msg)
		}
		for _, w := range want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %q does not match %v", what, msg, w)
			}
		}
	}
	_, err := Open("", nil)
	one(`Open("")`, err, os.ErrInvalid)

	dir := t.TempDir()
	db := mustOpen(t, dir, &Options{Prefix: FixedPrefix(2)})
	mustDo(t, db.Put([]byte("aa1"), []byte("v")))
	_, err = Open(dir, nil)
	one("second Open", err, ErrLocked)
	if strings.Contains(err.Error(), "process") {
		t.Errorf("second Open in this process: %q speaks of another process", err)
	}

	one("DeleteRange(start, nil)", db.DeleteRange([]byte("a"), nil), ErrInvalidRange)
	one("Batch.DeleteRange(nil, nil)", NewBatch().DeleteRange(nil, nil), ErrInvalidRange)
	mustDo(t, db.DeleteRange([]byte("b"), []byte("a"))) // start >= end: nothing, no error

	one("Checkpoint into the store", db.Checkpoint(filepath.Join(dir, "cp")), os.ErrInvalid)
	one("Checkpoint onto the store", db.Checkpoint(dir), os.ErrInvalid)
	if _, err := os.Stat(filepath.Join(dir, "cp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Checkpoint created %s: %v", filepath.Join(dir, "cp"), err)
	}
	mustDo(t, db.Checkpoint(filepath.Join(t.TempDir(), "cp"))) // beside it: fine

	snap, err := db.NewSnapshot()
	mustDo(t, err)
	mustDo(t, db.Put([]byte("aa2"), []byte("later")))
	if has, err := snap.Has([]byte("aa1")); !has || err != nil {
		t.Errorf("Snapshot.Has(aa1) = %v, %v", has, err)
	}
	if has, err := snap.Has([]byte("aa2")); has || err != nil {
		t.Errorf("Snapshot.Has of a later key = %v, %v", has, err)
	}
	if n, err := snap.ValueSize([]byte("aa1")); n != 1 || err != nil {
		t.Errorf("Snapshot.ValueSize(aa1) = %d, %v", n, err)
	}
	if _, err := snap.ValueSize([]byte("aa2")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Snapshot.ValueSize of a later key: %v", err)
	}
	mustDo(t, snap.Close())
	one("second Snapshot.Close", snap.Close(), ErrSnapshotReleased, ErrClosed)
	_, err = snap.Has([]byte("aa1"))
	one("Has on a closed Snapshot", err, ErrSnapshotReleased)

	it, err := db.NewIterator(nil)
	mustDo(t, err)
	mustDo(t, it.Close())
	one("second Iterator.Close", it.Close(), ErrIteratorClosed, ErrClosed)
	txn := db.NewTransaction(true)
	tit, err := txn.NewIterator(nil)
	mustDo(t, err)
	mustDo(t, tit.Close())
	one("second TxnIterator.Close", tit.Close(), ErrIteratorClosed, ErrClosed)
	txn.Discard()

	mustDo(t, db.Close())
	one("second DB.Close", db.Close(), ErrClosed)

	_, err = Open(dir, &Options{Prefix: FixedPrefix(3)})
	one("Open with another prefix extractor", err, ErrPrefixExtractor, ErrInvalidOptions)
}

// TestEveryCallAfterClose: any call after Close returns an error matching
// ErrClosed, with one "bloomkv:" prefix: every method of the DB, and every
// read of what was opened from it before (a snapshot, an iterator, a
// transaction), none of which may answer from state Close released or
// report "not found" for a key it cannot look up.
func TestEveryCallAfterClose(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	k := []byte("k")
	mustDo(t, db.Put(k, []byte("v")))
	snap, err := db.NewSnapshot()
	mustDo(t, err)
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	// Commit ends a transaction: the one committed is not the one read.
	rw, committed, ro := db.NewTransaction(true), db.NewTransaction(true), db.NewTransaction(false)
	mustDo(t, db.Close())

	b := NewBatch()
	b.Put(k, []byte("w"))
	fn := func([]byte) error { return nil }
	calls := map[string]func() error{
		"Get":                func() error { _, err := db.Get(k); return err },
		"GetFunc":            func() error { return db.GetFunc(k, fn) },
		"Has":                func() error { _, err := db.Has(k); return err },
		"Has(absent)":        func() error { _, err := db.Has([]byte("absent")); return err },
		"ValueSize":          func() error { _, err := db.ValueSize(k); return err },
		"Put":                func() error { return db.Put(k, nil) },
		"Delete":             func() error { return db.Delete(k) },
		"DeleteRange":        func() error { return db.DeleteRange(k, []byte("z")) },
		"Write":              func() error { return db.Write(b) },
		"Write(empty)":       func() error { return db.Write(NewBatch()) },
		"WriteSync":          func() error { return db.WriteSync(b) },
		"Sync":               db.Sync,
		"Flush":              db.Flush,
		"Compact":            db.Compact,
		"WaitForCompactions": func() error { return db.WaitForCompactions(context.Background()) },
		"Checkpoint":         func() error { return db.Checkpoint(filepath.Join(t.TempDir(), "cp")) },
		"Verify":             func() error { _, err := db.Verify(context.Background()); return err },
		"SetFilterBudget":    func() error { return db.SetFilterBudget(1 << 20) },
		"RebuildFilters":     db.RebuildFilters,
		"NewIterator":        func() error { _, err := db.NewIterator(nil); return err },
		"NewSnapshot":        func() error { _, err := db.NewSnapshot(); return err },
		"View":               func() error { return db.View(func(*Txn) error { return nil }) },
		"Update":             func() error { return db.Update(func(*Txn) error { return nil }) },
		"UpdateWith": func() error {
			return db.UpdateWith(&UpdateOptions{Retries: 3}, func(*Txn) error { return nil })
		},
		"CompareAndSet":         func() error { _, err := db.CompareAndSet(k, []byte("v"), []byte("w")); return err },
		"CompareAndSet(absent)": func() error { _, err := db.CompareAndSet([]byte("absent"), nil, []byte("w")); return err },
		"Close":                 db.Close,
		"NewTransaction.Get":    func() error { _, err := db.NewTransaction(true).Get(k); return err },
		"NewTransaction.Put":    func() error { return db.NewTransaction(true).Put(k, nil) },

		"Snapshot.Get":         func() error { _, err := snap.Get(k); return err },
		"Snapshot.GetFunc":     func() error { return snap.GetFunc(k, fn) },
		"Snapshot.Has":         func() error { _, err := snap.Has(k); return err },
		"Snapshot.ValueSize":   func() error { _, err := snap.ValueSize(k); return err },
		"Snapshot.NewIterator": func() error { _, err := snap.NewIterator(nil); return err },
		"Iterator.First": func() error {
			if it.First() {
				return nil
			}
			return it.Error()
		},
		"Txn.Get":         func() error { _, err := rw.Get(k); return err },
		"Txn.Has":         func() error { _, err := rw.Has([]byte("absent")); return err },
		"Txn.NewIterator": func() error { _, err := rw.NewIterator(nil); return err },
		"Txn.Commit": func() error {
			committed.Put(k, []byte("w")) // buffered: the commit is what must fail
			return committed.Commit()
		},
		"read-only Txn.Get": func() error { _, err := ro.Get(k); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
			continue
		}
		if msg := err.Error(); strings.Count(msg, "bloomkv:") != 1 || !strings.HasPrefix(msg, "bloomkv: ") {
			t.Errorf("%s after Close: %q, want one \"bloomkv:\" prefix, at the start", name, msg)
		}
	}
	mustDo(t, snap.Close()) // releasing what was opened before Close is not an error
	if err := it.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("Iterator.Close after DB.Close = %v, want the iteration's ErrClosed", err)
	}
	rw.Discard()
	ro.Discard()
}
