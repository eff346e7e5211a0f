package engines

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomkv/bloomkv/bench/filters"
)

// BenchmarkSyncPut measures durable Puts (fsync per acknowledged write)
// from 1, 4 and 16 goroutines, as enginebench -sync-scaling does, on a
// fresh store per sub-benchmark; one op is one Put, b.N Puts shared out
// among the goroutines, and ops/s is reported. Keys cycle through 10^5
// (overwrites beyond that). -short: 1 and 4 goroutines only, bbolt-batch
// left out (its 10 ms batch delay makes a lone Put slow).
func BenchmarkSyncPut(b *testing.B) {
	writers := []int{1, 4, 16}
	if testing.Short() {
		writers = writers[:2]
	}
	const keys = 100_000
	w := newWorkload(Config{N: keys, ValueSize: 100, Ops: 1, Seed: filters.Seed})
	for _, spec := range SyncSpecs() {
		if testing.Short() && spec.Name == "bbolt-batch" {
			continue
		}
		for _, n := range writers {
			b.Run(fmt.Sprintf("%s/writers=%d", spec.Name, n), func(b *testing.B) {
				s, err := spec.Open(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer func() {
					if err := s.Close(); err != nil {
						b.Error(err)
					}
				}()
				var (
					next atomic.Int64
					wg   sync.WaitGroup
				)
				b.ResetTimer()
				for range n {
					wg.Go(func() {
						for {
							j := int(next.Add(1) - 1)
							if j >= b.N {
								return
							}
							i := j % keys
							if err := s.Put(w.present[i], w.value(i)); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}
