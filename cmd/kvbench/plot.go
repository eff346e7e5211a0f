package main

import (
	"fmt"

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
	p, err := fprPlot(rows)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, file); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// fprPlot draws the FPR sweep (nil without rows).
func fprPlot(rows []fprRow) (*plot.Plot, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Bloom filter FPR: %s keys, %s absent probes",
		fmtInt(int64(rows[0].Keys)), fmtInt(int64(rows[0].Probes)))
	p.X.Label.Text = "bits per key (allocated)"
	p.Y.Label.Text = "false-positive rate"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())

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
		line.Dashes = plotutil.Dashes(i)
		p.Add(line)
		p.Legend.Add(layout+" theory", line)
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
		p.Legend.Add(layout+" measured", points)
	}
	return p, nil
}
