package main

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil || !reflect.DeepEqual(cfg, defaultConfig()) {
		t.Fatalf("no flags: %+v, %v; want the defaults", cfg, err)
	}
	cfg, err = parseFlags(strings.Fields("-keys 5000 -ops 100 -cache-size 1MiB -memtable-size 128k -baseline bbolt -duration 2s -hit-ratio 0.25 -compression zstd -readers 1,4,16 -cold-ops 300"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Keys != 5000 || cfg.Ops != 100 || cfg.CacheSize != 1<<20 || cfg.MemtableSize != 128<<10 ||
		cfg.Baseline != "bbolt" || cfg.Duration != 2*time.Second || cfg.HitRatio != 0.25 || cfg.Compression != "zstd" ||
		!slices.Equal(cfg.Readers, []int{1, 4, 16}) || cfg.ColdOps != 300 {
		t.Errorf("parsed %+v", cfg)
	}
}

func TestParseFlagsRejects(t *testing.T) {
	for _, args := range []string{
		"-keys 0", "-hit-ratio 1.5", "-baseline leveldb", "-cache-size lots", "-memtable-size 1KiB",
		"-ops 0 -duration 0s", "-bits-per-key -1", "subcommand", "-neg-segments 0", "-cold-ops 0", "-compression lz4",
		"-readers 0", "-readers 1,x", "-readers 4,",
		"-ops -5",                                          // not a silent fall back to -duration
		"-fpr-keys 99999999999", "-fpr-probes 99999999999", // would fail only at the end of the run
		"-plot fpr.txt", // a format gonum cannot write, found only after the run
	} {
		if _, err := parseFlags(strings.Fields(args), io.Discard); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out strings.Builder
	_, err := parseFlags([]string{"-h"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h returned %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"fill-seq", "get-miss", "disk reads avoided", "Bigtable", "-drop-cache", "-json", "-plot", "-baseline", "-hit-ratio", "scan-100", "-fill-report-keys", "-compression", "-cold-ops"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not mention %q", want)
		}
	}
}

// TestBitsPerKeyFlag: -bits-per-key 0 means what Options.BitsPerKey 0
// means (the default), and -disable-filters turns filters off.
func TestBitsPerKeyFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want float64
	}{
		{nil, 10},
		{[]string{"-bits-per-key", "0"}, 10},
		{[]string{"-bits-per-key", "7"}, 7},
		{[]string{"-disable-filters"}, 0},
		{[]string{"-bits-per-key", "7", "-disable-filters"}, 0},
	} {
		cfg, err := parseFlags(tc.args, io.Discard)
		if err != nil || cfg.BitsPerKey != tc.want {
			t.Errorf("%q: BitsPerKey %v, %v; want %v", tc.args, cfg.BitsPerKey, err, tc.want)
		}
	}
}

// TestCompressionFlag checks that -compression reaches the stores' options.
func TestCompressionFlag(t *testing.T) {
	for _, name := range []string{"snappy", "none", "zstd"} {
		cfg, err := parseFlags([]string{"-compression", name}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		s, err := openBloomkv(t.TempDir(), cfg, 10, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.opts.Compression.String(); got != name {
			t.Errorf("-compression %s: store opened with %s", name, got)
		}
		s.close()
	}
}
