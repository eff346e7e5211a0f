package bloomkv

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkCompactValues measures one major compaction of a store of
// 4 KiB values stored apart (20,000 keys in 10 segments, default options
// but no background compactions), random or compressible: the time and
// CPU time of Compact per value merged. Each iteration compacts a fresh
// copy of the same store, made outside the timer.
func BenchmarkCompactValues(b *testing.B) {
	for _, compressible := range []bool{false, true} {
		b.Run(fmt.Sprintf("compressible=%v", compressible), func(b *testing.B) {
			const n, segs = 20000, 10
			o := DefaultOptions()
			o.DisableAutoCompaction = true
			src := b.TempDir()
			db := mustOpen(b, src, o)
			rng := rand.New(rand.NewPCG(1, 2))
			v := make([]byte, 4096)
			for i := range n {
				for j := range v {
					v[j] = byte(rng.UintN(256))
					if compressible && j%8 != 0 {
						v[j] = 'x'
					}
				}
				mustDo(b, db.Put(fmt.Appendf(nil, "key-%08d", rng.IntN(n*4)), v))
				if (i+1)%(n/segs) == 0 {
					mustDo(b, db.Flush())
				}
			}
			mustDo(b, db.Close())
			var cpu float64
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				dir := filepath.Join(b.TempDir(), "db")
				copyStoreDir(b, src, dir)
				db := mustOpen(b, dir, o)
				b.StartTimer()
				c := cpuSeconds()
				mustDo(b, db.Compact())
				cpu += cpuSeconds() - c
				b.StopTimer()
				mustDo(b, db.Close())
				b.StartTimer()
			}
			b.ReportMetric(cpu*1e9/float64(b.N*n), "cpu-ns/value")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
		})
	}
}

// copyStoreDir copies the files of the store in src to a new directory dst.
func copyStoreDir(b *testing.B, src, dst string) {
	b.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		b.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			b.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
