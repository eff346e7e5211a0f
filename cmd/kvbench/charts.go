package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The plots measure their text with the Go font (golang.org/x/image's
// gofont, 130 KiB, compiled in) and every SVG embeds it, so a browser
// draws the text in the font it was laid out with: a label measured in one
// font and drawn in a wider fallback overflows its place (clipped tick
// labels, legend text over its swatches). The family also names a generic
// fallback, for viewers that ignore embedded fonts.
var (
	reportFont     = font.Font{Typeface: "Go"}
	reportFontOnce sync.Once
)

// useReportFont makes the Go font gonum's default, once.
func useReportFont() {
	reportFontOnce.Do(func() {
		f, err := opentype.Parse(goregular.TTF)
		if err != nil {
			panic(fmt.Sprintf("kvbench: the compiled-in Go font does not parse: %v", err)) // cannot happen
		}
		font.DefaultCache.Add([]font.Face{{Font: reportFont, Face: f}})
		plot.DefaultFont = reportFont
		plotter.DefaultFont = reportFont
	})
}

// chart is one figure: panels side by side, and at most one legend, drawn
// in its own strip at the right so that it covers no data.
type chart struct {
	panels []*plot.Plot
	legend *legend // nil: none
	w, h   vg.Length
}

// legend is a plot.Legend that takes each name once, so that the panels
// of a chart can all add their series.
type legend struct {
	plot.Legend
	names map[string]bool
}

// newLegend returns an empty legend in the report's font: swatch, then
// name, from the top.
func newLegend() *legend {
	useReportFont()
	l := &legend{Legend: plot.NewLegend(), names: map[string]bool{}}
	l.Top, l.Left = true, true
	return l
}

// add adds an entry called name unless there is one.
func (l *legend) add(name string, thumbs ...plot.Thumbnailer) {
	if l == nil || l.names[name] {
		return
	}
	l.names[name] = true
	l.Add(name, thumbs...)
}

// newPlot returns a plot in the report's font with a grid.
func newPlot(title string) *plot.Plot {
	useReportFont()
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(6)
	p.Add(plotter.NewGrid())
	return p
}

// fontFace matches the @font-face rules vgsvg embeds.
var (
	styleBlock = regexp.MustCompile(`(?s)<defs>\s*<style[^>]*>(.*?)</style>\s*</defs>`)
	fontFace   = regexp.MustCompile(`(?s)@font-face\s*\{.*?\}`)
)

// render draws the chart as SVG. It returns the SVG without its XML prolog
// (it goes inline into the page) and without its embedded @font-face
// rules, which it returns apart, so that the page carries the font once.
func (c *chart) render() (svg string, fontCSS []string, err error) {
	useReportFont()
	cv := vgsvg.NewWith(vgsvg.UseWH(c.w, c.h), vgsvg.EmbedFonts(true))
	dc := draw.New(cv)
	if c.legend != nil && len(c.legend.names) > 0 {
		lw := c.legend.Rectangle(dc).Size().X + vg.Points(16)
		c.legend.YOffs = -vg.Points(30) // below the title row
		c.legend.Draw(draw.Crop(dc, dc.Size().X-lw+vg.Points(8), 0, 0, 0))
		dc = draw.Crop(dc, 0, -lw, 0, 0)
	}
	if len(c.panels) == 1 {
		c.panels[0].Draw(dc)
	} else {
		tiles := draw.Tiles{Rows: 1, Cols: len(c.panels), PadX: vg.Points(14)}
		for j, cnv := range plot.Align([][]*plot.Plot{c.panels}, tiles, dc)[0] {
			c.panels[j].Draw(cnv)
		}
	}
	var b bytes.Buffer
	if _, err := cv.WriteTo(&b); err != nil {
		return "", nil, err
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:]
	}
	if m := styleBlock.FindStringSubmatch(s); m != nil {
		fontCSS = fontFace.FindAllString(m[1], -1)
		s = strings.Replace(s, m[0], "", 1)
	}
	// Name a generic family after the embedded one.
	s = strings.ReplaceAll(s, "font-family:Go;", "font-family:Go,sans-serif;")
	return s, fontCSS, nil
}

// series is one named set of values, one per category (NaN: none).
type series struct {
	name string
	vals []float64
}

// axisScale says how a value axis is drawn.
type axisScale int

const (
	linearAxis axisScale = iota
	logAxis
	autoAxis // log when the positive values span more than a factor of 30
)

// valueRange returns the smallest positive and the largest value of ss,
// and whether any value is zero.
func valueRange(ss []series) (lo, hi float64, zero bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, v := range s.vals {
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
			case v <= 0:
				zero = true
				hi = max(hi, v)
			default:
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	return lo, hi, zero
}

// resolve turns autoAxis into linearAxis or logAxis for values in [lo, hi].
func (s axisScale) resolve(lo, hi float64) axisScale {
	if s != autoAxis {
		return s
	}
	if !math.IsInf(lo, 0) && hi/lo > 30 {
		return logAxis
	}
	return linearAxis
}

// setValueAxis scales ax for values in [lo, hi] (lo the smallest positive
// one), with room above hi for value labels if room, and returns where a
// zero is drawn (the bottom of the axis). A log axis covers whole decades
// and labels each one with tick; a zero sits one decade below lo.
func setValueAxis(ax *plot.Axis, scale axisScale, lo, hi float64, zero, room bool, tick func(float64) string) float64 {
	top := 1.05
	if room {
		top = 3
	}
	if scale == logAxis {
		if math.IsInf(lo, 0) {
			lo, hi = 1, 10
		}
		ax.Scale = plot.LogScale{}
		bottom := math.Pow10(int(math.Floor(math.Log10(lo) + 1e-9)))
		if zero {
			bottom /= 10
		}
		ax.Min = bottom
		ax.Max = math.Pow10(int(math.Ceil(math.Log10(hi*top) - 1e-9)))
		ax.Tick.Marker = logTicks{tick}
		return bottom
	}
	if room {
		top = 1.18
	}
	ax.Min, ax.Max = 0, max(hi, 0)*top
	if ax.Max == 0 {
		ax.Max = 1
	}
	ax.Tick.Marker = relabel{plot.DefaultTicks{}, tick}
	return 0
}

// logTicks marks a log axis: a labelled tick at each power of ten, minor
// ticks between. (gonum's LogTicks truncates log10 of a minimum below 1
// toward zero, so an axis from 0.1 lost its first label.)
type logTicks struct{ f func(float64) string }

// Ticks implements plot.Ticker.
func (l logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	first := int(math.Floor(math.Log10(lo) + 1e-9))
	last := int(math.Ceil(math.Log10(hi) - 1e-9))
	for e := first; e <= last; e++ {
		d := math.Pow10(e)
		if d >= lo*(1-1e-9) && d <= hi*(1+1e-9) {
			ts = append(ts, plot.Tick{Value: d, Label: l.f(d)})
		}
		for m := 2.0; m < 10; m++ {
			if v := m * d; v > lo && v < hi {
				ts = append(ts, plot.Tick{Value: v})
			}
		}
	}
	return ts
}

// relabel formats the labels of another Ticker's ticks with f.
type relabel struct {
	t plot.Ticker
	f func(float64) string
}

// Ticks implements plot.Ticker.
func (r relabel) Ticks(lo, hi float64) []plot.Tick {
	ts := r.t.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = r.f(ts[i].Value)
		}
	}
	return ts
}

// tickNum labels a tick compactly: 0.001, 0.5, 20, 5k, 2M.
func tickNum(v float64) string {
	a := math.Abs(v)
	trim := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	switch {
	case a == 0:
		return "0"
	case a >= 1e9-0.5:
		return trim(math.Round(v/1e8)/10) + "G"
	case a >= 1e6-0.5:
		return trim(math.Round(v/1e5)/10) + "M"
	case a >= 1e3-0.5:
		return trim(math.Round(v/1e2)/10) + "k"
	case a >= 1e-4:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'e', 0, 64)
}

// tickDuration labels a tick in nanoseconds as a duration: 100ns, 10µs.
func tickDuration(ns float64) string {
	if ns <= 0 {
		return "0"
	}
	trim := func(x float64) string { return strconv.FormatFloat(x, 'g', 3, 64) }
	switch {
	case ns < 1e3:
		return trim(ns) + "ns"
	case ns < 1e6:
		return trim(ns/1e3) + "µs"
	case ns < 1e9:
		return trim(ns/1e6) + "ms"
	}
	return trim(ns/1e9) + "s"
}

// dotOptions configure dotPlot.
type dotOptions struct {
	title, valueLabel string
	scale             axisScale
	tick              func(float64) string // value axis labels (tickNum if nil)
	label             func(float64) string // a label by each point (none if nil)
	horizontal        bool                 // categories down the Y axis
}

// dotPlot draws one point per series and category, with a stem from the
// axis so that it reads like a bar, but on any scale: a bar on a log axis
// has no bottom. Values that are NaN are left out; zeros sit at the bottom
// of a log axis, labelled 0. The legend entries go to leg (if not nil).
func dotPlot(o dotOptions, cats []string, ss []series, leg *legend) (*plot.Plot, error) {
	p := newPlot(o.title)
	cat, val := &p.X, &p.Y
	if o.horizontal {
		cat, val = &p.Y, &p.X
	}
	val.Label.Text = o.valueLabel
	lo, hi, zero := valueRange(ss)
	scale := o.scale.resolve(lo, hi)
	tick := o.tick
	if tick == nil {
		tick = tickNum
	}
	bottom := setValueAxis(val, scale, lo, hi, zero, o.label != nil, tick)
	at := func(c, v float64) plotter.XY {
		if o.horizontal {
			return plotter.XY{X: v, Y: c}
		}
		return plotter.XY{X: c, Y: v}
	}
	n := float64(len(ss))
	step := min(0.7/n, 0.22)
	for k, s := range ss {
		off := (float64(k) - (n-1)/2) * step
		var pts plotter.XYs
		var labels []string
		for i, v := range s.vals {
			if math.IsNaN(v) || math.IsInf(v, 0) || i >= len(cats) {
				continue
			}
			pos := v
			if v <= 0 && scale == logAxis {
				pos = bottom
			}
			c := float64(i) + off
			pts = append(pts, at(c, pos))
			if o.label != nil {
				labels = append(labels, o.label(v))
			}
			stem, err := plotter.NewLine(plotter.XYs{at(c, bottom), at(c, pos)})
			if err != nil {
				return nil, err
			}
			stem.Color, stem.Width = plotutil.Color(k), vg.Points(2)
			p.Add(stem)
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, err
		}
		sc.Color, sc.Shape, sc.Radius = plotutil.Color(k), plotutil.Shape(k), vg.Points(4)
		p.Add(sc)
		leg.add(s.name, sc)
		if labels != nil {
			ls, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: labels})
			if err != nil {
				return nil, err
			}
			for i := range ls.TextStyle {
				ls.TextStyle[i].Color = color.Gray{Y: 0x30}
				if o.horizontal {
					ls.TextStyle[i].XAlign, ls.TextStyle[i].YAlign = text.XLeft, text.YCenter
				} else {
					ls.TextStyle[i].XAlign, ls.TextStyle[i].YAlign = text.XCenter, text.YBottom
				}
			}
			if o.horizontal {
				ls.Offset = vg.Point{X: vg.Points(7)}
			} else {
				ls.Offset = vg.Point{Y: vg.Points(6)}
			}
			p.Add(ls)
		}
	}
	if o.horizontal {
		p.NominalY(cats...)
		p.Y.Scale = flipScale{} // top to bottom in the order given
	} else {
		p.NominalX(cats...)
	}
	cat.Min, cat.Max = -0.5, float64(len(cats))-0.5
	return p, nil
}

// flipScale is a linear scale upside down: the first category on top.
type flipScale struct{}

// Normalize implements plot.Normalizer.
func (flipScale) Normalize(lo, hi, x float64) float64 { return (hi - x) / (hi - lo) }
