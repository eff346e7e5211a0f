package segment

import (
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

// BenchmarkLookupMapped is a warm point read of a mapped, uncompressed
// segment (what a Get of a store with default options does after the
// filter said yes): every block resident and verified, so a read slices
// the mapping. It reports CPU time per read too, steadier than wall time
// on a shared machine. The 4 KiB cases compare values kept in their
// blocks (one entry per block) with values stored apart.
func BenchmarkLookupMapped(b *testing.B) {
	for _, c := range []struct {
		name     string
		valueLen int
		apart    int
	}{
		{"value=100", 100, 0},
		{"value=4096/inline", 4096, 0},
		{"value=4096/apart", 4096, 1024},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchLookupMapped(b, c.valueLen, WriterOptions{BitsPerKey: 10, SeparateValues: c.apart})
		})
	}
}

func benchLookupMapped(b *testing.B, valueLen int, opts WriterOptions) {
	r := openMappedBench(b, valueLen, opts)
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = benchKey(nil, (i*7919)%benchEntries)
	}
	for i := range benchEntries { // verify every block
		if _, _, _, found, err := r.Lookup(benchKey(nil, i), bloom.Hash(benchKey(nil, i)), base.MaxSeq); !found || err != nil {
			b.Fatal(found, err)
		}
	}
	b.ReportAllocs()
	c0 := cpuSeconds()
	i := 0
	for b.Loop() {
		k := keys[i&(len(keys)-1)]
		_, _, _, found, err := r.Lookup(k, bloom.Hash(k), base.MaxSeq)
		if !found || err != nil {
			b.Fatal(found, err)
		}
		i++
	}
	b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
}
