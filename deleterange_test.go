package bloomkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"testing"
	"time"
)

// keysOf returns the keys an iterator over db shows, forward and (checked
// to agree) backward.
func keysOf(t *testing.T, newIter func(*IterOptions) (*Iterator, error)) []string {
	t.Helper()
	it, err := newIter(nil)
	mustDo(t, err)
	defer it.Close()
	var fwd, bwd []string
	for k := range it.All() {
		fwd = append(fwd, string(k))
	}
	for k := range it.Backward() {
		bwd = append(bwd, string(k))
	}
	mustDo(t, it.Error())
	slices.Reverse(bwd)
	if !slices.Equal(fwd, bwd) {
		t.Fatalf("forward %v, backward %v", fwd, bwd)
	}
	return fwd
}

func nkeys(lo, hi int) []string {
	var out []string
	for i := lo; i < hi; i++ {
		out = append(out, fmt.Sprintf("k%02d", i))
	}
	return out
}

// TestDeleteRangeSemantics pins down what a range tombstone hides, in the
// memtable, in a flushed segment and through compactions: the older
// versions of the keys in [start, end), not newer writes, not the end key,
// and nothing a snapshot taken before it sees.
func TestDeleteRangeSemantics(t *testing.T) {
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for _, k := range nkeys(0, 30) {
		mustDo(t, db.Put([]byte(k), []byte("old")))
	}
	mustDo(t, db.Flush()) // some versions in a segment, some in the memtable
	for _, k := range nkeys(5, 15) {
		mustDo(t, db.Put([]byte(k), []byte("old2")))
	}
	before, err := db.NewSnapshot()
	mustDo(t, err)
	defer before.Close()
	mustDo(t, db.DeleteRange([]byte("k10"), []byte("k20")))
	mustDo(t, db.Put([]byte("k15"), []byte("new")))

	want := append(append(nkeys(0, 10), "k15"), nkeys(20, 30)...)
	check := func(stage string) {
		t.Helper()
		if got := keysOf(t, db.NewIterator); !slices.Equal(got, want) {
			t.Fatalf("%s: keys %v, want %v", stage, got, want)
		}
		for _, k := range nkeys(0, 30) {
			v, err := db.Get([]byte(k))
			switch {
			case k == "k15":
				if string(v) != "new" {
					t.Fatalf("%s: Get(k15) = %q, %v; want the write made after the deletion", stage, v, err)
				}
			case k >= "k10" && k < "k20":
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("%s: Get(%s) = %q, %v; want ErrNotFound", stage, k, v, err)
				}
			case err != nil:
				t.Fatalf("%s: Get(%s): %v", stage, k, err)
			}
		}
		if got := keysOf(t, before.NewIterator); !slices.Equal(got, nkeys(0, 30)) {
			t.Fatalf("%s: the snapshot taken before the deletion shows %v", stage, got)
		}
		if v, err := before.Get([]byte("k12")); string(v) != "old2" {
			t.Fatalf("%s: snapshot Get(k12) = %q, %v; want old2", stage, v, err)
		}
	}
	check("memtable")
	mustDo(t, db.Flush())
	check("flushed")
	mustDo(t, db.Compact())
	check("compacted with the snapshot open")
	if n := liveRangeDels(db); n == 0 {
		t.Fatal("the compaction dropped the tombstone an open snapshot still needs to be told apart from")
	}
	mustDo(t, before.Close())
	mustDo(t, db.Compact())
	if got := keysOf(t, db.NewIterator); !slices.Equal(got, want) {
		t.Fatalf("after the last compaction: keys %v, want %v", got, want)
	}
	if n, entries := liveRangeDels(db), liveEntries(db); n != 0 || entries != uint64(len(want)) {
		t.Fatalf("a major compaction with no snapshot left %d range tombstones and %d entries, want 0 and %d", n, entries, len(want))
	}
}

// liveRangeDels and liveEntries sum the live segments' range tombstones
// and entries.
func liveRangeDels(db *DB) (n uint64) {
	rs := db.acquire()
	defer rs.release()
	for _, s := range rs.segments {
		n += s.reader.Properties().RangeDels
	}
	return n
}

func liveEntries(db *DB) (n uint64) {
	rs := db.acquire()
	defer rs.release()
	for _, s := range rs.segments {
		n += s.meta.Entries
	}
	return n
}

// TestDeleteRangeBatchOrder: a batch applies in order, so a put before a
// range deletion of its key in the same batch is deleted and one after it
// is not.
func TestDeleteRangeBatchOrder(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	b := NewBatch()
	mustDo(t, b.Put([]byte("a"), []byte("1")))
	mustDo(t, b.Put([]byte("b"), []byte("1")))
	mustDo(t, b.DeleteRange([]byte("a"), []byte("z")))
	mustDo(t, b.Put([]byte("b"), []byte("2")))
	mustDo(t, db.Write(b))
	if got := keysOf(t, db.NewIterator); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("keys %v, want [b]", got)
	}
	if v, err := db.Get([]byte("b")); string(v) != "2" {
		t.Fatalf("Get(b) = %q, %v", v, err)
	}
}

// TestDeleteRangeInput covers the documented errors and no-ops.
func TestDeleteRangeInput(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	mustDo(t, db.Put([]byte("k"), []byte("v")))
	big := make([]byte, MaxKeySize+1)
	for _, tc := range []struct {
		name       string
		start, end []byte
	}{{"start", big, append(big, 1)}, {"end", []byte("a"), big}} {
		if err := db.DeleteRange(tc.start, tc.end); !errors.Is(err, ErrKeyTooLarge) {
			t.Errorf("oversized %s: %v, want ErrKeyTooLarge", tc.name, err)
		}
	}
	// Empty or reversed ranges delete nothing and are not errors.
	mustDo(t, db.DeleteRange([]byte("k"), []byte("k")))
	mustDo(t, db.DeleteRange([]byte("z"), []byte("a")))
	if _, err := db.Get([]byte("k")); err != nil {
		t.Fatalf("an empty range deleted k: %v", err)
	}
	// An empty start means from the first key.
	mustDo(t, db.DeleteRange(nil, []byte("l")))
	if _, err := db.Get([]byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DeleteRange(nil, l) left k: %v", err)
	}
	// A batch reports the first bad operation at once, and Write returns it.
	b := NewBatch()
	if err := b.Put(nil, []byte("v")); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Batch.Put(nil): %v, want ErrEmptyKey", err)
	}
	if err := b.DeleteRange([]byte("a"), []byte("b")); !errors.Is(err, ErrEmptyKey) || !errors.Is(b.Err(), ErrEmptyKey) {
		t.Fatalf("after a refused operation the batch says %v / %v, want the sticky ErrEmptyKey", err, b.Err())
	}
	if err := db.Write(b); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Write of a refused batch: %v", err)
	}
	mustDo(t, db.Close())
	if err := db.DeleteRange([]byte("a"), []byte("b")); !errors.Is(err, ErrClosed) {
		t.Fatalf("DeleteRange after Close: %v, want ErrClosed", err)
	}
}

// TestDeleteRangeGetStopsAtTombstone: a Get of a key that a range
// tombstone deleted reads no block: the first segment whose filter says
// "maybe" holds only versions older than the tombstone, which the Get
// learns from memory, and it stops there — one filter asked, none of the
// older segments' filters, no block.
func TestDeleteRangeGetStopsAtTombstone(t *testing.T) {
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for seg := range 3 {
		for i := range 200 {
			mustDo(t, db.Put(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "v%d", seg)))
		}
		mustDo(t, db.Flush())
	}
	mustDo(t, db.DeleteRange([]byte("k0000"), []byte("k0100")))
	mustDo(t, db.Flush())
	before := db.Stats()
	for i := range 100 {
		if _, err := db.Get(fmt.Appendf(nil, "k%04d", i)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(k%04d): %v", i, err)
		}
	}
	after := db.Stats()
	if probed, reads := after.SegmentsProbed-before.SegmentsProbed, after.BlockReads+after.BlockCacheHits-before.BlockReads-before.BlockCacheHits; probed != 100 || reads != 0 {
		t.Fatalf("100 Gets of deleted keys probed %d segment filters and read %d blocks, want 100 and 0", probed, reads)
	}
}

// TestDeleteRangeFlushDropsCovered: a flush writes no version that the
// memtable's own range tombstone covers, only the tombstone.
func TestDeleteRangeFlushDropsCovered(t *testing.T) {
	o := smallOptions()
	o.MemtableSize = 1 << 20
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for i := range 100 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%04d", i), []byte("v")))
	}
	mustDo(t, db.DeleteRange([]byte("k0020"), []byte("k0070")))
	mustDo(t, db.Flush())
	if entries, rd := liveEntries(db), liveRangeDels(db); entries != 50 || rd != 1 {
		t.Fatalf("flushed %d entries and %d range tombstones, want 50 and 1", entries, rd)
	}
}

// TestDeleteRangeDropsDeletedSegments: a segment that newer range
// tombstones delete entirely leaves without a merge — unless a snapshot
// still sees it.
func TestDeleteRangeDropsDeletedSegments(t *testing.T) {
	o := smallOptions()
	o.MemtableSize = 1 << 20
	o.CompactionFanIn = 64 // the policy merges nothing here
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	put := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			mustDo(t, db.Put(fmt.Appendf(nil, "k%04d", i), make([]byte, 100)))
		}
		mustDo(t, db.Flush())
	}
	put(0, 100)
	put(100, 200)
	snap, err := db.NewSnapshot()
	mustDo(t, err)
	mustDo(t, db.DeleteRange([]byte("k0000"), []byte("k0100")))
	put(200, 300) // the flush carries the tombstone
	mustDo(t, db.WaitForCompactions(context.Background()))
	if n := db.Stats().Segments; n != 3 {
		t.Fatalf("with a snapshot that sees it, the deleted segment was dropped: %d segments, want 3", n)
	}
	mustDo(t, snap.Close())
	put(300, 301) // a flush asks the policy again
	mustDo(t, db.WaitForCompactions(context.Background()))
	st := db.Stats()
	if st.Segments != 3 {
		t.Fatalf("%d segments, want 3: the deleted one dropped, the new one added", st.Segments)
	}
	last := st.RecentCompactions[len(st.RecentCompactions)-1]
	if !last.DeleteOnly || last.Inputs != 1 || last.OutputBytes != 0 {
		t.Fatalf("last compaction %+v, want a delete-only drop of one segment", last)
	}
	if got := keysOf(t, db.NewIterator); len(got) != 201 || got[0] != "k0100" {
		t.Fatalf("%d keys from %v, want 201 from k0100", len(got), got[:1])
	}
}

// TestDeleteRangeKeepsSegmentAtExclusiveEnd: a segment whose largest key
// is the end of a newer range tombstone is not deleted entirely — the end
// is exclusive — so no delete-only compaction drops it, and its last key
// stays readable; one tombstone further would drop it.
func TestDeleteRangeKeepsSegmentAtExclusiveEnd(t *testing.T) {
	o := smallOptions()
	o.CompactionFanIn = 64   // the policy merges nothing here
	o.MemtableSize = 1 << 20 // a segment per Flush
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	// An older segment of keys no tombstone covers, so that what the
	// tombstone covers stays below the garbage merge's share
	// (garbageDensity) and no merge takes the segments together.
	for i := range 500 {
		mustDo(t, db.Put(fmt.Appendf(nil, "a%04d", i), []byte("v")))
	}
	mustDo(t, db.Flush())
	for i := range 100 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%04d", i), []byte("v")))
	}
	mustDo(t, db.Flush())
	mustDo(t, db.DeleteRange([]byte("k0000"), []byte("k0099")))
	mustDo(t, db.Put([]byte("z"), []byte("v"))) // the tombstone's segment holds a key: no point of it is covered
	mustDo(t, db.Flush())
	mustDo(t, db.WaitForCompactions(context.Background()))
	if n := db.Stats().Segments; n != 3 {
		t.Fatalf("%d segments, want 3: the one holding k0099, the end of the deleted range, stays", n)
	}
	if v, err := db.Get([]byte("k0099")); err != nil || string(v) != "v" {
		t.Fatalf("Get(k0099), the tombstone's exclusive end: %q, %v", v, err)
	}
	if got := keysOf(t, db.NewIterator); len(got) != 502 || got[500] != "k0099" || got[501] != "z" {
		t.Fatalf("%d keys, want 500 a-keys, k0099 and z", len(got))
	}
	mustDo(t, db.DeleteRange([]byte("k0099"), []byte("k0100")))
	mustDo(t, db.Flush())
	mustDo(t, db.WaitForCompactions(context.Background()))
	if got := keysOf(t, db.NewIterator); len(got) != 501 || got[500] != "z" {
		t.Fatalf("%d keys after the last key was deleted too, want 500 a-keys and z", len(got))
	}
	if last := db.Stats().RecentCompactions; len(last) == 0 || !last[len(last)-1].DeleteOnly {
		t.Fatalf("compactions %+v: want the fully deleted segment dropped without a merge", last)
	}
}

// raftKey is a raft log store's key: the index, big-endian.
func raftKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte("l"), i) }

// TestDeleteRangeRaftPattern is a raft log: entries appended by index, the
// head truncated behind each snapshot. Finding the first live entry reads
// a bounded number of blocks however many entries were truncated (it was
// a walk over every point tombstone before range deletion).
func TestDeleteRangeRaftPattern(t *testing.T) {
	o := smallOptions()
	o.MemtableSize = 64 << 10
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	const n, keep, every = 30000, 500, 2000
	first := uint64(1)
	for i := uint64(1); i <= n; i++ {
		mustDo(t, db.Put(raftKey(i), make([]byte, 100)))
		if i%every == 0 {
			mustDo(t, db.DeleteRange(raftKey(first), raftKey(i-keep)))
			first = i - keep
		}
	}
	mustDo(t, db.WaitForCompactions(context.Background()))
	opts := &IterOptions{Prefix: []byte("l")}
	before := db.Stats()
	it, err := db.NewIterator(opts)
	mustDo(t, err)
	if !it.First() || binary.BigEndian.Uint64(it.Key()[1:]) != first {
		t.Fatalf("first index %x, want %d (err %v)", it.Key(), first, it.Error())
	}
	mustDo(t, it.Close())
	after := db.Stats()
	blocks := after.BlockReads + after.BlockCacheHits - before.BlockReads - before.BlockCacheHits
	if blocks > uint64(2*after.Segments+2) {
		t.Fatalf("finding the first of %d live entries after %d truncated read %d blocks over %d segments", n-first+1, first-1, blocks, after.Segments)
	}
	t.Logf("first index after %d truncations: %d blocks over %d segments; %d compactions", n/every, blocks, after.Segments, after.Compactions)
}

// TestDeleteRangeSurvivesReopen: a range tombstone in the WAL is replayed,
// and one in a segment is read back.
func TestDeleteRangeSurvivesReopen(t *testing.T) {
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprint("flush=", flush), func(t *testing.T) {
			dir := t.TempDir()
			db := mustOpen(t, dir, smallOptions())
			for _, k := range nkeys(0, 30) {
				mustDo(t, db.Put([]byte(k), []byte("v")))
			}
			mustDo(t, db.DeleteRange([]byte("k05"), []byte("k25")))
			if flush {
				mustDo(t, db.Flush())
			}
			mustDo(t, db.Close())
			db = mustOpen(t, dir, smallOptions())
			defer db.Close()
			want := append(nkeys(0, 5), nkeys(25, 30)...)
			if got := keysOf(t, db.NewIterator); !slices.Equal(got, want) {
				t.Fatalf("after reopen: %v, want %v", got, want)
			}
			rep, err := db.Verify(context.Background())
			mustDo(t, err)
			if len(rep.Problems) > 0 {
				t.Fatalf("Verify: %v", rep.Problems)
			}
		})
	}
}

// TestDeleteRangeManyTombstones: many overlapping range deletions in one
// memtable and across segments agree with a model, through compactions.
func TestDeleteRangeManyTombstones(t *testing.T) {
	o := smallOptions()
	o.CompactionFanIn = 2
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	model := map[string]string{}
	for round := range 20 {
		for i := range 50 {
			k := fmt.Sprintf("k%04d", (round*37+i*13)%1000)
			v := strings.Repeat("v", round+1)
			mustDo(t, db.Put([]byte(k), []byte(v)))
			model[k] = v
		}
		lo := (round * 53) % 900
		start, end := fmt.Sprintf("k%04d", lo), fmt.Sprintf("k%04d", lo+round*10)
		mustDo(t, db.DeleteRange([]byte(start), []byte(end)))
		modelDeleteRange(model, start, end)
		if round%5 == 4 {
			mustDo(t, db.Flush())
		}
	}
	mustDo(t, db.WaitForCompactions(context.Background()))
	want := slices.Sorted(func(yield func(string) bool) {
		for k := range model {
			if !yield(k) {
				return
			}
		}
	})
	if got := keysOf(t, db.NewIterator); !slices.Equal(got, want) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
	mustDo(t, db.Compact())
	if got := keysOf(t, db.NewIterator); !slices.Equal(got, want) {
		t.Fatalf("after Compact: %d keys, want %d", len(got), len(want))
	}
}

// TestTombstoneDensityMerge: when point tombstones become a fifth of the
// live entries, a background merge to the oldest segment drops them and
// what they hide, though the size-tiered policy alone would merge nothing.
func TestTombstoneDensityMerge(t *testing.T) {
	o := smallOptions()
	o.MemtableSize = 1 << 20
	o.CompactionFanIn = 64
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for i := range 2000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%04d", i), make([]byte, 50)))
	}
	mustDo(t, db.Flush())
	for i := range 1000 {
		mustDo(t, db.Delete(fmt.Appendf(nil, "k%04d", 2*i)))
	}
	mustDo(t, db.Flush())
	mustDo(t, db.WaitForCompactions(context.Background()))
	if entries := liveEntries(db); entries != 1000 {
		t.Fatalf("%d live entries after 1000 deletions of 2000 keys, want 1000: the tombstones stayed", entries)
	}
	if got := keysOf(t, db.NewIterator); len(got) != 1000 || got[0] != "k0001" {
		t.Fatalf("%d keys from %v", len(got), got[:1])
	}
}

// BenchmarkGetMissRangeDels measures an absent-key Get on a store of
// 10^5 keys in 5 segments with no range tombstone, with 1,000 live ones in
// a segment of their own, and with 1,000 in the memtable. Each tombstone
// deletes one stored key; the probes are absent keys, so every Get checks
// the tombstones and the filters and reads nothing.
func BenchmarkGetMissRangeDels(b *testing.B) {
	const keys, segments, tombstones = 100_000, 5, 1000
	build := func(b *testing.B, where string) *DB {
		o := DefaultOptions()
		o.DisableAutoCompaction = true
		db := mustOpen(b, b.TempDir(), o)
		var k [16]byte
		v := make([]byte, 100)
		for i := range uint64(keys) {
			mustDo(b, db.Put(benchKey(k[:], i), benchValue(v, i)))
			if (i+1)%(keys/segments) == 0 {
				mustDo(b, db.Flush())
			}
		}
		if where == "none" {
			return db
		}
		for i := range uint64(tombstones) {
			start := benchKey(k[:], i*(keys/tombstones))
			mustDo(b, db.DeleteRange(start, append(bytes.Clone(start), 0)))
		}
		if where == "segment" {
			mustDo(b, db.Flush())
		}
		return db
	}
	for _, where := range []string{"none", "segment", "memtable"} {
		b.Run("tombstones="+where, func(b *testing.B) {
			db := build(b, where)
			defer db.Close()
			var k [16]byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := db.Get(benchKey(k[:], keys+uint64(i))); !errors.Is(err, ErrNotFound) {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkRaftFirstIndex is hashicorp/raft's FirstIndex on a log store
// after 299,000 of 300,000 appended entries (100-byte values) were
// truncated from the head, 1,000 at a time, by point deletes (what a log
// store had to do before range deletion) or by DeleteRange — with
// background compaction as it comes, no manual Compact. One op is a
// bounded iterator's First.
func BenchmarkRaftFirstIndex(b *testing.B) {
	const n, every = 300_000, 1000
	for _, how := range []string{"point-deletes", "delete-range"} {
		b.Run(how, func(b *testing.B) {
			db := mustOpen(b, b.TempDir(), nil)
			defer db.Close()
			first := uint64(1)
			v := make([]byte, 100)
			for i := uint64(1); i <= n; i++ {
				mustDo(b, db.Put(raftKey(i), v))
				if i%every != 0 || i == every {
					continue
				}
				upto := i - every + 1 // keep the last every entries
				if how == "delete-range" {
					mustDo(b, db.DeleteRange(raftKey(first), raftKey(upto)))
				} else {
					batch := NewBatch()
					for j := first; j < upto; j++ {
						batch.Delete(raftKey(j))
					}
					mustDo(b, db.Write(batch))
				}
				first = upto
			}
			mustDo(b, db.WaitForCompactions(context.Background()))
			opts := &IterOptions{Prefix: []byte("l")}
			b.ResetTimer()
			for range b.N {
				it, err := db.NewIterator(opts)
				mustDo(b, err)
				if !it.First() || binary.BigEndian.Uint64(it.Key()[1:]) != first {
					b.Fatalf("first index %x, want %d", it.Key(), first)
				}
				mustDo(b, it.Close())
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
			b.ReportMetric(float64(db.Stats().Segments), "segments")
		})
	}
}

// TestDeleteRangeManyInARow: thousands of range deletions in a row (a
// tenant clean-up loop) all apply, keep the memtable's tombstones in a
// few lists (about log₂ of their number, so a Get asks only those), and
// rotate nothing: the tombstones are a small part of a memtable's bytes.
func TestDeleteRangeManyInARow(t *testing.T) {
	o := smallOptions()
	o.MemtableSize = 64 << 20 // the size alone would never rotate
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	const n = 3000
	for i := range n {
		mustDo(t, db.Put(fmt.Appendf(nil, "t%05d/a", i), []byte("v")))
		mustDo(t, db.Put(fmt.Appendf(nil, "t%05d/b", i), []byte("v")))
	}
	for i := range n {
		if i%3 != 0 {
			mustDo(t, db.DeleteRange(fmt.Appendf(nil, "t%05d/", i), fmt.Appendf(nil, "t%05d0", i)))
		}
	}
	if got, want := len(keysOf(t, db.NewIterator)), 2*(n/3); got != want {
		t.Fatalf("%d keys left, want %d", got, want)
	}
	if st := db.Stats(); st.Flushes != 0 {
		t.Fatalf("%d flushes: range deletions rotated the memtable", st.Flushes)
	}
	rs := db.acquire()
	defer rs.release()
	for _, m := range rs.mems {
		pieces := m.RangeDels().Len()
		if lists := len(m.RangeDelLists()); lists > bits.Len(uint(pieces))+1 {
			t.Fatalf("a memtable keeps %d pieces in %d lists, more than log₂+1", pieces, lists)
		}
	}
}

// TestDeleteRangeUnderPrefixFilters: a segment that a prefix scan skips by
// its prefix filter still contributes its range tombstones, which delete
// keys of that prefix in older segments.
func TestDeleteRangeUnderPrefixFilters(t *testing.T) {
	o := smallOptions()
	o.DisableAutoCompaction = true
	o.Prefix = FixedPrefix(4)
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for i := range 10 {
		mustDo(t, db.Put(fmt.Appendf(nil, "aaaa%d", i), []byte("v")))
	}
	mustDo(t, db.Flush())
	// Keys on both sides of the prefix, so that the next segment's key
	// range holds it and only its prefix filter can rule it out.
	mustDo(t, db.Put([]byte("aaa01"), []byte("v")))
	mustDo(t, db.Put([]byte("aaab1"), []byte("v")))
	mustDo(t, db.DeleteRange([]byte("aaaa3"), []byte("aaaa8")))
	mustDo(t, db.Flush())
	before := db.Stats()
	got := keysOf(t, func(*IterOptions) (*Iterator, error) { return db.NewIterator(&IterOptions{Prefix: []byte("aaaa")}) })
	if want := []string{"aaaa0", "aaaa1", "aaaa2", "aaaa8", "aaaa9"}; !slices.Equal(got, want) {
		t.Fatalf("prefix scan: %v, want %v", got, want)
	}
	if skips := db.Stats().PrefixFilterSkips - before.PrefixFilterSkips; skips == 0 {
		t.Fatal("the newer segment was not skipped by its prefix filter: the test tests nothing")
	}
}

// overlappingRange is the i-th of a run of range deletions that each
// overlap about 50 others: [k(i), k(i+50)) over keys k(j) = "r%07d".
func overlappingRange(i int) (start, end []byte) {
	return fmt.Appendf(nil, "r%07d", i), fmt.Appendf(nil, "r%07d", i+50)
}

// TestDeleteRangeLargeBatch writes one batch of 10^5 range deletions —
// each overlapping ~50 others, and 1,000 nested ones on top — then
// reopens the store, which replays the batch from the WAL. Each tombstone
// used to copy the memtable's fragment list (O(n²): 42 s per Open at
// 3·10^4), and keeping every sequence number of nested tombstones is n²
// pieces; now the batch is fragmented once, with the newest sequence
// number per fragment, so its pieces stay linear in n.
func TestDeleteRangeLargeBatch(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 20_000
	}
	const nested = 1000
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	for i := 0; i < n+60; i += 7 {
		mustDo(t, db.Put(fmt.Appendf(nil, "r%07d", i), []byte("v")))
	}
	mustDo(t, db.Put([]byte("s"), []byte("kept")))
	b := NewBatch()
	for i := range n {
		mustDo(t, b.DeleteRange(overlappingRange(i)))
	}
	for i := range nested {
		mustDo(t, b.DeleteRange(fmt.Appendf(nil, "q%07d", i), fmt.Appendf(nil, "q%07d", 2*nested-i)))
	}
	mustDo(t, db.Write(b))
	check := func(stage string, db *DB) {
		t.Helper()
		left := keysOf(t, db.NewIterator)
		// Keys from r(n+50) on were outside every range.
		want := []string{}
		for i := 0; i < n+60; i += 7 {
			if i >= n+49 {
				want = append(want, fmt.Sprintf("r%07d", i))
			}
		}
		want = append(want, "s")
		if !slices.Equal(left, want) {
			t.Fatalf("%s: keys left %v, want %v", stage, left, want)
		}
		rs := db.acquire()
		defer rs.release()
		for _, m := range rs.mems {
			if pieces := m.RangeDels().Len(); pieces > 2*(n+nested) {
				t.Fatalf("%s: %d tombstone pieces for %d range deletions: not linear", stage, pieces, n+nested)
			}
		}
	}
	check("after Write", db)
	mustDo(t, db.Close())
	db = mustOpen(t, dir, nil)
	defer db.Close()
	check("after replay", db)
}

// TestDeleteRangeOverlappingCallsNoFlushStorm: 10^4 separate DeleteRange
// calls, each overlapping ~50 others, once rotated the memtable every ~32
// calls (the rotation counted fragment×sequence-number pieces, and the
// tombstones themselves toward the 1/16 share that rotates a memtable on
// a range deletion): thousands of flushes and write stalls. Now tombstones
// are charged their memory and rotate a memtable only when it is full.
func TestDeleteRangeOverlappingCallsNoFlushStorm(t *testing.T) {
	n := 10_000
	if testing.Short() {
		n = 3000
	}
	o := &Options{MemtableSize: 1 << 20}
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for i := range n {
		mustDo(t, db.Put(fmt.Appendf(nil, "r%07d", i), []byte("v")))
	}
	mustDo(t, db.Flush())
	before := db.Stats()
	for i := range n {
		mustDo(t, db.DeleteRange(overlappingRange(i)))
	}
	st := db.Stats()
	if left := keysOf(t, db.NewIterator); len(left) != 0 {
		t.Fatalf("%d keys left, e.g. %s", len(left), left[0])
	}
	// Each call leaves ~50 sequence numbers on each of its fragments (all
	// are needed: a reader may be at any of them), 8 bytes each: ~1 KiB.
	rs := db.acquire()
	var bytes int
	for _, m := range rs.mems {
		bytes += m.ApproximateSize()
	}
	rs.release()
	flushes := st.Flushes - before.Flushes
	limit := uint64(n*1100/o.MemtableSize) + 2 // a memtable's worth of tombstones per flush, and slack
	if flushes > limit || st.WriteStalls-before.WriteStalls > limit {
		t.Fatalf("%d flushes and %d write stalls for %d range deletions (memtables now %d bytes), want <= %d",
			flushes, st.WriteStalls-before.WriteStalls, n, bytes, limit)
	}
	t.Logf("%d range deletions: %d flushes, %d stalls", n, flushes, st.WriteStalls-before.WriteStalls)
}

// BenchmarkDeleteRangeBatch: one batch of n range deletions, each
// overlapping ~50 others, written and then replayed from the WAL by Open.
//
//	go test -run '^$' -bench DeleteRangeBatch -benchtime 1x .
func BenchmarkDeleteRangeBatch(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint("n=", n), func(b *testing.B) {
			var write, replay time.Duration
			for range b.N {
				dir := b.TempDir()
				db := mustOpen(b, dir, &Options{MemtableSize: 64 << 20})
				batch := NewBatch()
				for i := range n {
					mustDo(b, batch.DeleteRange(overlappingRange(i)))
				}
				start := time.Now()
				mustDo(b, db.Write(batch))
				write += time.Since(start)
				mustDo(b, db.Close())
				start = time.Now()
				db = mustOpen(b, dir, &Options{MemtableSize: 64 << 20})
				replay += time.Since(start)
				mustDo(b, db.Close())
			}
			b.ReportMetric(write.Seconds()/float64(b.N), "write-s")
			b.ReportMetric(replay.Seconds()/float64(b.N), "open-s")
		})
	}
}

// BenchmarkDeleteRangeCalls: n separate DeleteRange calls, each
// overlapping ~50 others, on a store of n keys (default options).
//
//	go test -run '^$' -bench DeleteRangeCalls -benchtime 1x .
func BenchmarkDeleteRangeCalls(b *testing.B) {
	const n = 100_000
	for range b.N {
		b.StopTimer()
		db := mustOpen(b, b.TempDir(), nil)
		for i := range n {
			mustDo(b, db.Put(fmt.Appendf(nil, "r%07d", i), []byte("v")))
		}
		mustDo(b, db.Flush())
		before := db.Stats()
		b.StartTimer()
		for i := range n {
			mustDo(b, db.DeleteRange(overlappingRange(i)))
		}
		b.StopTimer()
		st := db.Stats()
		b.ReportMetric(float64(st.Flushes-before.Flushes), "flushes")
		b.ReportMetric(float64(st.WriteStalls-before.WriteStalls), "stalls")
		mustDo(b, db.Close())
	}
}

// BenchmarkPickBesideRangeDels: the compaction pick, under db.mu, looks
// for segments that the range tombstones of newer segments delete
// entirely (deletedSegmentsLocked). Here four segments hold n range
// deletions each, each overlapping ~50 others, and four segments of other
// keys sit between them, so no segment is deleted. One op is one search.
//
//	go test -run '^$' -bench PickBesideRangeDels .
func BenchmarkPickBesideRangeDels(b *testing.B) {
	for _, n := range []int{1000, 30_000} {
		b.Run(fmt.Sprint("n=", n), func(b *testing.B) {
			db := mustOpen(b, b.TempDir(), &Options{MemtableSize: 64 << 20, DisableAutoCompaction: true})
			defer db.Close()
			for seg := range 8 {
				if seg%2 == 0 {
					batch := NewBatch()
					for i := range n {
						mustDo(b, batch.DeleteRange(overlappingRange(i+seg*n)))
					}
					mustDo(b, db.Write(batch))
				} else {
					for i := range 1000 {
						mustDo(b, db.Put(fmt.Appendf(nil, "r%07d-%d", (seg-1)*n+i*n/1000, i), []byte("v")))
					}
				}
				mustDo(b, db.Flush())
			}
			db.mu.Lock()
			defer db.mu.Unlock()
			if len(db.segments) != 8 {
				b.Fatalf("%d segments, want 8", len(db.segments))
			}
			for b.Loop() {
				if out := db.deletedSegmentsLocked(db.segments); len(out) != 0 {
					b.Fatalf("%d segments deleted, want none", len(out))
				}
			}
		})
	}
}

// BenchmarkNestedRangeDelsAcrossBatches: n range deletions, each its own
// batch, each nested inside the next ([n-i, n+i)), into one memtable;
// ns/rangedel is per DeleteRange. Each fragment keeps the sequence number
// of every tombstone over it, so n nested ones are about n²/2 pieces and
// a DeleteRange costs O(n) (bounded by the memtable's size, which counts
// them): BuildNewest keeps one per fragment within a batch, not across
// batches.
func BenchmarkNestedRangeDelsAcrossBatches(b *testing.B) {
	for _, n := range []int{1_000, 3_000, 10_000} {
		b.Run(fmt.Sprint("n=", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				db := mustOpen(b, b.TempDir(), &Options{MemtableSize: 64 << 20, DisableAutoCompaction: true})
				b.StartTimer()
				for i := range n {
					mustDo(b, db.DeleteRange(fmt.Appendf(nil, "k%07d", n-i), fmt.Appendf(nil, "k%07d", n+i+1)))
				}
				b.StopTimer()
				mustDo(b, db.Close())
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/rangedel")
		})
	}
}
