package main

import (
	"strings"
	"testing"
)

const sampleProcIO = `rchar: 6976
wchar: 120
syscr: 10
syscw: 3
read_bytes: 4096
write_bytes: 8192
cancelled_write_bytes: 0
`

func TestParseProcIO(t *testing.T) {
	got, err := parseProcIO([]byte(sampleProcIO))
	if err != nil {
		t.Fatal(err)
	}
	want := procIO{RChar: 6976, WChar: 120, SyscR: 10, SyscW: 3, ReadBytes: 4096, WriteBytes: 8192}
	if got != want {
		t.Errorf("parseProcIO = %+v, want %+v", got, want)
	}
}

func TestParseProcIOErrors(t *testing.T) {
	for name, text := range map[string]string{
		"missing field": strings.Replace(sampleProcIO, "syscw: 3\n", "", 1),
		"bad number":    strings.Replace(sampleProcIO, "syscr: 10", "syscr: ten", 1),
		"negative":      strings.Replace(sampleProcIO, "rchar: 6976", "rchar: -1", 1),
		"empty":         "",
	} {
		if got, err := parseProcIO([]byte(text)); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, got)
		}
	}
	// Lines the parser does not know are ignored, as newer kernels may add some.
	if _, err := parseProcIO([]byte(sampleProcIO + "new_counter: 5\nnot a line\n")); err != nil {
		t.Errorf("unknown lines: %v", err)
	}
}

func TestProcIOSince(t *testing.T) {
	before := procIO{RChar: 1000, SyscR: 10, ReadBytes: 4096, MajFlt: 1, sampleBytes: 130}
	after := procIO{RChar: 1000 + 130 + 500, SyscR: 10 + 2 + 5, ReadBytes: 8192, MajFlt: 4}
	cost := procIO{SyscR: 2, RChar: 120} // RChar of the cost is replaced by before's sample size
	got := after.since(before, cost)
	want := procIO{RChar: 500, SyscR: 5, ReadBytes: 4096, MajFlt: 3}
	if got != want {
		t.Errorf("since = %+v, want %+v", got, want)
	}
	// A quiet interval never goes below zero.
	if got := before.since(before, cost); got != (procIO{}) {
		t.Errorf("since of an unchanged sample = %+v, want zeros", got)
	}
}

func TestReadProcIOMeasuresItself(t *testing.T) {
	a, ok := readProcIO()
	if !ok {
		t.Skip("no /proc/self/io here")
	}
	b, _ := readProcIO()
	if b.SyscR <= a.SyscR || b.RChar < a.RChar+a.sampleBytes {
		t.Errorf("reading /proc/self/io did not show in it: %+v then %+v", a, b)
	}
	c, _ := readProcIO()
	if got := c.since(b, b.sub(a)); got.SyscR != 0 || got.RChar != 0 {
		t.Errorf("back-to-back samples minus the probe cost = %+v, want no reads", got)
	}
}
