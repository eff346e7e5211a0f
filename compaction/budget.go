package compaction

// This file plans how to fit the filters of all live segments into a
// memory budget by halving some of them. Which ones matters: the cost of a
// halving is the extra false positives it causes, and a false positive
// costs one block read whichever segment it happens in, while the memory a
// halving frees grows with the segment. So the largest segments give up
// bits per key first (the observation behind Monkey, Dayan et al.,
// SIGMOD 2017).

import (
	"container/heap"
	"errors"
	"fmt"

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
// The model keeps each filter's k when folding, as Fold does, and uses the
// layout's theoretical FPR for Keys keys. Greedy by marginal cost is
// optimal when halvings are small against the budget and a close
// heuristic otherwise, since each halving frees a fixed chunk.
func PlanBudget(fs []FilterInfo, budget int64) (BudgetPlan, error) {
	var work int
	return planBudget(fs, budget, &work)
}

// planBudget is PlanBudget, adding to *work the FPRs it computes and the
// halvings it compares.
func planBudget(fs []FilterInfo, budget int64, work *int) (BudgetPlan, error) {
	plan := BudgetPlan{Folds: make([]int, len(fs))}
	if budget < 0 {
		return plan, fmt.Errorf("%w: negative budget %d", ErrBudgetTooSmall, budget)
	}
	// Each filter's next halving, kept in a heap by cost: a halving
	// changes the cost of its own filter's next one only, so the cheapest
	// is found in O(log n), where a search of every filter made a plan of
	// h halvings O(h·n) (and h grows with n). The FPR at each size is
	// computed once, as the current size and as the next.
	h := halvings{fs: fs, cur: make([]bloom.Geometry, len(fs)), work: work}
	for i, f := range fs {
		h.cur[i] = f.Geometry
		plan.BytesBefore += int64(f.Geometry.Bits / 8)
		*work++
		now := fpr(f.Geometry, f.Keys)
		plan.ReadsBefore += now
		if next, ok := h.next(i, now); ok {
			h.heap = append(h.heap, next)
		}
	}
	heap.Init(&h)
	plan.BytesAfter, plan.ReadsAfter = plan.BytesBefore, plan.ReadsBefore
	for plan.BytesAfter > budget {
		if len(h.heap) == 0 {
			return plan, fmt.Errorf("%w: %d bytes of filters left for a budget of %d",
				ErrBudgetTooSmall, plan.BytesAfter, budget)
		}
		x := h.heap[0]
		i := x.i
		h.cur[i].Bits /= 2
		plan.BytesAfter -= int64(h.cur[i].Bits / 8)
		plan.ReadsAfter += x.fpr - x.from
		plan.Folds[i]++
		if next, ok := h.next(i, x.fpr); ok {
			h.heap[0] = next
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	return plan, nil
}

// halving is the next halving of filter i: its cost (the expected block
// reads per absent Get it adds per byte it frees), and the filter's FPR
// before (from) and after it (fpr).
type halving struct {
	cost, from, fpr float64
	i               int
}

// halvings is PlanBudget's heap of each filter's next halving, cheapest
// first; among equal costs the larger filter (it frees more for the same
// price), then the lower index, so plans are deterministic.
type halvings struct {
	fs   []FilterInfo
	cur  []bloom.Geometry // each filter's geometry after the halvings so far
	heap []halving
	work *int // FPRs computed and halvings compared (planBudget)
}

// next returns the next halving of filter i, whose FPR now is now; ok is
// false if it may not be halved again.
func (h *halvings) next(i int, now float64) (halving, bool) {
	g, keys := h.cur[i], h.fs[i].Keys
	if g.Halvings() == 0 || g.Bits/2 < keys {
		return halving{}, false
	}
	half := g
	half.Bits /= 2
	*h.work++
	after := fpr(half, keys)
	return halving{cost: (after - now) / float64(half.Bits/8), from: now, fpr: after, i: i}, true
}

func (h *halvings) Len() int { return len(h.heap) }
func (h *halvings) Less(a, b int) bool {
	*h.work++
	x, y := &h.heap[a], &h.heap[b]
	if x.cost != y.cost {
		return x.cost < y.cost
	}
	if bx, by := h.cur[x.i].Bits, h.cur[y.i].Bits; bx != by {
		return bx > by
	}
	return x.i < y.i
}
func (h *halvings) Swap(a, b int) { h.heap[a], h.heap[b] = h.heap[b], h.heap[a] }
func (h *halvings) Push(x any)    { h.heap = append(h.heap, x.(halving)) }
func (h *halvings) Pop() any {
	x := h.heap[len(h.heap)-1]
	h.heap = h.heap[:len(h.heap)-1]
	return x
}

// fpr is the theoretical FPR of a filter of geometry g holding keys keys.
func fpr(g bloom.Geometry, keys uint64) float64 {
	if keys == 0 {
		return 0
	}
	return bloom.FPR(g.Layout, float64(g.Bits)/float64(keys), g.K)
}
