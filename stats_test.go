package bloomkv

import (
	"encoding/json"
	"expvar"
	"fmt"
	"math"
	"testing"
)

// Compaction reads are counted apart: a Compact moves the compaction
// counters and leaves the read counters of Gets and scans as they were.
func TestStatsCompactionReadsApart(t *testing.T) {
	for _, mmap := range []bool{true, false} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			o := smallOptions()
			o.DisableAutoCompaction = true
			o.DisableMmap = !mmap
			db := mustOpen(t, t.TempDir(), o)
			defer db.Close()
			for s := range 4 {
				for i := range 500 {
					mustDo(t, db.Put(fmt.Appendf(nil, "k%05d", i*4+s), make([]byte, 50)))
				}
				mustDo(t, db.Flush())
			}
			if _, err := db.Get([]byte("k00001")); err != nil {
				t.Fatal(err)
			}
			before := db.Stats()
			if before.BlockReads+before.BlockCacheHits == 0 {
				t.Fatal("a Get from a segment counted no block")
			}
			mustDo(t, db.Compact())
			after := db.Stats()
			if after.Compactions != before.Compactions+1 {
				t.Fatalf("%d compactions, want %d", after.Compactions, before.Compactions+1)
			}
			if after.BlockReads != before.BlockReads || after.BlockCacheHits != before.BlockCacheHits {
				t.Fatalf("Compact moved the read counters: BlockReads %d → %d, BlockCacheHits %d → %d",
					before.BlockReads, after.BlockReads, before.BlockCacheHits, after.BlockCacheHits)
			}
			if got := after.CompactionBlockReads + after.CompactionBlockCacheHits - before.CompactionBlockReads - before.CompactionBlockCacheHits; got < 4 {
				t.Fatalf("Compact of 4 segments counted %d compaction blocks", got)
			}
			it, err := db.NewIterator(nil)
			mustDo(t, err)
			for range it.All() {
			}
			mustDo(t, it.Close())
			scanned := db.Stats()
			if scanned.BlockReads+scanned.BlockCacheHits <= after.BlockReads+after.BlockCacheHits ||
				scanned.CompactionBlockReads != after.CompactionBlockReads {
				t.Fatalf("a scan counted %+v then %+v", after, scanned)
			}
		})
	}
}

// StatsVar publishes Stats through expvar as JSON.
func TestStatsVar(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	mustDo(t, db.Flush())
	for range 3 {
		db.Get([]byte("a"))
	}
	// An expvar.Map, not expvar.Publish: the global name space keeps a
	// name for the life of the process, so a second run (-count=2) would
	// panic on it. Set and Get go through the same Var.String.
	vars := new(expvar.Map)
	vars.Set("bloomkv", db.StatsVar())
	v := vars.Get("bloomkv")
	var got Stats
	if err := json.Unmarshal([]byte(v.String()), &got); err != nil {
		t.Fatalf("%q: %v", v.String(), err)
	}
	if got.Gets != 3 || got.Writes != 1 || got.Flushes != 1 || got.Segments != 1 || got.FilterBytes == 0 {
		t.Fatalf("published %+v", got)
	}
	db.Get([]byte("a"))
	if err := json.Unmarshal([]byte(v.String()), &got); err != nil || got.Gets != 4 {
		t.Fatalf("the Var is not live: Gets %d, %v", got.Gets, err)
	}
	// A value encoding/json refuses would blank the whole Var.
	s := Stats{FilterExpectedReads: math.NaN(), RecentCompactions: []CompactionInfo{{EstimatedFPR: math.Inf(1)}}}
	if _, err := json.Marshal(s.jsonSafe()); err != nil {
		t.Fatal(err)
	}
}

// TestStatsNoFalsePositiveForUnseenVersions: a Get through a Snapshot (or
// a transaction) that asks a segment holding only versions of its key
// newer than the Snapshot finds nothing there, but the filter's "maybe"
// was right: the segment holds the key. It is not a false positive.
func TestStatsNoFalsePositiveForUnseenVersions(t *testing.T) {
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	mustDo(t, db.Put([]byte("k"), []byte("v1")))
	mustDo(t, db.Flush())
	snap, err := db.NewSnapshot()
	mustDo(t, err)
	defer snap.Close()
	mustDo(t, db.Put([]byte("k"), []byte("v2")))
	mustDo(t, db.Flush())
	before := db.Stats()
	if v, err := snap.Get([]byte("k")); err != nil || string(v) != "v1" {
		t.Fatalf("snapshot Get = %q, %v", v, err)
	}
	txn := db.NewTransaction(false)
	defer txn.Discard()
	mustDo(t, db.Put([]byte("k"), []byte("v3")))
	mustDo(t, db.Flush())
	if v, err := txn.Get([]byte("k")); err != nil || string(v) != "v2" {
		t.Fatalf("transaction Get = %q, %v", v, err)
	}
	after := db.Stats()
	if fp := after.FilterFalsePositives - before.FilterFalsePositives; fp != 0 {
		t.Errorf("Gets of a key every segment holds counted %d filter false positives, want 0", fp)
	}
	if probed := after.SegmentsProbed - before.SegmentsProbed; probed != 4 {
		t.Errorf("%d segments probed, want 4 (2 by each Get)", probed)
	}
}

// TestStatsProbesOnlySegmentsInRange: a Get consults the filter of a
// segment only when the key lies in the segment's key range, its first
// and last keys included; a key outside it costs no filter probe (nor a
// hash of the filter's pages), which is what SegmentsProbed counts.
func TestStatsProbesOnlySegmentsInRange(t *testing.T) {
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for i := 100; i < 200; i++ {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%05d", i), []byte("v")))
	}
	mustDo(t, db.Compact())
	for _, c := range []struct {
		key    string
		probed uint64
	}{
		{"a", 0}, {"k00099", 0}, {"k00100", 1}, {"k00150", 1}, {"k00199", 1}, {"k001990", 0}, {"k00200", 0}, {"z", 0},
	} {
		before := db.Stats()
		db.Get([]byte(c.key))
		if probed := db.Stats().SegmentsProbed - before.SegmentsProbed; probed != c.probed {
			t.Errorf("Get(%q) probed %d segments, want %d (the segment holds k00100 to k00199)", c.key, probed, c.probed)
		}
	}
}

// TestStatsFlushBytes: each flush counts in Flushes, and the bytes of the
// segment it wrote in FlushBytes, the write amplification's first term:
// two flushes count two and the two segments' sizes, nothing else.
func TestStatsFlushBytes(t *testing.T) {
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for round := range 2 {
		for i := range 20 {
			mustDo(t, db.Put(faultKey(100*round+i), faultValue(i)))
		}
		mustDo(t, db.Flush())
	}
	db.mu.Lock()
	var size uint64
	for _, s := range db.segments {
		size += uint64(s.meta.Size)
	}
	n := len(db.segments)
	db.mu.Unlock()
	if st := db.Stats(); n != 2 || st.Flushes != 2 || st.FlushBytes != size {
		t.Fatalf("%d segments of %d bytes: Flushes %d, FlushBytes %d; want 2 flushes of those bytes", n, size, st.Flushes, st.FlushBytes)
	}
}
