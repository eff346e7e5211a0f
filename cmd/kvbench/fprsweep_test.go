package main

import (
	"context"
	"math"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
)

func TestMeasureFPRMatchesTheory(t *testing.T) {
	const n, probes = 20000, 400000
	present, absent := fprHashes(n, probes, 7)
	for _, layout := range []bloom.Layout{bloom.Blocked, bloom.Classic} {
		for _, bpk := range []float64{4, 10, 16} {
			row, err := measureFPR(layout, bpk, present, absent)
			if err != nil {
				t.Fatal(err)
			}
			g := bloom.GeometryFor(layout, n, bpk)
			if row.K != g.K || row.MemBitsPerKey != float64(g.Bits)/n {
				t.Errorf("%s %v: k=%d mem=%v, want the geometry's k=%d and %v bits/key", layout, bpk, row.K, row.MemBitsPerKey, g.K, float64(g.Bits)/n)
			}
			// GeometryFor rounds up by at most 1/32 plus one unit.
			if row.MemBitsPerKey < bpk || row.MemBitsPerKey > bpk*(1+1.0/32)+512.0/n {
				t.Errorf("%s %v: %v bits/key allocated", layout, bpk, row.MemBitsPerKey)
			}
			if want := bloom.FPR(layout, row.MemBitsPerKey, row.K); row.Theory != want {
				t.Errorf("%s %v: theory %v, want bloom.FPR = %v", layout, bpk, row.Theory, want)
			}
			// The false positives are binomial(probes, theory): allow 5 sigma.
			sigma := math.Sqrt(row.Theory * (1 - row.Theory) / probes)
			if math.Abs(row.Measured-row.Theory) > 5*sigma {
				t.Errorf("%s %v: measured %v, theory %v (sigma %v)", layout, bpk, row.Measured, row.Theory, sigma)
			}
			if math.Abs(row.Estimated-row.Theory) > 0.1*row.Theory {
				t.Errorf("%s %v: EstimatedFPR %v, theory %v", layout, bpk, row.Estimated, row.Theory)
			}
			if row.FalsePositives != int(math.Round(row.Measured*probes)) || row.Keys != n || row.Probes != probes {
				t.Errorf("%s %v: inconsistent counts %+v", layout, bpk, row)
			}
		}
	}
}

func TestSweepFPRRows(t *testing.T) {
	rows, err := sweepFPR(context.Background(), 500, 2000, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (fprMaxBits - fprMinBits + 1); len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	for i, r := range rows {
		wantLayout := []string{"blocked", "classic"}[i%2]
		if r.Kind != "fpr" || r.Layout != wantLayout || r.BitsPerKey != float64(fprMinBits+i/2) {
			t.Errorf("row %d = %+v, want a %s row at %d bits/key", i, r, wantLayout, fprMinBits+i/2)
		}
	}
	// More bits must never raise the theoretical FPR.
	for i := 2; i < len(rows); i++ {
		if rows[i].Theory > rows[i-2].Theory {
			t.Errorf("%s theory rises from %v to %v at %v bits/key", rows[i].Layout, rows[i-2].Theory, rows[i].Theory, rows[i].BitsPerKey)
		}
	}
	tb := fprTable(rows)
	if len(tb.rows) != len(rows)/2 || len(tb.rows[0]) != len(tb.header) {
		t.Errorf("table has %d rows of %d cells, want %d rows of %d", len(tb.rows), len(tb.rows[0]), len(rows)/2, len(tb.header))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sweepFPR(ctx, 500, 2000, 1, nil); err == nil {
		t.Error("a cancelled sweep returned no error")
	}
}
