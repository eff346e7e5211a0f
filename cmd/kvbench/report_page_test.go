package main

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

var reportOut = flag.String("report-out", "", "TestReportPage: also write the page to this directory, to look at")

// loadRecords fills an htmlReport from a kvbench -json file, as a run does.
func loadRecords(t *testing.T, file string) *htmlReport {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := &htmlReport{keys: 100_000}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var kind struct{ Kind string }
		if err := json.Unmarshal(sc.Bytes(), &kind); err != nil {
			t.Fatal(err)
		}
		var v any
		switch kind.Kind {
		case "workload":
			v = new(result)
		case "fill-report":
			v = new(fillPoint)
		case "fpr":
			v = new(fprRow)
		case "filter-memory":
			v = new(fmPoint)
		default:
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), v); err != nil {
			t.Fatal(err)
		}
		if fp, ok := v.(*fillPoint); ok {
			h.collect(*fp)
		} else {
			h.collect(v)
		}
	}
	return h
}

// TestReportPage renders the page of a small run (testdata/report.jsonl,
// from kvbench -keys 100000 -baseline bbolt -json) with peers
// (testdata/peers.jsonl: enginebench throughput and sync-scaling lines and
// a table line) and checks what a reader relies on: the summary chart
// first, every chart present, each SVG well-formed XML, text only in the
// embedded font or a generic family, log axes labelled by decade.
func TestReportPage(t *testing.T) {
	h := loadRecords(t, "testdata/report.jsonl")
	dir := t.TempDir()
	if *reportOut != "" {
		dir = *reportOut
	}
	path, err := h.write(dir, "testdata/peers.jsonl", "kvbench: a header line\ndata set: 100,000 keys\n\n== Workloads ==\nrest of the text\n")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	ids := regexp.MustCompile(`<figure id="([a-z-]+)">`).FindAllStringSubmatch(page, -1)
	var got []string
	for _, m := range ids {
		got = append(got, m[1])
	}
	want := []string{"summary", "throughput", "latency", "disk-reads", "segments", "filter-memory", "write-amp", "fpr", "peers", "scaling"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("figures %v, want %v", got, want)
	}
	if i, j := strings.Index(page, `<figure id="summary">`), strings.Index(page, "== Workloads =="); j < i {
		t.Errorf("the text report comes before the summary chart")
	}
	svgs := regexp.MustCompile(`(?s)<svg.*?</svg>`).FindAllString(page, -1)
	if len(svgs) != len(want) {
		t.Fatalf("%d SVGs for %d figures", len(svgs), len(want))
	}
	// Log axes are labelled at each decade; the headline values are
	// written by their points.
	labels := map[string][]string{
		"summary":    {"0.001", "0.01", "0.1", "1", "10", "100", "1k", "10k", "100k", "1M", "1µs", "10µs", "100µs", "1ms", "10ms", "100ms", "0.0053", "0.536", "182,557", "4.48µs"},
		"throughput": {"1k", "10k", "100k", "1M", "10M", "fill-seq", "scan-full (keys)", "1,031,488"},
		"latency":    {"100ns", "1µs", "10µs", "1ms", "1s", "get-hit (bbolt)"},
		"disk-reads": {"0.001", "0.01", "0.1", "1", "0.0166", "0.536", "0"},
		"peers":      {"10k", "100k", "1M", "10M", "100M", "scan-100"},
		"scaling":    {"1", "4", "16", "10", "100", "1k", "10k"},
	}
	for i, svg := range svgs {
		texts := checkSVG(t, want[i], svg)
		for _, l := range labels[want[i]] {
			if !slices.Contains(texts, l) {
				t.Errorf("%s: no text %q in %q", want[i], l, texts)
			}
		}
	}
	// The one embedded font is declared once, for the whole page.
	if n := strings.Count(page, "@font-face"); n != 1 {
		t.Errorf("%d @font-face rules, want 1", n)
	}
	if !strings.Contains(page, `font-family:"Go"`) && !strings.Contains(page, "font-family:Go;") {
		t.Errorf("the @font-face does not declare the Go font")
	}
}

// checkSVG checks one chart: well-formed XML, every font family the Go
// font (embedded) with a generic fallback, text present. It returns the
// texts.
func checkSVG(t *testing.T, name, svg string) []string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var texts []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: SVG is not well-formed XML: %v", name, err)
		}
		if c, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(c)) != "" {
			texts = append(texts, strings.TrimSpace(string(c)))
		}
	}
	for _, m := range regexp.MustCompile(`font-family:([^;"]*)`).FindAllStringSubmatch(svg, -1) {
		if m[1] != "Go,sans-serif" {
			t.Errorf("%s: font-family %q, want the embedded Go font with a generic fallback", name, m[1])
		}
	}
	if len(texts) < 4 {
		t.Errorf("%s: only %d text elements: %q", name, len(texts), texts)
	}
	return texts
}

func TestTickLabels(t *testing.T) {
	for _, c := range []struct {
		v        float64
		num, dur string
	}{
		{0, "0", "0"}, {0.0001, "0.0001", "0.0001ns"}, {0.001, "0.001", "0.001ns"}, {0.5, "0.5", "0.5ns"},
		{20, "20", "20ns"}, {1000, "1k", "1µs"}, {5000, "5k", "5µs"}, {1e6, "1M", "1ms"},
		{2.5e6, "2.5M", "2.5ms"}, {1e9, "1G", "1s"}, {1e-5, "1e-05", "1e-05ns"},
	} {
		if got := tickNum(c.v); got != c.num {
			t.Errorf("tickNum(%v) = %q, want %q", c.v, got, c.num)
		}
		if got := tickDuration(c.v); got != c.dur {
			t.Errorf("tickDuration(%v) = %q, want %q", c.v, got, c.dur)
		}
	}
}

// TestLogAxis: values from 0.03 to 5.6 (the headline of disk reads
// avoided) get a log axis of whole decades with room for the labels, and
// a zero sits a decade below the smallest value.
func TestLogAxis(t *testing.T) {
	p, err := dotPlot(dotOptions{scale: autoAxis, label: fmtPerOp}, []string{"a", "b"},
		[]series{{"x", []float64{0.03, 5.6}}, {"y", []float64{0, 1}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); !ok || p.Y.Min != 0.001 || p.Y.Max != 100 {
		t.Fatalf("Y axis %T [%v, %v], want a log scale over [0.001, 100]", p.Y.Scale, p.Y.Min, p.Y.Max)
	}
	var labels []string
	for _, tk := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0.001 0.01 0.1 1 10 100" {
		t.Fatalf("log ticks %q", got)
	}
	// An axis whose bottom is below 1 and not an exact power in floating
	// point keeps its first label.
	p, err = dotPlot(dotOptions{scale: logAxis}, []string{"a"}, []series{{"x", []float64{0.108, 0.458}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	labels = nil
	for _, tk := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0.1 1" {
		t.Fatalf("log ticks over [%v, %v]: %q, want \"0.1 1\"", p.Y.Min, p.Y.Max, got)
	}
	p, err = dotPlot(dotOptions{scale: autoAxis}, []string{"a"}, []series{{"x", []float64{3, 5}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); ok {
		t.Fatal("values within a factor of 2 got a log axis")
	}
}

func TestReadPeers(t *testing.T) {
	pr, err := readPeers("testdata/peers.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.rows) != 3 || len(pr.scaling) != 2 || pr.rows[2].Engine != "bbolt" || pr.scaling[0].Cells[2].OpsPerSec != 1639 {
		t.Fatalf("read %+v", pr)
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, []byte("| a table |\n{\"workload\":\"cold\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readPeers(empty); err == nil {
		t.Fatal("a file without enginebench lines gave no error")
	}
}
