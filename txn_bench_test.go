package bloomkv

import (
	"sync/atomic"
	"testing"
)

// BenchmarkPutParallel: concurrent Puts of 16-byte keys and 100-byte
// values, which group commit gathers into shared WAL writes. With
// BenchmarkFillRandom, the measure of what transactions cost plain writes
// while none is open (the commit leader's one atomic load).
func BenchmarkPutParallel(b *testing.B) {
	db := mustOpen(b, b.TempDir(), nil)
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
