package bloomkv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/internal/base"
)

// tieredStore fills a store by flushes of different sizes (compaction
// off), so that its segments differ in size as tiers do: segment s holds
// perSegment·4^s keys (s = 0..segments-1, oldest largest). Keys are even
// numbers in random order, so every segment spans nearly the whole key
// range and an absent (odd) key is in range of all of them, as in a
// random fill.
func tieredStore(t *testing.T, opts *Options, segments, perSegment int) (*DB, [][]byte) {
	t.Helper()
	opts.MemtableSize = 64 << 20
	opts.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), opts)
	total := 0
	for s := range segments {
		total += perSegment << (2 * s)
	}
	perm := rand.New(rand.NewPCG(4, 17)).Perm(total)
	var keys [][]byte
	for s := segments - 1; s >= 0; s-- {
		for range perSegment << (2 * s) {
			k := fmt.Appendf(nil, "key%08d", 2*perm[len(keys)])
			keys = append(keys, k)
			if err := db.Put(k, k); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return db, keys
}

// residentBitsPerKey returns each live segment's resident filter bits per
// key, newest first (0: no filter).
func residentBitsPerKey(db *DB) []float64 {
	rs := db.acquire()
	defer rs.release()
	var out []float64
	for _, s := range rs.segments {
		if f := s.reader.ResidentFilter(); f != nil {
			out = append(out, float64(f.Geometry().Bits)/float64(s.meta.Entries))
		} else {
			out = append(out, 0)
		}
	}
	return out
}

// checkAllFound fails on a false negative.
func checkAllFound(t *testing.T, db *DB, keys [][]byte, when string) {
	t.Helper()
	for _, k := range keys {
		if v, err := db.Get(k); err != nil || !bytes.Equal(v, k) {
			t.Fatalf("%s: Get(%s) = %q, %v: a filter lost a key", when, k, v, err)
		}
	}
}

// absentBlocks is the measured block reads per absent Get over n Gets
// (n at most the keys of a tieredStore, so that every probe is in range):
// the figure Stats.FilterExpectedReads predicts.
func absentBlocks(t *testing.T, db *DB, n int) float64 {
	t.Helper()
	before := db.Stats()
	for i := range n {
		if _, err := db.Get(fmt.Appendf(nil, "key%08d", 2*i+1)); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	after := db.Stats()
	return float64(after.BlockReads+after.BlockCacheHits-before.BlockReads-before.BlockCacheHits) / float64(n)
}

// TestFilterOptimalSizesByShape: under FilterOptimal the smaller (newer)
// segments get more bits per key than the larger ones, the filters use
// about the memory BitsPerKey would, every key is found, and the expected
// reads are below uniform's at that memory.
func TestFilterOptimalSizesByShape(t *testing.T) {
	db, keys := tieredStore(t, smallOptions(), 3, 1000)
	defer db.Close()
	bpk := residentBitsPerKey(db)
	for i := 1; i < len(bpk); i++ {
		if bpk[i] >= bpk[i-1] {
			t.Errorf("bits per key newest first %v: want decreasing with size", bpk)
		}
	}
	checkAllFound(t, db, keys, "FilterOptimal")
	st := db.Stats()
	uniform := compaction.UniformReads(bloom.Blocked, []uint64{1000, 4000, 16000}, float64(8*st.FilterBytes))
	if st.FilterExpectedReads >= uniform {
		t.Errorf("expected reads %.4f at %d filter bytes, uniform bits per key there %.4f", st.FilterExpectedReads, st.FilterBytes, uniform)
	}
	t.Logf("bits per key %v; %d bytes; expected %.4f (uniform %.4f)", bpk, st.FilterBytes, st.FilterExpectedReads, uniform)
}

// TestStatsExpectedReadsWithoutBudget: FilterExpectedReads is reported
// without a budget (Σ FPR of the resident filters) and matches the
// measured block reads per absent Get; without filters it is the segment
// count.
func TestStatsExpectedReadsWithoutBudget(t *testing.T) {
	for _, alloc := range []FilterAllocation{FilterUniform, FilterOptimal} {
		opts := smallOptions()
		opts.FilterAllocation = alloc
		db, _ := tieredStore(t, opts, 3, 2000)
		st := db.Stats()
		var want float64
		rs := db.acquire()
		for _, s := range rs.segments {
			f := s.reader.ResidentFilter()
			want += bloom.FPR(f.Geometry().Layout, float64(f.Geometry().Bits)/float64(s.meta.Entries), f.Geometry().K)
		}
		rs.release()
		if st.FilterExpectedReads <= 0 || math.Abs(st.FilterExpectedReads-want) > 1e-9 {
			t.Errorf("%v: FilterExpectedReads %v, want Σ FPR %v", alloc, st.FilterExpectedReads, want)
		}
		got := absentBlocks(t, db, 40000)
		if math.Abs(got-want) > 0.3*want+0.002 {
			t.Errorf("%v: measured %.4f blocks per absent Get, expected %.4f", alloc, got, want)
		}
		db.Close()
	}
	opts := smallOptions()
	opts.DisableFilters = true
	db, _ := tieredStore(t, opts, 2, 500)
	defer db.Close()
	if st := db.Stats(); st.FilterExpectedReads != float64(st.Segments) {
		t.Errorf("without filters: FilterExpectedReads %v, want the %d segments", st.FilterExpectedReads, st.Segments)
	}
}

// TestSetFilterBudget: lowering the budget at run time folds the resident
// filters to fit and raises the expected reads; raising it unfolds them
// back to the stored filters; keys are found throughout; bad values and
// a closed DB are refused.
func TestSetFilterBudget(t *testing.T) {
	db, keys := tieredStore(t, smallOptions(), 3, 1000)
	full := db.Stats()
	for _, frac := range []int64{2, 4} {
		budget := full.FilterBytes / frac
		if err := db.SetFilterBudget(budget); err != nil {
			t.Fatal(err)
		}
		st := db.Stats()
		if st.FilterBytes > budget || st.FilterExpectedReads <= full.FilterExpectedReads {
			t.Errorf("budget %d: %d filter bytes, expected reads %.4f (%.4f before)", budget, st.FilterBytes, st.FilterExpectedReads, full.FilterExpectedReads)
		}
		checkAllFound(t, db, keys, fmt.Sprintf("budget 1/%d", frac))
	}
	if err := db.SetFilterBudget(0); err != nil {
		t.Fatal(err)
	}
	if st := db.Stats(); st.FilterBytes != full.FilterBytes || st.FilterExpectedReads != full.FilterExpectedReads {
		t.Errorf("budget removed: %d bytes, %.4f reads; want the stored %d, %.4f", st.FilterBytes, st.FilterExpectedReads, full.FilterBytes, full.FilterExpectedReads)
	}
	if err := db.SetFilterBudget(-1); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("SetFilterBudget(-1) = %v, want ErrInvalidOptions", err)
	}
	db.Close()
	if err := db.SetFilterBudget(1 << 20); !errors.Is(err, ErrClosed) {
		t.Errorf("SetFilterBudget after Close = %v, want ErrClosed", err)
	}
	if err := db.RebuildFilters(); !errors.Is(err, ErrClosed) {
		t.Errorf("RebuildFilters after Close = %v, want ErrClosed", err)
	}
}

// TestRebuildFilters: rebuilding in memory follows the options (uniform
// under a budget: the most bits per key that fit; optimal under a budget:
// fits it and expects fewer reads than folding did), loses no key, and a
// reopen brings the stored filters back.
func TestRebuildFilters(t *testing.T) {
	opts := smallOptions()
	opts.FilterAllocation = FilterUniform
	db, keys := tieredStore(t, opts, 3, 1000)
	dir := db.dir
	segsBefore := segmentsHash(t, dir)
	full := db.Stats()
	if err := db.SetFilterBudget(full.FilterBytes / 2); err != nil {
		t.Fatal(err)
	}
	folded := db.Stats()
	if err := db.RebuildFilters(); err != nil { // uniform: the most bits per key that fit
		t.Fatal(err)
	}
	if st := db.Stats(); st.FilterBytes > full.FilterBytes/2 || st.FilterExpectedReads >= folded.FilterExpectedReads {
		t.Errorf("uniform rebuilt: %d bytes (budget %d), %.4f reads (folded %.4f)", st.FilterBytes, full.FilterBytes/2, st.FilterExpectedReads, folded.FilterExpectedReads)
	}
	checkAllFound(t, db, keys, "uniform rebuilt")
	db.opts.FilterAllocation = FilterOptimal // as a reopen with it would
	if err := db.RebuildFilters(); err != nil {
		t.Fatal(err)
	}
	rebuilt := db.Stats()
	if rebuilt.FilterBytes > full.FilterBytes/2 || rebuilt.FilterExpectedReads >= folded.FilterExpectedReads {
		t.Errorf("rebuilt: %d bytes (budget %d), %.4f reads (folded %.4f)", rebuilt.FilterBytes, full.FilterBytes/2, rebuilt.FilterExpectedReads, folded.FilterExpectedReads)
	}
	checkAllFound(t, db, keys, "rebuilt")
	if got := absentBlocks(t, db, len(keys)); math.Abs(got-rebuilt.FilterExpectedReads) > 0.3*rebuilt.FilterExpectedReads+0.002 {
		t.Errorf("rebuilt: measured %.4f blocks per absent Get, expected %.4f", got, rebuilt.FilterExpectedReads)
	}
	t.Logf("half memory: folded %.4f, rebuilt optimal %.4f expected reads (full %.4f)", folded.FilterExpectedReads, rebuilt.FilterExpectedReads, full.FilterExpectedReads)
	if segmentsHash(t, dir) != segsBefore {
		t.Error("a budget change or a rebuild of the filters rewrote a segment file")
	}
	db.Close()
	opts.FilterBudget = 0
	db = mustOpen(t, dir, opts)
	defer db.Close()
	if st := db.Stats(); st.FilterBytes != full.FilterBytes {
		t.Errorf("reopened: %d filter bytes, want the stored %d", st.FilterBytes, full.FilterBytes)
	}
}

// TestFiltersNeverLoseKeys is the model test of every path a filter takes:
// random writes with flushes and background compactions under both
// allocations, budgets changed at run time, rebuilds and reopens; after
// each step every key written is read back (a filter may say "maybe"
// wrongly, never "no").
func TestFiltersNeverLoseKeys(t *testing.T) {
	for _, alloc := range []FilterAllocation{FilterOptimal, FilterUniform} {
		t.Run(alloc.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(17, uint64(alloc)))
			opts := smallOptions()
			opts.FilterAllocation = alloc
			opts.FilterBudget = 2 << 10
			dir := t.TempDir()
			db := mustOpen(t, dir, opts)
			defer func() { db.Close() }()
			model := map[string]bool{}
			var keys [][]byte
			for step := range 12 {
				for range 500 + r.IntN(2000) {
					k := fmt.Appendf(nil, "k%07d", r.IntN(40000))
					if !model[string(k)] {
						model[string(k)] = true
						keys = append(keys, k)
					}
					if err := db.Put(k, k); err != nil {
						t.Fatal(err)
					}
				}
				switch step % 4 {
				case 0:
					if err := db.SetFilterBudget(int64(r.IntN(16 << 10))); err != nil {
						t.Fatal(err)
					}
				case 1:
					if err := db.Flush(); err != nil {
						t.Fatal(err)
					}
					if err := db.RebuildFilters(); err != nil {
						t.Fatal(err)
					}
				case 2:
					if err := db.Compact(); err != nil {
						t.Fatal(err)
					}
				case 3:
					db.Close()
					db = mustOpen(t, dir, opts)
				}
				if err := db.WaitForCompactions(context.Background()); err != nil {
					t.Fatal(err)
				}
				checkAllFound(t, db, keys, fmt.Sprintf("step %d", step))
			}
		})
	}
}

func TestFilterAllocationOption(t *testing.T) {
	opts := smallOptions()
	opts.FilterAllocation = FilterUniform + 1
	if _, err := Open(t.TempDir(), opts); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Open with FilterAllocation %d = %v, want ErrInvalidOptions", opts.FilterAllocation, err)
	}
}

// segmentsHash hashes the names and bytes of dir's segment files.
func segmentsHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	segs, err := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt))
	mustDo(t, err)
	for _, name := range segs {
		b, err := os.ReadFile(name)
		mustDo(t, err)
		fmt.Fprintf(h, "%s %d\n", filepath.Base(name), len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestFilterOptimalMergeUnitesFilters: under FilterOptimal (the default)
// a merge of segments that hold the same keys takes its output's filter
// from the union of theirs, sized for the output's share of memory
// (planBitsPerKey), instead of hashing every key again; and every key is
// found after it. Only uniform's share was seen to reach the planner, so
// a share of 0 (no filter to plan: always rebuild) passed under the
// default.
func TestFilterOptimalMergeUnitesFilters(t *testing.T) {
	db := mustOpen(t, t.TempDir(), &Options{DisableAutoCompaction: true})
	defer db.Close()
	const n = 5000
	for range 2 {
		for i := range n {
			mustDo(t, db.Put(fmt.Appendf(nil, "key%06d", i), []byte("v")))
		}
		mustDo(t, db.Flush())
	}
	mustDo(t, db.Compact())
	st := db.Stats()
	if len(st.RecentCompactions) == 0 {
		t.Fatal("no compaction recorded")
	}
	c := st.RecentCompactions[len(st.RecentCompactions)-1]
	if !strings.HasPrefix(c.FilterPath, "union") {
		t.Errorf("a merge of two segments holding the same %d keys: filter path %q, want a union", n, c.FilterPath)
	}
	for i := range n {
		if _, err := db.Get(fmt.Appendf(nil, "key%06d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRebuiltFiltersOfMergedSegmentsGo: the filters RebuildFilters built
// for segments that a merge then replaced are let go at the next refit:
// kept, each held its merged segment's handle and filter reachable for
// the DB's life.
func TestRebuiltFiltersOfMergedSegmentsGo(t *testing.T) {
	db := mustOpen(t, t.TempDir(), &Options{DisableAutoCompaction: true})
	defer db.Close()
	for s := range 3 {
		for i := range 1000 {
			mustDo(t, db.Put(fmt.Appendf(nil, "key%d-%05d", s, i), []byte("v")))
		}
		mustDo(t, db.Flush())
	}
	mustDo(t, db.RebuildFilters())
	mustDo(t, db.Compact())
	db.mu.Lock()
	defer db.mu.Unlock()
	live := make(map[*segHandle]bool)
	for _, s := range db.segments {
		live[s] = true
	}
	if len(db.segments) != 1 {
		t.Fatalf("%d segments after a full merge, want 1", len(db.segments))
	}
	for s := range db.rebuilt {
		if !live[s] {
			t.Errorf("the rebuilt filter of %s, merged away, is kept", s.name)
		}
	}
}

// TestRebuildFiltersAfterClose: RebuildFilters on a closed DB returns
// ErrClosed and leaves the DB's lock free, so that calls after it
// answer ErrClosed too rather than wait forever.
func TestRebuildFiltersAfterClose(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	mustDo(t, db.Close())
	done := make(chan [2]error, 1)
	go func() { done <- [2]error{db.RebuildFilters(), db.SetFilterBudget(1 << 20)} }()
	select {
	case errs := <-done:
		for i, err := range errs {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("call %d after Close: %v, want ErrClosed", i, err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RebuildFilters then SetFilterBudget after Close did not return in 10 s")
	}
}

// TestRebuildFiltersFitTheBudget: under a FilterBudget, RebuildFilters
// sizes the filters to fit it, with either allocation, so that none needs
// folding after (each fold costs accuracy a filter sized for the memory
// would keep), and they hold at most the budget.
func TestRebuildFiltersFitTheBudget(t *testing.T) {
	for _, alloc := range []FilterAllocation{FilterOptimal, FilterUniform} {
		db := mustOpen(t, t.TempDir(), &Options{DisableAutoCompaction: true, FilterAllocation: alloc})
		for s := range 4 {
			for i := range 2000 << s {
				mustDo(t, db.Put(fmt.Appendf(nil, "key%d-%06d", s, i), nil))
			}
			mustDo(t, db.Flush())
		}
		budget := db.Stats().FilterBytes / 2
		mustDo(t, db.SetFilterBudget(budget))
		mustDo(t, db.RebuildFilters())
		if st := db.Stats(); st.FilterBytes > budget {
			t.Errorf("%v: filters of %d bytes after a rebuild for a budget of %d", alloc, st.FilterBytes, budget)
		}
		db.mu.Lock()
		for _, s := range db.segments {
			if s.folds != 0 {
				t.Errorf("%v: %s folded %d times after a rebuild for the budget", alloc, s.name, s.folds)
			}
		}
		db.mu.Unlock()
		mustDo(t, db.Close())
	}
}

// TestRebuildFiltersAtOneBitPerKey: BitsPerKey 1, the least a filter can
// have, still rebuilds a filter for every segment: only 0 means none.
// Rebuilds were seen at the default bits per key only, so treating 1 as
// no filter passed.
func TestRebuildFiltersAtOneBitPerKey(t *testing.T) {
	db := mustOpen(t, t.TempDir(), &Options{DisableAutoCompaction: true, BitsPerKey: 1, FilterAllocation: FilterUniform})
	defer db.Close()
	for s := range 2 {
		for i := range 2000 {
			mustDo(t, db.Put(fmt.Appendf(nil, "key%d-%05d", s, i), nil))
		}
		mustDo(t, db.Flush())
	}
	mustDo(t, db.RebuildFilters())
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, s := range db.segments {
		if f := s.reader.Filter(); f == nil || db.rebuilt[s] == nil {
			t.Errorf("%s has no filter after a rebuild at 1 bit per key", s.name)
		}
	}
}
