package bloomkv

import (
	"fmt"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/segment"
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

// BenchmarkFlush times DB.Flush of a memtable filled to about 85% of the
// default 4 MiB with random 16-byte keys and 100-byte values (as
// enginebench's fill-latency times it): a flush is what a stalled writer
// waits for, so its time bounds a write stall. The Puts are not timed;
// cpu-ns/op is the process's CPU time during the Flush calls. No merge
// runs beside them (DisableAutoCompaction), so that they time the flush.
func BenchmarkFlush(b *testing.B) {
	o := DefaultOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(b, b.TempDir(), o)
	defer db.Close()
	const entries = 4 << 20 * 85 / 100 / (16 + 100 + 80)
	var k [16]byte
	v := make([]byte, 100)
	b.SetBytes(entries * (16 + 100))
	var cpu float64
	next := uint64(0)
	for b.Loop() {
		b.StopTimer()
		for range entries {
			if err := db.Put(benchKey(k[:], next), benchValue(v, next)); err != nil {
				b.Fatal(err)
			}
			next++
		}
		c0 := cpuSeconds()
		b.StartTimer()
		if err := db.Flush(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuSeconds() - c0
		b.StartTimer()
	}
	b.ReportMetric(cpu*1e9/float64(b.N), "cpu-ns/op")
}

// TestChunkSize: flushes and merges of small segments write in default
// chunks; a merge of hugeSegmentBytes or more writes huge chunks.
func TestChunkSize(t *testing.T) {
	seg := func(size int64) *segHandle { return &segHandle{meta: base.SegmentMeta{Size: size}} }
	for _, c := range []struct {
		replaces []*segHandle
		want     int
	}{
		{nil, segment.DefaultChunkSize},
		{[]*segHandle{seg(4 << 20), seg(4 << 20)}, segment.DefaultChunkSize},
		{[]*segHandle{seg(hugeSegmentBytes/2 - 1), seg(hugeSegmentBytes / 2)}, segment.DefaultChunkSize},
		{[]*segHandle{seg(hugeSegmentBytes / 2), seg(hugeSegmentBytes / 2)}, segment.HugeChunkSize},
	} {
		if got := chunkSize(c.replaces); got != c.want {
			t.Errorf("chunkSize of %d inputs = %d, want %d", len(c.replaces), got, c.want)
		}
	}
}

// BenchmarkFlushBesideSnapshots: a flush of a memtable of 10^4 keys,
// each written twice, with s snapshots open, one taken after each of the
// first s writes; ns/key is per key flushed. The versions kept grow with
// the snapshots, the cost of a key by a binary search among them.
func BenchmarkFlushBesideSnapshots(b *testing.B) {
	for _, s := range []int{0, 1_000, 10_000} {
		b.Run(fmt.Sprint("snapshots=", s), func(b *testing.B) {
			const keys = 10_000
			db := mustOpen(b, b.TempDir(), &Options{MemtableSize: 64 << 20, DisableAutoCompaction: true})
			defer db.Close()
			var snaps []*Snapshot
			for b.Loop() {
				b.StopTimer()
				for round := range 2 {
					for i := range keys {
						mustDo(b, db.Put(fmt.Appendf(nil, "k%06d", i), fmt.Appendf(nil, "v%d", round)))
						if len(snaps) < s {
							sn, err := db.NewSnapshot()
							mustDo(b, err)
							snaps = append(snaps, sn)
						}
					}
				}
				b.StartTimer()
				mustDo(b, db.Flush())
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
			for _, sn := range snaps {
				sn.Close()
			}
		})
	}
}
