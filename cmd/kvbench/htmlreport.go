package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
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

// figure is one plot of the page.
type figure struct {
	Title, Caption string
	SVG            template.HTML
}

// write renders the page into dir/index.html. peers, if set, is a file of
// enginebench JSON lines (bench/: go run ./cmd/enginebench -all) whose
// throughput is plotted relative to bloomkv.
func (h *htmlReport) write(dir, peers, header string) (string, error) {
	var figs []figure
	add := func(title, caption string, mk func() (*plot.Plot, error)) error {
		p, err := mk()
		if err != nil {
			return err
		}
		if p == nil {
			return nil
		}
		svg, err := renderSVG(p)
		if err != nil {
			return err
		}
		figs = append(figs, figure{title, caption, template.HTML(svg)})
		return nil
	}
	errs := []error{
		add("Disk reads avoided", "Data blocks read per Get and bytes read from the block device per Get (read_bytes), with and without filters; warm rows have the page cache as the previous phase left it, cold rows follow an eviction of the store's files.", h.avoidedPlot),
		add("Absent-key block reads against segments", "During the fill report: data blocks touched per absent-key Get against the number of segments, measured and predicted (the sum of the probed filters' FPRs).", h.blocksBySegmentsPlot),
		add("Filter memory", "Data blocks touched per absent-key Get against filter memory (share of 10 bits per key) on the fill-random store: every segment at the same bits per key, filters folded greedily from 10 (or 20) bits per key, and the optimal allocation (Options.FilterAllocation = FilterOptimal); lines predicted (Σ FPR), points measured.", h.filterMemoryPlot),
		add("Fill report: write amplification", "Bytes written per user byte over the fill, with and without the WAL.", h.fillPlot),
		add("FPR sweep", "Measured false-positive rate against theory for both filter layouts.", func() (*plot.Plot, error) { return fprPlot(h.fpr) }),
	}
	if peers != "" {
		errs = append(errs, add("Against other stores", "Throughput relative to bloomkv (1.0) in one enginebench run: fill, get-hit, get-miss.",
			func() (*plot.Plot, error) { return peerPlot(peers) }))
	}
	for _, err := range errs {
		if err != nil {
			return "", fmt.Errorf("report: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	var page bytes.Buffer
	err := pageTemplate.Execute(&page, struct {
		Header  string
		When    string
		Figures []figure
	}{header, time.Now().UTC().Format(time.RFC3339), figs})
	if err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	path := filepath.Join(dir, "index.html")
	return path, os.WriteFile(path, page.Bytes(), 0o644)
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>kvbench report</title>
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;color:#222}
figure{margin:2em 0}figcaption{color:#555;font-size:.9em}pre{background:#f6f6f6;padding:1em;overflow:auto}</style>
</head><body><h1>kvbench report</h1><p>{{.When}}</p><pre>{{.Header}}</pre>
{{range .Figures}}<figure><h2>{{.Title}}</h2>{{.SVG}}<figcaption>{{.Caption}}</figcaption></figure>
{{end}}</body></html>
`))

func renderSVG(p *plot.Plot) (string, error) {
	w, err := p.WriterTo(8*vg.Inch, 4.5*vg.Inch, "svg")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if _, err := w.WriteTo(&b); err != nil {
		return "", err
	}
	svg := b.String()
	if i := strings.Index(svg, "<svg"); i > 0 { // drop the XML prolog: the SVG is inline
		svg = svg[i:]
	}
	return svg, nil
}

// avoidedPlot draws the disk-reads-avoided rows as grouped bars.
func (h *htmlReport) avoidedPlot() (*plot.Plot, error) {
	type pair struct{ with, without *result }
	var labels []string
	var pairs []pair
	find := func(section, workload, variant string) *result {
		for i := range h.results {
			r := &h.results[i]
			if r.Section == section && r.Workload == workload && r.Variant == variant {
				return r
			}
		}
		return nil
	}
	for _, c := range []struct{ label, section, workload, with, without string }{
		{"get-miss warm", "disk-reads-avoided", "get-miss", "filters", "no filters"},
		{"get-miss cold", "disk-reads-avoided-cold", "get-miss", "filters, cold", "no filters, cold"},
		{"get-hit cold", "disk-reads-avoided-cold", "get-hit", "filters, cold", "no filters, cold"},
	} {
		w, wo := find(c.section, c.workload, c.with), find(c.section, c.workload, c.without)
		if w != nil && wo != nil {
			labels, pairs = append(labels, c.label), append(pairs, pair{w, wo})
		}
	}
	if len(pairs) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Per Get: data blocks read, and KiB read from the device"
	p.Y.Label.Text = "per Get"
	p.Legend.Top = true
	series := []struct {
		name string
		val  func(r *result) float64
	}{
		{"blocks, filters", func(r *result) float64 { return r.readIO().blockReads }},
		{"blocks, no filters", func(r *result) float64 { return r.readIO().blockReads }},
		{"device KiB, filters", func(r *result) float64 { return nanZero(r.readIO().readBytes) / 1024 }},
		{"device KiB, no filters", func(r *result) float64 { return nanZero(r.readIO().readBytes) / 1024 }},
	}
	w := vg.Points(14)
	for i, s := range series {
		vals := make(plotter.Values, len(pairs))
		for j, pr := range pairs {
			r := pr.with
			if i%2 == 1 {
				r = pr.without
			}
			vals[j] = s.val(r)
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(i)
		bars.Offset = vg.Length(i-2)*w + w/2
		p.Add(bars)
		p.Legend.Add(s.name, bars)
	}
	p.NominalX(labels...)
	return p, nil
}

func nanZero(v float64) float64 {
	if v != v {
		return 0
	}
	return v
}

// blocksBySegmentsPlot draws the fill report's absent-Get block reads
// against the segment count, measured and predicted.
func (h *htmlReport) blocksBySegmentsPlot() (*plot.Plot, error) {
	return h.fillSeries("Absent-key Get: data blocks touched against segments", "segments", "blocks per absent Get",
		func(f fillPoint) float64 { return float64(f.Segments) }, addPoints,
		[]string{"measured", "predicted (Σ FPR)"},
		func(f fillPoint) float64 { return f.Blocks }, func(f fillPoint) float64 { return f.Predicted })
}

// fillPlot draws write amplification over the fill report.
func (h *htmlReport) fillPlot() (*plot.Plot, error) {
	return h.fillSeries("Write amplification over a random fill", "keys written", "bytes written per user byte",
		func(f fillPoint) float64 { return float64(f.Keys) }, addLines,
		[]string{"with WAL", "without WAL"},
		func(f fillPoint) float64 { return f.WriteAmp }, func(f fillPoint) float64 { return f.WriteAmpNoWAL })
}

// fillSeries plots one series per ys over the fill report's checkpoints
// (nil without any), drawn by draw (addPoints or addLines).
func (h *htmlReport) fillSeries(title, xLabel, yLabel string, x func(fillPoint) float64,
	draw func(*plot.Plot, []string, ...plotter.XYs) error, names []string, ys ...func(fillPoint) float64) (*plot.Plot, error) {
	if len(h.fill) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	p.Legend.Top = true
	series := make([]plotter.XYs, len(ys))
	for _, f := range h.fill {
		for i, y := range ys {
			series[i] = append(series[i], plotter.XY{X: x(f), Y: y(f)})
		}
	}
	return p, draw(p, names, series...)
}

func addPoints(p *plot.Plot, names []string, series ...plotter.XYs) error {
	for i, s := range series {
		sc, err := plotter.NewScatter(s)
		if err != nil {
			return err
		}
		sc.Color, sc.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(sc)
		p.Legend.Add(names[i], sc)
	}
	return nil
}

func addLines(p *plot.Plot, names []string, series ...plotter.XYs) error {
	for i, s := range series {
		l, err := plotter.NewLine(s)
		if err != nil {
			return err
		}
		l.Color, l.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		p.Add(l)
		p.Legend.Add(names[i], l)
	}
	return nil
}

// peerPlot reads enginebench JSON lines and draws each engine's throughput
// relative to bloomkv's.
func peerPlot(file string) (*plot.Plot, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type row struct {
		Engine  string  `json:"engine"`
		Fill    float64 `json:"fill_ops_per_sec"`
		GetHit  float64 `json:"get_hit_ops_per_sec"`
		GetMiss float64 `json:"get_miss_ops_per_sec"`
	}
	var rows []row
	var base *row
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r row
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Engine == "" || r.Fill == 0 {
			continue // other workloads' lines, the table
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i := range rows {
		if rows[i].Engine == "bloomkv" {
			base = &rows[i]
		}
	}
	if base == nil {
		return nil, fmt.Errorf("%s: no bloomkv line with fill, get-hit and get-miss", file)
	}
	p := plot.New()
	p.Title.Text = "Throughput relative to bloomkv"
	p.Y.Label.Text = "× bloomkv"
	p.Legend.Top = true
	w := vg.Points(12)
	var names []string
	for _, r := range rows {
		names = append(names, r.Engine)
	}
	for i, m := range []struct {
		name string
		val  func(row) float64
	}{{"fill", func(r row) float64 { return r.Fill }}, {"get-hit", func(r row) float64 { return r.GetHit }}, {"get-miss", func(r row) float64 { return r.GetMiss }}} {
		vals := make(plotter.Values, len(rows))
		for j, r := range rows {
			if b := m.val(*base); b > 0 {
				vals[j] = m.val(r) / b
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(i)
		bars.Offset = vg.Length(i-1) * w
		p.Add(bars)
		p.Legend.Add(m.name, bars)
	}
	p.NominalX(names...)
	return p, nil
}

// filterMemoryPlot draws the filter-memory curve: per allocation the
// predicted block reads per absent Get as a line and the measured ones as
// points, on a log scale (they span two orders of magnitude).
func (h *htmlReport) filterMemoryPlot() (*plot.Plot, error) {
	if len(h.fm) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Block reads per absent Get against filter memory"
	p.X.Label.Text, p.Y.Label.Text = "filter memory (% of 10 bits per key)", "blocks per absent Get (log)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	p.Legend.Top = true
	for i, alloc := range []string{"uniform", "greedy", "optimal"} {
		var pred, meas plotter.XYs
		for _, f := range h.fm {
			if f.Allocation == alloc && f.Predicted > 0 && f.Measured > 0 {
				pred = append(pred, plotter.XY{X: 100 * f.Share, Y: f.Predicted})
				meas = append(meas, plotter.XY{X: 100 * f.Share, Y: f.Measured})
			}
		}
		if len(pred) == 0 {
			continue
		}
		l, err := plotter.NewLine(pred)
		if err != nil {
			return nil, err
		}
		l.Color, l.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		sc, err := plotter.NewScatter(meas)
		if err != nil {
			return nil, err
		}
		sc.Color, sc.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(l, sc)
		p.Legend.Add(alloc+" predicted", l)
		p.Legend.Add(alloc+" measured", sc)
	}
	return p, nil
}
