package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestFmtInt(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 1234567: "1,234,567", -45678: "-45,678"} {
		if got := fmtInt(n); got != want {
			t.Errorf("fmtInt(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFmtNum(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0"}, {1, "1"}, {34.24, "34.2"}, {0.9531, "0.953"}, {0.00612, "0.00612"},
		{999.4, "999"}, {999.6, "1,000"}, {123456.7, "123,457"}, {2.5e-8, "2.5e-08"},
		{math.NaN(), "–"}, {math.Inf(1), "∞"},
	}
	for _, tt := range tests {
		if got := fmtNum(tt.v); got != tt.want {
			t.Errorf("fmtNum(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestFmtPerOp(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.0004: "<0.001", 0.001: "0.001", 0.0415: "0.0415", 6.34: "6.34"} {
		if got := fmtPerOp(v); got != want {
			t.Errorf("fmtPerOp(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestFmtBytes(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0 B"}, {0.3, "<1 B"}, {512, "512 B"}, {2355, "2.3 KiB"}, {8 << 20, "8 MiB"}, {3.5 * (1 << 30), "3.5 GiB"},
	}
	for _, tt := range tests {
		if got := fmtBytes(tt.v); got != tt.want {
			t.Errorf("fmtBytes(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestFmtLatencyAndPct(t *testing.T) {
	for ns, want := range map[uint64]string{0: "0ns", 850: "850ns", 1000: "1.00µs", 12345: "12.3µs", 1450000: "1.45ms", 2e9: "2.00s"} {
		if got := fmtLatency(ns); got != want {
			t.Errorf("fmtLatency(%d) = %q, want %q", ns, got, want)
		}
	}
	for p, want := range map[float64]string{0: "0%", 0.0819: "8.19%", 6.7e-5: "0.00670%", 0.14: "14.0%"} {
		if got := fmtPct(p); got != want {
			t.Errorf("fmtPct(%v) = %q, want %q", p, got, want)
		}
	}
}

func TestRatio(t *testing.T) {
	if got := ratio(96, 0.8); math.Abs(got-120) > 1e-9 {
		t.Errorf("ratio(96, 0.8) = %v, want 120", got)
	}
	if got := ratio(0, 0); !math.IsNaN(got) {
		t.Errorf("ratio(0, 0) = %v, want NaN", got)
	}
	if got := ratio(3, 0); !math.IsInf(got, 1) {
		t.Errorf("ratio(3, 0) = %v, want +Inf", got)
	}
	for r, want := range map[float64]string{111.4: "111×", 31.24: "31.2×", 1.049: "1.05×", math.Inf(1): "∞", math.NaN(): "–"} {
		if got := fmtRatio(r); got != want {
			t.Errorf("fmtRatio(%v) = %q, want %q", r, got, want)
		}
	}
	if got := perOp(uint64(300), 200); got != 1.5 {
		t.Errorf("perOp(300, 200) = %v, want 1.5", got)
	}
	if got := perOp(int64(300), 0); got != 0 {
		t.Errorf("perOp(300, 0) = %v, want 0", got)
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{"0": 0, "8388608": 8 << 20, "8MiB": 8 << 20, "8m": 8 << 20, "512 KiB": 512 << 10, "1G": 1 << 30, "64kb": 64 << 10, "100B": 100}
	for in, want := range good {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "8 TiB", "99999999999999999999", "4611686018427387904G"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestTableWrite(t *testing.T) {
	tb := &table{
		groups: []group{{"", 1}, {"pair", 2}},
		header: []string{"name", "a", "b"},
	}
	tb.add("first", "1", "22")
	tb.add("x", "333", "4")
	var buf bytes.Buffer
	tb.write(&buf)
	// Columns: name 5 wide, a 3, b 2, two spaces apart; the group spans
	// a and b (7 characters): too narrow for dashes, so it is centred.
	want := strings.Join([]string{
		"        pair",
		"name     a   b",
		"first    1  22",
		"x      333   4",
		"",
	}, "\n")
	if buf.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", buf.String(), want)
	}

	wide := &table{groups: []group{{"", 1}, {"g", 1}}, header: []string{"n", "column"}}
	buf.Reset()
	wide.write(&buf)
	if want := "   - g --\nn  column\n"; buf.String() != want {
		t.Errorf("wide group:\n%q\nwant\n%q", buf.String(), want)
	}
}
