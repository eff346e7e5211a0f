package compaction

// This file chooses each segment's filter when it is built: bits per key
// and k. Every segment's filter costs one block read per absent Get with
// probability FPR_i, whatever the segment's size, while its memory grows
// with the segment. Minimising Σ FPR_i under a memory budget therefore
// gives large segments fewer bits per key and small ones more (Monkey,
// Dayan et al., SIGMOD 2017). DESIGN.md §4 has the derivation and the
// simulation.

import (
	"container/heap"
	"math"
	"sort"
	"sync"

	"github.com/bloomkv/bloomkv/bloom"
)

// Allocation grid. Bits per key are chosen in steps of allocStep from 1
// (GeometryFor's floor) to allocMaxBits, or 0 (no filter). A step of 1/16
// bit per key changes a filter's FPR by about 2% (the FPR falls by half
// every 1.44 bits per key), below the 3.1% of GeometryFor's size rounding.
// Beyond 32 bits per key the blocked layout's FPR stops falling (its
// optimum is 0.0001% there), so more bits only waste memory.
const (
	allocStep    = 1.0 / 16
	allocMaxBits = 32
	allocPoints  = allocMaxBits/allocStep + 1
)

// fprCurve is the FPR at each grid point with the best integer k there:
// p(b) = min_k FPR(layout, b, k), the cost a filter of b bits per key has.
// ln holds the logarithms of fpr, for at's interpolation.
type fprCurve struct{ fpr, ln [allocPoints]float64 }

var (
	curveOnce [3]sync.Once
	curves    [3]fprCurve
)

func curveFor(layout bloom.Layout) *fprCurve {
	i := int(layout) % len(curves)
	curveOnce[i].Do(func() { // 3 ms for Blocked
		c := &curves[i]
		computeCurve(layout, &c.fpr)
		for g, p := range c.fpr {
			c.ln[g] = math.Log(p)
		}
	})
	return &curves[i]
}

// inf marks grid points below 1 bit per key in a curve.
var inf = math.Inf(1)

// computeCurve fills c with the layout's curve from bloom.FPR.
func computeCurve(layout bloom.Layout, c *[allocPoints]float64) {
	c[0] = 1 // no filter: every absent Get reads a block
	for g := 1; g < allocPoints; g++ {
		b := float64(g) * allocStep
		if b < 1 {
			c[g] = inf // GeometryFor gives at least 1 bit per key
			continue
		}
		c[g] = bloom.FPR(layout, b, bloom.OptimalK(layout, b))
	}
}

// AllocateBits returns the bits per key for each of segments holding keys[i]
// keys that minimise the expected block reads per absent Get, Σ FPR_i,
// while the filters, sized as GeometryFor rounds them, fit in memBits bits.
// 0 means no filter: when memory is tight the optimum drops the filters of
// the largest segments (FPR 1) rather than spread too few bits over them.
//
// Method: Lagrangian relaxation over each segment's candidates (the grid
// of bits per key, each at its size after GeometryFor's rounding and the
// FPR there with the best integer k). For a multiplier λ each segment
// takes the candidate minimising FPR + λ·bits; memory falls as λ grows,
// so λ is bisected to the smallest value whose total fits. The memory
// that rounding leaves unused is then spent greedily on the upgrades that
// save the most reads per bit. For a classic filter, FPR = e^(-b·ln²2),
// the Lagrangian gives the closed form FPR_i = λ'·n_i.
//
// Segments with no keys get 0. A memBits that cannot even hold the
// smallest filters gives all zeros.
func AllocateBits(layout bloom.Layout, keys []uint64, memBits float64) []float64 {
	var work int
	return allocateBits(layout, keys, memBits, &work)
}

// allocateBits is AllocateBits, adding to *work the candidates it weighs
// while it spends what rounding left (spendLeft).
func allocateBits(layout bloom.Layout, keys []uint64, memBits float64, work *int) []float64 {
	cands := make([][]candidate, len(keys))
	hulls := make([][]int, len(keys))
	for i, n := range keys {
		cands[i] = candidatesFor(layout, n)
		hulls[i] = lowerHull(cands[i])
	}
	pick := make([]int, len(keys))
	at := func(lambda float64) float64 { // total memory at λ; fills pick
		var total float64
		for i, cs := range cands {
			best := minimizer(cs, hulls[i], lambda)
			pick[i] = best
			total += cs[best].bits
		}
		return total
	}
	// λ is in block reads per bit: below 1e-30 every bit pays, at 1 none.
	lo, hi := math.Log(1e-30), 0.0
	if at(math.Exp(lo)) <= memBits {
		hi = lo
	} else {
		for range 100 {
			mid := (lo + hi) / 2
			if at(math.Exp(mid)) <= memBits {
				hi = mid
			} else {
				lo = mid
			}
		}
	}
	spendLeft(cands, pick, memBits-at(math.Exp(hi)), 4*len(keys), work)
	bits := make([]float64, len(keys))
	for i, cs := range cands {
		bits[i] = cs[pick[i]].perKey
	}
	return bits
}

// lowerHull returns the indices of the candidates (in increasing bits)
// that lie on the lower convex hull of the points (bits, reads), in
// order, without collinear ones: for any λ the candidate that minimises
// reads + λ·bits is among them (a linear function is least at a vertex),
// and along them the cost first falls, then rises, so minimizer finds it
// by binary search. The bisection of λ asks each segment a hundred
// times; scanning all ~500 candidates each time made an allocation cost
// about 25 µs per live segment at every flush and merge.
func lowerHull(cs []candidate) []int {
	h := make([]int, 0, 16)
	for j, c := range cs {
		for len(h) >= 2 {
			a, b := cs[h[len(h)-2]], cs[h[len(h)-1]]
			// Drop b if it does not lie below the line from a to c.
			if (b.reads-a.reads)*(c.bits-a.bits) < (c.reads-a.reads)*(b.bits-a.bits) {
				break
			}
			h = h[:len(h)-1]
		}
		h = append(h, j)
	}
	return h
}

// minimizer returns the candidate of cs minimising reads + lambda·bits,
// the one with fewer bits among equals, searching hull (lowerHull(cs)):
// the first vertex from which the next costs no less.
func minimizer(cs []candidate, hull []int, lambda float64) int {
	cost := func(j int) float64 { return cs[j].reads + lambda*cs[j].bits }
	m := sort.Search(len(hull)-1, func(m int) bool { return cost(hull[m+1]) >= cost(hull[m]) })
	return hull[m]
}

// spendLeft spends left bits, what rounding left unused, on at most
// limit upgrades of pick, one at a time, each the upgrade that fits and
// saves the most reads per bit (the lowest segment, then the lowest
// candidate, among equals).
//
// Each segment's best upgrade that fits is kept in a heap: left only
// falls, so a segment's best is still its best while it fits, and
// otherwise no better than it was; only the top of the heap is brought
// up to date, and is then the best of all. Searching every segment's
// candidates for each upgrade, as this did, cost O(s) candidate lists an
// upgrade, and the upgrades grow with s where many segments share a size
// (82 at s=1000, 247 at s=3000: 0.9 s an allocation, at every flush).
func spendLeft(cands [][]candidate, pick []int, left float64, limit int, work *int) {
	h := make(upgrades, 0, len(cands))
	for i := range cands {
		if u, ok := bestUpgrade(cands[i], i, pick[i], left, work); ok {
			h = append(h, u)
		}
	}
	heap.Init(&h)
	for n := 0; n < limit && len(h) > 0; {
		u := h[0]
		cs := cands[u.i]
		if d := cs[u.j].bits - cs[pick[u.i]].bits; d <= left {
			left -= d
			pick[u.i] = u.j
			n++
		}
		// The segment's best from its pick now, within what is left.
		if next, ok := bestUpgrade(cs, u.i, pick[u.i], left, work); ok {
			h[0] = next
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
}

// upgrade is a move of segment i's pick to its candidate j, saving gain
// reads per bit it adds.
type upgrade struct {
	gain float64
	i, j int
}

// bestUpgrade returns segment i's upgrade from candidate cur that adds at
// most left bits and saves the most reads per bit (the lowest candidate
// among equals), ok false if none fits and saves any.
func bestUpgrade(cs []candidate, i, cur int, left float64, work *int) (u upgrade, ok bool) {
	*work += len(cs)
	from := cs[cur]
	for j, c := range cs {
		if d := c.bits - from.bits; d > 0 && d <= left {
			if g := (from.reads - c.reads) / d; g > u.gain {
				u, ok = upgrade{g, i, j}, true
			}
		}
	}
	return u, ok
}

// upgrades is a max-heap of upgrades by gain, the lowest segment first
// among equals (container/heap).
type upgrades []upgrade

func (h upgrades) Len() int { return len(h) }
func (h upgrades) Less(a, b int) bool {
	if h[a].gain != h[b].gain {
		return h[a].gain > h[b].gain
	}
	return h[a].i < h[b].i
}
func (h upgrades) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *upgrades) Push(x any)   { *h = append(*h, x.(upgrade)) }
func (h *upgrades) Pop() any {
	old := *h
	u := old[len(old)-1]
	*h = old[:len(old)-1]
	return u
}

// candidate is one choice of filter for a segment: asked bits per key, and
// what GeometryFor makes of it (bits) with its FPR (reads per absent Get).
type candidate struct{ perKey, bits, reads float64 }

// candidatesFor lists a segment's choices: no filter, then each grid point
// that gives a new size (grid points rounding to one size are one choice).
func candidatesFor(layout bloom.Layout, n uint64) []candidate {
	cs := []candidate{{0, 0, 1}}
	if n == 0 {
		return cs
	}
	c := curveFor(layout)
	for g := int(1 / allocStep); g < allocPoints; g++ {
		b := float64(g) * allocStep
		bits := float64(bloom.BitsFor(layout, int(n), b))
		if bits == cs[len(cs)-1].bits {
			continue
		}
		cs = append(cs, candidate{b, bits, c.at(bits / float64(n))})
	}
	return cs
}

// at interpolates the curve at b bits per key (log-linear between grid
// points; the FPR of a filter falls about exponentially with b).
func (c *fprCurve) at(b float64) float64 {
	x := b / allocStep
	g := int(x)
	if g >= allocPoints-1 {
		return c.fpr[allocPoints-1]
	}
	if math.IsInf(c.fpr[g], 1) {
		return c.fpr[g+1]
	}
	f := x - float64(g)
	return math.Exp((1-f)*c.ln[g] + f*c.ln[g+1])
}

// ExpectedFolds estimates how many times the filter budget will halve the
// filter of a segment of keys keys, in a store of total keys (this
// segment included) whose size-tiered policy merges fanIn segments: 0 if
// the store has no byte budget (memory then scales with the keys and
// nothing is folded). Under a fixed budget the store's memory per key
// falls as it grows; this segment lives until fanIn-1 more of its size
// have been flushed, (fanIn-1)·keys more keys, so the memory per key may
// fall by g = 1 + (fanIn-1)·keys/total while it lives, and the budget
// takes that from the largest filters by halving: about log2(g) halvings,
// capped at 2 (beyond that the budget is far too small for the store,
// and k no longer matters much).
func ExpectedFolds(keys, total uint64, fanIn int, budgeted bool) int {
	if !budgeted || total == 0 || fanIn < 2 {
		return 0
	}
	g := 1 + float64(fanIn-1)*float64(keys)/float64(total)
	return min(int(math.Round(math.Log2(g))), 2)
}

// FoldK returns the k for a filter of the layout built at bitsPerKey that
// may be halved up to folds times (its k cannot change when it is): the k
// that minimises the worst ratio, over the sizes b, b/2, …, b/2^folds, of
// its FPR to the FPR of the best k for that size. With folds 0 it is
// bloom.OptimalK. DESIGN.md §4 has the trade-off (at 10 bits per key,
// k 7 → 5 costs 15% more false positives unfolded and saves 10% after
// one fold).
func FoldK(layout bloom.Layout, bitsPerKey float64, folds int) int {
	k0 := bloom.OptimalK(layout, bitsPerKey)
	if folds <= 0 {
		return k0
	}
	best, bestWorst := k0, math.Inf(1)
	for k := k0; k >= 1; k-- {
		worst := 0.0
		for j, b := 0, bitsPerKey; j <= folds && b >= 1; j, b = j+1, b/2 {
			r := bloom.FPR(layout, b, k) / bloom.FPR(layout, b, bloom.OptimalK(layout, b))
			worst = max(worst, r)
		}
		if worst < bestWorst {
			best, bestWorst = k, worst
		}
	}
	return best
}

// SegmentGeometry is the geometry of the filter of a segment of keys keys
// at bitsPerKey (as AllocateBits chose it) that may be folded folds times:
// GeometryFor's rounded size, with FoldK's k. ok is false for "no filter"
// (bitsPerKey 0, or no keys).
func SegmentGeometry(layout bloom.Layout, keys int, bitsPerKey float64, folds int) (g bloom.Geometry, ok bool) {
	if bitsPerKey <= 0 || keys <= 0 {
		return bloom.Geometry{}, false
	}
	g = bloom.GeometryFor(layout, keys, bitsPerKey)
	g.K = FoldK(layout, float64(g.Bits)/float64(keys), min(folds, g.Halvings()))
	return g, true
}

// ExpectedReads is the expected block reads per Get of an absent key that
// lies in the key range of every segment: Σ FPR over the filters (FPR at
// their geometry for their keys), plus 1 for each segment without a
// filter.
func ExpectedReads(fs []FilterInfo, unfiltered int) float64 {
	r := float64(unfiltered)
	for _, f := range fs {
		r += fpr(f.Geometry, f.Keys)
	}
	return r
}

// SegmentFilter is the filter of a new segment of n keys that joins the
// live segments others (the inputs it replaces left out) of a size-tiered
// store merging fanIn segments at a time: its geometry under the optimal
// allocation, ok false for no filter.
//
// The allocation is solved for the live segments as they are with the new
// one in: that is the policy's shape at this moment (with equal flushes,
// tier t holds the t-th base-fanIn digit of the flush count). The memory
// is what uniform filters of bitsPerKey would take for every live segment;
// with a byte budget (budgetBits > 0) it is the budget, and only then may
// a segment get no filter. Sizing for the shape at the
// end of the segment's life instead (fanIn-1 more segments of its size)
// was simulated and rejected: it starves the largest segments, which
// live longest (DESIGN.md §4). A growing store under a byte budget drifts
// above it, and the budget folds the filters back (PlanBudget), at the k
// chosen for the folds the segment is expected to see (ExpectedFolds).
func SegmentFilter(layout bloom.Layout, others []uint64, n uint64, bitsPerKey float64, budgetBits float64, fanIn int) (bloom.Geometry, bool) {
	keys := append(append([]uint64(nil), others...), n)
	var total uint64
	for _, k := range keys {
		total += k
	}
	mem := budgetBits
	if budgetBits <= 0 {
		// The memory uniform filters take as GeometryFor rounds them up
		// to whole blocks. Counting bitsPerKey per key instead left a small
		// segment less than one block, and the optimum gave it no filter.
		for _, k := range keys {
			mem += float64(bloom.BitsFor(layout, int(k), bitsPerKey))
		}
	}
	b := AllocateBits(layout, keys, mem)[len(others)]
	if budgetBits <= 0 && b <= 0 {
		b = bitsPerKey // without a byte budget every segment keeps a filter
	}
	folds := ExpectedFolds(n, total, fanIn, budgetBits > 0)
	return SegmentGeometry(layout, int(n), b, folds)
}

// UniformReads is the expected block reads per absent Get with every
// segment at the same bits per key, the largest whose filters (rounded
// as GeometryFor rounds them) fit in memBits, each with its best k: the
// allocation FilterOptimal is compared with.
func UniformReads(layout bloom.Layout, keys []uint64, memBits float64) float64 {
	b := UniformBitsPerKey(layout, keys, memBits)
	if b == 0 {
		return float64(len(keys)) // not even 1 bit per key fits: no filters
	}
	var r float64
	for _, n := range keys {
		r += fpr(bloom.GeometryFor(layout, int(n), b), n)
	}
	return r
}

// UniformBitsPerKey is the largest bits per key (to 2^-40, at most
// allocMaxBits) at which filters for all of keys, sized by GeometryFor,
// fit in memBits; 0 if not even 1 bit per key fits.
func UniformBitsPerKey(layout bloom.Layout, keys []uint64, memBits float64) float64 {
	used := func(b float64) float64 {
		var m float64
		for _, n := range keys {
			m += float64(bloom.BitsFor(layout, int(n), b))
		}
		return m
	}
	lo, hi := 1.0, float64(allocMaxBits)
	if used(lo) > memBits {
		return 0
	}
	if used(hi) <= memBits {
		return hi
	}
	for range 45 {
		if mid := (lo + hi) / 2; used(mid) <= memBits {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
