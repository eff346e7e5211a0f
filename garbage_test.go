package bloomkv

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/segment"
)

// blocksOf returns the data blocks (read or found in the cache) that fn
// makes Gets and iterators of db touch.
func blocksOf(t *testing.T, db *DB, fn func()) uint64 {
	t.Helper()
	before := db.Stats()
	fn()
	after := db.Stats()
	return after.BlockReads + after.BlockCacheHits - before.BlockReads - before.BlockCacheHits
}

// firstIndexBlocks returns the blocks a raft log's FirstIndex (a bounded
// iterator's First) touches, checking it finds want.
func firstIndexBlocks(t *testing.T, db *DB, want uint64) uint64 {
	t.Helper()
	return blocksOf(t, db, func() {
		it, err := db.NewIterator(&IterOptions{Prefix: []byte("l")})
		mustDo(t, err)
		if !it.First() || binary.BigEndian.Uint64(it.Key()[1:]) != want {
			t.Fatalf("first index %x, want %d (err %v)", it.Key(), want, it.Error())
		}
		mustDo(t, it.Close())
	})
}

// TestGarbageMergeAfterSnapshotRangeDelete is a raft log that truncates
// its head with DeleteRange while a snapshot is streamed: the flush or
// compaction that runs meanwhile must keep every truncated entry for the
// snapshot. Once the snapshot is released the store must merge them away
// by itself, or every FirstIndex steps over all of them, indefinitely.
// The entries are in a segment before the truncation (a compaction keeps
// them), or still in the memtable with it (the flush keeps them: the
// memtable is too empty for the range deletion to rotate it first).
func TestGarbageMergeAfterSnapshotRangeDelete(t *testing.T) {
	n := uint64(20000)
	if testing.Short() {
		n = 5000
	}
	const keep = 100
	for _, how := range []string{"compact", "flush"} {
		t.Run(how, func(t *testing.T) {
			o := DefaultOptions()
			o.MemtableSize = 64 << 20
			db := mustOpen(t, t.TempDir(), o)
			defer db.Close()
			v := make([]byte, 16)
			for i := uint64(1); i <= n; i++ {
				mustDo(t, db.Put(raftKey(i), v))
			}
			if how == "compact" {
				mustDo(t, db.Flush())
			}
			snap, err := db.NewSnapshot()
			mustDo(t, err)
			first := n - keep + 1
			mustDo(t, db.DeleteRange(raftKey(1), raftKey(first)))
			if how == "compact" {
				mustDo(t, db.Compact())
			} else {
				mustDo(t, db.Flush())
			}
			mustDo(t, db.WaitForCompactions(context.Background()))
			during := firstIndexBlocks(t, db, first)
			mustDo(t, snap.Close())
			mustDo(t, db.WaitForCompactions(context.Background()))
			after := firstIndexBlocks(t, db, first)
			t.Logf("n=%d: FirstIndex reads %d blocks with the snapshot open, %d after it was released; %d live entries, %d segments",
				n, during, after, liveEntries(db), db.Stats().Segments)
			if after > 2 {
				t.Fatalf("FirstIndex reads %d blocks after the snapshot was released: the truncated entries stayed", after)
			}
			if e := liveEntries(db); e != keep {
				t.Fatalf("%d live entries, want %d", e, keep)
			}
		})
	}
}

// TestGarbageMergeAfterSnapshotOverwrite: every key overwritten while a
// snapshot is open leaves two versions of each in the compacted segment,
// and a scan of the latest state reads both. Once the snapshot is
// released the older versions must be merged away by the store itself.
func TestGarbageMergeAfterSnapshotOverwrite(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 5000
	}
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	v := make([]byte, 16)
	for i := range n {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%06d", i), v))
	}
	mustDo(t, db.Flush())
	scan := func() uint64 {
		return blocksOf(t, db, func() {
			if got := len(keysOf(t, db.NewIterator)); got != n {
				t.Fatalf("scan shows %d keys, want %d", got, n)
			}
		})
	}
	base := scan()
	snap, err := db.NewSnapshot()
	mustDo(t, err)
	v[0] = 1
	for i := range n {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%06d", i), v))
	}
	mustDo(t, db.Compact())
	during := scan()
	mustDo(t, snap.Close())
	mustDo(t, db.WaitForCompactions(context.Background()))
	after := scan()
	t.Logf("n=%d: scan %d blocks before the overwrite, %d with the snapshot open, %d after it was released; %d live entries",
		n, base, during, after, liveEntries(db))
	if after > base+base/10 {
		t.Fatalf("a scan reads %d blocks after the snapshot was released, %d before the overwrite: the older versions stayed", after, base)
	}
	if e := liveEntries(db); e != uint64(n) {
		t.Fatalf("%d live entries, want %d", e, n)
	}
}

// segmentProps returns the properties of the live segments, newest first.
func segmentProps(db *DB) []segment.Properties {
	rs := db.acquire()
	defer rs.release()
	var out []segment.Properties
	for _, s := range rs.segments {
		out = append(out, s.reader.Properties())
	}
	return out
}

// TestRangeCoveredSurvivesReopen: the count of range-covered versions a
// compaction kept for a snapshot is in the segment file, so a store
// reopened after the snapshot is gone (a restart ends every snapshot)
// still knows the garbage is there and merges it away.
func TestRangeCoveredSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	o := DefaultOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	const n, keep = 2000, 10
	for i := uint64(1); i <= n; i++ {
		mustDo(t, db.Put(raftKey(i), []byte("v")))
	}
	mustDo(t, db.Flush())
	snap, err := db.NewSnapshot()
	mustDo(t, err)
	mustDo(t, db.DeleteRange(raftKey(1), raftKey(n-keep+1)))
	mustDo(t, db.Put(raftKey(1), []byte("again"))) // newer than the tombstone: not covered
	mustDo(t, db.Compact())
	mustDo(t, snap.Close())
	check := func(when string) {
		t.Helper()
		props := segmentProps(db)
		if len(props) != 1 || props[0].RangeCovered != n-keep-1 {
			t.Fatalf("%s: segments %+v, want one with %d range-covered versions", when, props, n-keep-1)
		}
	}
	check("after the compaction")
	mustDo(t, db.Close())
	db = mustOpen(t, dir, o)
	check("reopened")
	mustDo(t, db.Close())

	o.DisableAutoCompaction = false
	db = mustOpen(t, dir, o)
	defer db.Close()
	mustDo(t, db.WaitForCompactions(context.Background()))
	props := segmentProps(db)
	if len(props) != 1 || props[0].Entries != keep+1 || props[0].RangeCovered != 0 || props[0].RangeDels != 0 {
		t.Fatalf("reopened with background compaction: segments %+v, want one of %d entries and no garbage", props, keep+1)
	}
	if got := firstIndexBlocks(t, db, 1); got > 2 {
		t.Fatalf("FirstIndex reads %d blocks", got)
	}
}

// TestGarbageMergeWaitsForSnapshots: while a snapshot is open, the merge
// is not scheduled (it could not drop what the snapshot sees, and would
// be due again at once), and the store settles; after the last snapshot
// goes it runs once, and its output holds no garbage, so nothing is due
// after it.
func TestGarbageMergeWaitsForSnapshots(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	const n = 3000
	for i := uint64(1); i <= n; i++ {
		mustDo(t, db.Put(raftKey(i), []byte("v")))
	}
	mustDo(t, db.Flush())
	s1, err := db.NewSnapshot()
	mustDo(t, err)
	mustDo(t, db.Put([]byte("a"), []byte("v")))
	s2, err := db.NewSnapshot() // sees the deleted entries too
	mustDo(t, err)
	mustDo(t, db.DeleteRange(raftKey(1), raftKey(n)))
	mustDo(t, db.Compact())
	compactions := func() uint64 {
		// A merge due again after itself would never let the store
		// settle; the deadline only bounds how long the test waits.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		mustDo(t, db.WaitForCompactions(ctx))
		return db.Stats().Compactions
	}
	c0 := compactions()
	mustDo(t, s1.Close())
	// A flush asks the scheduler too (this one leaves the tier-0
	// segments under the fan-in, so the policy has nothing to offer).
	mustDo(t, db.Put([]byte("m"), []byte("v")))
	mustDo(t, db.Flush())
	if c := compactions(); c != c0 || liveEntries(db) != n+2 {
		t.Fatalf("with a snapshot still open: %d compactions after %d, %d live entries, want none and %d", c, c0, liveEntries(db), n+2)
	}
	mustDo(t, s2.Close())
	c1 := compactions()
	if c1 != c0+1 || liveEntries(db) != 3 {
		t.Fatalf("after the last snapshot: %d compactions after %d, %d live entries, want one and 3", c1, c0, liveEntries(db))
	}
	db.mu.Lock()
	pick := db.garbageMergeLocked()
	db.mu.Unlock()
	if pick != nil {
		t.Fatalf("after the garbage merge another is due: %+v", pick)
	}
	// More snapshots come and go: nothing to do.
	for range 3 {
		s, err := db.NewSnapshot()
		mustDo(t, err)
		mustDo(t, s.Close())
	}
	if c := compactions(); c != c1 {
		t.Fatalf("%d compactions after %d with nothing to drop", c, c1)
	}
}
