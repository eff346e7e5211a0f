package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tinyConfig runs every workload and section in a few seconds, also under
// -race.
func tinyConfig(t *testing.T) config {
	cfg := defaultConfig()
	cfg.Keys = 5000
	cfg.Ops = 1000
	cfg.MemtableSize = 64 << 10 // several segments from 5000 keys
	cfg.CacheSize = 256 << 10
	cfg.NegSegments = 10
	cfg.FillReportKeys = 4000
	cfg.FPRKeys, cfg.FPRProbes = 2000, 10000
	cfg.Baseline = "bbolt"
	cfg.Dir = t.TempDir()
	cfg.Quiet = true
	cfg.DropCache = dropCacheSupported
	return cfg
}

func TestRunSmoke(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.JSON = filepath.Join(t.TempDir(), "out.jsonl")
	cfg.Plot = filepath.Join(t.TempDir(), "fpr.svg")
	cfg.Readers = []int{1, 3}
	var stdout, stderr bytes.Buffer
	start := time.Now()
	if err := run(context.Background(), cfg, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("tiny run took %v", time.Since(start))
	out := stdout.String()
	for _, want := range []string{
		"== Workloads", "fill-seq", "fill-random", "get-hit", "get-miss", "mixed (50% hits)", "memory: ",
		"scan-100 (100 keys from a random Seek)", "scan-full", "keys/s", "measured FPR",
		"== Disk reads avoided", "gain with filters", "== Fill report", "W-amp", "== Negative lookups", "negative-lookup", "== Prefix lookups", "searched (asked - skipped)",
		"== Bloom filter FPR against theory", "== Baseline: bbolt", "total time",
		"== Filter memory", "greedy fold", "as built by the fill",
		"== Concurrent reads", "get-hit (3 readers)", "get-miss (1 reader)", "(runtime.NumCPU)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("quiet run wrote to stderr: %q", stderr.String())
	}
	if sections, took := strings.Count(out, "\n== "), strings.Count(out, "(section took "); took != sections {
		t.Errorf("%d sections, %d of them end with the time they took", sections, took)
	}

	records := readJSONLines(t, cfg.JSON)
	seen := map[string]int{}
	for _, r := range records {
		key := r["kind"].(string) + " " + str(r["section"]) + " " + str(r["store"]) + " " + str(r["workload"]) + " " + str(r["variant"])
		seen[key]++
		if r["kind"] == "workload" && r["skipped"] == nil && r["ops"].(float64) <= 0 {
			t.Errorf("record without operations: %v", r)
		}
	}
	for _, want := range []string{
		"workload workloads bloomkv fill-seq ", "workload workloads bloomkv fill-random ",
		"workload workloads bloomkv get-hit ", "workload workloads bloomkv get-miss ",
		"workload workloads bloomkv mixed 50% hits", "workload workloads bloomkv scan-100 100 keys from a random Seek",
		"workload workloads bloomkv scan-full " + fmtInt(int64(cfg.Keys)) + " keys in order",
		"workload disk-reads-avoided bloomkv get-miss filters", "workload disk-reads-avoided bloomkv get-miss no filters",
		"workload negative-lookups bloomkv negative-lookup filters", "workload negative-lookups bloomkv negative-lookup no filters",
		"workload prefix-lookups bloomkv prefix-present prefix filters", "workload prefix-lookups bloomkv prefix-present no prefix filters",
		"workload prefix-lookups bloomkv prefix-absent prefix filters", "workload prefix-lookups bloomkv prefix-absent no prefix filters",
		"workload baseline bbolt fill-random ", "workload baseline bbolt get-hit ", "workload baseline bbolt get-miss ",
	} {
		if seen[want] != 1 {
			t.Errorf("%d JSON records %q, want 1", seen[want], want)
		}
	}
	// Concurrent reads: every reader's share of -ops done, and each Get
	// counted by the store once.
	for _, r := range records {
		if r["section"] != concurrentSection {
			continue
		}
		readers := map[string]float64{"1 reader": 1, "3 readers": 3}[str(r["variant"])]
		want := readers * float64((cfg.Ops+int64(readers)-1)/int64(readers))
		if ops, gets := r["ops"].(float64), r["db"].(map[string]any)["gets"].(float64); readers == 0 || ops != want || gets != want {
			t.Errorf("concurrent-reads record %v %v: %v ops, %v Gets, want %v", r["workload"], r["variant"], ops, gets, want)
		}
	}
	for _, want := range []string{"get-hit 1 reader", "get-miss 1 reader", "get-hit 3 readers", "get-miss 3 readers"} {
		if seen["workload "+concurrentSection+" bloomkv "+want] != 1 {
			t.Errorf("no concurrent-reads record %q", want)
		}
	}
	if n := seen["fpr fpr-sweep   "]; n != 2*(fprMaxBits-fprMinBits+1) {
		t.Errorf("%d FPR records, want %d", n, 2*(fprMaxBits-fprMinBits+1))
	}
	for _, alloc := range []string{"uniform", "greedy", "optimal"} {
		n := 0
		for _, r := range records {
			if r["kind"] == "filter-memory" && r["allocation"] == alloc {
				n++
				if r["predicted_blocks_per_get"].(float64) <= 0 || r["filter_bytes"].(float64) <= 0 {
					t.Errorf("filter-memory record without a prediction or filters: %v", r)
				}
			}
		}
		if n != len(fmShares) {
			t.Errorf("%d filter-memory records for %s, want %d", n, alloc, len(fmShares))
		}
	}
	if fi, err := os.Stat(cfg.Plot); err != nil || fi.Size() == 0 {
		t.Errorf("plot not written: %v", err)
	}
	if entries, _ := os.ReadDir(cfg.Dir); len(entries) != 0 {
		t.Errorf("work directory left behind: %v", entries)
	}
}

func TestRunJSONToStdout(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.Baseline, cfg.DropCache, cfg.BitsPerKey = "", false, 0 // also the no-filter path: comparisons skipped
	cfg.JSON = "-"
	var stdout bytes.Buffer
	if err := run(context.Background(), cfg, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&stdout)
	lines := 0
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", sc.Text(), err)
		}
		lines++
	}
	if lines == 0 {
		t.Error("no JSON on stdout")
	}
}

func TestRunCancelled(t *testing.T) {
	cfg := tinyConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := run(ctx, cfg, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("a cancelled run returned no error")
	}
	if entries, _ := os.ReadDir(cfg.Dir); len(entries) != 0 {
		t.Errorf("cancelled run left %v behind", entries)
	}
}

func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// TestHTMLReport runs the tiny benchmark with -report and a peers file and
// checks that the page holds the text report and every plot, as inline
// SVG, with nothing it links to.
func TestHTMLReport(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.Report = filepath.Join(t.TempDir(), "report")
	peers := filepath.Join(t.TempDir(), "peers.jsonl")
	lines := `{"engine":"bloomkv","fill_ops_per_sec":200000,"get_hit_ops_per_sec":500000,"get_miss_ops_per_sec":9000000}
{"engine":"pebble","fill_ops_per_sec":150000,"get_hit_ops_per_sec":200000,"get_miss_ops_per_sec":1500000}
| a Markdown table line that is not JSON |
`
	if err := os.WriteFile(peers, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.ReportPeers = peers
	cfg.FilterMemoryKeys = 3000 // the long run's path: a fresh store for the curve
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), cfg, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	page, err := os.ReadFile(filepath.Join(cfg.Report, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	want := []string{"Disk reads avoided", "Filters at a glance", "Throughput", "Latency percentiles", "Absent-key block reads against segments", "Filter memory", "Fill report: write amplification", "FPR sweep", "Against other stores", "== Workloads"}
	if !dropCacheSupported {
		want = want[1:]
	}
	for _, w := range want {
		if !strings.Contains(html, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
	if n := strings.Count(html, "<svg"); n < len(want)-1 {
		t.Errorf("%d inline SVGs, want %d", n, len(want)-1)
	}
	// In-page anchors and the font as a data: URL are all it may refer to.
	if strings.Contains(html, "src=") || regexp.MustCompile(`href="[^#]`).MatchString(html) ||
		regexp.MustCompile(`url\([^d]`).MatchString(html) {
		t.Error("the page links to something: it must be self-contained")
	}
}

// TestRunChecksReportFilesFirst: -report-peers is read, and -report's
// directory made, before the run, so that a wrong path is reported at
// once rather than after the minutes the run takes.
func TestRunChecksReportFilesFirst(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string]func(*config){
		"missing peers":       func(c *config) { c.Report, c.ReportPeers = t.TempDir(), filepath.Join(t.TempDir(), "none.jsonl") },
		"report under a file": func(c *config) { c.Report = filepath.Join(notDir, "report") },
	} {
		cfg := tinyConfig(t)
		set(&cfg)
		var stdout bytes.Buffer
		err := run(context.Background(), cfg, &stdout, io.Discard)
		if err == nil || stdout.Len() != 0 {
			t.Errorf("%s: run returned %v after writing %d bytes of report; want an error before the run", name, err, stdout.Len())
		}
	}
}
