package engines

import (
	"math"
	"math/bits"
	"time"
)

// Histogram counts durations in nanoseconds in log-linear buckets, as
// HdrHistogram does: values below histSub are counted exactly, and each
// power of two above is split into histSub equal buckets, so a value is
// known to within 1/histSub of itself (0.8%) at any magnitude. Recording
// is an index computation and an increment: no allocation, no sort, cheap
// enough to time every Put of a fill. The zero value is empty and ready.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	// A value of bit length L > histSubBits falls in group L-histSubBits
	// (1..64-histSubBits), after the exact group 0 of values < histSub.
	histBuckets = (64 - histSubBits + 1) << histSubBits
)

// histBucket returns the index of the bucket counting v.
func histBucket(v uint64) int {
	if v < histSub {
		return int(v)
	}
	// v = m·2^shift with histSub <= m < 2·histSub.
	shift := bits.Len64(v) - histSubBits - 1
	return (shift+1)<<histSubBits + int(v>>shift) - histSub
}

// histRange returns the smallest and largest value bucket b counts.
func histRange(b int) (lo, hi uint64) {
	if b < histSub {
		return uint64(b), uint64(b)
	}
	shift := b>>histSubBits - 1
	lo = uint64(b&(histSub-1)+histSub) << shift
	return lo, lo + (1<<shift - 1)
}

// Record counts one duration (negative ones as 0).
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[histBucket(v)]++
	h.n++
	h.max = max(h.max, v)
}

// Count returns how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest duration recorded, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the q-quantile (0 < q <= 1) by the nearest-rank
// definition: the top of the bucket holding the sample of rank
// ceil(q·n), capped at the largest value recorded. It errs on the slow
// side, by less than 1/128 of the value; 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	// The epsilon absorbs rounding in q·n (0.07·100 is 7.000000000000001).
	rank := uint64(min(max(math.Ceil(q*float64(h.n)-1e-9), 1), float64(h.n)))
	var seen uint64
	for b, c := range h.counts {
		if seen += c; seen >= rank && c > 0 {
			_, hi := histRange(b)
			return time.Duration(min(hi, h.max))
		}
	}
	return time.Duration(h.max)
}

// CountAbove returns how many recorded durations are certainly longer
// than d: those in buckets whose every value exceeds d. Durations in the
// one bucket that straddles d (within 0.8% of it) are not counted.
func (h *Histogram) CountAbove(d time.Duration) uint64 {
	var n uint64
	for b := histBucket(uint64(max(d, 0))) + 1; b < histBuckets; b++ {
		n += h.counts[b]
	}
	return n
}

// HistBucket is one non-empty bucket of a Histogram: its index and count.
type HistBucket [2]uint64

// Buckets returns the non-empty buckets, for JSON.
func (h *Histogram) Buckets() []HistBucket {
	var out []HistBucket
	for b, c := range h.counts {
		if c > 0 {
			out = append(out, HistBucket{uint64(b), c})
		}
	}
	return out
}

// HistogramOf rebuilds a Histogram from its Buckets and its Max.
func HistogramOf(buckets []HistBucket, maxDur time.Duration) *Histogram {
	h := &Histogram{max: uint64(max(maxDur, 0))}
	for _, b := range buckets {
		if b[0] < histBuckets {
			h.counts[b[0]] += b[1]
			h.n += b[1]
		}
	}
	return h
}
