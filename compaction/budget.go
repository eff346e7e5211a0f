package compaction

// This file plans how to fit the filters of all live segments into a
// memory budget by halving some of them. Which ones matters: the cost of a
// halving is the extra false positives it causes, and a false positive
// costs one block read whichever segment it happens in, while the memory a
// halving frees grows with the segment. So the largest segments give up
// bits per key first (the observation behind Monkey, Dayan et al.,
// SIGMOD 2017).

import (
	"errors"
	"fmt"
	"math"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

// FilterInfo describes one segment's filter to PlanBudget.
type FilterInfo struct {
	Geometry bloom.Geometry
	Keys     uint64 // distinct keys the filter holds
}

// filterInfoOf returns the FilterInfo of a segment, false if it has no
// filter. It counts Entries as keys: a flushed or merged segment holds one
// entry per user key, and the writer adds each user key to the filter.
func filterInfoOf(m base.SegmentMeta) (FilterInfo, bool) {
	if m.FilterBits == 0 {
		return FilterInfo{}, false
	}
	g := bloom.Geometry{
		Layout: bloom.Layout(m.FilterLayout),
		Bits:   m.FilterBits,
		K:      int(m.FilterK),
		Seed:   bloom.DefaultSeed, // the segment writer accepts no other
	}
	return FilterInfo{Geometry: g, Keys: m.Entries}, true
}

// BudgetPlan is PlanBudget's answer. Reads are expected block reads per
// Get of an absent key, the sum of the filters' FPRs: each filter that
// answers "maybe" sends the Get to its segment for one block.
type BudgetPlan struct {
	Folds       []int // halvings to apply, per input filter
	BytesBefore int64 // filter memory now
	BytesAfter  int64 // filter memory after the folds
	ReadsBefore float64
	ReadsAfter  float64
}

// ErrBudgetTooSmall is returned (wrapped) by PlanBudget when even folding
// every filter as far as allowed leaves the total above the budget.
var ErrBudgetTooSmall = errors.New("compaction: filter memory budget too small")

// PlanBudget returns how many times to halve each filter of fs so that
// their total size is at most budget bytes, choosing one halving at a time:
// the one that adds the fewest expected block reads per absent Get per
// byte it frees. Filters under budget are left alone.
//
// A filter is never folded below 1 bit per key (beyond that it answers
// "maybe" to almost everything and a smaller budget is better met by
// dropping the filter, a decision left to the caller), nor beyond its
// Geometry.Halvings. If the budget cannot be met, the plan folds as far as
// allowed and the error wraps ErrBudgetTooSmall with the shortfall.
//
// The model keeps each filter's k when folding, as Halve does, and uses the
// layout's theoretical FPR for Keys keys. Greedy by marginal cost is
// optimal when halvings are small against the budget and a close
// heuristic otherwise, since each halving frees a fixed chunk.
func PlanBudget(fs []FilterInfo, budget int64) (BudgetPlan, error) {
	plan := BudgetPlan{Folds: make([]int, len(fs))}
	if budget < 0 {
		return plan, fmt.Errorf("%w: negative budget %d", ErrBudgetTooSmall, budget)
	}
	cur := make([]bloom.Geometry, len(fs))
	cost := make([]float64, len(fs)) // of each filter's next halving; +Inf if none
	for i, f := range fs {
		cur[i] = f.Geometry
		plan.BytesBefore += int64(f.Geometry.Bits / 8)
		plan.ReadsBefore += fpr(f.Geometry, f.Keys)
		cost[i] = halvingCost(f.Geometry, f.Keys)
	}
	plan.BytesAfter, plan.ReadsAfter = plan.BytesBefore, plan.ReadsBefore
	for plan.BytesAfter > budget {
		i := cheapest(cost, cur)
		if i < 0 {
			return plan, fmt.Errorf("%w: %d bytes of filters left for a budget of %d",
				ErrBudgetTooSmall, plan.BytesAfter, budget)
		}
		half := cur[i]
		half.Bits /= 2
		plan.BytesAfter -= int64(half.Bits / 8)
		plan.ReadsAfter += fpr(half, fs[i].Keys) - fpr(cur[i], fs[i].Keys)
		cur[i] = half
		plan.Folds[i]++
		cost[i] = halvingCost(half, fs[i].Keys)
	}
	return plan, nil
}

// cheapest returns the index of the smallest finite cost, preferring the
// larger filter among equal costs (it frees more for the same price) and
// then the lower index, so plans are deterministic; -1 if none is finite.
func cheapest(cost []float64, cur []bloom.Geometry) int {
	best := -1
	for i, c := range cost {
		if math.IsInf(c, 1) {
			continue
		}
		if best < 0 || c < cost[best] || (c == cost[best] && cur[i].Bits > cur[best].Bits) {
			best = i
		}
	}
	return best
}

// halvingCost is the extra expected block reads per absent Get per byte
// freed by halving a filter of geometry g holding keys keys, or +Inf if the
// halving is not allowed.
func halvingCost(g bloom.Geometry, keys uint64) float64 {
	if g.Halvings() == 0 || g.Bits/2 < keys {
		return math.Inf(1)
	}
	half := g
	half.Bits /= 2
	return (fpr(half, keys) - fpr(g, keys)) / float64(half.Bits/8)
}

// fpr is the theoretical FPR of a filter of geometry g holding keys keys.
func fpr(g bloom.Geometry, keys uint64) float64 {
	if keys == 0 {
		return 0
	}
	return bloom.FPR(g.Layout, float64(g.Bits)/float64(keys), g.K)
}
