package engines

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var (
	coldPaired  = flag.String("engines.cold-paired", "bloomkv,pebble", "BenchmarkColdPaired: cold variants to compare, comma-separated")
	coldPairedN = flag.Int("engines.cold-n", 1_000_000, "BenchmarkColdPaired: keys per store")
)

// BenchmarkColdPaired compares cold hits of several stores side by side
// (ColdPairs): b.N rounds, each one Get of the same key on every store,
// after evicting them all. Run it with a fixed count, as the cold workload
// does 20,000 Gets:
//
//	go test -run '^$' -bench ColdPaired -benchtime 20000x ./engines
//
// It reports, per variant, ops/s over its own Gets' time, device bytes,
// major faults and CPU µs per Get, and each variant's ops/s relative to
// the first's. The stores are built once per benchmark run (the testing
// package calls a benchmark first with b.N = 1, then with the count) and
// reopened at each call after the first (ColdPairs.Run), so every count
// of -count is cold.
func BenchmarkColdPaired(b *testing.B) {
	if err := CheckDeviceCounters(); err != nil {
		b.Skip(err)
	}
	cfg := DefaultColdConfig()
	cfg.N = *coldPairedN
	if pairs == nil {
		var err error
		if pairs, err = NewColdPairs(strings.Split(*coldPaired, ","), cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	res, err := pairs.Run(b.N)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range res {
		b.ReportMetric(r.OpsPerSec, r.Engine+"-ops/s")
		b.ReportMetric(r.ReadBytesPerGet, r.Engine+"-B/get")
		b.ReportMetric(r.MajFaultsPerGet, r.Engine+"-majflt/get")
		b.ReportMetric(r.CPUMicrosPerGet, r.Engine+"-cpu-us/get")
		b.ReportMetric(r.OpsPerSec/res[0].OpsPerSec, r.Engine+"-vs-"+res[0].Engine)
	}
}

// pairs is BenchmarkColdPaired's stores, kept across its calls and closed
// by TestMain.
var pairs *ColdPairs

func TestMain(m *testing.M) {
	code := m.Run()
	if pairs != nil {
		if err := pairs.Close(); err != nil {
			println("closing the paired stores:", err.Error())
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

// TestColdPairsSmoke runs a small paired cold run: every variant answers
// every Get correctly (Run checks each value) and, its store evicted,
// reads the device.
func TestColdPairsSmoke(t *testing.T) {
	if err := CheckDeviceCounters(); err != nil {
		t.Skip(err)
	}
	cfg := ColdConfig{N: 3000, ValueSize: 100, Warm: 50, Seed: 3, Dir: t.TempDir()}
	p, err := NewColdPairs([]string{"bloomkv", "bloomkv-nommap", "pebble"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	for range 2 {
		// A second run reopens the stores and evicts them again: what the
		// first read is in no cache, and it reads the device too.
		res, err := p.Run(300)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 3 {
			t.Fatalf("%d results for 3 variants", len(res))
		}
		for _, r := range res {
			t.Logf("%+v", r)
			if r.OpsPerSec <= 0 || r.ReadBytesPerGet <= 0 {
				t.Errorf("%s: %+v: no Gets timed, or no device reads after eviction", r.Engine, r)
			}
		}
	}
	if _, err := NewColdPairs([]string{"no-such-store"}, cfg); err == nil {
		t.Error("NewColdPairs accepted an unknown variant")
	}
}
