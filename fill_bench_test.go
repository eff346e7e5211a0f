package bloomkv

import (
	"fmt"
	"testing"
)

// BenchmarkFillValues is BenchmarkFillRandom (one Put per op, random
// 16-byte keys, no fsync) at 100-byte and 4 KiB values, reporting the
// process's CPU time per Put (cpu-ns/op: the writer's and the background
// flushes' and compactions'), which a shared, loaded machine disturbs less
// than ns/op.
func BenchmarkFillValues(b *testing.B) {
	for _, size := range []int{100, 4096} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			db := mustOpen(b, b.TempDir(), nil)
			defer db.Close()
			var k [16]byte
			v := make([]byte, size)
			b.ReportAllocs()
			b.SetBytes(int64(16 + size))
			cpu := cpuSeconds()
			for i := range b.N {
				if err := db.Put(benchKey(k[:], uint64(i)), benchValue(v, uint64(i))); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((cpuSeconds()-cpu)*1e9/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
