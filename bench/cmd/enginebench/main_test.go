package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/bench/engines"
)

// asMainEnv makes the test binary behave as enginebench, so that runAll's
// re-executions of os.Executable() work under go test.
const asMainEnv = "ENGINEBENCH_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunAll runs -all end to end with a small N: one child process per
// engine, then the table, with one row per engine and bloomkv's ratios 1.
func TestRunAll(t *testing.T) {
	t.Setenv(asMainEnv, "1")
	cfg := engines.Config{N: 1000, ValueSize: 50, Ops: 1000, Seed: 5, Dir: t.TempDir(), Readers: []int{1, 4}}
	var out, progress bytes.Buffer
	if err := runAll(&out, &progress, cfg); err != nil {
		t.Fatalf("runAll: %v\nprogress:\n%s", err, progress.String())
	}
	table := out.String()
	for _, spec := range engines.Specs() {
		if !strings.Contains(table, "| "+spec.Name+" | ") {
			t.Errorf("no row for %s in\n%s", spec.Name, table)
		}
	}
	if !strings.Contains(table, "| bloomkv | local | ") || strings.Count(table, "| 1.00 |") < 3 {
		t.Errorf("bloomkv row should be local with ratios 1.00:\n%s", table)
	}
	if !strings.Contains(table, "| engine | get-hit 1 | get-hit 4 | 4/1 | get-miss 1 | get-miss 4 | 4/1 |") ||
		strings.Count(table, " (iter) |")+strings.Count(table, " (get) |") < 3 || !strings.Contains(table, "CPUs (runtime.NumCPU") && !strings.Contains(table, "1 CPU (") {
		t.Errorf("no concurrent-reads table with the CPU count and Pebble's iterator misses:\n%s", table)
	}
	if !strings.Contains(table, "N = 1000 keys") {
		t.Errorf("table does not state the workload:\n%s", table)
	}
	if entries, _ := os.ReadDir(cfg.Dir); len(entries) != 0 {
		t.Errorf("%d store directories left behind", len(entries))
	}
}

func TestWriteTable(t *testing.T) {
	results := []engines.Result{
		{Engine: "bloomkv", Version: "local", Fill: 1000, GetHit: 2000, GetMiss: 4000, ScanFull: 8000, ScanFullMB: 0.9,
			Scan100: 100, Scan100Keys: 10000, ScanSeconds: 1.25, DiskBytes: 3 << 20, Layout: "1 segment"},
		{Engine: "pebble", Version: "v2", Fill: 500, GetHit: 3000, GetMiss: 1000, GetMissIter: 2000, ScanFull: 6000, ScanFullMB: 0.7,
			Scan100: 200, Scan100Keys: 20000, ScanSeconds: 2, Layout: "L6",
			PeakRSS: 300 << 20, RSSAnon: 200 << 20, RSSAnonMax: 250 << 20, RSSFile: 10 << 20, HarnessAnon: 90 << 20},
	}
	var out bytes.Buffer
	writeTable(&out, results)
	for _, want := range []string{
		"| bloomkv | local | 1,000 | 1.00 | 2,000 | 1.00 | 4,000 | 1.00 | 0.0 | 3.0 |",
		"| pebble | v2 | 500 | 0.50 | 3,000 | 1.50 | 2,000 (iter) | 0.50 | 0.0 | 0.0 |",
		"| bloomkv | 8,000 | 1 | 1.00 | 100 | 10,000 | 1.00 | 1.2 |",
		"| pebble | 6,000 | 1 | 0.75 | 200 | 20,000 | 2.00 | 2.0 |",
		"pebble get-miss: DB.Get 1,000 ops/s, iterator (UseL6Filters + SeekPrefixGE) 2,000 ops/s",
		"* pebble: L6",
		"| bloomkv | - | - | - | - | - |", // no memory measured
		"| pebble | 300 | 200 | 250 | 10 | 90 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	writeTable(&out, results[1:]) // no bloomkv: no ratios
	if !strings.Contains(out.String(), "| pebble | v2 | 500 | - | 3,000 | - |") ||
		!strings.Contains(out.String(), "| pebble | 6,000 | 1 | - | 200 | 20,000 | - |") {
		t.Errorf("without bloomkv the ratios should be -:\n%s", out.String())
	}
}

func TestOpsCell(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{{0, "0"}, {999.4, "999"}, {999.6, "1,000"}, {123456, "123,456"}, {1234567.8, "1,234,568"}} {
		if got := opsCell(tt.in); got != tt.want {
			t.Errorf("opsCell(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRunAllSync runs -all -sync-scaling end to end with a few Puts per
// cell: one child per store, one table row each.
func TestRunAllSync(t *testing.T) {
	t.Setenv(asMainEnv, "1")
	cfg := engines.SyncConfig{Writers: []int{1, 2}, Ops: 20, Duration: 10 * time.Second, ValueSize: 50, Seed: 5, Dir: t.TempDir()}
	var out, progress bytes.Buffer
	if err := runAllSync(&out, &progress, cfg); err != nil {
		t.Fatalf("runAllSync: %v\nprogress:\n%s", err, progress.String())
	}
	table := out.String()
	for _, spec := range engines.SyncSpecs() {
		if !strings.Contains(table, "| "+spec.Name+" | ") {
			t.Errorf("no row for %s in\n%s", spec.Name, table)
		}
	}
	if !strings.Contains(table, cpus(runtime.NumCPU())+" (runtime.NumCPU)") {
		t.Errorf("the table does not give the CPU count:\n%s", table)
	}
	if !strings.Contains(table, "| 1 writer ops/s | 2 writer ops/s | 2/1 |") {
		t.Errorf("header:\n%s", table)
	}
	if entries, _ := os.ReadDir(cfg.Dir); len(entries) != 0 {
		t.Errorf("%d store directories left behind", len(entries))
	}
}

// TestRunAllFillLatency runs -all -fill-latency end to end with a small
// fill: one row per store, and every store's slow Puts counted against
// bloomkv's measured flush time.
func TestRunAllFillLatency(t *testing.T) {
	t.Setenv(asMainEnv, "1")
	cfg := engines.FillLatencyConfig{N: 2000, ValueSize: 50, Seed: 5, Dir: t.TempDir()}
	var out, progress bytes.Buffer
	if err := runAllFillLatency(&out, &progress, cfg); err != nil {
		t.Fatalf("runAllFillLatency: %v\nprogress:\n%s", err, progress.String())
	}
	table := out.String()
	for _, spec := range engines.Specs() {
		if !strings.Contains(table, "| "+spec.Name+" | ") {
			t.Errorf("no row for %s in\n%s", spec.Name, table)
		}
	}
	var flushUs []string
	for line := range strings.Lines(progress.String()) {
		if i := strings.Index(line, `"threshold_us":`); i >= 0 {
			v, _, _ := strings.Cut(line[i+len(`"threshold_us":`):], ",")
			flushUs = append(flushUs, v)
		}
	}
	if len(flushUs) != len(engines.Specs()) || len(slices.Compact(slices.Clone(flushUs))) != 1 {
		t.Errorf("every store should share bloomkv's threshold, got %q\n%s", flushUs, progress.String())
	}
	if !strings.Contains(table, "| p50 µs | p99 µs | p99.9 µs | max ms | Puts > ") || !strings.Contains(table, "CPUs (runtime.NumCPU)") && !strings.Contains(table, "1 CPU (") {
		t.Errorf("header:\n%s", table)
	}
	if entries, _ := os.ReadDir(cfg.Dir); len(entries) != 0 {
		t.Errorf("%d store directories left behind", len(entries))
	}
}

// TestRunAllCold runs -all -cold end to end with a small store: one row
// per read variant in each phase's table.
func TestRunAllCold(t *testing.T) {
	if err := engines.CheckDeviceCounters(); err != nil {
		t.Skip(err)
	}
	t.Setenv(asMainEnv, "1")
	cfg := engines.ColdConfig{N: 2000, ValueSize: 50, Ops: 200, Warm: 20, Seed: 5, Dir: t.TempDir()}
	var out, progress bytes.Buffer
	if err := runAllCold(&out, &progress, cfg); err != nil {
		t.Fatalf("runAllCold: %v\nprogress:\n%s", err, progress.String())
	}
	table := out.String()
	for _, spec := range engines.ColdSpecs() {
		for _, v := range spec.Variants {
			if strings.Count(table, "| "+v.Name+" | ") != 2 {
				t.Errorf("want a hit and a miss row for %s in\n%s", v.Name, table)
			}
		}
	}
	if err := evictionConfirmed(table); err != nil {
		t.Errorf("%v:\n%s", err, table)
	}
}

// maxLeftoverPages is how many pages of one store's files may still be
// resident right after eviction: eviction is advice, and a store may write
// a page (a log, an OPTIONS file) between the advice and the check. A
// failed eviction leaves every page of the files, dozens here.
const maxLeftoverPages = 4

// evictionConfirmed reads the table's eviction line: nil if no page was
// resident, or if every store left at most maxLeftoverPages per phase.
func evictionConfirmed(table string) error {
	if strings.Contains(table, "0 pages of any store file resident") {
		return nil
	}
	const prefix = "Pages still resident right after eviction (hit, miss): "
	i := strings.Index(table, prefix)
	if i < 0 {
		return errors.New("eviction not confirmed: no eviction line")
	}
	line, _, _ := strings.Cut(table[i+len(prefix):], "\n")
	for _, entry := range strings.Split(strings.TrimSuffix(line, "."), "), ") {
		var hit, miss int
		_, counts, _ := strings.Cut(entry, " (")
		if _, err := fmt.Sscanf(counts, "%d, %d pages", &hit, &miss); err != nil {
			return fmt.Errorf("eviction line entry %q: %v", entry, err)
		}
		if hit > maxLeftoverPages || miss > maxLeftoverPages {
			return fmt.Errorf("eviction not confirmed: %s", entry)
		}
	}
	return nil
}

func TestEvictionConfirmed(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"Eviction checked with mincore: 0 pages of any store file resident before every timed loop.", true},
		{"Pages still resident right after eviction (hit, miss): pebble-l6filters (0, 1 pages).", true},
		{"Pages still resident right after eviction (hit, miss): a (2, 0 pages), b (1, 4 pages).", true},
		{"Pages still resident right after eviction (hit, miss): a (0, 1 pages), bbolt (41, 40 pages).", false},
		{"no line at all", false},
	} {
		if err := evictionConfirmed(tc.line + "\n"); (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok %v", tc.line, err, tc.ok)
		}
	}
}
