package engines

import (
	"flag"
	"testing"

	"github.com/bloomkv/bloomkv/bench/filters"
)

// benchKeys is the store size of the scan benchmarks. The default keeps a
// run of all of them to about a minute; -engines.bench-n 1000000 matches
// enginebench's store.
var benchKeys = flag.Int("engines.bench-n", 100_000, "keys in the stores of BenchmarkScan* (-short: 2000)")

// benchValue is the value size of the scan benchmarks' stores.
var benchValue = flag.Int("engines.bench-value", 100, "value size in bytes of the stores of BenchmarkScan*")

func init() {
	flag.BoolVar(&ScanRead, "engines.scan-read", false, "the scan benchmarks read every key and value they take (ScanRead), not only their lengths")
}

// benchStore fills a store for spec with the workload's keys, compacts it,
// warms the page cache, reopens it and does one untimed full scan, as
// enginebench's read phase would; the store is closed when b ends.
func benchStore(b *testing.B, spec Spec) (Scanner, *workload) {
	b.Helper()
	e, w := benchEngine(b, spec)
	return e.(Scanner), w
}

// benchEngine is benchStore returning the Engine.
func benchEngine(b *testing.B, spec Spec) (Engine, *workload) {
	b.Helper()
	n := *benchKeys
	if testing.Short() {
		n = 2000
	}
	w := newWorkload(Config{N: n, ValueSize: *benchValue, Ops: 1, Seed: filters.Seed})
	dir := b.TempDir()
	if err := w.build(spec, dir, &Result{}); err != nil {
		b.Fatal(err)
	}
	if err := warmPageCache(dir); err != nil {
		b.Fatal(err)
	}
	e, err := spec.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Close(); err != nil {
			b.Error(err)
		}
	})
	sc, ok := e.(Scanner)
	if !ok {
		b.Fatalf("%s does not implement Scanner", spec.Name)
	}
	if keys, _, err := sc.Scan(nil, -1); err != nil || keys != n {
		b.Fatalf("untimed full scan: %d keys of %d, %v", keys, n, err)
	}
	return e, w
}

// BenchmarkScanFull scans every key of a compacted store in order; one op
// is one full scan. MB/s counts key and value bytes; cpu-ns/key is the
// process's CPU time per key, steadier than the wall time on a shared,
// loaded machine.
func BenchmarkScanFull(b *testing.B) {
	for _, spec := range Specs() {
		b.Run(spec.Name, func(b *testing.B) {
			sc, w := benchStore(b, spec)
			benchFullScan(b, w, func() (int, int64, error) { return sc.Scan(nil, -1) })
		})
	}
}

// BenchmarkScanFullReverse is BenchmarkScanFull backward, from the last key
// (the engines that implement ReverseScanner).
func BenchmarkScanFullReverse(b *testing.B) {
	for _, spec := range Specs() {
		b.Run(spec.Name, func(b *testing.B) {
			sc, w := benchStore(b, spec)
			rs, ok := sc.(ReverseScanner)
			if !ok {
				b.Skipf("%s does not implement ReverseScanner", spec.Name)
			}
			benchFullScan(b, w, rs.ScanReverse)
		})
	}
}

func benchFullScan(b *testing.B, w *workload, scan func() (int, int64, error)) {
	var total int64
	for _, k := range w.present {
		total += int64(len(k) + w.cfg.ValueSize)
	}
	b.SetBytes(total)
	cpu := cpuSeconds()
	for b.Loop() {
		keys, n, err := scan()
		if err != nil || keys != w.cfg.N || n != total {
			b.Fatalf("full scan: %d keys, %d bytes, %v; want %d, %d", keys, n, err, w.cfg.N, total)
		}
	}
	b.ReportMetric(float64(b.N*w.cfg.N)/b.Elapsed().Seconds(), "keys/s")
	b.ReportMetric((cpuSeconds()-cpu)*1e9/float64(b.N*w.cfg.N), "cpu-ns/key")
}

// BenchmarkScan100 runs short range scans: a new iterator, a seek to a
// present key (in the workload's random order), then up to scanLen keys;
// one op is one scan.
func BenchmarkScan100(b *testing.B) {
	for _, spec := range Specs() {
		b.Run(spec.Name, func(b *testing.B) {
			sc, w := benchStore(b, spec)
			rank := w.ranks()
			scans, keysRead := 0, 0
			cpu := cpuSeconds()
			for b.Loop() {
				i := w.order[scans%len(w.order)]
				scans++
				keys, _, err := sc.Scan(w.present[i], scanLen)
				if want := min(scanLen, w.cfg.N-int(rank[i])); err != nil || keys != want {
					b.Fatalf("range scan from key %d: %d keys, %v; want %d", i, keys, err, want)
				}
				keysRead += keys
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "scans/s")
			b.ReportMetric(float64(keysRead)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric((cpuSeconds()-cpu)*1e9/float64(keysRead), "cpu-ns/key")
		})
	}
}
