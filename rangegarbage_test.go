package bloomkv

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// fillRandom puts n keys "t/"+i (big-endian) with random 100-byte
// values, and compacts them into one segment.
func fillRandom(t *testing.T, db *DB, n uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]byte, 100)
	for i := range n {
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		mustDo(t, db.Put(tableKey(i), v))
	}
	mustDo(t, db.Compact())
}

func tableKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte("t/"), i) }

// TestDeleteRangeReclaimsOlderSegments: a DeleteRange of most of a store
// whose data sits in an older segment gets the space back by itself, in
// a store that does not grow any more, where the size-tiered policy would
// never merge the old segment with the tombstone's. Then nothing more is
// merged: the merge took the tombstone, and no estimate is left. The same
// after a reopen, where the estimates are computed from the files.
func TestDeleteRangeReclaimsOlderSegments(t *testing.T) {
	n := uint64(60_000)
	if testing.Short() {
		n = 20_000
	}
	for _, reopen := range []bool{false, true} {
		dir := t.TempDir()
		o := DefaultOptions()
		o.MemtableSize = 1 << 20         // what is covered counts from 1 MiB
		o.DisableAutoCompaction = reopen // the merge is due only after the reopen
		db := mustOpen(t, dir, o)
		fillRandom(t, db, n)
		before := db.Stats().SegmentBytes
		mustDo(t, db.DeleteRange(tableKey(0), tableKey(n*9/10)))
		mustDo(t, db.Flush())
		if reopen {
			mustDo(t, db.Close())
			o.DisableAutoCompaction = false
			db = mustOpen(t, dir, o)
		}
		mustDo(t, db.WaitForCompactions(context.Background()))
		entries, after := liveEntries(db), db.Stats()
		t.Logf("reopen %v: %d keys, 90%% deleted: %d -> %d segment bytes, %d entries in %d segments, %d compactions",
			reopen, n, before, after.SegmentBytes, entries, after.Segments, after.Compactions)
		if entries > n/10+64 || after.SegmentBytes > before/5 {
			t.Errorf("reopen %v: after deleting 90%% of %d keys, %d entries and %d of %d bytes remain", reopen, n, entries, after.SegmentBytes, before)
		}
		// Nothing due any more: another look at the store merges nothing.
		db.mu.Lock()
		db.scheduleCompactionLocked()
		db.mu.Unlock()
		mustDo(t, db.WaitForCompactions(context.Background()))
		if c := db.Stats().Compactions; c != after.Compactions {
			t.Errorf("reopen %v: %d more compactions with nothing to merge", reopen, c-after.Compactions)
		}
		for i := n * 9 / 10; i < n; i += 997 {
			if _, err := db.Get(tableKey(i)); err != nil {
				t.Fatalf("key %d, not deleted: %v", i, err)
			}
		}
		mustDo(t, db.Close())
	}
}

// TestCoverageFollowsLiveSegments: the estimate of what a segment's range
// tombstones cover in older segments counts only live ones. A segment
// they delete whole, dropped without a merge (as a raft log's truncated
// head is), takes its share with it, so that a log truncated now and then
// does not rewrite the store each time for garbage already gone; and a
// merge of older segments that leaves the tombstones out passes its
// inputs' share to its output, which still holds what they covered.
func TestCoverageFollowsLiveSegments(t *testing.T) {
	o := DefaultOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	v := make([]byte, 100)
	for part := range uint64(3) { // three segments: keys [0, 2000), [2000, 4000), [4000, 6000)
		for i := part * 2000; i < (part+1)*2000; i++ {
			mustDo(t, db.Put(tableKey(i), v))
		}
		mustDo(t, db.Flush())
	}
	mustDo(t, db.DeleteRange(tableKey(0), tableKey(3000)))
	mustDo(t, db.Flush())
	covered := func() (total uint64, pairs int) {
		db.mu.Lock()
		defer db.mu.Unlock()
		return db.segments[0].coveredGarbage(), len(db.segments[0].coversOlder)
	}
	check := func(when string, wantPairs int, lo, hi uint64) {
		t.Helper()
		total, pairs := covered()
		t.Logf("%s: %d entries covered in %d segments", when, total, pairs)
		if pairs != wantPairs || total < lo || total > hi {
			t.Fatalf("%s: the estimate is %d entries in %d segments, want %d-%d in %d", when, total, pairs, lo, hi, wantPairs)
		}
	}
	check("3000 of 6000 keys deleted", 2, 2000, 3000)

	db.mu.Lock()
	gone := db.deletedSegmentsLocked(db.segments)
	db.mu.Unlock()
	if len(gone) != 1 {
		t.Fatalf("%d segments deleted whole, want 1", len(gone))
	}
	mustDo(t, db.dropSegments(gone))
	check("the segment deleted whole dropped", 1, 1, 1000)

	// The two older segments merged without the tombstones: the output
	// holds the 1000 covered keys still.
	db.mu.Lock()
	older := slices.Clone(db.segments[1:])
	db.mu.Unlock()
	mustDo(t, db.compactSegments(older, 1, true))
	check("the older segments merged", 1, 1, 1000)
}

// TestSmallCoveredGarbageWaits: what range tombstones cover in older
// segments starts a merge only once it is a memtable's worth of bytes;
// less is left to the merges of the flushes to come (a raft log truncated
// behind every 1,000 entries would otherwise rewrite itself at each).
func TestSmallCoveredGarbageWaits(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil) // 4 MiB memtables
	defer db.Close()
	fillRandom(t, db, 5000) // about 0.6 MB
	mustDo(t, db.DeleteRange(tableKey(0), tableKey(4500)))
	mustDo(t, db.Flush())
	mustDo(t, db.WaitForCompactions(context.Background()))
	if entries := liveEntries(db); entries < 5000 {
		t.Fatalf("%d entries left: a merge dropped the covered puts, under a memtable's worth", entries)
	}
	db.mu.Lock()
	b := db.coveredBytesLocked()
	db.mu.Unlock()
	if b < 400_000 {
		t.Fatalf("the covered puts are estimated at %d bytes, want about 0.5 MB", b)
	}
}

// TestCoverageWorkBounded: the estimates of one pass stop where their
// work runs out (coverageWork), at Open as at an install: none at all
// with none to spend, all of them with enough.
func TestCoverageWorkBounded(t *testing.T) {
	defer func(w int) { coverageWork = w }(coverageWork)
	dir := t.TempDir()
	o := DefaultOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	v := make([]byte, 100)
	for i := range uint64(4000) {
		mustDo(t, db.Put(tableKey(i), v))
	}
	mustDo(t, db.Flush())
	mustDo(t, db.DeleteRange(tableKey(0), tableKey(3000)))
	mustDo(t, db.Flush())
	mustDo(t, db.Close())
	for _, work := range []int{0, 1 << 18} {
		coverageWork = work
		db := mustOpen(t, dir, o)
		db.mu.Lock()
		n := db.segments[0].coveredGarbage()
		db.mu.Unlock()
		mustDo(t, db.Close())
		if work == 0 && n != 0 || work > 0 && n < 2000 {
			t.Errorf("work %d: %d entries covered at Open, want %s", work, n, map[bool]string{true: "none", false: "about 3000"}[work == 0])
		}
	}
}

// TestCoverageCountsOneEntry: an estimate of a single covered entry is
// kept, in both directions coverageFor works: a tombstone's segment
// flushed over an older segment of one key records it, and so does the
// output of a merge of that older segment, installed below the
// tombstone's. (Each covered entry is garbage a later merge may reclaim;
// a test that covers thousands would not tell "more than none" from
// "more than one".)
func TestCoverageCountsOneEntry(t *testing.T) {
	o := DefaultOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	mustDo(t, db.Put(tableKey(1), []byte("v")))
	mustDo(t, db.Flush())
	mustDo(t, db.DeleteRange(tableKey(0), tableKey(2)))
	mustDo(t, db.Flush())
	check := func(when string) {
		t.Helper()
		db.mu.Lock()
		defer db.mu.Unlock()
		if len(db.segments) != 2 {
			t.Fatalf("%s: %d segments, want 2", when, len(db.segments))
		}
		cov := db.segments[0].coversOlder
		if len(cov) != 1 || cov[0].older != db.segments[1] || cov[0].n != 1 {
			t.Fatalf("%s: the tombstone's segment estimates %+v, want one entry of the older segment", when, cov)
		}
	}
	check("flushed over one key")

	db.mu.Lock()
	older := slices.Clone(db.segments[1:])
	db.mu.Unlock()
	mustDo(t, db.compactSegments(older, 1, true))
	check("the older segment merged")
}
