package main

import (
	"context"
	"math"
	"testing"
)

// TestFillCheckpointPredictsTheFilters: the fill report's prediction is
// the Σ FPR of the filters the store really holds. Under FilterOptimal
// (the default) segments of different sizes get different bits per key,
// so probed × the FPR of -bits-per-key is not what they predict.
func TestFillCheckpointPredictsTheFilters(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.MemtableSize = 4 << 20 // no flush but ours
	b := &bench{cfg: cfg}
	s, err := openBloomkv(t.TempDir(), cfg, cfg.BitsPerKey, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	d := newDataset(6000, cfg.ValueSize, 7)
	// Segments of 3000, 2000 and 1000 keys: the optimal allocation sizes
	// each one's filter differently.
	start := 0
	for _, n := range []int{3000, 2000, 1000} {
		for j := start; j < start+n; j++ {
			i := d.randomOrder(int64(j)) // in random order, so that every segment spans the key range
			if err := s.put(d.key(i), d.value(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		start += n
	}
	p, err := b.fillCheckpoint(context.Background(), s, d, int64(d.len()))
	if err != nil {
		t.Fatal(err)
	}
	st := s.db.Stats()
	if st.Segments != 3 || p.Probed < 2.9 {
		t.Fatalf("%d segments, %v probed per Get; want 3 and about 3", st.Segments, p.Probed)
	}
	if want := st.FilterExpectedReads; math.Abs(p.Predicted-want) > 1e-9*want {
		t.Errorf("predicted %.5f blocks per absent Get, want the filters' Σ FPR %.5f", p.Predicted, want)
	}
}
