package compaction

import (
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
)

// TestFoldsTo pins when one geometry folds onto another: same layout, k
// and seed, and a bit count that is the target's times 2^j with j within
// the source's halvings — all of them allowed.
func TestFoldsTo(t *testing.T) {
	g := bloom.Geometry{Layout: bloom.Blocked, Bits: 64 * 512, K: 6} // 64 blocks: 6 halvings
	if g.Halvings() != 6 {
		t.Fatalf("test geometry has %d halvings, want 6", g.Halvings())
	}
	with := func(change func(*bloom.Geometry)) bloom.Geometry { h := g; change(&h); return h }
	tests := []struct {
		name     string
		from, to bloom.Geometry
		want     int // -1: does not fold
	}{
		{"same", g, g, 0},
		{"one halving", g, with(func(h *bloom.Geometry) { h.Bits /= 2 }), 1},
		{"every halving", g, with(func(h *bloom.Geometry) { h.Bits >>= 6 }), 6},
		{"larger target", g, with(func(h *bloom.Geometry) { h.Bits *= 2 }), -1},
		{"not a power of two apart", with(func(h *bloom.Geometry) { h.Bits = 3 * 512 }), with(func(h *bloom.Geometry) { h.Bits = 512 }), -1},
		{"other k", g, with(func(h *bloom.Geometry) { h.K = 5; h.Bits /= 2 }), -1},
		{"other seed", g, with(func(h *bloom.Geometry) { h.Seed = 1; h.Bits /= 2 }), -1},
		{"other layout", g, with(func(h *bloom.Geometry) { h.Layout = bloom.Classic; h.Bits /= 2 }), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, ok := foldsTo(tt.from, tt.to)
			if tt.want < 0 {
				if ok {
					t.Fatalf("folds in %d halvings, want not at all", j)
				}
				return
			}
			if !ok || j != tt.want {
				t.Fatalf("foldsTo = %d, %v; want %d, true", j, ok, tt.want)
			}
		})
	}
}

// TestRightSizeFoldsAtTheTarget pins that a fold whose estimated FPR
// equals the target exactly is taken: the target is a ceiling, not a
// bound to stay strictly under.
func TestRightSizeFoldsAtTheTarget(t *testing.T) {
	f := filterOf(t, writerGeometry(4000), 0, 1000)
	once, err := Fold(f, 1)
	if err != nil {
		t.Fatal(err)
	}
	twice, err := Fold(f, 2)
	if err != nil {
		t.Fatal(err)
	}
	if twice.EstimatedFPR() <= once.EstimatedFPR() {
		t.Fatal("a second fold does not raise the estimate")
	}
	if got, n := RightSize(f, once.EstimatedFPR()); n != 1 || got.Geometry() != once.Geometry() {
		t.Fatalf("RightSize at the estimate after one fold: %d folds, want 1", n)
	}
}
