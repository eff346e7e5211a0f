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
