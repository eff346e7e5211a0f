package bloomkv

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestFilterBudget: under a budget of half the filters' memory, the
// resident filters fit, every key is still found (folding is exact), and
// absent Gets read more blocks, about as the plan predicts.
func TestFilterBudget(t *testing.T) {
	const segments, perSegment, gets = 8, 4000, 20000
	build := func(budget int64) *DB {
		opts := smallOptions()
		opts.MemtableSize = 4 << 20
		opts.DisableAutoCompaction = true
		opts.FilterBudget = budget
		db := mustOpen(t, t.TempDir(), opts)
		for s := range segments {
			for i := range perSegment * (s + 1) / 2 { // segments of different sizes
				k := fmt.Appendf(nil, "key%08d", 2*(i*segments+s))
				db.Put(k, k)
			}
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		return db
	}
	absentReads := func(db *DB) float64 {
		before := db.Stats()
		for i := range gets {
			if _, err := db.Get(fmt.Appendf(nil, "key%08d", 2*i+1)); !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
		}
		after := db.Stats()
		return float64(after.BlockReads+after.BlockCacheHits-before.BlockReads-before.BlockCacheHits) / gets
	}

	full := build(0)
	defer full.Close()
	fullBytes := full.Stats().FilterBytes
	fullReads := absentReads(full)

	budget := fullBytes / 2
	db := build(budget)
	defer db.Close()
	st := db.Stats()
	if st.FilterBytes > budget {
		t.Fatalf("filters hold %d bytes, budget %d", st.FilterBytes, budget)
	}
	for s := range segments {
		for i := range perSegment * (s + 1) / 2 {
			k := fmt.Appendf(nil, "key%08d", 2*(i*segments+s))
			if v, err := db.Get(k); err != nil || !bytes.Equal(v, k) {
				t.Fatalf("false negative under the budget: Get(%s) = %v", k, err)
			}
		}
	}
	reads := absentReads(db)
	t.Logf("filters %d → %d bytes: %.4f → %.4f blocks per absent Get (plan predicted %.4f)",
		fullBytes, st.FilterBytes, fullReads, reads, st.FilterExpectedReads)
	if reads <= fullReads || reads > 3*st.FilterExpectedReads {
		t.Errorf("absent Get reads %.4f under budget (%.4f without); plan predicted %.4f",
			reads, fullReads, st.FilterExpectedReads)
	}
}
