package compaction

// This file holds the compaction policy: which segments to merge next.
// It is pure: it looks at segment metadata and answers, and the DB does the
// merging (see DESIGN.md for how the pieces fit together).

import (
	"math"

	"github.com/bloomkv/bloomkv/internal/base"
)

// DefaultFanIn is the number of segments SizeTiered merges at once when its
// FanIn is unset. Four keeps write amplification near one rewrite per tier
// while a store of 4^t flushes needs only t tiers.
const DefaultFanIn = 4

// Pick names one merge: the inputs segs[Start:End] of the slice passed to
// SizeTiered.Pick. The run is contiguous because the DB orders segments by
// sequence number: an output made of non-adjacent segments would hold
// versions both newer and older than a segment it skipped, and no position
// in the newest-first order would be right for it.
type Pick struct {
	Start, End int // inputs are segs[Start:End], newest first; End-Start ≥ 2

	// Tier is the tier to record in the output's SegmentMeta.
	Tier uint32

	// IncludesOldest reports that the run ends with the oldest segment
	// (End == len(segs)). Only then may the merge drop tombstones: no older
	// segment is left whose versions they would have to keep hiding.
	IncludesOldest bool
}

// SizeTiered is a size-tiered merging compaction in the style of Bigtable:
// segments are grouped into tiers of similar size, and once FanIn adjacent
// segments share a tier they are merged into one segment of the next tier.
// With equal flushes this behaves like a base-FanIn counter: every byte is
// rewritten about once per tier, F flushes need ⌊log_FanIn F⌋+1 tiers, and
// each tier holds at most FanIn-1 segments between merges.
//
// The zero value is usable: FanIn 4, tiers taken from SegmentMeta.Tier.
type SizeTiered struct {
	// FanIn is the number of segments merged at once; values below 2 mean
	// DefaultFanIn.
	FanIn int

	// minSize selects how tiers are assigned. Zero: a segment's tier is its
	// SegmentMeta.Tier, which compaction sets from Pick.Tier (0 for a
	// flush). Positive: the tier is derived from the file size alone,
	// floor(log_ratio(Size/minSize)), 0 below minSize·ratio. Size
	// tiers need no bookkeeping and put a merge whose output shrank
	// (overwrites, deletions) back among segments of its real size instead
	// of leaving it to wait for peers it will never get. A good minSize is
	// half the usual flushed segment size: then flushes between half and
	// twice that size share tier 0.
	//
	// The DB leaves it zero; size tiers are kept, unexported, for the
	// tests and simulations that compare them (DESIGN.md).
	minSize int64

	// ratio is the size ratio between adjacent tiers when minSize is
	// set; values at or below 1 mean FanIn. With ratio == FanIn a
	// merge of FanIn segments of tier t that drops nothing lands exactly
	// in tier t+1, however the sizes vary within tier t.
	ratio float64
}

// Pick returns the next merge for the live segments segs, ordered newest
// first as the DB probes them, or nil if nothing needs merging; it neither
// retains nor modifies segs. It returns the oldest FanIn segments of the
// lowest tier that holds FanIn adjacent segments. The lowest tier goes
// first because its merge is the cheapest and frees as many segment slots
// as any other; the oldest segments of a longer run go first so that the
// output, one tier up, lands next to the older and larger segments and the
// newest-first order keeps non-decreasing tiers.
func (p SizeTiered) Pick(segs []base.SegmentMeta) *Pick {
	fanIn := p.fanIn()
	tiers := p.effectiveTiers(segs)
	for start := 0; start < len(tiers); {
		end := start + 1
		for end < len(tiers) && tiers[end] == tiers[start] {
			end++
		}
		if end-start >= fanIn {
			return &Pick{
				Start:          end - fanIn,
				End:            end,
				Tier:           tiers[start] + 1,
				IncludesOldest: end == len(segs),
			}
		}
		start = end
	}
	return nil
}

// Tiers returns the number of tiers segs span: one more than the highest
// tier, or 0 for no segments. It is the argument MaxSegments and
// StallThreshold expect.
func (p SizeTiered) Tiers(segs []base.SegmentMeta) int {
	tiers := p.effectiveTiers(segs)
	if len(tiers) == 0 {
		return 0
	}
	return int(tiers[len(tiers)-1]) + 1 // the oldest has the highest tier
}

// MaxSegments is the most live segments a store spanning the given number
// of tiers holds while compaction keeps up: FanIn-1 per tier (a FanIn-th
// is merged away at once) plus the flush that has just landed.
func (p SizeTiered) MaxSegments(tiers int) int {
	return (p.fanIn()-1)*max(tiers, 1) + 1
}

// StallThreshold is the segment count at which the DB should stop
// admitting writes until compaction catches up: MaxSegments plus two
// tier-0 merges' worth of flushes. Below it, compaction is only busy; at
// it, flushes arrive faster than merges retire them, and every Get for an
// absent key pays one more filter probe (and FPR more block reads) per
// extra segment.
//
// The slack assumes that while a long merge of a high tier runs, the DB
// keeps merging the newer segments: Pick(segs[:busy.Start]) picks a run
// that is disjoint from the busy one and still contiguous. Without that, a
// merge of tier t lasts about FanIn^t flushes and any fixed threshold
// stalls writes during it.
func (p SizeTiered) StallThreshold(tiers int) int {
	return p.MaxSegments(tiers) + 2*p.fanIn()
}

// UrgentThreshold is the segment count, halfway between MaxSegments and
// StallThreshold, at which the DB should merge the newest segments even
// while its allowed compactions are all busy with older ones: one tier-0
// merge's worth of flushes past MaxSegments means a long merge holds the
// only slot, and waiting for it would reach StallThreshold.
func (p SizeTiered) UrgentThreshold(tiers int) int {
	return p.MaxSegments(tiers) + p.fanIn()
}

func (p SizeTiered) fanIn() int {
	if p.FanIn < 2 {
		return DefaultFanIn
	}
	return p.FanIn
}

func (p SizeTiered) tierRatio() float64 {
	if p.ratio <= 1 || math.IsNaN(p.ratio) {
		return float64(p.fanIn())
	}
	return p.ratio
}

// rawTier is the tier of one segment on its own.
func (p SizeTiered) rawTier(s base.SegmentMeta) uint32 {
	if p.minSize <= 0 {
		return s.Tier
	}
	if s.Size < p.minSize {
		return 0
	}
	ratio, r := float64(s.Size)/float64(p.minSize), p.tierRatio()
	t := math.Floor(math.Log(ratio) / math.Log(r))
	// The quotient of logarithms can land a hair below an exact power
	// (log 64 / log 4 = 2.9999…); settle t so that r^t ≤ ratio < r^(t+1).
	if math.Pow(r, t+1) <= ratio {
		t++
	} else if t > 0 && math.Pow(r, t) > ratio {
		t--
	}
	return uint32(min(max(t, 0), math.MaxUint32-1)) // room for Pick's +1
}

// effectiveTiers returns the tier of each segment of segs (newest first) as
// the running maximum of the raw tiers from the newest segment on, so that
// tiers never decrease towards older segments and equal tiers are
// adjacent. Without it a segment smaller than a newer one (a merge output
// that shrank, a file from an older policy) would be cut off from its
// peers by the larger newer segment and could wait forever; lifted, it
// joins the next merge of the tier above, which costs only rewriting it.
func (p SizeTiered) effectiveTiers(segs []base.SegmentMeta) []uint32 {
	tiers := make([]uint32, len(segs))
	var floor uint32
	for i, s := range segs {
		floor = max(floor, p.rawTier(s))
		tiers[i] = floor
	}
	return tiers
}
