package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestComparisonGain(t *testing.T) {
	tests := []struct {
		c    comparison
		want string
	}{
		{comparison{"block reads", 0.8, 96, fmtNum, "fewer", countFloor}, "120× fewer"},
		{comparison{"ops/s", 150000, 3000, fmtNum, "faster", 0}, "50× faster"},
		{comparison{"p99", 20000, 740000, fmtNum, "lower", 0}, "37× lower"},
		{comparison{"block reads", 0, 96, fmtNum, "fewer", countFloor}, ">96,000× fewer"},       // 0 is below the floor too
		{comparison{"syscr", 3.8e-6, 1.34, fmtNum, "fewer", countFloor}, ">1,340× fewer"},       // noise: not 352,632×
		{comparison{"rchar", 1.15e-5, 4024, fmtBytesNaN, "fewer", bytesFloor}, ">4,024× fewer"}, // under a byte per Get
		{comparison{"syscalls", 0, 0, fmtNum, "fewer", countFloor}, ""},                         // nothing to compare
		{comparison{"syscalls", 0.00001, 0.0005, fmtNum, "fewer", countFloor}, ""},              // noise
		{comparison{"rchar", 0.01, 0.9, fmtNum, "fewer", bytesFloor}, ""},                       // under a byte per Get
		{comparison{"probed", 99, 99, fmtNum, "fewer", countFloor}, ""},                         // equal
		{comparison{"segments", 99, 98, fmtNum, "", 0}, ""},                                     // setup line
		{comparison{"ops/s", 1000, 2000, fmtNum, "faster", 0}, "0.5× faster"},                   // a loss shows as one
	}
	for _, tt := range tests {
		if got := tt.c.gain(); got != tt.want {
			t.Errorf("%+v: gain %q, want %q", tt.c, got, tt.want)
		}
	}
}

// missResult is a get-miss result with the given per-Get block reads.
func missResult(ops int64, blockReads, segments uint64, opsPerSec float64) result {
	return result{
		Workload: "get-miss", Ops: ops, OpsPerSec: opsPerSec,
		DB:    dbCounters{Gets: uint64(ops), SegmentsProbed: segments * uint64(ops), BlockReads: blockReads, BytesRead: blockReads * 3000},
		Shape: dbShape{Segments: int(segments)},
		IO:    &procIO{SyscR: blockReads},
	}
}

func TestCompareFilters(t *testing.T) {
	with := missResult(1000, 900, 99, 150000)
	with.DB.FilterNegatives, with.DB.FilterFalsePositives = 98100, 900
	without := missResult(100, 9600, 99, 3000)
	rows := map[string]comparison{}
	for _, c := range compareFilters(with, without) {
		rows[c.metric] = c
	}
	check := func(metric string, with, without float64, gain string) {
		t.Helper()
		c, ok := rows[metric]
		if !ok {
			t.Fatalf("no line %q", metric)
		}
		if c.with != with || c.without != without || c.gain() != gain {
			t.Errorf("%s: %v vs %v, gain %q; want %v vs %v, gain %q", metric, c.with, c.without, c.gain(), with, without, gain)
		}
	}
	check("segments probed / Get", 99, 99, "")
	check("skipped by filter / Get", 98.1, 0, "")
	check("block reads / Get", 0.9, 96, "107× fewer")
	check("bytes read / Get", 2700, 288000, "107× fewer")
	check("read syscalls / Get (syscr)", 0.9, 96, "107× fewer")
	check("ops/s", 150000, 3000, "50× faster")

	var buf bytes.Buffer
	comparisonTable(with, without, 10).write(&buf)
	for _, want := range []string{"filters (10 bits/key)", "107× fewer", "50× faster", "2.64 KiB", "281 KiB"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("comparison table lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestReadIOWithoutProcIO(t *testing.T) {
	r := missResult(10, 5, 3, 1)
	r.IO = nil
	var buf bytes.Buffer
	readTable([]result{r}).write(&buf)
	if !strings.Contains(buf.String(), "n/a") {
		t.Errorf("a result without /proc/self/io should show n/a:\n%s", buf.String())
	}
	if c := r.readIO(); c.blockReads != 0.5 || c.probed != 3 {
		t.Errorf("readIO = %+v, want 0.5 block reads and 3 segments per Get", c)
	}
}

// TestLatencyTableSlowOps: a workload of fewer than one operation per
// second (scan-full: one scan of every key) shows its rate, not 0.
func TestLatencyTableSlowOps(t *testing.T) {
	var buf bytes.Buffer
	latencyTable([]result{{Workload: "scan-full", Ops: 1, Seconds: 2.41, OpsPerSec: 1 / 2.41}}).write(&buf)
	if !strings.Contains(buf.String(), "  0.415  ") {
		t.Errorf("latency table shows scan-full's 0.415 ops/s as:\n%s", buf.String())
	}
}
