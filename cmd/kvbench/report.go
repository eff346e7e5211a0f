package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"
)

// reporter sends the human report to text and, with -json, every record
// to a JSON Lines stream.
type reporter struct {
	text io.Writer
	json *json.Encoder // nil without -json
	html *htmlReport   // nil without -report
	// sectionStart is when the open section began (zero: none open), so
	// that each section ends with its own time: a user sizing a run, or
	// trimming the default, sees what each part costs.
	sectionStart time.Time
}

func (r *reporter) printf(format string, args ...any) { fmt.Fprintf(r.text, format, args...) }

// section ends the open section, if any, and starts a part of the report.
func (r *reporter) section(title string) {
	r.endSection()
	r.printf("\n== %s ==\n", title)
	r.sectionStart = time.Now()
}

// endSection closes the open section, if any, with the time it took.
func (r *reporter) endSection() {
	if r.sectionStart.IsZero() {
		return
	}
	r.printf("(section took %s)\n", time.Since(r.sectionStart).Round(time.Millisecond))
	r.sectionStart = time.Time{}
}

// record writes v as one JSON line, if -json was given.
func (r *reporter) record(v any) error {
	if r.html != nil {
		r.html.collect(v)
	}
	if r.json == nil {
		return nil
	}
	if err := r.json.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// latencyTable shows throughput and latency of any workloads.
func latencyTable(results []result) *table {
	t := &table{header: []string{"workload", "ops", "ops/s", "mean", "p50", "p99", "p99.9", "max"}}
	for _, r := range results {
		l := r.Latency
		t.add(r.label(), fmtInt(r.Ops), fmtNum(r.OpsPerSec), // fmtNum: scan-full runs at under 1 op/s
			fmtLatency(l.Mean), fmtLatency(l.P50), fmtLatency(l.P99), fmtLatency(l.P999), fmtLatency(l.Max))
	}
	return t
}

// label names a result in a table: the workload, and the variant if any.
func (r result) label() string {
	if r.Variant == "" {
		return r.Workload
	}
	return r.Workload + " (" + r.Variant + ")"
}

// writeTable shows what fills cost the store: data rate, flushes, stalls,
// compactions, the segments they left, the time to come to rest after the
// last Put, and bytes written per Put.
func writeTable(results []result) *table {
	t := &table{header: []string{"workload", "MB/s", "flushes", "stalls", "compactions",
		"segments", "on disk", "settle", "WAL B/put", "wchar/put", "write_bytes/put"}}
	for _, r := range results {
		mbps := float64(r.Ops) * float64(r.BytesPerOp) / r.Seconds / 1e6
		wchar, wbytes := "n/a", "n/a"
		if r.IO != nil {
			wchar, wbytes = fmtNum(perOp(r.IO.WChar, r.Ops)), fmtNum(perOp(r.IO.WriteBytes, r.Ops))
		}
		t.add(r.Workload, fmtNum(mbps), fmtInt(int64(r.DB.Flushes)), fmtInt(int64(r.DB.WriteStalls)),
			fmtInt(int64(r.DB.Compactions)), fmtInt(int64(r.Shape.Segments)), fmtBytes(float64(r.Shape.SegmentBytes)),
			fmtLatency(uint64(r.FinishSeconds*1e9)), fmtNum(perOp(r.DB.WALBytes, r.Ops)), wchar, wbytes)
	}
	return t
}

// readIO is the per-Get cost of a read result, from the DB's counters and
// /proc/self/io (fields NaN where that file is missing).
type readIO struct {
	probed, skipped, falsePos, blockReads, cacheHits, bytesRead float64
	syscr, rchar, readBytes, majflt                             float64
}

func (r result) readIO() readIO {
	c := readIO{
		probed:     perOp(r.DB.SegmentsProbed, r.Ops),
		skipped:    perOp(r.DB.FilterNegatives, r.Ops),
		falsePos:   perOp(r.DB.FilterFalsePositives, r.Ops),
		blockReads: perOp(r.DB.BlockReads, r.Ops),
		cacheHits:  perOp(r.DB.BlockCacheHits, r.Ops),
		bytesRead:  perOp(r.DB.BytesRead, r.Ops),
		syscr:      math.NaN(), rchar: math.NaN(), readBytes: math.NaN(), majflt: math.NaN(),
	}
	if r.IO != nil {
		c.syscr, c.rchar = perOp(r.IO.SyscR, r.Ops), perOp(r.IO.RChar, r.Ops)
		c.readBytes, c.majflt = perOp(r.IO.ReadBytes, r.Ops), perOp(r.IO.MajFlt, r.Ops)
	}
	return c
}

// readTable shows per-Get costs: segments whose filter was asked, those it
// ruled out, its false positives, data blocks from the files and from the
// cache, bytes read from the files, and what the process did: read
// syscalls and their bytes, bytes from the device, major page faults.
func readTable(results []result) *table {
	t := &table{
		groups: []group{{"", 1}, {"segments per Get", 3}, {"blocks per Get", 2}, {"", 1}, {"process per Get", 4}},
		header: []string{"workload", "probed", "skipped", "false+", "read", "cached", "bytes/Get", "syscr", "rchar", "read_bytes", "majflt"},
	}
	for _, r := range results {
		c := r.readIO()
		t.add(r.label(), fmtPerOp(c.probed), fmtPerOp(c.skipped), fmtPerOp(c.falsePos), fmtPerOp(c.blockReads),
			fmtPerOp(c.cacheHits), fmtBytes(c.bytesRead), fmtPerOp(c.syscr), fmtBytesNaN(c.rchar), fmtBytesNaN(c.readBytes), fmtPerOp(c.majflt))
	}
	return t
}

func fmtBytesNaN(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmtBytes(v)
}

// comparison is one line of a filters-on/filters-off table.
type comparison struct {
	metric        string
	with, without float64
	format        func(float64) string
	// word says how the filtered store is better: "faster" compares
	// with/without (throughput), "fewer" and "lower" compare without/with
	// (costs); "" means the line is setup, not a result, and has no gain.
	word string
	// floor is the value below which a line is noise, not a cost: a read
	// syscall per thousand Gets is the process, not the lookup.
	floor float64
}

// Noise floors of the comparison lines: per-Get counts and bytes.
const (
	countFloor = 0.001
	bytesFloor = 1
)

// gain says how much better the filtered store does on this line, or ""
// when there is nothing to say (setup lines, equal values, noise). A cost
// below the floor is noise, not a measurement: dividing by it would print
// a ratio of noise (a few stray syscalls over a million Gets made
// "350,160,681× fewer"), so the gain is then given as a bound, cost over
// floor.
func (c comparison) gain() string {
	if c.word == "" || c.with == c.without || max(c.with, c.without) < c.floor {
		return ""
	}
	r := ratio(c.without, c.with)
	if c.word == "faster" {
		r = ratio(c.with, c.without)
	} else if c.with < c.floor {
		return ">" + fmtRatio(c.without/c.floor) + " " + c.word
	}
	if math.IsNaN(r) {
		return ""
	}
	return fmtRatio(r) + " " + c.word
}

// compareFilters lines up a result with filters against one without.
func compareFilters(with, without result) []comparison {
	a, b := with.readIO(), without.readIO()
	count := func(metric string, x, y float64, word string) comparison {
		return comparison{metric, x, y, fmtPerOp, word, countFloor}
	}
	bytes := func(metric string, x, y float64) comparison {
		return comparison{metric, x, y, fmtBytesNaN, "fewer", bytesFloor}
	}
	lat := func(metric string, x, y uint64) comparison {
		return comparison{metric, float64(x), float64(y), func(v float64) string { return fmtLatency(uint64(v)) }, "lower", 0}
	}
	return []comparison{
		count("segments", float64(with.Shape.Segments), float64(without.Shape.Segments), ""),
		{"filter memory", float64(with.Shape.FilterBytes), float64(without.Shape.FilterBytes), fmtBytes, "", 0},
		count("segments probed / Get", a.probed, b.probed, ""),
		count("skipped by filter / Get", a.skipped, b.skipped, ""),
		count("filter false positives / Get", a.falsePos, b.falsePos, ""),
		count("block reads / Get", a.blockReads, b.blockReads, "fewer"),
		count("block cache hits / Get", a.cacheHits, b.cacheHits, "fewer"),
		bytes("bytes read / Get", a.bytesRead, b.bytesRead),
		count("read syscalls / Get (syscr)", a.syscr, b.syscr, "fewer"),
		bytes("bytes via syscalls / Get (rchar)", a.rchar, b.rchar),
		bytes("device reads / Get (read_bytes)", a.readBytes, b.readBytes),
		count("major page faults / Get", a.majflt, b.majflt, "fewer"),
		{"ops/s", with.OpsPerSec, without.OpsPerSec, fmtNum, "faster", 0},
		lat("p50", with.Latency.P50, without.Latency.P50),
		lat("p99", with.Latency.P99, without.Latency.P99),
		lat("p99.9", with.Latency.P999, without.Latency.P999),
	}
}

// comparisonTable renders compareFilters.
func comparisonTable(with, without result, bitsPerKey float64) *table {
	t := &table{header: []string{with.Workload, fmt.Sprintf("filters (%s bits/key)", fmtNum(bitsPerKey)), "no filters", "gain with filters"}}
	for _, c := range compareFilters(with, without) {
		t.add(c.metric, c.format(c.with), c.format(c.without), c.gain())
	}
	return t
}
