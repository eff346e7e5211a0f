package main

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"

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
	writeMemTable(w, results)
	fmt.Fprintln(w)
	writeScanTable(w, results, ref)
	fmt.Fprintln(w)
	if len(results) > 0 && len(results[0].Readers) > 0 {
		writeReadersTable(w, results)
		fmt.Fprintln(w)
	}
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

// writeMemTable writes each engine's process memory (omitted where none
// was measured).
func writeMemTable(w io.Writer, results []engines.Result) {
	fmt.Fprintln(w, "| engine | peak RSS MiB | anon MiB | anon max MiB | file-backed MiB | harness anon MiB |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.Engine,
			mib(r.PeakRSS), mib(r.RSSAnon), mib(r.RSSAnonMax), mib(r.RSSFile), mib(r.HarnessAnon))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "peak RSS = VmHWM of the engine's process; anon = RssAnon with the store open after the reads; "+
		"anon max = the largest RssAnon sampled after fill, Compact and the reads; file-backed = RssFile then "+
		"(mapped files); harness anon = RssAnon before the store was opened (keys, values, order), part of every number.")
}

// writeReadersTable writes the concurrent get phases: per reader count,
// get-hit and get-miss ops/s summed over the goroutines (for Pebble the
// faster of its two miss paths, as in the point table), and the most
// readers' rate over the fewest's.
func writeReadersTable(w io.Writer, results []engines.Result) {
	var ns []string
	for _, c := range results[0].Readers {
		ns = append(ns, strconv.Itoa(c.Readers))
	}
	first, last := ns[0], ns[len(ns)-1]
	fmt.Fprintf(w, "Concurrent reads on %s (runtime.NumCPU; GOMAXPROCS %d): each phase's %d lookups shared out among the readers "+
		"(goroutine g takes lookups g, g+n, g+2n, ... of the single-reader sequence), ops/s summed over all of them. "+
		"With more readers than CPUs the goroutines take turns on the cores: such cells measure contention, not scaling.\n\n",
		cpus(runtime.NumCPU()), runtime.GOMAXPROCS(0), results[0].Ops)
	head, rule := "| engine |", "|---|"
	for _, n := range ns {
		head += " get-hit " + n + " |"
		rule += "--:|"
	}
	head += " " + last + "/" + first + " |"
	rule += "--:|"
	for _, n := range ns {
		head += " get-miss " + n + " |"
		rule += "--:|"
	}
	head += " " + last + "/" + first + " |"
	rule += "--:|"
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	var iterNotes []string
	for _, r := range results {
		if len(r.Readers) != len(ns) {
			continue // a child run with other reader counts: cannot share the columns
		}
		row := "| " + r.Engine + " |"
		for _, c := range r.Readers {
			row += " " + opsCell(c.GetHit) + " |"
		}
		row += " " + ratio(r.Readers[len(ns)-1].GetHit, r.Readers[0].GetHit) + " |"
		var misses []float64
		for _, c := range r.Readers {
			miss, path := c.BestGetMiss()
			cell := opsCell(miss)
			if c.GetMissIter > 0 {
				cell += " (" + path + ")"
				iterNotes = append(iterNotes, fmt.Sprintf("%s %d readers: Get %s, iterator %s", r.Engine, c.Readers, opsCell(c.GetMiss), opsCell(c.GetMissIter)))
			}
			row += " " + cell + " |"
			misses = append(misses, miss)
		}
		row += " " + ratio(misses[len(misses)-1], misses[0]) + " |"
		fmt.Fprintln(w, row)
	}
	if len(iterNotes) > 0 {
		fmt.Fprintf(w, "\nget-miss through one UseL6Filters iterator per goroutine where the store has that path (%s); the table shows the faster.\n",
			strings.Join(iterNotes, "; "))
	}
}

// cpus says how many CPUs, in words.
func cpus(n int) string {
	if n == 1 {
		return "1 CPU"
	}
	return strconv.Itoa(n) + " CPUs"
}

// mib formats bytes as MiB, "-" for 0 (not measured).
func mib(b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(b)/(1<<20))
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

// writeSyncTable writes the sync-write scaling results: ops/s per writer
// count, the scaling factor, Put latencies and device bytes per Put.
func writeSyncTable(w io.Writer, results []engines.SyncResult) {
	if len(results) == 0 {
		return
	}
	r0 := results[0]
	fmt.Fprintf(w, "Durable Puts (fsync per acknowledged write), 16-byte random keys, %d-byte values, "+
		"at most %d Puts or %gs per cell, a fresh store per cell, seed %d; %s (runtime.NumCPU), GOMAXPROCS %d: "+
		"writers beyond the CPU count also queue for the cores\n\n", r0.ValueSize, r0.MaxOps, r0.MaxSecs, r0.Seed, cpus(r0.CPUs), r0.GOMAXPROCS)
	var ws []int
	for _, c := range r0.Cells {
		ws = append(ws, c.Writers)
	}
	head, rule := "| engine | version |", "|---|---|"
	for _, n := range ws {
		head += fmt.Sprintf(" %d writer ops/s |", n)
		rule += "--:|"
	}
	head += fmt.Sprintf(" %d/%d |", ws[len(ws)-1], ws[0])
	rule += "--:|"
	head += " p50 µs | p99 µs | device KiB written/Put | Puts/WAL fsync |"
	rule += "--:|--:|--:|--:|"
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, r := range results {
		row := fmt.Sprintf("| %s | %s |", r.Engine, r.Version)
		var p50, p99, wb, pf []string
		for _, c := range r.Cells {
			row += " " + opsCell(c.OpsPerSec) + " |"
			p50 = append(p50, fmt.Sprintf("%.0f", c.P50Micros))
			p99 = append(p99, fmt.Sprintf("%.0f", c.P99Micros))
			wb = append(wb, fmt.Sprintf("%.1f", c.WriteBytesPerPut/1024))
			if c.PutsPerFsync > 0 {
				pf = append(pf, fmt.Sprintf("%.1f", c.PutsPerFsync))
			}
		}
		puts := "–" // not counted for this store
		if len(pf) == len(r.Cells) {
			puts = join(pf)
		}
		row += fmt.Sprintf(" %.2f | %s | %s | %s | %s |", r.Scaling, join(p50), join(p99), join(wb), puts)
		fmt.Fprintln(w, row)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "p50, p99, device KiB written per Put and Puts per WAL fsync (counted for bloomkv and Pebble) are given per cell, %s writers.\n", join(intStrings(ws)))
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "* %s: %s\n", r.Engine, r.Settings)
	}
}

func join(s []string) string { return strings.Join(s, " / ") }

func intStrings(ns []int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = strconv.Itoa(n)
	}
	return out
}

// writeColdTable writes the cold-read results: per variant and phase,
// ops/s, device bytes and major faults per Get, and what the Gets left in
// the page cache.
func writeColdTable(w io.Writer, results []engines.ColdResult) {
	if len(results) == 0 {
		return
	}
	r0 := results[0]
	fmt.Fprintf(w, "Cold reads: N = %d keys (16 bytes), %d-byte values, compacted; per phase the store is opened, "+
		"%d untimed misses, every file evicted from the page cache with the store open, then %d Gets timed; seed %d\n\n",
		r0.N, r0.ValueSize, r0.Warm, r0.Ops, r0.Seed)
	var notEvicted []string
	for _, hit := range []bool{true, false} {
		name := "get-miss"
		if hit {
			name = "get-hit"
		}
		f := r0.Hit.First
		fmt.Fprintf(w, "%s | all %d Gets: ops/s | KiB read/Get | maj faults/Get | first %d Gets: ops/s | KiB read/Get | maj faults/Get | cached MiB after |\n", name, r0.Ops, f)
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|")
		for _, r := range results {
			p := r.Miss
			if hit {
				p = r.Hit
			}
			fmt.Fprintf(w, "| %s | %s | %.1f | %.4f | %s | %.1f | %.4f | %.1f |\n", r.Engine,
				opsCell(p.OpsPerSec), p.ReadBytesPerGet/1024, p.MajFaultsPerGet,
				opsCell(p.FirstOpsPerSec), p.FirstReadBytesPerGet/1024, p.FirstMajFaultsPerGet,
				float64(p.CachedAfter)/(1<<20))
			if hit && r.Hit.ResidentAfterEvict+r.Miss.ResidentAfterEvict > 0 {
				notEvicted = append(notEvicted, fmt.Sprintf("%s (%d, %d pages)", r.Engine, r.Hit.ResidentAfterEvict, r.Miss.ResidentAfterEvict))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "KiB read/Get = /proc/self/io read_bytes delta over the timed Gets ÷ Gets (read-ahead included); "+
		"maj faults/Get = getrusage ru_majflt delta ÷ Gets; cached MiB after = the store's pages in the page cache after the Gets (mincore).")
	if len(notEvicted) > 0 {
		fmt.Fprintf(w, "Pages still resident right after eviction (hit, miss): %s.\n", strings.Join(notEvicted, ", "))
	} else {
		fmt.Fprintln(w, "Eviction checked with mincore: 0 pages of any store file resident before every timed loop.")
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "* %s: %s; %s; disk %.1f MiB; device read_ahead_kb %d\n", r.Engine, r.Settings, r.Layout,
			float64(r.DiskBytes)/(1<<20), r.ReadAheadKB)
	}
}

// writeFillLatencyTable writes the fill-latency results: Put latency
// percentiles, the Puts slower than the threshold (bloomkv's flush time),
// each store's own flush time where it has a flush, and bloomkv's stall
// counters; then bloomkv's slow Puts one by one.
func writeFillLatencyTable(w io.Writer, results []engines.FillLatencyResult) {
	if len(results) == 0 {
		return
	}
	r0 := results[0]
	fmt.Fprintf(w, "Put latency during a fill: N = %d random 16-byte keys, %d-byte values, one Put per call, no fsync, "+
		"a fresh store with default options (as in -all), seed %d; %s (runtime.NumCPU), GOMAXPROCS %d\n\n",
		r0.N, r0.ValueSize, r0.Seed, cpus(runtime.NumCPU()), runtime.GOMAXPROCS(0))
	thr := fmt.Sprintf("%.1f ms", r0.ThresholdMicros/1e3)
	fmt.Fprintf(w, "| engine | version | Puts/s | p50 µs | p99 µs | p99.9 µs | max ms | Puts > %s | flush ms | longest stall ms | stalls / flushes / compactions |\n", thr)
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range results {
		flush, counters, longest := "-", "-", "-"
		if r.LongestStallMicros > 0 {
			longest = fmt.Sprintf("%.1f", r.LongestStallMicros/1e3)
		}
		if r.FlushMicros > 0 {
			flush = fmt.Sprintf("%.1f (%d entries)", r.FlushMicros/1e3, r.FlushEntries)
		}
		if r.Stalls+r.Flushes+r.Compactions > 0 {
			counters = fmt.Sprintf("%d / %d / %d", r.Stalls, r.Flushes, r.Compactions)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %d | %s | %s | %s |\n", r.Engine, r.Version, opsCell(r.OpsPerSec),
			float64(r.P50)/1e3, float64(r.P99)/1e3, float64(r.P999)/1e3, float64(r.Max)/1e6, r.SlowCount, flush, longest, counters)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Puts > %s: Puts slower than the threshold (bloomkv's flush time unless -fill-threshold was given), counted exactly. "+
		"flush ms: the median of 5 timed Flush calls, each of a memtable filled to about 85%% of the default 4 MiB (entries of key + value + 80 bytes of skiplist node; fewer if the store flushed by itself first), on a fresh store (stores with a public flush). "+
		"Percentiles from a log-linear histogram of every Put (within 0.8%%, rounded up); max exact. "+
		"longest stall: bloomkv's Stats.LongestWriteStall, the longest time one Put waited for a flush or a compaction (a Put's latency beyond it waited for a CPU, the device or the runtime). "+
		"stalls / flushes / compactions: bloomkv's Stats counters over the fill.\n", thr)
	for _, r := range results {
		if len(r.SlowPuts) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s's Puts slower than %.1f ms (%d, the first %d listed): ", r.Engine, r.ThresholdMicros/1e3, r.SlowCount, len(r.SlowPuts))
		var parts []string
		for _, p := range r.SlowPuts {
			part := fmt.Sprintf("#%d at %.0f ms: %.1f ms", p.Index, p.AtMs, p.Micros/1e3)
			if p.Stalls+p.Flushes+p.Compactions > 0 {
				part += fmt.Sprintf(" (since the previous: %d stalls, %.1f ms stalled, %d flushes, %d compactions)", p.Stalls, p.StallMicros/1e3, p.Flushes, p.Compactions)
			}
			if p.SpanMicros > 0 {
				part += fmt.Sprintf(" [the writer's thread waited for a CPU %.1f ms of the last %.1f ms]", p.RunqueueWaitMicros/1e3, p.SpanMicros/1e3)
			}
			parts = append(parts, part)
		}
		fmt.Fprintln(w, strings.Join(parts, "; "))
	}
}
