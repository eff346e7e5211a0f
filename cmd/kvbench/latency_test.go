package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketOfCoversValue(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	values := []uint64{0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 1000, 1 << 40, math.MaxUint64 - 1, math.MaxUint64}
	for range 10000 {
		values = append(values, r.Uint64()>>r.IntN(64))
	}
	for _, v := range values {
		b := bucketOf(v)
		if b < 0 || b >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside 0..%d", v, b, numBuckets-1)
		}
		lo, hi := bucketRange(b)
		if v < lo || v > hi {
			t.Fatalf("bucketOf(%d) = %d with range [%d, %d]", v, b, lo, hi)
		}
		if width := hi - lo; float64(width) > float64(lo)/subBuckets {
			t.Fatalf("bucket %d = [%d, %d] is wider than 1/%d of its start", b, lo, hi, subBuckets)
		}
	}
}

func TestBucketsAreContiguous(t *testing.T) {
	// Every bucket starts right after the previous one ends: no value is
	// lost between buckets and none is counted twice.
	_, prevHi := bucketRange(0)
	for b := 1; b < numBuckets; b++ {
		lo, hi := bucketRange(b)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", b, lo, prevHi)
		}
		if bucketOf(lo) != b || bucketOf(hi) != b {
			t.Fatalf("bucket %d = [%d, %d] but bucketOf gives %d and %d", b, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		prevHi = hi
	}
	if prevHi != math.MaxUint64 {
		t.Fatalf("last bucket ends at %d, want MaxUint64", prevHi)
	}
}

func TestNearestRank(t *testing.T) {
	tests := []struct {
		n    uint64
		q    float64
		want uint64
	}{
		{0, 0.5, 0},
		{1, 0.5, 1},
		{1, 0.999, 1},
		{2, 0.5, 1},
		{3, 0.5, 2},
		{4, 0.5, 2},
		{100, 0.99, 99},
		{1000, 0.999, 999},
		{100, 0.07, 7},      // 0.07·100 is 7.000000000000001 in floating point
		{10000, 0.035, 350}, // and 0.035·10000 is 350.00000000000006
		{1001, 0.999, 1000},
		{10, 0, 1},
		{10, 1, 10},
	}
	for _, tt := range tests {
		if got := nearestRank(tt.n, tt.q); got != tt.want {
			t.Errorf("nearestRank(%d, %v) = %d, want %d", tt.n, tt.q, got, tt.want)
		}
	}
}

func TestQuantileBucket(t *testing.T) {
	counts := []uint64{0, 2, 0, 3, 1}
	for rank, want := range map[uint64]int{1: 1, 2: 1, 3: 3, 5: 3, 6: 4, 7: -1} {
		if got := quantileBucket(counts, rank); got != want {
			t.Errorf("quantileBucket(rank %d) = %d, want %d", rank, got, want)
		}
	}
}

// exactQuantile is the nearest-rank quantile of a sorted slice.
func exactQuantile(sorted []uint64, q float64) uint64 {
	return sorted[nearestRank(uint64(len(sorted)), q)-1]
}

func TestQuantileAgainstSortedSlice(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 100, 1000, 54321} {
		h := new(histogram)
		var all []uint64
		for range n {
			// Log-normal around 5µs with a long tail, like real latencies.
			v := uint64(math.Exp(8.5 + 1.2*r.NormFloat64()))
			h.record(time.Duration(v))
			all = append(all, v)
		}
		slices.Sort(all)
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
			exact, got := exactQuantile(all, q), h.quantile(q)
			// The histogram reports the top of the exact value's bucket,
			// capped at the maximum: never below, at most 1/32 above.
			if got < exact || float64(got) > float64(exact)*(1+1.0/subBuckets) {
				t.Errorf("n=%d q=%v: histogram %d, exact %d", n, q, got, exact)
			}
		}
		s := h.summary()
		if s.Max != all[n-1] {
			t.Errorf("n=%d: max %d, want %d", n, s.Max, all[n-1])
		}
		var sum uint64
		for _, v := range all {
			sum += v
		}
		if s.Mean != sum/uint64(n) {
			t.Errorf("n=%d: mean %d, want %d", n, s.Mean, sum/uint64(n))
		}
	}
}

func TestQuantileEdgeCases(t *testing.T) {
	h := new(histogram)
	if got := h.summary(); got != (latencySummary{}) {
		t.Errorf("empty histogram summary = %+v, want zeros", got)
	}
	h.record(-time.Second) // a clock step backwards must not wrap around
	h.record(1234 * time.Microsecond)
	if got := h.quantile(0.5); got != 0 {
		t.Errorf("p50 of {0, 1234µs} = %d, want 0", got)
	}
	if got := h.quantile(1); got != 1234000 {
		t.Errorf("p100 = %d, want exactly the maximum 1234000", got)
	}
}
