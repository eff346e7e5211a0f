package compaction

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

// tieredFilters returns the filters of a size-tiered store: perTier
// segments in each tier, tier t holding 4^t·base keys, built as the
// segment writer builds them.
func tieredFilters(tiers, perTier, base int) []FilterInfo {
	var fs []FilterInfo
	for t, n := 0, base; t < tiers; t, n = t+1, n*4 {
		for range perTier {
			fs = append(fs, FilterInfo{Geometry: writerGeometry(n), Keys: uint64(n)})
		}
	}
	return fs
}

func totalBytes(fs []FilterInfo) int64 {
	var n int64
	for _, f := range fs {
		n += int64(f.Geometry.Bits / 8)
	}
	return n
}

// uniformReads is the expected block reads per absent Get if every filter
// had been built at the same bits per key, with its optimal k, using
// memBytes in total: the alternative a budget planner competes with.
func uniformReads(fs []FilterInfo, memBytes int64) float64 {
	var keys uint64
	for _, f := range fs {
		keys += f.Keys
	}
	bpk := float64(memBytes*8) / float64(keys)
	return float64(len(fs)) * TargetFPR(bpk)
}

func TestPlanBudgetUnderBudget(t *testing.T) {
	fs := tieredFilters(3, 3, 1000)
	total := totalBytes(fs)
	plan, err := PlanBudget(fs, total)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(plan.Folds, func(n int) bool { return n != 0 }) {
		t.Errorf("folds %v under budget, want none", plan.Folds)
	}
	if plan.BytesBefore != total || plan.BytesAfter != total || plan.ReadsAfter != plan.ReadsBefore {
		t.Errorf("plan %+v, want nothing changed at %d bytes", plan, total)
	}
}

// TestPlanBudgetHalvesLargestFirst: with equal bits per key every halving
// costs the same FPR, so the largest filter, freeing the most, goes first.
func TestPlanBudgetHalvesLargestFirst(t *testing.T) {
	fs := tieredFilters(4, 2, 1000)
	largest := fs[len(fs)-1].Geometry.Bits / 8
	plan, err := PlanBudget(fs, totalBytes(fs)-int64(largest)/4) // one halving of a largest filter suffices
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int, len(fs))
	want[len(fs)-2] = 1 // the first of the two largest, as ties go to the lower index
	if !slices.Equal(plan.Folds, want) {
		t.Errorf("folds %v, want %v", plan.Folds, want)
	}
}

// TestPlanBudgetBeatsUniform: at budgets from 3/4 down to 1/4 of the
// memory built at 10 bits per key, the plan fits the budget and expects no
// more block reads per absent Get than uniform bits per key at the same
// memory, although it can only halve and keeps each filter's k.
func TestPlanBudgetBeatsUniform(t *testing.T) {
	fs := tieredFilters(5, 3, 2000)
	total := totalBytes(fs)
	for _, frac := range []float64{0.75, 0.5, 0.3, 0.25} {
		budget := int64(frac * float64(total))
		plan, err := PlanBudget(fs, budget)
		if err != nil {
			t.Fatal(err)
		}
		uniform := uniformReads(fs, plan.BytesAfter)
		t.Logf("budget %.0f%%: %d → %d bytes, reads per absent Get %.4f → %.4f; uniform at equal memory %.4f; folds %v",
			frac*100, plan.BytesBefore, plan.BytesAfter, plan.ReadsBefore, plan.ReadsAfter, uniform, plan.Folds)
		if plan.BytesAfter > budget {
			t.Errorf("%d bytes after the plan, over the budget of %d", plan.BytesAfter, budget)
		}
		if plan.ReadsAfter > uniform {
			t.Errorf("budgeted reads %.4f > uniform %.4f", plan.ReadsAfter, uniform)
		}
		if got := predictedReads(fs, plan.Folds); !close(got, plan.ReadsAfter) {
			t.Errorf("ReadsAfter %v, recomputed from the folds %v", plan.ReadsAfter, got)
		}
		if got := foldedBytes(fs, plan.Folds); got != plan.BytesAfter {
			t.Errorf("BytesAfter %d, recomputed from the folds %d", plan.BytesAfter, got)
		}
	}
}

func predictedReads(fs []FilterInfo, folds []int) float64 {
	var sum float64
	for i, f := range fs {
		g := f.Geometry
		g.Bits >>= folds[i]
		sum += fpr(g, f.Keys)
	}
	return sum
}

func foldedBytes(fs []FilterInfo, folds []int) int64 {
	var sum int64
	for i, f := range fs {
		sum += int64(f.Geometry.Bits>>folds[i]) / 8
	}
	return sum
}

func close(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestPlanBudgetTooSmall(t *testing.T) {
	fs := tieredFilters(2, 2, 1000)
	plan, err := PlanBudget(fs, 100)
	if !errors.Is(err, ErrBudgetTooSmall) {
		t.Fatalf("err %v, want ErrBudgetTooSmall", err)
	}
	t.Log(err)
	for i, f := range fs {
		g := f.Geometry
		g.Bits >>= plan.Folds[i]
		if bpk := float64(g.Bits) / float64(f.Keys); bpk < 1 {
			t.Errorf("filter %d folded to %.2f bits per key, want ≥ 1", i, bpk)
		}
		if g.Bits/2 >= f.Keys && g.Halvings() > 0 {
			t.Errorf("filter %d could fold once more, yet the budget is not met", i)
		}
	}
	if _, err := PlanBudget(fs, -1); !errors.Is(err, ErrBudgetTooSmall) {
		t.Errorf("negative budget: err %v, want ErrBudgetTooSmall", err)
	}
}

func TestPlanBudgetEmptyFilter(t *testing.T) {
	// A filter of no keys costs nothing to fold, so it goes first and all
	// the way, before any filter that holds keys.
	fs := []FilterInfo{
		{Geometry: writerGeometry(1000), Keys: 1000},
		{Geometry: bloom.Geometry{Layout: bloom.Blocked, Bits: 512 * 64, K: 6}, Keys: 0},
	}
	plan, err := PlanBudget(fs, totalBytes(fs)-64*63)
	if err != nil || !slices.Equal(plan.Folds, []int{0, 6}) || plan.ReadsAfter != plan.ReadsBefore {
		t.Errorf("plan %+v, err %v; want the empty filter folded 6 times for free", plan, err)
	}
}

func TestFilterInfoOf(t *testing.T) {
	if _, ok := filterInfoOf(base.SegmentMeta{FileNum: 1, Entries: 10}); ok {
		t.Error("a segment without a filter has a FilterInfo")
	}
	g := writerGeometry(5000)
	m := base.SegmentMeta{FileNum: 1, Entries: 5000, FilterLayout: uint8(g.Layout), FilterK: uint8(g.K), FilterBits: g.Bits}
	got, ok := filterInfoOf(m)
	if !ok || got != (FilterInfo{Geometry: g, Keys: 5000}) {
		t.Errorf("filterInfoOf = %+v, %v; want geometry %+v with 5000 keys", got, ok, g)
	}
}

// TestPlanBudgetWorkGrowsLinearly: a plan computes each filter's FPR at
// each size it weighs once, and finds the cheapest next halving in a
// heap. Searching every filter for each halving made a plan of h
// halvings over n filters O(h·n), and h grows with n (25,333 halvings of
// 10^4 filters folded to a fifth: 8 s, held under the DB's mutex at every
// flush and merge, most of it four FPRs a halving). It counts the FPRs
// and comparisons, over classic filters, whose FPR is cheap.
func TestPlanBudgetWorkGrowsLinearly(t *testing.T) {
	n := 4000
	if testing.Short() {
		n = 1000
	}
	fs := make([]FilterInfo, n)
	var total int64
	for i := range fs {
		keys := 5000 + i%13
		fs[i] = FilterInfo{Geometry: bloom.GeometryFor(bloom.Classic, keys, 16), Keys: uint64(keys)}
		total += int64(fs[i].Geometry.Bits / 8)
	}
	var work int
	plan, err := planBudget(fs, total/5, &work)
	if err != nil || plan.BytesAfter > total/5 {
		t.Fatalf("plan: %d bytes of %d, %v", plan.BytesAfter, total/5, err)
	}
	halvings := 0
	for _, f := range plan.Folds {
		halvings += f
	}
	t.Logf("%d filters, %d halvings: work %d", n, halvings, work)
	if limit := 4 * (n + halvings) * bits.Len(uint(n)); work > limit {
		t.Fatalf("%d filters, %d halvings: work %d, want <= %d", n, halvings, work, limit)
	}
}

// BenchmarkPlanBudget plans the folds of n blocked filters of 10 bits per
// key into a fifth of their memory: the work a store with a filter budget
// does, holding its mutex, at each flush and merge.
func BenchmarkPlanBudget(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("filters=%d", n), func(b *testing.B) {
			fs := make([]FilterInfo, n)
			var total int64
			for i := range fs {
				keys := 5000 + 37*i
				fs[i] = FilterInfo{Geometry: bloom.GeometryFor(bloom.Blocked, keys, 10), Keys: uint64(keys)}
				total += int64(fs[i].Geometry.Bits / 8)
			}
			for b.Loop() {
				if _, err := PlanBudget(fs, total/4); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
