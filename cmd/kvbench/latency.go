package main

import (
	"math"
	"math/bits"
	"time"
)

// The latency histogram is log-linear, like HdrHistogram: values below
// subBuckets are counted exactly, and every power of two above is split
// into subBuckets equal buckets. A value is then known to within
// 1/subBuckets of itself (3.1%) whatever its magnitude, in a fixed array
// that recording touches once: no allocation, no sorting, per operation.
const (
	subBucketBits = 5
	subBuckets    = 1 << subBucketBits
	// The largest shift is 63-subBucketBits (a value with all 64 bits
	// used), giving indexes up to (64-subBucketBits+1)<<subBucketBits - 1.
	numBuckets = (64 - subBucketBits + 1) << subBucketBits
)

// histogram counts latencies in nanoseconds.
type histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64
	max    uint64
}

// bucketOf returns the index of the bucket that counts v.
func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	// v = m·2^shift with subBuckets <= m < 2·subBuckets: the bucket is the
	// shift's group plus m's offset within it.
	shift := bits.Len64(v) - subBucketBits - 1
	m := v >> shift
	return (shift+1)<<subBucketBits + int(m) - subBuckets
}

// bucketRange returns the smallest and largest value counted by bucket b.
func bucketRange(b int) (lo, hi uint64) {
	if b < subBuckets {
		return uint64(b), uint64(b)
	}
	shift := b>>subBucketBits - 1
	m := uint64(b&(subBuckets-1)) + subBuckets
	lo = m << shift
	return lo, lo + (1<<shift - 1)
}

func (h *histogram) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

// nearestRank is the 1-based rank of the q-quantile of n samples by the
// nearest-rank definition: the smallest rank r with r/n >= q. The epsilon
// absorbs rounding in q·n: 0.07·100 is 7.000000000000001 in floating
// point, which must give rank 7, not 8.
func nearestRank(n uint64, q float64) uint64 {
	if n == 0 {
		return 0
	}
	r := math.Ceil(q*float64(n) - 1e-9)
	return uint64(min(max(r, 1), float64(n)))
}

// quantileBucket returns the bucket holding the sample of the given
// 1-based rank, walking the cumulative counts; -1 if there are fewer
// samples than rank.
func quantileBucket(counts []uint64, rank uint64) int {
	var seen uint64
	for b, c := range counts {
		seen += c
		if seen >= rank && c > 0 {
			return b
		}
	}
	return -1
}

// quantile returns the q-quantile in nanoseconds: the top of the bucket
// holding the nearest-rank sample, capped at the largest value recorded.
// Reporting a bucket's top errs on the slow side, by less than 3.1%.
func (h *histogram) quantile(q float64) uint64 {
	b := quantileBucket(h.counts[:], nearestRank(h.n, q))
	if b < 0 {
		return 0
	}
	_, hi := bucketRange(b)
	return min(hi, h.max)
}

// latencySummary is what the report shows of a histogram, in nanoseconds.
type latencySummary struct {
	Mean uint64 `json:"mean"`
	P50  uint64 `json:"p50"`
	P99  uint64 `json:"p99"`
	P999 uint64 `json:"p99_9"`
	Max  uint64 `json:"max"`
}

func (h *histogram) summary() latencySummary {
	s := latencySummary{P50: h.quantile(0.5), P99: h.quantile(0.99), P999: h.quantile(0.999), Max: h.max}
	if h.n > 0 {
		s.Mean = h.sum / h.n
	}
	return s
}

// merge adds o's samples to h.
func (h *histogram) merge(o *histogram) {
	for b, c := range o.counts {
		h.counts[b] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}
