package bloom

import (
	"encoding/binary"
	"math"
	"testing"
)

// The statistical tests measure false-positive rates with fixed key sets, so
// they are deterministic; the tolerances are several standard deviations of
// the sampling error at these sizes, so they fail on a wrong formula or a
// biased probe scheme, not by bad luck.

// statSizes returns how many keys to add and how many absent keys to query.
// Measuring a rate near 0.05% to ±15% takes over 5·10^5 queries (±15% is
// then 2.5 standard deviations), so -short and -race shrink the filters
// more than the queries.
func statSizes() (n, absent int) {
	switch {
	case raceEnabled:
		return 200_000, 1_000_000
	case testing.Short():
		return 100_000, 1_000_000
	}
	return 1_000_000, 1_000_000
}

// statHashes returns the hashes of keys 0..n-1 of a set (see testKey),
// computed without keeping the keys.
func statHashes(set byte, n int) []uint64 {
	hs := make([]uint64, n)
	var k [9]byte
	k[0] = set
	for i := range hs {
		binary.BigEndian.PutUint64(k[1:], uint64(i))
		hs[i] = Hash(k[:])
	}
	return hs
}

// measuredFPR is the fraction of hashes (of keys never added) that f reports.
func measuredFPR(f *Filter, absent []uint64) float64 {
	var fp int
	for _, h := range absent {
		if f.ContainsHash(h) {
			fp++
		}
	}
	return float64(fp) / float64(len(absent))
}

func buildHashes(t testing.TB, g Geometry, hs []uint64) *Filter {
	f := mustGeometry(t, g)
	for _, h := range hs {
		f.AddHash(h)
	}
	return f
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

func TestStatisticalFPR(t *testing.T) {
	n, nAbsent := statSizes()
	present, absent := statHashes(0, n), statHashes(1, nAbsent)
	for _, layout := range []Layout{Blocked, Classic} {
		for _, bpk := range []float64{6, 10, 16} {
			f := buildHashes(t, GeometryFor(layout, n, bpk), present)
			for _, h := range present {
				if !f.ContainsHash(h) {
					t.Fatalf("%s %v bits/key: false negative", layout, bpk)
				}
			}
			measured, theory := measuredFPR(f, absent), f.TheoreticalFPR()
			estFPR, estCount := f.EstimatedFPR(), f.EstimatedCount()
			t.Logf("%s %.2f bits/key k=%d: FPR measured %.4f%%, theory %.4f%%, estimated %.4f%%; count estimated %.0f of %d",
				layout, f.BitsPerKey(), f.g.K, 100*measured, 100*theory, 100*estFPR, estCount, n)
			if !within(measured, theory, 0.15) {
				t.Errorf("%s %v bits/key: measured FPR %.4g, theoretical %.4g (want ±15%%)", layout, bpk, measured, theory)
			}
			if !within(estFPR, measured, 0.15) {
				t.Errorf("%s %v bits/key: EstimatedFPR %.4g, measured %.4g (want ±15%%)", layout, bpk, estFPR, measured)
			}
			if !within(estCount, float64(n), 0.05) {
				t.Errorf("%s %v bits/key: EstimatedCount %.0f, want %d ±5%%", layout, bpk, estCount, n)
			}
		}
	}
}

func TestStatisticalIntersection(t *testing.T) {
	n, _ := statSizes()
	hs := statHashes(0, n+n/2)
	a, b := hs[:n], hs[n/2:] // overlap: keys n/2..n-1
	for _, layout := range []Layout{Blocked, Classic} {
		g := GeometryFor(layout, n, 10)
		fa, fb := buildHashes(t, g, a), buildHashes(t, g, b)
		est, err := fa.EstimateIntersection(fb)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: intersection estimated %.0f, true %d", layout, est, n/2)
		if !within(est, float64(n/2), 0.05) {
			t.Errorf("%s: EstimateIntersection %.0f, want %d ±5%%", layout, est, n/2)
		}
	}
}

// TestFoldedK shows why a filter meant to be folded should be built with
// the k of its target size: folding keeps k, so a 20 bits/key filter with
// the k of 20 bits/key (14 by the classic formula) folded to 10 bits/key
// has the FPR of 10 bits/key at k=14, well above the optimum; built with
// the k of 10 bits/key, the folded filter is the direct 10-bit filter.
func TestFoldedK(t *testing.T) {
	n, nAbsent := statSizes()
	present, absent := statHashes(0, n), statHashes(1, nAbsent)
	for _, layout := range []Layout{Blocked, Classic} {
		direct := buildHashes(t, GeometryFor(layout, n, 10), present)
		directFPR := measuredFPR(direct, absent)

		g20 := GeometryFor(layout, n, 20)
		if g20.Bits/2 != direct.g.Bits {
			t.Fatalf("%s: 20 bits/key rounds to %d bits, not twice the %d of 10 bits/key", layout, g20.Bits, direct.g.Bits)
		}
		g20.K = 14
		bigK := buildHashes(t, g20, present)
		if err := bigK.Fold(); err != nil {
			t.Fatal(err)
		}
		bigKFPR, bigKTheory := measuredFPR(bigK, absent), FPR(layout, bigK.BitsPerKey(), 14)

		// Built with the target k, the folded filter is the direct one, bit
		// for bit, so its FPR is the direct filter's.
		g20.K = direct.g.K
		smallK := buildHashes(t, g20, present)
		if err := smallK.Fold(); err != nil {
			t.Fatal(err)
		}
		sameBits(t, layout.String()+": folded filter built with the target k vs direct", smallK, direct)

		t.Logf("%s folded 20→%.2f bits/key: k=14 FPR %.3f%% (formula at k=14 %.3f%%); with k=%d as direct: %.3f%% (formula %.3f%%)",
			layout, bigK.BitsPerKey(), 100*bigKFPR, 100*bigKTheory, direct.g.K, 100*directFPR, 100*direct.TheoreticalFPR())
		if !within(bigKFPR, bigKTheory, 0.15) {
			t.Errorf("%s: folded k=14 filter FPR %.4g, want FPR(%s, %.2f, 14) = %.4g ±15%%", layout, bigKFPR, layout, bigK.BitsPerKey(), bigKTheory)
		}
		if bigKFPR < 1.5*directFPR {
			t.Errorf("%s: folded k=14 filter FPR %.4g is not clearly worse than the direct filter's %.4g", layout, bigKFPR, directFPR)
		}
		if !within(directFPR, direct.TheoreticalFPR(), 0.15) {
			t.Errorf("%s: direct 10 bits/key filter FPR %.4g, theoretical %.4g", layout, directFPR, direct.TheoreticalFPR())
		}
	}
}
