package bloomkv

import (
	"sync/atomic"
	"testing"
)

// BenchmarkPutParallelSync is BenchmarkPutParallel with Options.Sync:
// every Put is acknowledged only once an fsync covers it, so what it
// measures is how well group commit shares fsyncs among writers (one per
// -cpu) and overlaps them with the next group's write.
func BenchmarkPutParallelSync(b *testing.B) {
	o := DefaultOptions()
	o.Sync = true
	db := mustOpen(b, b.TempDir(), o)
	defer db.Close()
	b.ReportAllocs()
	b.SetBytes(116)
	var n atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		var k [16]byte
		v := make([]byte, 100)
		for pb.Next() {
			i := n.Add(1)
			if err := db.Put(benchKey(k[:], i), benchValue(v, i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
