package bloomkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/errorfs"
)

// faultValue is the only value ever written to key i: a reopened store
// that holds anything else for it returned wrong data.
func faultValue(i int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "value-%05d|", i), 8)
}

func faultKey(i int) []byte { return fmt.Appendf(nil, "key%05d", i) }

// faultWorkload puts keys (recording each acknowledged one), flushes now
// and then, deletes a few, and ends with a major compaction; background
// flushes and compactions run throughout. It returns the first error.
func faultWorkload(db *DB, acked map[int]bool) error {
	for i := range 600 {
		if err := db.Put(faultKey(i), faultValue(i)); err != nil {
			return err
		}
		acked[i] = true
		if i%150 == 149 {
			if err := db.Flush(); err != nil {
				return err
			}
		}
	}
	return db.Compact()
}

func faultOptions(fs vfs.FS) *Options {
	o := smallOptions()
	o.FS = fs
	o.Sync = true // so syncs are part of every acknowledgement
	return o
}

// TestFaultAtEveryStep fails, in turn, each file operation the workload
// performs — every write, sync, file creation, directory sync, manifest
// commit and removal — and checks: the failure is reported (to the caller,
// or as ErrReadOnly on the next write once it happened in the
// background), and after reopening on a healthy file system every
// acknowledged write is there with its value and nothing is corrupt.
func TestFaultAtEveryStep(t *testing.T) {
	ops := []struct {
		op    vfs.Op
		fault errorfs.Fault
	}{
		{vfs.OpWrite, errorfs.Fault{Err: syscall.EIO}},
		{vfs.OpWrite, errorfs.Fault{Err: syscall.ENOSPC, Short: true}},
		{vfs.OpSync, errorfs.Fault{Err: syscall.EIO}},
		{vfs.OpCreate, errorfs.Fault{Err: syscall.ENOSPC}},
		{vfs.OpSyncDir, errorfs.Fault{Err: syscall.EIO}},
		{vfs.OpCommit, errorfs.Fault{Err: syscall.EIO}},
		{vfs.OpRemove, errorfs.Fault{Err: syscall.EIO}},
	}
	for _, tc := range ops {
		name := fmt.Sprintf("%v-%v", tc.op, tc.fault.Err)
		if tc.fault.Short {
			name += "-short"
		}
		t.Run(name, func(t *testing.T) {
			total := countOps(t, tc.op)
			if total == 0 {
				t.Fatalf("the workload performs no %v", tc.op)
			}
			steps := spread(total, 12)
			if testing.Short() {
				steps = spread(total, 4)
			}
			for _, k := range steps {
				f := tc.fault
				f.Ops, f.Nth = tc.op, k
				runWithFault(t, f)
			}
			t.Logf("%d %v operations; failed each of %d of them in turn", total, tc.op, len(steps))
		})
	}
}

// countOps runs the workload on a healthy Faulty file system and returns
// how many operations of kind op it performed after Open.
func countOps(t *testing.T, op vfs.Op) int {
	fs := errorfs.New(vfs.Default)
	db := mustOpen(t, t.TempDir(), faultOptions(fs))
	before := fs.Count(op)
	mustDo(t, faultWorkload(db, map[int]bool{}))
	n := fs.Count(op) - before
	mustDo(t, db.Close())
	return n
}

// spread returns up to n step numbers in 1..total: the first few, the last
// few and evenly spaced ones between.
func spread(total, n int) []int {
	if total <= n {
		steps := make([]int, total)
		for i := range steps {
			steps[i] = i + 1
		}
		return steps
	}
	seen := map[int]bool{}
	var steps []int
	for i := range n {
		k := 1 + i*(total-1)/(n-1)
		if !seen[k] {
			seen[k] = true
			steps = append(steps, k)
		}
	}
	return steps
}

func runWithFault(t *testing.T, fault errorfs.Fault) {
	t.Helper()
	dir := t.TempDir()
	fs := errorfs.New(vfs.Default)
	db := mustOpen(t, dir, faultOptions(fs))
	fs.SetFault(fault)
	acked := map[int]bool{}
	err := faultWorkload(db, acked)
	if fs.Fired() > 0 && fault.Ops != vfs.OpRemove {
		// The failure must surface: to the caller that met it, or, for
		// background work, as a refusal of the next write.
		if err == nil {
			err = db.Put([]byte("after"), []byte("x"))
		}
		if err == nil || !errors.Is(err, ErrReadOnly) && !errors.Is(db.Put([]byte("probe"), nil), ErrReadOnly) {
			// Unless it ran out of a resource writing a new segment: then
			// it was retried (retry.go), and the store stays writable.
			retriedNotSticky(t, fault, db, err)
			fs.Clear()
			checkReopened(t, fault, dir, acked)
			return
		}
		if !errors.Is(err, fault.Err) && !errors.Is(err, ErrReadOnly) {
			t.Fatalf("%+v: error %v matches neither the injected error nor ErrReadOnly", fault, err)
		}
		if perr := db.Put([]byte("later"), []byte("x")); !errors.Is(perr, ErrReadOnly) {
			t.Fatalf("%+v: a write after a durability failure returned %v, want ErrReadOnly", fault, perr)
		}
		readOnlyUntilReopened(t, fault, db, acked)
	} else if err != nil {
		t.Fatalf("%+v: workload failed although no fault fired: %v", fault, err)
	} else {
		// A failed removal only leaves garbage: nothing to report.
		mustDo(t, db.Close())
	}
	fs.Clear()
	checkReopened(t, fault, dir, acked)
}

// retriedNotSticky checks a fault that did not make the store read-only:
// it ran out of a resource (the errno says so) while a flush or a merge
// wrote its segment, and was retried or returned by Flush or Compact as
// it is; once the fault is gone (it fires once) Flush, WaitForCompactions
// and Close succeed. It closes db.
func retriedNotSticky(t *testing.T, fault errorfs.Fault, db *DB, err error) {
	t.Helper()
	if !resourceExhausted(fault.Err) {
		t.Fatalf("%+v fired, yet the store is writable (workload: %v)", fault, err)
	}
	if err == nil && db.Stats().RetriedFailures == 0 {
		t.Fatalf("%+v fired, yet every call succeeded and nothing was retried", fault)
	}
	if err != nil && !errors.Is(err, fault.Err) {
		t.Fatalf("%+v: error %v does not match the injected error", fault, err)
	}
	mustDo(t, db.Flush())
	mustDo(t, db.WaitForCompactions(context.Background()))
	mustDo(t, db.Close())
}

// readOnlyUntilReopened checks what a store made read-only by a failure
// promises until it is reopened: reads of acknowledged writes go on, and
// Flush, WaitForCompactions and Close return the stored failure (matching
// ErrReadOnly and the injected error) instead of waiting for work that
// will never be done, or reporting success: a caller who checks only
// Close must learn that not everything reached a segment. It closes db.
func readOnlyUntilReopened(t *testing.T, fault errorfs.Fault, db *DB, acked map[int]bool) {
	t.Helper()
	for i := range 600 {
		if acked[i] {
			if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
				t.Fatalf("%+v: Get of acknowledged key %d from the read-only store: %q, %v", fault, i, v, err)
			}
			break
		}
	}
	stored := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrReadOnly) || !errors.Is(err, fault.Err) {
			t.Fatalf("%+v: %s after the failure = %v, want ErrReadOnly wrapping %v", fault, what, err, fault.Err)
		}
	}
	stored("Flush", db.Flush())
	// No deadline: the promise is that it returns, not how soon, and one
	// that waited for a merge that will never run hangs the test.
	stored("WaitForCompactions", db.WaitForCompactions(context.Background()))
	stored("Close", db.Close())
}

// checkReopened reopens dir on a healthy file system: every acknowledged
// write is there with its value, no key holds another, and every segment
// verifies.
func checkReopened(t *testing.T, fault errorfs.Fault, dir string, acked map[int]bool) {
	t.Helper()
	db := mustOpen(t, dir, faultOptions(vfs.Default))
	defer db.Close()
	for i := range 600 {
		v, err := db.Get(faultKey(i))
		switch {
		case err == nil && !bytes.Equal(v, faultValue(i)):
			t.Fatalf("%+v: key %d reads back a value that was never written", fault, i)
		case errors.Is(err, ErrNotFound) && acked[i]:
			t.Fatalf("%+v: acknowledged key %d lost", fault, i)
		case err != nil && !errors.Is(err, ErrNotFound):
			t.Fatalf("%+v: Get key %d after reopen: %v", fault, i, err)
		}
	}
	rs := db.acquire()
	defer rs.release()
	for _, s := range rs.segments {
		if err := s.reader.Verify(); err != nil {
			t.Fatalf("%+v: segment %s after reopen: %v", fault, s.name, err)
		}
	}
}

// TestFaultStickyDiskGone: from some point on every write and sync fails,
// as when a disk is pulled. The store must refuse writes, keep serving
// reads of what it has, and reopen with everything acknowledged.
func TestFaultStickyDiskGone(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.New(vfs.Default)
	db := mustOpen(t, dir, faultOptions(fs))
	acked := map[int]bool{}
	for i := range 300 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
		acked[i] = true
	}
	fs.SetFault(errorfs.Fault{Ops: vfs.OpWrite | vfs.OpSync | vfs.OpCreate, Sticky: true})
	var err error
	for i := 300; i < 600 && err == nil; i++ {
		if err = db.Put(faultKey(i), faultValue(i)); err == nil {
			acked[i] = true
		}
	}
	if !errors.Is(err, syscall.EIO) || !errors.Is(db.Put([]byte("k"), []byte("v")), ErrReadOnly) {
		t.Fatalf("writes on a dead disk: %v, then not read-only", err)
	}
	if v, err := db.Get(faultKey(7)); err != nil || !bytes.Equal(v, faultValue(7)) {
		t.Fatalf("read-only store does not serve reads: %q, %v", v, err)
	}
	db.Close()
	fs.Clear()
	db = mustOpen(t, dir, faultOptions(vfs.Default))
	defer db.Close()
	for i := range acked {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("acknowledged key %d after reopen: %q, %v", i, v, err)
		}
	}
}

// TestFaultReads: with the file not mapped, a failing read surfaces as an
// error from Get and from an iterator — never a wrong value or a false
// "not found" — and the store works again once the device does.
func TestFaultReads(t *testing.T) {
	fs := errorfs.New(vfs.Default)
	o := faultOptions(fs)
	o.DisableMmap = true
	o.BlockCacheSize = 1 // every Get reads its block
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for i := range 600 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	mustDo(t, db.Compact())
	fs.SetFault(errorfs.Fault{Ops: vfs.OpRead, Name: "*.seg", Sticky: true})
	if _, err := db.Get(faultKey(5)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Get on a failing device: %v, want EIO", err)
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	n := 0
	for range it.All() {
		n++
	}
	if err := it.Close(); !errors.Is(err, syscall.EIO) || n != 0 {
		t.Fatalf("scan on a failing device: %d keys, %v; want none and EIO", n, err)
	}
	fs.Clear()
	if v, err := db.Get(faultKey(5)); err != nil || !bytes.Equal(v, faultValue(5)) {
		t.Fatalf("Get once the device recovered: %q, %v", v, err)
	}
}

// TestReopenAfterUnusedFileNumbers: file numbers the manifest counted but
// no file carries (a segment whose create failed) must not make the next
// Open move the counter backwards. Found by TestFaultAtEveryStep (ENOSPC on
// a create).
func TestReopenAfterUnusedFileNumbers(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, smallOptions())
	mustDo(t, db.Put([]byte("k"), []byte("v")))
	for range 5 {
		db.manifest.NewFileNum() // handed out, never used
	}
	mustDo(t, db.manifest.Apply(manifest.Edit{})) // commits a counter covering them, as a flush would
	mustDo(t, db.Close())
	db = mustOpen(t, dir, smallOptions())
	defer db.Close()
	if v, err := db.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get after reopen: %q, %v", v, err)
	}
}
