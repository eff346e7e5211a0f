package engines

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistogramQuantiles checks every reported quantile against the exact
// nearest-rank quantile of the sorted samples: never below it, never more
// than 1/128 above it, and the max exact.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		gen  func() time.Duration
	}{
		{"small exact", func() time.Duration { return time.Duration(rng.IntN(100)) }},
		{"uniform µs", func() time.Duration { return time.Duration(rng.IntN(1_000_000)) }},
		// Log-uniform from 1 ns to about 17 s: every bucket group.
		{"log-uniform", func() time.Duration {
			return time.Duration(uint64(1) << rng.IntN(34) * uint64(1+rng.IntN(1<<10)) >> 10)
		}},
		{"long tail", func() time.Duration {
			if rng.IntN(1000) == 0 {
				return time.Duration(50e6 + rng.IntN(1e9))
			}
			return time.Duration(2000 + rng.IntN(3000))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			samples := make([]time.Duration, 100_001)
			for i := range samples {
				samples[i] = tc.gen()
				h.Record(samples[i])
			}
			slices.Sort(samples)
			if h.Count() != uint64(len(samples)) || h.Max() != samples[len(samples)-1] {
				t.Fatalf("count %d, max %v; want %d, %v", h.Count(), h.Max(), len(samples), samples[len(samples)-1])
			}
			for _, q := range []float64{0.001, 0.07, 0.25, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
				rank := int(math.Ceil(q*float64(len(samples)) - 1e-9)) // nearest rank, 1-based
				exact := samples[max(rank, 1)-1]
				got := h.Quantile(q)
				if got < exact || got > exact+exact/histSub {
					t.Errorf("q %v: %v, want %v to %v", q, got, exact, exact+exact/histSub)
				}
			}
			// CountAbove against the sorted samples, at a few thresholds.
			for _, d := range []time.Duration{samples[len(samples)/2], samples[len(samples)*99/100], samples[len(samples)-1]} {
				above := len(samples) - func() int { i, _ := slices.BinarySearch(samples, d+1); return i }()
				got := h.CountAbove(d)
				// Samples within d's bucket (at most 0.8% above d) are not counted.
				near := len(samples) - func() int { i, _ := slices.BinarySearch(samples, d+d/histSub+1); return i }()
				if got > uint64(above) || got < uint64(near) {
					t.Errorf("CountAbove(%v) = %d, want between %d and %d", d, got, near, above)
				}
			}
			// JSON round trip.
			back := HistogramOf(h.Buckets(), h.Max())
			if back.Count() != h.Count() || back.Quantile(0.99) != h.Quantile(0.99) {
				t.Errorf("rebuilt histogram differs: %d, %v vs %d, %v", back.Count(), back.Quantile(0.99), h.Count(), h.Quantile(0.99))
			}
		})
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.CountAbove(0) != 0 {
		t.Error("empty histogram: want zeros")
	}
}

// TestHistBuckets checks the bucket layout: contiguous, each value in the
// range of its bucket, and no bucket wider than 1/128 of its low end.
func TestHistBuckets(t *testing.T) {
	for b := range histBuckets {
		lo, hi := histRange(b)
		if histBucket(lo) != b || histBucket(hi) != b {
			t.Fatalf("bucket %d: [%d, %d] maps to %d, %d", b, lo, hi, histBucket(lo), histBucket(hi))
		}
		if b+1 < histBuckets {
			if next, _ := histRange(b + 1); next != hi+1 {
				t.Fatalf("bucket %d ends at %d, bucket %d starts at %d", b, hi, b+1, next)
			}
		}
		if lo >= histSub && hi-lo+1 > lo/histSub {
			t.Fatalf("bucket %d: [%d, %d] wider than 1/%d of %d", b, lo, hi, histSub, lo)
		}
	}
	if _, hi := histRange(histBuckets - 1); hi != ^uint64(0) {
		t.Errorf("last bucket ends at %d, want 2^64-1", hi)
	}
}
