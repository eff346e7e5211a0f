package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// table is a plain-text table: the first column left-aligned (names), the
// others right-aligned (numbers), columns two spaces apart. groups, if
// set, is a line above the header whose titles each span some columns.
type table struct {
	groups []group
	header []string
	rows   [][]string
}

// group titles span consecutive columns, in order from the first.
type group struct {
	title string
	span  int
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

const colGap = "  "

func (t *table) write(w io.Writer) {
	widths := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	if len(t.groups) > 0 {
		fmt.Fprintln(w, t.groupLine(widths))
	}
	for _, row := range append([][]string{t.header}, t.rows...) {
		var b strings.Builder
		for i, c := range row {
			if i >= len(widths) {
				break
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(colGap + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// groupLine centres each group's title in a run of dashes as wide as the
// columns it spans; an empty title leaves its columns blank.
func (t *table) groupLine(widths []int) string {
	var b strings.Builder
	col := 0
	for _, g := range t.groups {
		width := 0
		for i := col; i < col+g.span && i < len(widths); i++ {
			width += widths[i] + len(colGap)
		}
		if col == 0 {
			width -= len(colGap) // the first column has no gap before it
		} else {
			b.WriteString(colGap)
			width -= len(colGap)
		}
		col += g.span
		if g.title == "" {
			b.WriteString(strings.Repeat(" ", max(width, 0)))
			continue
		}
		// Dashes around the title mark the span; where there is no room
		// for at least one on each side, spaces centre it instead.
		fill, title := "-", " "+g.title+" "
		if width < utf8.RuneCountInString(title)+2 {
			fill, title = " ", g.title
		}
		pad := max(width-utf8.RuneCountInString(title), 0)
		b.WriteString(strings.Repeat(fill, pad/2) + title + strings.Repeat(fill, pad-pad/2))
	}
	return strings.TrimRight(b.String(), " ")
}

// fmtInt formats n with thousands separators: 1,234,567.
func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtNum formats a non-negative measurement with about three significant
// digits and no exponent down to 1e-6: 1,234 · 34.2 · 0.953 · 0.0061.
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.IsInf(v, 0):
		return "∞"
	case v == 0:
		return "0"
	case math.Abs(v) >= 999.5:
		return fmtInt(int64(math.Round(v)))
	case math.Abs(v) < 1e-6:
		return strconv.FormatFloat(v, 'e', 1, 64)
	}
	decimals := max(2-int(math.Floor(math.Log10(math.Abs(v)))), 0)
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// fmtPerOp is fmtNum for per-operation averages, where anything below one
// in a thousand operations is shown as such rather than in exponent form.
func fmtPerOp(v float64) string {
	if v > 0 && v < countFloor {
		return "<0.001"
	}
	return fmtNum(v)
}

// fmtBytes formats a byte count in binary units: 512 B, 2.3 KiB, 150 MiB.
func fmtBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for math.Abs(v) >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		if v > 0 && v < 1 { // an average below one byte per operation
			return "<1 B"
		}
		return fmtNum(v) + " B"
	}
	return fmtNum(v) + " " + units[i]
}

// formatBytes is fmtBytes for flag defaults and headers.
func formatBytes(v float64) string { return fmtBytes(v) }

// fmtLatency formats nanoseconds with three significant digits in the
// largest unit that keeps the number >= 1: 850ns, 12.3µs, 1.45ms.
func fmtLatency(ns uint64) string {
	v := float64(ns)
	switch {
	case v < 1e3:
		return fmt.Sprintf("%.0fns", v)
	case v < 1e6:
		return sig3(v/1e3) + "µs"
	case v < 1e9:
		return sig3(v/1e6) + "ms"
	}
	return sig3(v/1e9) + "s"
}

// sig3 formats v (> 0) with three significant digits, keeping trailing
// zeros so columns of them line up: 0.0120, 1.20, 12.0, 120.
func sig3(v float64) string {
	decimals := max(2-int(math.Floor(math.Log10(v))), 0)
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// fmtPct formats a probability as a percentage with three significant
// digits: 0.0819 → 8.19%, 6.7e-5 → 0.00670%.
func fmtPct(p float64) string {
	if p <= 0 {
		return "0%"
	}
	return sig3(p*100) + "%"
}

// ratio is a/b, with the cases a report must not print as NaN spelled out:
// 0/0 is NaN ("–", nothing to compare), x/0 is +Inf ("∞").
func ratio(a, b float64) float64 {
	switch {
	case b != 0:
		return a / b
	case a == 0:
		return math.NaN()
	}
	return math.Inf(1)
}

// fmtRatio formats a ratio as a factor: 111×, 31.2×, 1.05×.
func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return fmtNum(r)
	}
	return fmtNum(r) + "×"
}

// perOp divides a total by an operation count (0 for no operations).
func perOp[T int64 | uint64](total T, ops int64) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(total) / float64(ops)
}
