package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bloomkv/bloomkv"
)

// The filter-memory curve: block reads per absent Get against
// filter memory, for three ways of spending it on one store.
const (
	// fmProbes is the number of absent-key Gets per point (at most -ops
	// when that is set): at the
	// smallest predicted figure of the default run (≈0.004 blocks per
	// Get at 150% memory, optimal) that is ≈200 events, ±7%; at 50%
	// memory (≈0.29 per Get) ±0.8%.
	fmProbes = 50_000
	// fmBitsPerKey is the reference: memory is given as a share of what
	// 10 bits per key would use.
	fmBitsPerKey = 10
)

// fmShares are the memory points, as shares of fmBitsPerKey per key.
var fmShares = []float64{0.25, 0.5, 0.75, 1, 1.25, 1.5}

// fmPoint is one point of the curve.
type fmPoint struct {
	Kind string `json:"kind"` // "filter-memory"
	// Allocation: "uniform" (every segment at the same bits per key, the
	// most that fit share·10 bits per key: FilterUniform's rebuild under
	// FilterBudget),
	// "greedy" (every segment at 10 bits per key, or 20 above 100%, then
	// folded by the budget: FilterUniform with FilterBudget), "optimal"
	// (FilterOptimal with FilterBudget, filters sized for the store's
	// shape), or "as built" (the store as its fill left it: FilterOptimal,
	// BitsPerKey 10, no budget, each filter sized when its segment was).
	Allocation  string  `json:"allocation"`
	Share       float64 `json:"memory_share"` // of 10 bits per key
	Keys        int64   `json:"keys"`
	Segments    int     `json:"segments"`
	FilterBytes int64   `json:"filter_bytes"` // resident, as Stats reports it
	// Predicted is Stats.FilterExpectedReads: Σ FPR of the resident
	// filters. Measured is data blocks touched (read or from the cache)
	// per Get of a random absent key; FalsePos the filter false positives
	// per Get.
	Predicted float64 `json:"predicted_blocks_per_get"`
	Measured  float64 `json:"measured_blocks_per_get"`
	FalsePos  float64 `json:"false_positives_per_get"`
	Gets      int     `json:"gets"`
	// Rebuild is the time RebuildFilters took (0 for "as built").
	Rebuild time.Duration `json:"rebuild_ns"`
}

// filterMemory is the section "Filter memory": on the fill-random store
// (or, with -filter-memory-keys, a fresh store of that many keys) the
// resident filters are rebuilt in memory (DB.RebuildFilters) for each
// allocation and memory share, and block reads per absent Get are
// measured next to the DB's prediction. The files are not changed; the
// store is reopened as it was at the end.
func (b *bench) filterMemory(ctx context.Context) (err error) {
	b.rep.section("Filter memory: block reads per absent Get against filter memory")
	if b.cfg.BitsPerKey == 0 {
		b.rep.printf("skipped: -disable-filters leaves nothing to compare\n")
		return nil
	}
	s, d := b.main, b.data
	if n := b.cfg.FilterMemoryKeys; n > 0 {
		d = newDataset(n, b.cfg.ValueSize, b.cfg.Seed+3)
		if s, err = b.openStore("filter-memory", fmBitsPerKey); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, s.close()) }()
		if _, err := b.measure(ctx, s, fillWorkload(s, "load filter-memory", d, d.randomOrder)); err != nil {
			return err
		}
	}
	orig := *s.opts
	defer func() {
		*s.opts = orig
		err = errors.Join(err, s.reopen(func(string) error { return nil }))
	}()
	keys := int64(d.len())
	probes := fmProbes
	if b.cfg.Ops > 0 {
		probes = int(min(b.cfg.Ops, fmProbes))
	}
	probe := func(p *fmPoint) error {
		st := s.db.Stats()
		p.Kind, p.Keys, p.Segments, p.FilterBytes, p.Predicted = "filter-memory", keys, st.Segments, st.FilterBytes, st.FilterExpectedReads
		r := rngFor(b.cfg.Seed, fmt.Sprintf("filter-memory-%s-%v", p.Allocation, p.Share))
		var absent [keySize]byte
		for i := range probes {
			if i%4096 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			if _, err := s.db.Get(d.absentKey(r.IntN(d.len()), &absent)); !errors.Is(err, bloomkv.ErrNotFound) {
				return fmt.Errorf("filter memory: Get of an absent key: %v", err)
			}
		}
		after := s.db.Stats()
		p.Gets = probes
		p.Measured = float64(after.BlockReads+after.BlockCacheHits-st.BlockReads-st.BlockCacheHits) / float64(probes)
		p.FalsePos = float64(after.FilterFalsePositives-st.FilterFalsePositives) / float64(probes)
		return b.rep.record(p)
	}
	// reopen reopens the store with the allocation, bits per key and
	// budget; rebuild rebuilds its resident filters for them.
	reopen := func(alloc bloomkv.FilterAllocation, bpk float64, budget int64) error {
		s.opts.FilterAllocation, s.opts.BitsPerKey, s.opts.FilterBudget = alloc, bpk, budget
		return s.reopen(func(string) error { return nil })
	}
	rebuild := func(p *fmPoint) error {
		t := time.Now()
		err := s.db.RebuildFilters()
		p.Rebuild = time.Since(t)
		return err
	}
	budgetFor := func(share float64) int64 { return int64(share * fmBitsPerKey * float64(keys) / 8) }

	built := fmPoint{Allocation: "as built", Share: float64(s.db.Stats().FilterBytes) * 8 / float64(keys) / fmBitsPerKey}
	if err := probe(&built); err != nil {
		return err
	}
	bar := newProgress(b.stderr, b.cfg.Quiet, "filter memory", int64(3*len(fmShares)), "points")
	defer bar.done()
	rows := make([][3]fmPoint, len(fmShares))
	done := 0
	point := func(i, j int, p fmPoint) error {
		if err := probe(&p); err != nil {
			return err
		}
		rows[i][j] = p
		done++
		bar.set(int64(done))
		return nil
	}
	// Each point costs a rebuild (a scan of the store) except greedy's,
	// which folds one rebuild at 10 (or 20) bits per key to each budget.
	for i, share := range fmShares { // uniform: the most bits per key that fit
		p := fmPoint{Allocation: "uniform", Share: share}
		if err := reopen(bloomkv.FilterUniform, share*fmBitsPerKey, budgetFor(share)); err != nil {
			return err
		}
		if err := rebuild(&p); err != nil {
			return err
		}
		if err := point(i, 0, p); err != nil {
			return err
		}
	}
	for _, from := range []float64{fmBitsPerKey, 2 * fmBitsPerKey} { // greedy: fold from 10, or 20 above 100%
		var p fmPoint
		if err := reopen(bloomkv.FilterUniform, from, 0); err != nil {
			return err
		}
		if err := rebuild(&p); err != nil {
			return err
		}
		for i, share := range fmShares {
			if (share > 1) != (from > fmBitsPerKey) {
				continue
			}
			p.Allocation, p.Share = "greedy", share
			if err := s.db.SetFilterBudget(budgetFor(share)); err != nil {
				return err
			}
			if err := point(i, 1, p); err != nil {
				return err
			}
			p.Rebuild = 0
		}
	}
	if err := reopen(bloomkv.FilterOptimal, fmBitsPerKey, 0); err != nil { // optimal for each budget
		return err
	}
	for i, share := range fmShares {
		p := fmPoint{Allocation: "optimal", Share: share}
		if err := s.db.SetFilterBudget(budgetFor(share)); err != nil {
			return err
		}
		if err := rebuild(&p); err != nil {
			return err
		}
		if err := point(i, 2, p); err != nil {
			return err
		}
	}
	bar.done()
	b.printFilterMemory(built, rows)
	return nil
}

// printFilterMemory writes the curve as a table.
func (b *bench) printFilterMemory(built fmPoint, rows [][3]fmPoint) {
	store := "the store of fill-random"
	if b.cfg.FilterMemoryKeys > 0 {
		store = "a fresh store, random fill"
	}
	b.rep.printf("%s keys in %d segments (%s, compaction settled); for each point the resident filters\n",
		fmtInt(built.Keys), built.Segments, store)
	b.rep.printf("are rebuilt in memory (DB.RebuildFilters) and %s random absent keys are read. memory = share of %d bits per key;\n",
		fmtInt(int64(built.Gets)), fmBitsPerKey)
	b.rep.printf("pred = Stats.FilterExpectedReads (Σ FPR), meas = data blocks touched per absent Get.\n")
	b.rep.printf("uniform: the same bits/key for every segment, the most that fit; greedy: %d (20 above 100%%) bits/key folded\n", fmBitsPerKey)
	b.rep.printf("to the budget; optimal: FilterOptimal for the budget. vs uniform = optimal's measured change.\n")
	t := &table{
		groups: []group{{"", 1}, {"uniform", 3}, {"greedy fold", 3}, {"optimal", 3}, {"", 2}},
		header: []string{"memory", "bytes", "pred", "meas", "bytes", "pred", "meas", "bytes", "pred", "meas", "vs uniform", "meas/pred"},
	}
	for _, r := range rows {
		cells := []string{fmt.Sprintf("%.0f%%", 100*r[0].Share)}
		for _, p := range r {
			cells = append(cells, fmtBytes(float64(p.FilterBytes)), fmt.Sprintf("%.4f", p.Predicted), fmt.Sprintf("%.4f", p.Measured))
		}
		cells = append(cells, fmt.Sprintf("%+.0f%%", 100*(r[2].Measured/r[0].Measured-1)), fmt.Sprintf("%.2f", r[2].Measured/r[2].Predicted))
		t.add(cells...)
	}
	t.write(b.rep.text)
	b.rep.printf("as built by the fill (FilterOptimal, %d bits/key, no budget): %s of filters (%.0f%%), pred %.4f, meas %.4f blocks per absent Get.\n",
		fmBitsPerKey, fmtBytes(float64(built.FilterBytes)), 100*built.Share, built.Predicted, built.Measured)
}
