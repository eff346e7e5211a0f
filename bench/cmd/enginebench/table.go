package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/bloomkv/bloomkv/bench/engines"
)

// writeTable writes results as a Markdown table of ops/s with each rate's
// ratio to bloomkv's, followed by notes on the IterGetter paths and the
// stores' layouts. Without a bloomkv result the ratios are "-".
func writeTable(w io.Writer, results []engines.Result) {
	var ref *engines.Result
	for i := range results {
		if results[i].Engine == "bloomkv" {
			ref = &results[i]
		}
	}
	if len(results) > 0 {
		r := results[0]
		fmt.Fprintf(w, "N = %d keys (16 bytes), %d-byte values, %d lookups per get phase, seed %d\n\n",
			r.N, r.ValueSize, r.Ops, r.Seed)
	}
	fmt.Fprintln(w, "| engine | version | fill ops/s | × | get-hit ops/s | × | get-miss ops/s | × | scan keys/s | × | scan-100 /s | × | compact s | disk MiB |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range results {
		miss, path := r.BestGetMiss()
		missCell := opsCell(miss)
		if r.GetMissIter > 0 {
			missCell += " (" + path + ")"
		}
		var refFill, refHit, refMiss, refScan, refScan100 float64
		if ref != nil {
			refFill, refHit = ref.Fill, ref.GetHit
			refMiss, _ = ref.BestGetMiss()
			refScan, refScan100 = ref.ScanFull, ref.Scan100
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f |\n",
			r.Engine, r.Version,
			opsCell(r.Fill), ratio(r.Fill, refFill),
			opsCell(r.GetHit), ratio(r.GetHit, refHit),
			missCell, ratio(miss, refMiss),
			opsCell(r.ScanFull), ratio(r.ScanFull, refScan),
			opsCell(r.Scan100), ratio(r.Scan100, refScan100),
			r.CompactSeconds, float64(r.DiskBytes)/(1<<20))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "× = engine ops/s ÷ bloomkv ops/s (above 1: faster than bloomkv).")
	for _, r := range results {
		if r.GetMissIter > 0 {
			fmt.Fprintf(w, "%s get-miss: DB.Get %s ops/s, iterator (UseL6Filters + SeekPrefixGE) %s ops/s; the table shows the faster.\n",
				r.Engine, opsCell(r.GetMiss), opsCell(r.GetMissIter))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Layout after compaction (reopened):")
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "* %s: %s\n", r.Engine, r.Layout)
	}
}

// opsCell formats a rate as a whole number with thousands separators.
func opsCell(opsPerSec float64) string {
	s := strconv.FormatInt(int64(opsPerSec+0.5), 10)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// ratio formats v/ref, or "-" when there is no reference.
func ratio(v, ref float64) string {
	if ref <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v/ref)
}
