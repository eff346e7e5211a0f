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
	benchGets(b, func(e Engine, w *workload, i int, buf []byte) ([]byte, error) {
		k := w.order[i%len(w.order)]
		v, found, err := e.Get(buf[:0], w.present[k])
		if err == nil && (!found || !bytes.Equal(v, w.value(int(k)))) {
			b.Fatalf("Get of present key %d: found %v", k, found)
		}
		return v, err
	})
}

// BenchmarkGetMiss is BenchmarkGetHit for absent keys, through each
// engine's plain Get (Pebble's DB.Get: enginebench's get-miss column uses
// an iterator with L6 filters for it instead).
func BenchmarkGetMiss(b *testing.B) {
	benchGets(b, func(e Engine, w *workload, i int, buf []byte) ([]byte, error) {
		k := w.absent[i%len(w.absent)]
		v, found, err := e.Get(buf[:0], k)
		if err == nil && found {
			b.Fatalf("Get of absent key %x found it", k)
		}
		return v, err
	})
}

// benchGets runs get, the i-th lookup of a benchmark (buf is the last
// value, for reuse), on a store of each engine.
func benchGets(b *testing.B, get func(e Engine, w *workload, i int, buf []byte) ([]byte, error)) {
	for _, spec := range Specs() {
		b.Run(spec.Name, func(b *testing.B) {
			e, w := benchEngine(b, spec)
			var buf []byte
			cpu := cpuSeconds()
			i := 0
			for b.Loop() {
				v, err := get(e, w, i, buf)
				if err != nil {
					b.Fatal(err)
				}
				buf, i = v, i+1
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric((cpuSeconds()-cpu)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}
