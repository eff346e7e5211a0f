package compaction

// This file decides how a merge obtains its output's Bloom filter: by
// OR-ing the inputs' filters (exact when they share a geometry; DESIGN.md
// has the arithmetic and measurements) or by hashing the merged keys again. It never modifies an input filter: those may be zero-copy
// views into segment files (bloom.Decode).

import (
	"errors"
	"fmt"
	"math"

	"github.com/bloomkv/bloomkv/bloom"
)

// UnionSlack is how far above the target FPR a union's estimated FPR may
// be and still be used instead of a rebuild: 25%, because the estimate of
// a well-filled filter wanders by a few percent, and a union a little
// worse than a rebuild still saves hashing every key of the merge.
const UnionSlack = 0.25

// FilterPath is how a merge obtains its output filter.
type FilterPath int

const (
	// PathRebuild: hash the merged keys into a new filter (what the
	// segment writer does by default). The zero value, since it is always
	// correct.
	PathRebuild FilterPath = iota
	// PathUnion: OR the inputs' filters, larger ones first folded down to
	// the smallest input's geometry. Exact for the union of the input key
	// sets; pays off when the inputs share most keys.
	PathUnion
	// PathUnionFold: PathUnion, then fold the union while its estimated
	// FPR stays within the target, because the union is sparser than its
	// size needs (inputs built with headroom, or holding few keys).
	PathUnionFold
)

// String returns the path's name as logs show it.
func (p FilterPath) String() string {
	switch p {
	case PathRebuild:
		return "rebuild"
	case PathUnion:
		return "union"
	case PathUnionFold:
		return "union+fold"
	}
	return fmt.Sprintf("FilterPath(%d)", int(p))
}

// FilterPlan reports what PlanFilter chose and why, for logs and stats.
type FilterPlan struct {
	Path FilterPath

	// TargetFPR is what a rebuild at the requested bits per key achieves
	// (see TargetFPR).
	TargetFPR float64

	// EstimatedFPR is the estimated FPR of the returned filter. For
	// PathRebuild it is that of the rejected trial union, or 1 if the
	// inputs could not be united at all (a missing filter, or geometries
	// that do not fold onto each other).
	EstimatedFPR float64

	InputBits  uint64 // sum of the input filters' sizes
	OutputBits uint64 // size of the returned filter; 0 for PathRebuild
	InputFolds int    // halvings applied to larger inputs to match the smallest
	Folds      int    // halvings applied to the union (PathUnionFold)
}

// ErrBitsPerKey is returned for a bits-per-key setting that is not a
// positive number.
var ErrBitsPerKey = errors.New("compaction: bits per key must be positive")

// TargetFPR is the false-positive rate a rebuilt filter has at bitsPerKey:
// the blocked layout at its optimal k, which is how the segment writer
// builds filters. It is the yardstick for unions and folds.
func TargetFPR(bitsPerKey float64) float64 {
	return bloom.FPR(bloom.Blocked, bitsPerKey, bloom.OptimalK(bloom.Blocked, bitsPerKey))
}

// PlanFilter decides how to build the filter of a merge of the segments
// whose filters are inputs (nil for a segment without one), for a store
// configured with bitsPerKey.
//
// It unites the inputs when every input has a filter, all fold exactly
// onto the smallest one's geometry, and the union's estimated FPR is at
// most TargetFPR(bitsPerKey)·(1+UnionSlack); it then folds the union while
// that keeps its estimated FPR within the target. Otherwise it returns
// PathRebuild and a nil filter.
//
// The union holds every key of every input, so it is a correct filter for
// any merge of them: a merge only drops keys. It is a new filter; the
// inputs are never modified. Its Count is the sum of the inputs' counts,
// an upper bound on its distinct keys.
func PlanFilter(inputs []*bloom.Filter, bitsPerKey float64) (FilterPlan, *bloom.Filter, error) {
	if !(bitsPerKey > 0) || math.IsInf(bitsPerKey, 1) {
		return FilterPlan{}, nil, fmt.Errorf("%w: got %v", ErrBitsPerKey, bitsPerKey)
	}
	plan := FilterPlan{Path: PathRebuild, TargetFPR: TargetFPR(bitsPerKey), EstimatedFPR: 1}
	for _, f := range inputs {
		if f != nil {
			plan.InputBits += f.Geometry().Bits
		}
	}
	g, ok := commonGeometry(inputs)
	if !ok {
		return plan, nil, nil
	}
	union, folds := unite(inputs, g)
	plan.InputFolds = folds
	plan.EstimatedFPR = union.EstimatedFPR()
	if plan.EstimatedFPR > plan.TargetFPR*(1+UnionSlack) {
		return plan, nil, nil // the union is too full: a rebuild is worth its hashing
	}
	plan.Path = PathUnion
	if sized, n := RightSize(union, plan.TargetFPR); n > 0 {
		union, plan.Folds, plan.Path = sized, n, PathUnionFold
		plan.EstimatedFPR = union.EstimatedFPR()
	}
	plan.OutputBits = union.Geometry().Bits
	return plan, union, nil
}

// RightSize folds a copy of f while the estimated FPR after each fold stays
// at or below targetFPR, and returns it with the number of folds. With no
// fold possible it returns f itself and 0; f is never modified.
//
// Use it on a filter that is larger than its keys need: one built with
// headroom, or one whose keys were mostly dropped since. Folding keeps k,
// so a filter folded far below the size its k was chosen for is worse than
// one built at that size; the estimate accounts for that, which is why the
// decision is made on a trial fold rather than on bits per key.
func RightSize(f *bloom.Filter, targetFPR float64) (*bloom.Filter, int) {
	cur, folds := f, 0
	for cur.Geometry().Halvings() > 0 {
		next := clone(cur)
		if err := next.Fold(); err != nil {
			panic(err) // cannot happen: Halvings() > 0 was checked
		}
		if next.EstimatedFPR() > targetFPR {
			break
		}
		cur, folds = next, folds+1
	}
	return cur, folds
}

// commonGeometry returns the geometry of the smallest input if every input
// is present and folds exactly onto it.
func commonGeometry(inputs []*bloom.Filter) (bloom.Geometry, bool) {
	if len(inputs) == 0 {
		return bloom.Geometry{}, false
	}
	for _, f := range inputs {
		if f == nil {
			return bloom.Geometry{}, false
		}
	}
	g := inputs[0].Geometry()
	for _, f := range inputs[1:] {
		if f.Geometry().Bits < g.Bits {
			g = f.Geometry()
		}
	}
	for _, f := range inputs {
		if _, ok := foldsTo(f.Geometry(), g); !ok {
			return bloom.Geometry{}, false
		}
	}
	return g, true
}

// foldsTo returns how many halvings turn geometry from into geometry to,
// if some number does: the same layout, k and seed, and a bit count that is
// to's times 2^j with at least j halvings available.
func foldsTo(from, to bloom.Geometry) (int, bool) {
	if from.Layout != to.Layout || from.K != to.K || from.Seed != to.Seed || from.Bits < to.Bits {
		return 0, false
	}
	j := 0
	for b := from.Bits; b > to.Bits; b /= 2 {
		j++
	}
	return j, from.Bits == to.Bits<<j && j <= from.Halvings()
}

// unite returns a new filter of geometry g holding the OR of all inputs,
// each first folded onto g (commonGeometry vouches that it folds), and the
// number of halvings that took.
func unite(inputs []*bloom.Filter, g bloom.Geometry) (*bloom.Filter, int) {
	out, err := bloom.NewGeometry(g)
	if err != nil {
		panic(err) // cannot happen: g is an existing filter's geometry
	}
	total := 0
	for _, f := range inputs {
		n, _ := foldsTo(f.Geometry(), g)
		src, err := Fold(f, n)
		if err == nil {
			err = out.Union(src)
		}
		if err != nil {
			panic(err) // cannot happen: foldsTo checked that f folds onto g
		}
		total += n
	}
	return out, total
}

// Fold returns f halved n times, as a new filter unless n is 0 (then f
// itself). f is never modified: it may be a view into a segment file that
// readers still use. Use it to apply a BudgetPlan's folds to live filters.
// It fails if n is negative or above f's Geometry().Halvings.
func Fold(f *bloom.Filter, n int) (*bloom.Filter, error) {
	if n < 0 || n > f.Geometry().Halvings() {
		return nil, fmt.Errorf("%w: %d folds of a filter with %d halvings", bloom.ErrGeometry, n, f.Geometry().Halvings())
	}
	if n == 0 {
		return f, nil
	}
	c := clone(f)
	for range n {
		if err := c.Fold(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// clone returns a copy of f that shares no memory with it. Folding works
// on copies because Fold replaces the filter it is called on, and an
// input may be a view into a segment file that other readers still use.
func clone(f *bloom.Filter) *bloom.Filter {
	c, err := bloom.NewGeometry(f.Geometry())
	if err != nil {
		panic(err) // cannot happen: f's geometry is valid
	}
	if err := c.Union(f); err != nil {
		panic(err) // cannot happen: same geometry
	}
	return c
}
