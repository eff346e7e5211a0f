package bloom

import (
	"fmt"
	"math"
)

// FillRatio returns the fraction of bits that are set.
func (f *Filter) FillRatio() float64 {
	return float64(onesCount(f.bits)) / float64(f.g.Bits)
}

// EstimatedCount estimates the number of distinct keys added from the
// fraction of zero bits alone (Broder & Mitzenmacher): a bit stays zero
// after n keys with probability (1 - q)^n, q being the chance that one key
// sets it, so n ≈ ln(zero fraction) / ln(1 - q). It returns +Inf for a
// filter with no zero bits.
func (f *Filter) EstimatedCount() float64 {
	return f.g.countFromOnes(onesCount(f.bits))
}

// countFromOnes inverts the expected zero fraction of the geometry.
//
// Classic: one key sets a given bit with probability q = 1-(1-1/m)^k.
// Blocked: one key lands in a given block with probability 1/B and then
// sets a given bit of it with probability 1-(1-1/512)^k.
func (g Geometry) countFromOnes(ones uint64) float64 {
	zero := 1 - float64(ones)/float64(g.Bits)
	if zero <= 0 {
		return math.Inf(1)
	}
	kf := float64(g.K)
	// survival is -ln P(a given bit stays zero when one key is added).
	var survival float64
	if g.Layout == Blocked {
		blocks := float64(g.Bits / blockBits)
		survival = -math.Log1p(math.Expm1(kf*math.Log1p(-1.0/blockBits)) / blocks)
	} else {
		survival = -kf * math.Log1p(-1/float64(g.Bits))
	}
	return -math.Log(zero) / survival
}

// EstimatedFPR estimates the false-positive rate for keys that were not
// added, from the bits alone: for Classic the fill ratio to the power k; for
// Blocked the mean over blocks of (block fill)^k, since a query lands in one
// block and must find its k bits set there.
func (f *Filter) EstimatedFPR() float64 {
	kf := float64(f.g.K)
	if f.g.Layout != Blocked {
		return math.Pow(f.FillRatio(), kf)
	}
	var perFill [blockBits + 1]float64
	for i := range perFill {
		perFill[i] = math.Pow(float64(i)/blockBits, kf)
	}
	var sum float64
	for off := 0; off < len(f.bits); off += blockBytes {
		sum += perFill[onesCount(f.bits[off:off+blockBytes])]
	}
	return sum / float64(len(f.bits)/blockBytes)
}

// TheoreticalFPR is the FPR the layout's formula predicts for this filter's
// geometry holding Count keys.
func (f *Filter) TheoreticalFPR() float64 {
	if f.count == 0 {
		return 0
	}
	return FPR(f.g.Layout, f.BitsPerKey(), f.g.K)
}

// EstimateIntersection estimates |A ∩ B| for the key sets A of f and B of
// other, which must share a geometry: |A| + |B| - |A ∪ B|, each estimated
// from zero bits, with A ∪ B read off the OR of the two bit arrays (Broder &
// Mitzenmacher's Z1 + Z2 - Z12 form). The estimate is clamped at 0.
func (f *Filter) EstimateIntersection(other *Filter) (float64, error) {
	if f.g != other.g {
		return 0, fmt.Errorf("%w: intersection of %+v with %+v", ErrGeometry, f.g, other.g)
	}
	union := f.g.countFromOnes(onesCountOr(f.bits, other.bits))
	return max(0, f.EstimatedCount()+other.EstimatedCount()-union), nil
}
