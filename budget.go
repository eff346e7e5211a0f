package bloomkv

import (
	"errors"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/compaction"
)

// applyFilterBudgetLocked fits the resident filters of all live segments
// into the filter budget (Options.FilterBudget, or SetFilterBudget's) by
// folding some of them (compaction.PlanBudget: where a halving costs the
// fewest expected extra block reads per byte saved), and records the
// expected block reads per absent Get, with or without a budget. Folding
// is exact, so no false negative arises; a fold is made from the segment's
// base filter (the stored one, or RebuildFilters'), so a segment whose
// budget grows back gets its full filter again. db.mu must be held.
func (db *DB) applyFilterBudgetLocked() {
	var (
		infos      []compaction.FilterInfo
		segs       []*segHandle
		bases      []*bloom.Filter
		unfiltered int
	)
	for _, s := range db.segments {
		base := db.baseFilterLocked(s)
		if base == nil {
			unfiltered++
			continue
		}
		infos = append(infos, compaction.FilterInfo{Geometry: base.Geometry(), Keys: s.meta.Entries})
		segs = append(segs, s)
		bases = append(bases, base)
	}
	db.forgetRebuiltLocked()
	plan := compaction.BudgetPlan{Folds: make([]int, len(infos))}
	if db.opts.FilterBudget > 0 {
		var err error
		plan, err = compaction.PlanBudget(infos, db.opts.FilterBudget)
		if err != nil && !errors.Is(err, compaction.ErrBudgetTooSmall) {
			db.logger.Warn("filter budget plan", "err", err)
			return
		}
		if err != nil {
			db.logger.Warn("filter budget cannot be met without going below 1 bit per key", "err", err)
		}
	}
	for i, s := range segs {
		if s.folds == plan.Folds[i] {
			continue
		}
		f, err := compaction.Fold(bases[i], plan.Folds[i])
		if err == nil {
			if _, ok := db.rebuilt[s]; ok {
				s.reader.ReplaceFilter(f) // a fold of a filter built from the segment's keys
			} else {
				err = s.reader.UseFilter(f)
			}
		}
		if err != nil {
			db.logger.Warn("folding filter", "segment", s.name, "err", err)
			continue
		}
		s.folds = plan.Folds[i]
	}
	for i := range infos {
		infos[i].Geometry.Bits >>= uint(max(segs[i].folds, 0))
	}
	db.expectedReads = compaction.ExpectedReads(infos, unfiltered)
}
