package engines

import (
	"bytes"
	"testing"
)

// BenchmarkGetHit looks up present keys of a compacted, warm store in the
// workload's random order (benchStore: -engines.bench-n keys of
// -engines.bench-value bytes), through each engine's Get, which copies the
// value out; one op is one Get. cpu-ns/op is the process's CPU time per
// Get, steadier than ops/s on a shared machine. enginebench's get phase
// measures the same at its own scale.
func BenchmarkGetHit(b *testing.B) {
	for _, spec := range Specs() {
		b.Run(spec.Name, func(b *testing.B) {
			e, w := benchEngine(b, spec)
			var buf []byte
			cpu := cpuSeconds()
			i := 0
			for b.Loop() {
				k := w.order[i%len(w.order)]
				i++
				v, found, err := e.Get(buf[:0], w.present[k])
				if err != nil || !found || !bytes.Equal(v, w.value(int(k))) {
					b.Fatalf("Get of present key %d: found %v, %v", k, found, err)
				}
				buf = v
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric((cpuSeconds()-cpu)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkGetMiss is BenchmarkGetHit for absent keys, through each
// engine's plain Get (Pebble's DB.Get: enginebench's get-miss column uses
// an iterator with L6 filters for it instead).
func BenchmarkGetMiss(b *testing.B) {
	for _, spec := range Specs() {
		b.Run(spec.Name, func(b *testing.B) {
			e, w := benchEngine(b, spec)
			var buf []byte
			cpu := cpuSeconds()
			i := 0
			for b.Loop() {
				k := w.absent[i%len(w.absent)]
				i++
				if _, found, err := e.Get(buf[:0], k); err != nil || found {
					b.Fatalf("Get of absent key %x: found %v, %v", k, found, err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric((cpuSeconds()-cpu)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}
