package bloomkv

// Filter memory that pays: each segment's filter gets the bits
// per key, and the k, that minimise the expected block reads per absent
// Get for the store's filter memory and shape. The arithmetic is in
// package compaction (alloc.go, budget.go) and compaction/DESIGN.md §4;
// this file connects it to the DB: the geometry a flush or merge gives
// its output, the run-time budget, and rebuilding resident filters.

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/compaction"
)

// FilterAllocation says how the filter memory is spread over segments
// (Options.FilterAllocation).
type FilterAllocation uint8

const (
	// FilterOptimal gives each segment, when it is built, the bits per key
	// that minimise Σ FPR over the live segments for the memory (Monkey):
	// the FPR of a segment's filter ends up about proportional to its
	// keys, so each 4× larger tier gets about 2.9 fewer bits per key, and
	// the largest segments may get no filter when memory is very tight.
	// Its k is chosen for the folds the budget may apply later
	// (compaction.FoldK). The default: at equal memory it reads 33–56%
	// fewer blocks per absent Get than uniform bits per key on the
	// policy's tier shapes (simulated), 43–51% on kvbench's default store
	// (measured); nothing on a store of one segment (DESIGN.md §4; README
	// has kvbench's curve).
	FilterOptimal FilterAllocation = iota
	// FilterUniform gives every segment Options.BitsPerKey and the k best
	// for it, and under a FilterBudget folds filters greedily: bloomkv's
	// earlier behaviour, kept for comparison.
	FilterUniform
)

func (a FilterAllocation) String() string {
	switch a {
	case FilterOptimal:
		return "optimal"
	case FilterUniform:
		return "uniform"
	}
	return fmt.Sprintf("FilterAllocation(%d)", uint8(a))
}

// filterLayout is the layout of every filter the DB builds (the segment
// writer's default).
const filterLayout = bloom.Blocked

// segmentFilter returns the function the segment writer calls to size the
// filter of a segment about to replace the segments replaces (nil for a
// flush), or nil for the writer's uniform BitsPerKey.
//
// The allocation (compaction.SegmentFilter) is solved for the live
// segments as they will be once the new one is in: the others keep their
// key counts, the new one has the keys the writer counted. The memory is
// BitsPerKey for every live key, or FilterBudget if set.
func (db *DB) segmentFilter(replaces []*segHandle) func(keys int) (bloom.Geometry, bool) {
	if db.opts.BitsPerKey <= 0 || db.opts.FilterAllocation != FilterOptimal {
		return nil
	}
	gone := make(map[*segHandle]bool, len(replaces))
	for _, s := range replaces {
		gone[s] = true
	}
	db.mu.Lock()
	others := make([]uint64, 0, len(db.segments)+1)
	for _, s := range db.segments {
		if !gone[s] {
			others = append(others, s.meta.Entries)
		}
	}
	budget := db.opts.FilterBudget
	db.mu.Unlock()
	bpk, fanIn := db.opts.BitsPerKey, db.opts.CompactionFanIn
	return func(keys int) (bloom.Geometry, bool) {
		return compaction.SegmentFilter(filterLayout, others, uint64(keys), bpk, 8*float64(budget), fanIn)
	}
}

// planBitsPerKey is the bits per key compaction's filter planner aims at
// for a merge of inputs: BitsPerKey, or under FilterOptimal what the
// allocation gives an output the size of the largest input (the union
// path only pays when the inputs share nearly all keys, so the output is
// about that size; otherwise the writer sizes the rebuilt filter). 0 means
// the output gets no filter, so nothing is to be planned.
func (db *DB) planBitsPerKey(inputs []*segHandle) float64 {
	alloc := db.segmentFilter(inputs)
	if alloc == nil {
		return db.opts.BitsPerKey
	}
	var n uint64
	for _, s := range inputs {
		n = max(n, s.meta.Entries)
	}
	g, ok := alloc(int(n))
	if !ok || n == 0 {
		return 0
	}
	return float64(g.Bits) / float64(n)
}

// baseFilterLocked is the filter folds of s start from: the one
// RebuildFilters built, or the stored one; nil if s has none.
func (db *DB) baseFilterLocked(s *segHandle) *bloom.Filter {
	if f, ok := db.rebuilt[s]; ok {
		return f
	}
	return s.reader.Filter()
}

// forgetRebuiltLocked drops the rebuilt filters of segments no longer live.
func (db *DB) forgetRebuiltLocked() {
	if len(db.rebuilt) == 0 {
		return
	}
	live := make(map[*segHandle]bool, len(db.segments))
	for _, s := range db.segments {
		live[s] = true
	}
	for s := range db.rebuilt {
		if !live[s] {
			delete(db.rebuilt, s)
		}
	}
}

// SetFilterBudget changes Options.FilterBudget while the DB runs: the
// resident filters are refolded at once to fit bytes (0: no cap), without
// rewriting any segment. Folds are made from each segment's stored filter,
// so raising the budget unfolds them again, up to their stored size; more
// memory than that reaches old segments only through RebuildFilters or
// their next merge. With mmap (the default) the stored filter is a view
// into the mapped file and only the resident one is on the heap, so a
// fold frees what it saves, and unfolding reads the stored filter again
// through the mapping. With Options.DisableMmap the reader keeps the
// stored filter on the heap, so a budget lowers the resident filters but
// not the heap. Segments built from now on are sized for the new
// budget. Stats.FilterBytes and Stats.FilterExpectedReads show the result.
func (db *DB) SetFilterBudget(bytes int64) error {
	if bytes < 0 {
		return fmt.Errorf("%w: FilterBudget = %d, want 0 (no cap) or more", ErrInvalidOptions, bytes)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return ErrClosed
	}
	db.opts.FilterBudget = bytes
	db.applyFilterBudgetLocked()
	return nil
}

// RebuildFilters gives every live segment the filter it would get if all
// were built now, at once, for the current options, budget and shape: it
// reads each segment's keys and builds the new filter in memory, leaving
// the files unchanged (their stored filters come back on the next Open).
//
// A segment's filter is sized when the segment is written, for the shape
// and budget of that moment; this re-optimises them all when those have
// changed much (a budget raised beyond the stored filters, a switch of
// FilterAllocation on reopen), and lets kvbench measure any allocation on
// one store. It costs a scan of every segment, one per core at a time:
// about 1–2% of merging them (hashing a key is ~5 ns next to reading and
// decoding its entry).
func (db *DB) RebuildFilters() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	segs := db.refSegmentsLocked(0, len(db.segments))
	budget := db.opts.FilterBudget
	db.mu.Unlock()
	defer unrefAll(segs)
	geoms := db.rebuildGeometries(segs, budget)
	filters := make([]*bloom.Filter, len(segs))
	errs := make([]error, len(segs))
	// Segments are scanned in parallel, one per core: a scan is CPU-bound
	// (decoding blocks), and the two largest segments of a tiered store
	// hold most keys.
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, s := range segs {
		if geoms[i].Bits == 0 {
			continue // no filter
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			filters[i], errs[i] = buildFilter(s, geoms[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return ErrClosed
	}
	if db.rebuilt == nil {
		db.rebuilt = make(map[*segHandle]*bloom.Filter)
	}
	for i, s := range segs {
		if s.obsolete.Load() {
			continue // merged meanwhile: its output was sized when built
		}
		db.rebuilt[s] = filters[i]
		s.reader.ReplaceFilter(filters[i])
		s.folds = 0
	}
	db.applyFilterBudgetLocked()
	return nil
}

// rebuildGeometries are the geometries RebuildFilters gives segs (Bits 0:
// no filter). FilterUniform: BitsPerKey each, or under a budget the most
// bits per key that fit it, the same for all. FilterOptimal: the optimal
// allocation for all of them at once, for the budget or BitsPerKey for
// every key, with the best k for each size: a rebuild is for the store
// as it is, and the next one (or a merge) follows it if it grows.
func (db *DB) rebuildGeometries(segs []*segHandle, budget int64) []bloom.Geometry {
	keys := make([]uint64, len(segs))
	var total uint64
	for i, s := range segs {
		keys[i] = s.meta.Entries
		total += keys[i]
	}
	geoms := make([]bloom.Geometry, len(segs))
	if db.opts.BitsPerKey <= 0 {
		return geoms
	}
	bits := make([]float64, len(segs))
	switch {
	case db.opts.FilterAllocation == FilterOptimal:
		mem := db.opts.BitsPerKey * float64(total)
		if budget > 0 {
			mem = 8 * float64(budget)
		}
		bits = compaction.AllocateBits(filterLayout, keys, mem)
	default:
		b := db.opts.BitsPerKey
		if budget > 0 {
			b = min(b, compaction.UniformBitsPerKey(filterLayout, keys, 8*float64(budget)))
		}
		for i := range bits {
			bits[i] = b
		}
	}
	for i, n := range keys {
		geoms[i], _ = compaction.SegmentGeometry(filterLayout, int(n), bits[i], 0)
	}
	return geoms
}

// buildFilter returns a filter of geometry g holding every user key of s.
func buildFilter(s *segHandle, g bloom.Geometry) (*bloom.Filter, error) {
	f, err := bloom.NewGeometry(g)
	if err != nil {
		return nil, fmt.Errorf("rebuild filter of %s: %w", s.name, err)
	}
	it := s.reader.NewIter(false)
	it.SkipValueRecords()
	defer it.Close()
	var last []byte
	for ok := it.First(); ok; ok = it.Next() {
		if k := it.Key(); last == nil || string(k) != string(last) {
			f.Add(k)
			last = append(last[:0], k...)
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("rebuild filter of %s: %w", s.name, err)
	}
	return f, nil
}
