package bloomkv

import (
	"errors"

	"github.com/bloomkv/bloomkv/compaction"
)

// applyFilterBudgetLocked fits the resident filters of all live segments
// into Options.FilterBudget by folding some of them (compaction.PlanBudget:
// the largest segments give up bits first, where a halving costs the fewest
// expected extra block reads per byte saved). Folding is exact, so no
// false negative arises; a fold is made from the stored filter, so a
// segment whose budget grows back gets its full filter again. db.mu must
// be held.
func (db *DB) applyFilterBudgetLocked() {
	if db.opts.FilterBudget <= 0 {
		return
	}
	var (
		infos []compaction.FilterInfo
		segs  []*segHandle
	)
	for _, s := range db.segments {
		if info, ok := compaction.FilterInfoOf(s.meta); ok && s.reader.Filter() != nil {
			infos = append(infos, info)
			segs = append(segs, s)
		}
	}
	plan, err := compaction.PlanBudget(infos, db.opts.FilterBudget)
	if err != nil && !errors.Is(err, compaction.ErrBudgetTooSmall) {
		db.logger.Warn("filter budget plan", "err", err)
		return
	}
	if err != nil {
		db.logger.Warn("filter budget cannot be met without going below 1 bit per key", "err", err)
	}
	for i, s := range segs {
		if s.folds == plan.Folds[i] {
			continue
		}
		f, err := compaction.Fold(s.reader.Filter(), plan.Folds[i])
		if err == nil {
			err = s.reader.UseFilter(f)
		}
		if err != nil {
			db.logger.Warn("folding filter", "segment", s.name, "err", err)
			continue
		}
		s.folds = plan.Folds[i]
	}
	db.expectedReads = plan.ReadsAfter
}
