package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlot draws the FPR sweep: for each layout, theory as a line and the
// measurements as points in the same colour, FPR on a log scale. The
// file's extension picks the format (.svg, .png, .pdf, ...).
func writePlot(file string, rows []fprRow) error {
	if len(rows) == 0 {
		return fmt.Errorf("plot: no rows")
	}
	p, err := fprPlot(rows, nil)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if strings.EqualFold(filepath.Ext(file), ".svg") {
		// With the font embedded, as on the report's page (charts.go).
		svg, css, err := (&chart{panels: []*plot.Plot{p}, w: 8 * vg.Inch, h: 5 * vg.Inch}).render()
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		svg = strings.Replace(svg, ">", "><defs><style>"+strings.Join(css, "\n")+"</style></defs>", 1)
		return os.WriteFile(file, []byte(svg), 0o644)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, file); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// fprPlot draws the FPR sweep (nil without rows), its legend entries in
// leg or, if nil, inside the plot.
func fprPlot(rows []fprRow, leg *legend) (*plot.Plot, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	p := newPlot("")
	addEntry := func(name string, th plot.Thumbnailer) {
		if leg != nil {
			leg.add(name, th)
		} else {
			p.Legend.Add(name, th)
		}
	}
	p.Title.Text = fmt.Sprintf("Bloom filter FPR: %s keys, %s absent probes",
		fmtInt(int64(rows[0].Keys)), fmtInt(int64(rows[0].Probes)))
	p.X.Label.Text = "bits per key (allocated)"
	p.Y.Label.Text = "false-positive rate"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{tickNum}
	p.Legend.Top = true

	for i, layout := range []string{"blocked", "classic"} {
		var measured, theory plotter.XYs
		for _, r := range rows {
			if r.Layout != layout {
				continue
			}
			theory = append(theory, plotter.XY{X: r.MemBitsPerKey, Y: r.Theory})
			if r.Measured > 0 { // a log scale has no place for 0
				measured = append(measured, plotter.XY{X: r.MemBitsPerKey, Y: r.Measured})
			}
		}
		line, err := plotter.NewLine(theory)
		if err != nil {
			return nil, err
		}
		line.Color = plotutil.Color(i)
		line.Dashes, line.Width = plotutil.Dashes(i), vg.Points(2)
		p.Add(line)
		addEntry(layout+" theory", line)
		if len(measured) == 0 {
			continue
		}
		points, err := plotter.NewScatter(measured)
		if err != nil {
			return nil, err
		}
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(points)
		addEntry(layout+" measured", points)
	}
	return p, nil
}
