package compaction

import (
	"math"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestSizeTierAtPowers pins the size tier at and around every power of
// the ratio, where the quotient of logarithms can land a hair off: a size
// of exactly minSize·r^t is tier t, one byte more too, one byte less is
// tier t-1, for every t up to sizes of 2^53 bytes (beyond, float64
// cannot tell a size from its neighbour), for several ratios and minimum
// sizes. The expected tier is computed in integers.
func TestSizeTierAtPowers(t *testing.T) {
	const maxExact = 1 << 53
	type sizeTier struct {
		size int64
		want uint32
	}
	for _, r := range []int64{2, 3, 4, 5, 7, 10} {
		for _, minSize := range []int64{1, 3, 1000, 1 << 20, 1<<40 + 7} {
			p := SizeTiered{minSize: minSize, ratio: float64(r)}
			if r == DefaultFanIn {
				p.ratio = 0 // the default ratio is FanIn
			}
			pow := minSize // minSize·r^tier
			for tier := uint32(0); ; tier++ {
				cases := []sizeTier{{pow, tier}}
				if pow+1 < pow*r {
					cases = append(cases, sizeTier{pow + 1, tier})
				}
				if tier > 0 {
					cases = append(cases, sizeTier{pow - 1, tier - 1})
				}
				for _, c := range cases {
					if got := p.rawTier(base.SegmentMeta{Size: c.size}); got != c.want {
						t.Errorf("ratio %d, minSize %d: size %d has tier %d, want %d", r, minSize, c.size, got, c.want)
					}
				}
				if pow > maxExact/r {
					break
				}
				pow *= r
			}
		}
	}
	// Sizes whose ratio to minSize is one float64 step below a power of
	// the ratio, where the quotient of logarithms rounds up to the power's
	// exponent: the tier is still the one below.
	for _, c := range []struct {
		minSize, size int64
		want          uint32
	}{
		{1 << 53, 1<<55 - 4, 0},  // ratio 4 - 2^-51
		{1 << 53, 1<<57 - 16, 1}, // ratio 16 - 2^-49
		{1 << 53, 1 << 55, 1},
	} {
		if got := (SizeTiered{minSize: c.minSize}).rawTier(base.SegmentMeta{Size: c.size}); got != c.want {
			t.Errorf("minSize %d: size %d has tier %d, want %d", c.minSize, c.size, got, c.want)
		}
	}
	// Below minSize, including empty segments, is tier 0.
	p := SizeTiered{minSize: 1 << 20}
	for _, size := range []int64{0, 1, 1<<20 - 1} {
		if got := p.rawTier(base.SegmentMeta{Size: size}); got != 0 {
			t.Errorf("size %d below minSize has tier %d, want 0", size, got)
		}
	}
}

// TestSizeTierRatioDefault pins that a ratio at or below 1, or NaN, means
// FanIn: such ratios give the same tiers as ratio 0.
func TestSizeTierRatioDefault(t *testing.T) {
	const minSize = 1 << 20
	want := SizeTiered{minSize: minSize, FanIn: 3}
	for _, ratio := range []float64{1, 0.5, -2, math.NaN()} {
		p := SizeTiered{minSize: minSize, FanIn: 3, ratio: ratio}
		for _, size := range []int64{minSize, 3 * minSize, 9*minSize - 1, 9 * minSize, 1 << 40} {
			s := base.SegmentMeta{Size: size}
			if got, w := p.rawTier(s), want.rawTier(s); got != w {
				t.Errorf("ratio %v: size %d has tier %d, want %d as with FanIn 3", ratio, size, got, w)
			}
		}
	}
}

// TestSizeTierLeavesRoomForPick pins the clamp of size tiers at
// MaxUint32-1: with a ratio barely above 1 the tiers would run past
// uint32, and a merge of the top tier must still get a higher tier, not
// one that wrapped around to 0.
func TestSizeTierLeavesRoomForPick(t *testing.T) {
	p := SizeTiered{minSize: 1, ratio: 1 + 1e-12}
	segs := sized(1<<62, 1<<62, 1<<62, 1<<62)
	if got := p.rawTier(segs[0]); got != math.MaxUint32-1 {
		t.Fatalf("tier %d, want %d", got, uint32(math.MaxUint32-1))
	}
	if pk := p.Pick(segs); pk == nil || pk.Tier != math.MaxUint32 {
		t.Fatalf("Pick = %+v, want the four merged into tier %d", pk, uint32(math.MaxUint32))
	}
}
