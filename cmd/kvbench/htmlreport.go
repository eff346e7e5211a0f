package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// htmlReport collects what a run measured for -report DIR: one
// self-contained HTML page with the plots as inline SVG.
type htmlReport struct {
	keys    int // the data set's keys: scan-full's keys per pass
	results []result
	fill    []fillPoint
	fpr     []fprRow
	fm      []fmPoint
}

// collect keeps the records the page plots; called for every record.
func (h *htmlReport) collect(v any) {
	switch x := v.(type) {
	case *result:
		h.results = append(h.results, *x)
	case fillPoint:
		h.fill = append(h.fill, x)
	case *fprRow:
		h.fpr = append(h.fpr, *x)
	case *fmPoint:
		h.fm = append(h.fm, *x)
	}
}

// figure is one chart of the page.
type figure struct {
	ID, Title, Caption string
	SVG                template.HTML
}

// Sizes of the page's charts: the page is laidout for this width.
const (
	chartWidth  = 11 * vg.Inch
	chartHeight = 4.2 * vg.Inch
)

// write renders the page into dir/index.html: a summary chart first, then
// throughput, latency, the filter charts and, with peers (a file of
// enginebench JSON lines, bench/: go run ./cmd/enginebench -all, and
// -all -sync-scaling), other stores; the text report last, folded.
func (h *htmlReport) write(dir, peers, text string) (string, error) {
	var figs []figure
	fonts := map[string]bool{}
	var fontCSS []string
	add := func(id, title, caption string, mk func() (*chart, error)) error {
		c, err := mk()
		if err != nil || c == nil {
			return err
		}
		if c.w == 0 {
			c.w, c.h = chartWidth, chartHeight
		}
		svg, css, err := c.render()
		if err != nil {
			return err
		}
		for _, f := range css {
			if !fonts[f] {
				fonts[f] = true
				fontCSS = append(fontCSS, f)
			}
		}
		figs = append(figs, figure{id, title, caption, template.HTML(svg)})
		return nil
	}
	errs := []error{
		add("summary", "Filters at a glance", "The same data with Bloom filters and without (Options.DisableFilters; for prefix scans, prefix filters and none): data blocks read per operation, operations per second and the 99th-percentile latency. Cold rows follow an eviction of the store's files from the page cache; negative lookups are 90% absent keys over many segments. Log scales: the values span orders of magnitude.", h.summaryChart),
		add("throughput", "Throughput", "Operations per second of each workload, one goroutine (scan-100: scans of 100 keys; scan-full: keys), with -baseline the same workloads on bbolt. Log scale.", h.throughputChart),
		add("latency", "Latency percentiles", "Per operation, as the workload's goroutine saw it: median, 99th and 99.9th percentiles and the maximum (a log-linear histogram, within 3%). Log scale.", h.latencyChart),
		add("disk-reads", "Disk reads avoided", "Per Get, with and without filters: data blocks read from segment files, and bytes the process read from the block device (read_bytes in /proc/self/io). Warm rows have the page cache as the previous phase left it, cold rows follow an eviction of the store's files. Log scales; a 0 sits at the axis.", h.avoidedChart),
		add("segments", "Absent-key block reads against segments", "During the fill report: data blocks touched per absent-key Get against the number of segments, measured and predicted (Stats.FilterExpectedReads: the sum of the filters' FPRs, each at its own bits per key).", h.blocksBySegmentsChart),
		add("filter-memory", "Filter memory", "Data blocks touched per absent-key Get against filter memory (share of 10 bits per key) on the fill-random store: every segment at the same bits per key, filters folded greedily from 10 (or 20) bits per key, and the optimal allocation (Options.FilterAllocation = FilterOptimal); lines predicted (Σ FPR), points measured.", h.filterMemoryChart),
		add("write-amp", "Fill report: write amplification", "Bytes written per user byte over the fill, with and without the WAL.", h.fillChart),
		add("fpr", "FPR sweep", "Measured false-positive rate against theory for both filter layouts.", h.fprChart),
	}
	if peers != "" {
		pr, err := readPeers(peers)
		errs = append(errs, err,
			add("peers", "Against other stores", "One enginebench run (bench/: go run ./cmd/enginebench -all): operations per second of each store, one goroutine, log scale (scan-100: scans of up to 100 keys; scan-full: keys).", pr.throughputChart),
			add("scaling", "Durable writes against writers", "enginebench -all -sync-scaling: fsync'd Puts per second against the number of writing goroutines, per store; group commit makes a line rise. Log scales.", pr.scalingChart))
	}
	for _, err := range errs {
		if err != nil {
			return "", fmt.Errorf("report: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	head, _, _ := strings.Cut(strings.TrimLeft(text, "\n"), "\n\n")
	var page bytes.Buffer
	err := pageTemplate.Execute(&page, struct {
		Head, Text, When string
		Lines            int
		Fonts            template.CSS
		Figures          []figure
	}{head, text, time.Now().UTC().Format(time.RFC3339), strings.Count(text, "\n"),
		template.CSS(strings.Join(fontCSS, "\n")), figs})
	if err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	path := filepath.Join(dir, "index.html")
	return path, os.WriteFile(path, page.Bytes(), 0o644)
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>kvbench report</title>
<style>{{.Fonts}}
body{font-family:sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222}
figure{margin:1.5em 0 2.5em}figure h2{margin:0 0 .3em;font-size:1.3em}figcaption{color:#555;font-size:.9em;max-width:60em}
svg{max-width:100%;height:auto}pre{background:#f6f6f6;padding:.8em;overflow:auto;font-size:.85em}
nav a{margin-right:1em}</style>
</head><body><h1>kvbench report</h1><p>{{.When}}</p><pre>{{.Head}}</pre>
<nav>{{range .Figures}}<a href="#{{.ID}}">{{.Title}}</a> {{end}}<a href="#text">Text report</a></nav>
{{range .Figures}}<figure id="{{.ID}}"><h2>{{.Title}}</h2>{{.SVG}}<figcaption>{{.Caption}}</figcaption></figure>
{{end}}<details id="text"><summary>The text report ({{.Lines}} lines)</summary><pre>{{.Text}}</pre></details>
</body></html>
`))

// find returns the result of workload in section with variant, or nil.
func (h *htmlReport) find(section, workload, variant string) *result {
	for i := range h.results {
		r := &h.results[i]
		if r.Section == section && r.Workload == workload && r.Variant == variant {
			return r
		}
	}
	return nil
}

// comparisonPair is one workload run with filters and without.
type comparisonPair struct {
	label         string
	with, without *result
}

// comparisons returns the filters-on/filters-off pairs the run measured.
func (h *htmlReport) comparisons(coldHits bool) []comparisonPair {
	var out []comparisonPair
	for _, c := range []struct{ label, section, workload, with, without string }{
		{"get-miss", "disk-reads-avoided", "get-miss", "filters", "no filters"},
		{"get-miss, cold", "disk-reads-avoided-cold", "get-miss", "filters, cold", "no filters, cold"},
		{"get-hit, cold", "disk-reads-avoided-cold", "get-hit", "filters, cold", "no filters, cold"},
		{"negative lookups", "negative-lookups", "negative-lookup", "filters", "no filters"},
		{"absent prefix scan", "prefix-lookups", "prefix-absent", "prefix filters", "no prefix filters"},
	} {
		if c.workload == "get-hit" && !coldHits {
			continue
		}
		w, wo := h.find(c.section, c.workload, c.with), h.find(c.section, c.workload, c.without)
		if w != nil && wo != nil {
			out = append(out, comparisonPair{c.label, w, wo})
		}
	}
	return out
}

// pairSeries returns the with and without series of val over pairs.
func pairSeries(pairs []comparisonPair, val func(*result) float64) []series {
	with, without := series{name: "filters"}, series{name: "no filters"}
	for _, p := range pairs {
		with.vals = append(with.vals, val(p.with))
		without.vals = append(without.vals, val(p.without))
	}
	return []series{with, without}
}

// pairLabels returns the pairs' labels, the charts' categories.
func pairLabels(pairs []comparisonPair) []string {
	cats := make([]string, len(pairs))
	for i, p := range pairs {
		cats[i] = p.label
	}
	return cats
}

// summaryChart: per filters-on/off pair, blocks read, ops/s and p99.
func (h *htmlReport) summaryChart() (*chart, error) {
	pairs := h.comparisons(false)
	if len(pairs) == 0 {
		return nil, nil
	}
	cats := pairLabels(pairs)
	leg := newLegend()
	blocks, err := dotPlot(dotOptions{title: "data blocks read per operation", scale: logAxis, label: fmtPerOp, horizontal: true},
		cats, pairSeries(pairs, func(r *result) float64 { return r.readIO().blockReads }), leg)
	if err != nil {
		return nil, err
	}
	ops, err := dotPlot(dotOptions{title: "operations per second", scale: logAxis, label: fmtCount, horizontal: true},
		cats, pairSeries(pairs, func(r *result) float64 { return r.OpsPerSec }), leg)
	if err != nil {
		return nil, err
	}
	p99, err := dotPlot(dotOptions{title: "p99 latency", scale: logAxis, tick: tickDuration, label: fmtNs, horizontal: true},
		cats, pairSeries(pairs, func(r *result) float64 { return float64(r.Latency.P99) }), leg)
	if err != nil {
		return nil, err
	}
	hideCategories(ops)
	hideCategories(p99)
	return &chart{panels: []*plot.Plot{blocks, ops, p99}, legend: leg, w: chartWidth, h: vg.Points(40) + vg.Points(52*float64(len(cats)))}, nil
}

// hideCategories blanks p's category labels: a panel beside another that
// shows them.
func hideCategories(p *plot.Plot) {
	p.Y.Tick.Marker = relabel{p.Y.Tick.Marker, func(float64) string { return " " }}
}

func fmtCount(v float64) string { return fmtInt(int64(math.Round(v))) }
func fmtNs(v float64) string    { return fmtLatency(uint64(v)) }

// workloadRows returns the workloads section's results, and with
// -baseline bbolt's, each under a short label.
func (h *htmlReport) workloadRows() (labels []string, rs []result) {
	for _, r := range h.results {
		switch r.Section {
		case workloadsSection:
			labels = append(labels, r.Workload)
		case "baseline":
			labels = append(labels, r.Workload+" (bbolt)")
		default:
			continue
		}
		rs = append(rs, r)
	}
	return labels, rs
}

// throughputChart: ops/s of each workload, bloomkv and the baseline.
func (h *htmlReport) throughputChart() (*chart, error) {
	var cats []string
	idx := map[string]int{}
	bk, bb := series{name: "bloomkv"}, series{name: "bbolt"}
	for _, r := range h.results {
		if r.Section != workloadsSection && r.Section != "baseline" {
			continue
		}
		name := strings.TrimSuffix(r.Workload, "-random")
		if r.Workload == "fill-random" {
			name = "fill-random"
		}
		i, ok := idx[r.Workload]
		if !ok {
			i = len(cats)
			idx[r.Workload] = i
			cats = append(cats, name)
			bk.vals, bb.vals = append(bk.vals, math.NaN()), append(bb.vals, math.NaN())
		}
		v := r.OpsPerSec
		if r.Workload == "scan-full" && h.keys > 0 {
			v = float64(h.keys) / r.Seconds * float64(r.Ops)
			cats[i] = "scan-full (keys)"
		}
		if r.Section == "baseline" {
			bb.vals[i] = v
		} else {
			bk.vals[i] = v
		}
	}
	if len(cats) == 0 {
		return nil, nil
	}
	ss := []series{bk}
	if hasValue(bb) {
		ss = append(ss, bb)
	}
	leg := newLegend()
	p, err := dotPlot(dotOptions{title: "operations per second", scale: logAxis, label: fmtCount, horizontal: true}, cats, ss, leg)
	if err != nil {
		return nil, err
	}
	return &chart{panels: []*plot.Plot{p}, legend: leg, w: chartWidth, h: vg.Points(60) + vg.Points(34*float64(len(cats)))}, nil
}

func hasValue(s series) bool {
	for _, v := range s.vals {
		if !math.IsNaN(v) {
			return true
		}
	}
	return false
}

// latencyChart: p50, p99, p99.9 and max of every workload but scan-full
// (one operation there is a whole pass).
func (h *htmlReport) latencyChart() (*chart, error) {
	labels, rs := h.workloadRows()
	var cats []string
	ss := []series{{name: "p50"}, {name: "p99"}, {name: "p99.9"}, {name: "max"}}
	for i, r := range rs {
		if r.Workload == "scan-full" || r.Ops == 0 {
			continue
		}
		cats = append(cats, labels[i])
		l := r.Latency
		for k, v := range []uint64{l.P50, l.P99, l.P999, l.Max} {
			ss[k].vals = append(ss[k].vals, float64(v))
		}
	}
	if len(cats) == 0 {
		return nil, nil
	}
	leg := newLegend()
	p, err := dotPlot(dotOptions{title: "latency per operation", scale: logAxis, tick: tickDuration, horizontal: true}, cats, ss, leg)
	if err != nil {
		return nil, err
	}
	return &chart{panels: []*plot.Plot{p}, legend: leg, w: chartWidth, h: vg.Points(60) + vg.Points(40*float64(len(cats)))}, nil
}

// avoidedChart: blocks and device bytes per Get, with and without
// filters, on two axes of their own.
func (h *htmlReport) avoidedChart() (*chart, error) {
	var pairs []comparisonPair
	for _, p := range h.comparisons(true) {
		if strings.HasPrefix(p.label, "get-") {
			pairs = append(pairs, p)
		}
	}
	if len(pairs) == 0 {
		return nil, nil
	}
	cats := pairLabels(pairs)
	leg := newLegend()
	blocks, err := dotPlot(dotOptions{title: "data blocks read per Get", scale: logAxis, label: fmtPerOp, horizontal: true},
		cats, pairSeries(pairs, func(r *result) float64 { return r.readIO().blockReads }), leg)
	if err != nil {
		return nil, err
	}
	panels := []*plot.Plot{blocks}
	kib := pairSeries(pairs, func(r *result) float64 { return r.readIO().readBytes / 1024 })
	if hasValue(kib[0]) || hasValue(kib[1]) { // NaN without /proc/self/io
		dev, err := dotPlot(dotOptions{title: "KiB read from the device per Get", scale: logAxis, label: fmtPerOp, horizontal: true}, cats, kib, leg)
		if err != nil {
			return nil, err
		}
		hideCategories(dev)
		panels = append(panels, dev)
	}
	return &chart{panels: panels, legend: leg, w: chartWidth, h: vg.Points(50) + vg.Points(56*float64(len(cats)))}, nil
}

func nanZero(v float64) float64 {
	if v != v {
		return 0
	}
	return v
}

// single wraps one plot and its legend as a chart of the default size.
func single(p *plot.Plot, leg *legend, err error) (*chart, error) {
	if p == nil || err != nil {
		return nil, err
	}
	return &chart{panels: []*plot.Plot{p}, legend: leg}, nil
}

// blocksBySegmentsChart draws the fill report's absent-Get block reads
// against the segment count, measured and predicted; on a log scale when
// they span orders of magnitude (zeros are then left out).
func (h *htmlReport) blocksBySegmentsChart() (*chart, error) {
	leg := newLegend()
	p, err := h.fillSeries("Absent-key Get: data blocks touched against segments", "segments", "blocks per absent Get",
		func(f fillPoint) float64 { return float64(f.Segments) }, addPoints, autoAxis, leg,
		[]string{"measured", "predicted (Σ FPR)"},
		func(f fillPoint) float64 { return f.Blocks }, func(f fillPoint) float64 { return f.Predicted })
	return single(p, leg, err)
}

// fillChart draws write amplification over the fill report.
func (h *htmlReport) fillChart() (*chart, error) {
	leg := newLegend()
	p, err := h.fillSeries("Write amplification over a random fill", "keys written", "bytes written per user byte",
		func(f fillPoint) float64 { return float64(f.Keys) }, addLines, linearAxis, leg,
		[]string{"with WAL", "without WAL"},
		func(f fillPoint) float64 { return f.WriteAmp }, func(f fillPoint) float64 { return f.WriteAmpNoWAL })
	return single(p, leg, err)
}

// fillSeries plots one series per ys over the fill report's checkpoints
// (nil without any), drawn by draw (addPoints or addLines), Y on scale.
func (h *htmlReport) fillSeries(title, xLabel, yLabel string, x func(fillPoint) float64,
	draw func(*plot.Plot, *legend, []string, ...plotter.XYs) error, scale axisScale, leg *legend,
	names []string, ys ...func(fillPoint) float64) (*plot.Plot, error) {
	if len(h.fill) == 0 {
		return nil, nil
	}
	p := newPlot(title)
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	p.X.Tick.Marker = relabel{plot.DefaultTicks{}, tickNum}
	all := make([]series, len(ys))
	for i, y := range ys {
		for _, f := range h.fill {
			all[i].vals = append(all[i].vals, y(f))
		}
	}
	lo, hi, zero := valueRange(all)
	scale = scale.resolve(lo, hi)
	setValueAxis(&p.Y, scale, lo, hi, zero && scale != logAxis, false, tickNum)
	series := make([]plotter.XYs, len(ys))
	for _, f := range h.fill {
		for i, y := range ys {
			if v := y(f); scale != logAxis || v > 0 { // a log scale has no place for 0
				series[i] = append(series[i], plotter.XY{X: x(f), Y: v})
			}
		}
	}
	return p, draw(p, leg, names, series...)
}

func addPoints(p *plot.Plot, leg *legend, names []string, series ...plotter.XYs) error {
	for i, s := range series {
		if len(s) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(s)
		if err != nil {
			return err
		}
		sc.Color, sc.Shape, sc.Radius = plotutil.Color(i), plotutil.Shape(i), vg.Points(3.5)
		p.Add(sc)
		leg.add(names[i], sc)
	}
	return nil
}

func addLines(p *plot.Plot, leg *legend, names []string, series ...plotter.XYs) error {
	for i, s := range series {
		if len(s) == 0 {
			continue
		}
		l, err := plotter.NewLine(s)
		if err != nil {
			return err
		}
		l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(2)
		p.Add(l)
		leg.add(names[i], l)
	}
	return nil
}

// peers is what the report plots of an enginebench run: the throughput
// lines (enginebench -all) and the sync-scaling lines (-sync-scaling).
type peers struct {
	file    string
	rows    []peerRow
	scaling []peerScaling
}

// peerRow is the part of an enginebench throughput line the report uses.
type peerRow struct {
	Engine   string  `json:"engine"`
	Fill     float64 `json:"fill_ops_per_sec"`
	GetHit   float64 `json:"get_hit_ops_per_sec"`
	GetMiss  float64 `json:"get_miss_ops_per_sec"`
	Scan100  float64 `json:"scan_100_per_sec"`
	ScanFull float64 `json:"scan_full_keys_per_sec"`
}

// peerScaling is the part of an enginebench -sync-scaling line the report
// uses.
type peerScaling struct {
	Workload string `json:"workload"`
	Engine   string `json:"engine"`
	Cells    []struct {
		Writers   int     `json:"writers"`
		OpsPerSec float64 `json:"ops_per_sec"`
	} `json:"cells"`
}

// readPeers reads enginebench JSON lines; other lines (the tables, other
// workloads) are skipped. A file with neither kind of line is an error.
func readPeers(file string) (*peers, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pr := &peers{file: file}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s peerScaling
		if json.Unmarshal(sc.Bytes(), &s) == nil && s.Workload == "sync-scaling" && s.Engine != "" && len(s.Cells) > 0 {
			pr.scaling = append(pr.scaling, s)
			continue
		}
		var r peerRow
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Engine != "" && r.Fill > 0 {
			pr.rows = append(pr.rows, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(pr.rows) == 0 && len(pr.scaling) == 0 {
		return nil, fmt.Errorf("%s: no enginebench throughput or sync-scaling lines", file)
	}
	return pr, nil
}

// throughputChart draws each store's ops/s per workload, log scale.
func (pr *peers) throughputChart() (*chart, error) {
	if pr == nil || len(pr.rows) == 0 {
		return nil, nil
	}
	cats := []string{"fill", "get-hit", "get-miss", "scan-100", "scan-full (keys)"}
	var ss []series
	for _, r := range pr.rows {
		ss = append(ss, series{name: r.Engine, vals: []float64{r.Fill, r.GetHit, r.GetMiss, zeroNaN(r.Scan100), zeroNaN(r.ScanFull)}})
	}
	if !slices.ContainsFunc(ss, func(s series) bool { return !math.IsNaN(s.vals[3]) }) {
		cats = cats[:3] // a run without the scan phases
	}
	leg := newLegend()
	p, err := dotPlot(dotOptions{title: "operations per second, by store", scale: logAxis, horizontal: true}, cats, ss, leg)
	if err != nil {
		return nil, err
	}
	return &chart{panels: []*plot.Plot{p}, legend: leg, w: chartWidth, h: vg.Points(60) + vg.Points((14+10*float64(len(ss)))*float64(len(cats)))}, nil
}

// zeroNaN maps an absent (zero) value to NaN: not drawn.
func zeroNaN(v float64) float64 {
	if v == 0 {
		return math.NaN()
	}
	return v
}

// scalingChart draws each store's sync-write ops/s against writers,
// log-log.
func (pr *peers) scalingChart() (*chart, error) {
	if pr == nil || len(pr.scaling) == 0 {
		return nil, nil
	}
	p := newPlot("fsync'd Puts per second against writers")
	p.X.Label.Text, p.Y.Label.Text = "writing goroutines", "Puts per second"
	leg := newLegend()
	var all series
	writers := map[int]bool{}
	for i, s := range pr.scaling {
		var pts plotter.XYs
		for _, c := range s.Cells {
			if c.Writers > 0 && c.OpsPerSec > 0 {
				pts = append(pts, plotter.XY{X: float64(c.Writers), Y: c.OpsPerSec})
				all.vals = append(all.vals, c.OpsPerSec)
				writers[c.Writers] = true
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width, l.Dashes = plotutil.Color(i), vg.Points(2), plotutil.Dashes(i)
		sc.Color, sc.Shape, sc.Radius = plotutil.Color(i), plotutil.Shape(i), vg.Points(4)
		p.Add(l, sc)
		leg.add(s.Engine, l, sc)
	}
	if len(writers) == 0 {
		return nil, nil
	}
	lo, hi, _ := valueRange([]series{all})
	setValueAxis(&p.Y, logAxis, lo, hi, false, false, tickNum)
	var ticks []plot.Tick
	wmin, wmax := math.Inf(1), 0.0
	for w := range writers {
		ticks = append(ticks, plot.Tick{Value: float64(w), Label: strconv.Itoa(w)})
		wmin, wmax = min(wmin, float64(w)), max(wmax, float64(w))
	}
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = wmin/1.3, wmax*1.3
	return single(p, leg, nil)
}

// filterMemoryChart draws the filter-memory curve: per allocation the
// predicted block reads per absent Get as a line and the measured ones as
// points, on a log scale (they span two orders of magnitude).
func (h *htmlReport) filterMemoryChart() (*chart, error) {
	if len(h.fm) == 0 {
		return nil, nil
	}
	p := newPlot("Block reads per absent Get against filter memory")
	p.X.Label.Text, p.Y.Label.Text = "filter memory (% of 10 bits per key)", "blocks per absent Get"
	leg := newLegend()
	var all series
	for i, alloc := range []string{"uniform", "greedy", "optimal"} {
		var pred, meas plotter.XYs
		for _, f := range h.fm {
			if f.Allocation == alloc && f.Predicted > 0 && f.Measured > 0 {
				pred = append(pred, plotter.XY{X: 100 * f.Share, Y: f.Predicted})
				meas = append(meas, plotter.XY{X: 100 * f.Share, Y: f.Measured})
				all.vals = append(all.vals, f.Predicted, f.Measured)
			}
		}
		if len(pred) == 0 {
			continue
		}
		l, err := plotter.NewLine(pred)
		if err != nil {
			return nil, err
		}
		l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(2)
		sc, err := plotter.NewScatter(meas)
		if err != nil {
			return nil, err
		}
		sc.Color, sc.Shape, sc.Radius = plotutil.Color(i), plotutil.Shape(i), vg.Points(3.5)
		p.Add(l, sc)
		leg.add(alloc+" predicted", l)
		leg.add(alloc+" measured", sc)
	}
	if len(all.vals) == 0 {
		return nil, nil
	}
	lo, hi, _ := valueRange([]series{all})
	setValueAxis(&p.Y, logAxis, lo, hi, false, false, tickNum)
	return single(p, leg, nil)
}

// fprChart is the FPR sweep with its legend at the side.
func (h *htmlReport) fprChart() (*chart, error) {
	leg := newLegend()
	p, err := fprPlot(h.fpr, leg)
	return single(p, leg, err)
}
