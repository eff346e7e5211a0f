package bloom

import "testing"

// TestBitsForMatchesGeometryFor: BitsFor is GeometryFor's size, without k.
func TestBitsForMatchesGeometryFor(t *testing.T) {
	for _, layout := range []Layout{Blocked, Classic} {
		for _, n := range []int{0, 1, 100, 1000, 19_500, 1_250_000} {
			for _, bpk := range []float64{0, 0.5, 1, 2.5, 7.3, 10, 16.0625, 32} {
				if got, want := BitsFor(layout, n, bpk), GeometryFor(layout, n, bpk).Bits; got != want {
					t.Errorf("BitsFor(%v, %d, %v) = %d, GeometryFor's %d", layout, n, bpk, got, want)
				}
			}
		}
	}
}

// TestBitsForRoundsUnits pins BitsFor's rounding on exact unit counts (at
// one unit per key): at least one unit; up to 64 units as asked; above 64,
// up to the next c·2^j with 32 ≤ c < 64. Fewer than one key or one bit per
// key count as one.
func TestBitsForRoundsUnits(t *testing.T) {
	for _, tc := range []struct {
		n         int
		bpkScale  float64 // bits per key, in units
		wantUnits uint64
	}{
		{0, 1, 1}, {1, 1, 1}, {-5, 1, 1}, {2, 1, 2}, {63, 1, 63}, {64, 1, 64},
		{65, 1, 66}, {66, 1, 66}, {127, 1, 128}, {128, 1, 128}, {129, 1, 132},
		{1000, 1, 1008}, {1008, 1, 1008}, {1009, 1, 1024},
		{128, 1.0 / 2, 64}, {130, 1.0 / 2, 66}, {3, 10, 30},
	} {
		for _, layout := range []Layout{Blocked, Classic} {
			unit := uint64(wordBits)
			if layout == Blocked {
				unit = blockBits
			}
			if got := BitsFor(layout, tc.n, tc.bpkScale*float64(unit)); got != tc.wantUnits*unit {
				t.Errorf("BitsFor(%s, %d, %v) = %d bits, want %d units of %d", layout, tc.n, tc.bpkScale*float64(unit), got, tc.wantUnits, unit)
			}
		}
	}
	for _, bpk := range []float64{0, 0.25, 1} {
		if got := BitsFor(Classic, 640, bpk); got != 640 {
			t.Errorf("BitsFor(Classic, 640, %v) = %d, want 640 (one bit per key)", bpk, got)
		}
	}
}
