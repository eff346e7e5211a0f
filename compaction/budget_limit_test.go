package compaction

import (
	"errors"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
)

// TestPlanBudgetFoldsDownToOneBitPerKey pins PlanBudget's floor: a filter
// may be halved to exactly 1 bit per key, never below.
func TestPlanBudgetFoldsDownToOneBitPerKey(t *testing.T) {
	g := bloom.Geometry{Layout: bloom.Blocked, Bits: 512 * 64, K: 6}
	tests := []struct {
		name  string
		keys  uint64
		folds int // to fit half the memory; -1: ErrBudgetTooSmall
	}{
		{"halving lands on 1 bit per key", g.Bits / 2, 1},
		{"halving would go below 1 bit per key", g.Bits/2 + 1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := PlanBudget([]FilterInfo{{Geometry: g, Keys: tt.keys}}, int64(g.Bits/16))
			if tt.folds < 0 {
				if !errors.Is(err, ErrBudgetTooSmall) || plan.Folds[0] != 0 {
					t.Fatalf("plan %+v, err %v; want no fold and ErrBudgetTooSmall", plan, err)
				}
				return
			}
			if err != nil || plan.Folds[0] != tt.folds {
				t.Fatalf("plan %+v, err %v; want %d folds", plan, err, tt.folds)
			}
		})
	}
}
