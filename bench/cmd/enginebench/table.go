package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/bloomkv/bloomkv/bench/engines"
)

// writeTable writes results as two Markdown tables, point operations and
// scans, of rates with each one's ratio to bloomkv's, followed by notes on
// the IterGetter paths and the stores' layouts. Without a bloomkv result
// the ratios are "-".
func writeTable(w io.Writer, results []engines.Result) {
	var ref engines.Result // zero rates without bloomkv: every ratio "-"
	for _, r := range results {
		if r.Engine == "bloomkv" {
			ref = r
		}
	}
	if len(results) > 0 {
		r := results[0]
		fmt.Fprintf(w, "N = %d keys (16 bytes), %d-byte values, %d lookups per get phase, %d short scans, seed %d\n\n",
			r.N, r.ValueSize, r.Ops, max(r.Ops/25, 1), r.Seed)
	}
	writePointTable(w, results, ref)
	fmt.Fprintln(w)
	writeScanTable(w, results, ref)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "× = engine rate ÷ bloomkv rate (above 1: faster than bloomkv).")
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

// writePointTable writes the fill, get and compaction columns.
func writePointTable(w io.Writer, results []engines.Result, ref engines.Result) {
	fmt.Fprintln(w, "| engine | version | fill ops/s | × | get-hit ops/s | × | get-miss ops/s | × | compact s | disk MiB |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	refMiss, _ := ref.BestGetMiss()
	for _, r := range results {
		miss, path := r.BestGetMiss()
		missCell := opsCell(miss)
		if r.GetMissIter > 0 {
			missCell += " (" + path + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f |\n",
			r.Engine, r.Version,
			opsCell(r.Fill), ratio(r.Fill, ref.Fill),
			opsCell(r.GetHit), ratio(r.GetHit, ref.GetHit),
			missCell, ratio(miss, refMiss),
			r.CompactSeconds, float64(r.DiskBytes)/(1<<20))
	}
}

// writeScanTable writes the scan columns and the time the scan phase took.
func writeScanTable(w io.Writer, results []engines.Result, ref engines.Result) {
	fmt.Fprintln(w, "| engine | scan-full keys/s | MB/s | × | scan-100 scans/s | keys/s | × | scan phase s |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %s | %.1f |\n",
			r.Engine,
			opsCell(r.ScanFull), r.ScanFullMB, ratio(r.ScanFull, ref.ScanFull),
			opsCell(r.Scan100), opsCell(r.Scan100Keys), ratio(r.Scan100, ref.Scan100),
			r.ScanSeconds)
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
