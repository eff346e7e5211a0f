package bloom

import (
	"math/rand/v2"
	"testing"
)

// The benchmarks use the store's typical filter: 10^6 random 16-byte keys
// at 10 bits per key, in both layouts. Key sets are built once per
// benchmark, outside the timed loop (b.Loop).

const (
	benchN   = 1_000_000
	benchBPK = 10
)

// benchKeys returns n random 16-byte keys from a fixed seed; different
// seeds give disjoint sets in practice (2^-128 collision chance per pair).
func benchKeys(seed uint64, n int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	buf := make([]byte, 16*n)
	for i := 0; i < len(buf); i += 8 {
		le.PutUint64(buf[i:], rng.Uint64())
	}
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = buf[16*i : 16*i+16 : 16*i+16]
	}
	return keys
}

func benchFilter(b *testing.B, layout Layout, keys [][]byte) *Filter {
	f := mustGeometry(b, GeometryFor(layout, len(keys), benchBPK))
	for _, k := range keys {
		f.Add(k)
	}
	return f
}

func forLayouts(b *testing.B, fn func(b *testing.B, layout Layout)) {
	for _, layout := range []Layout{Blocked, Classic} {
		b.Run(layout.String(), func(b *testing.B) { fn(b, layout) })
	}
}

func BenchmarkAdd(b *testing.B) {
	forLayouts(b, func(b *testing.B, layout Layout) {
		keys := benchKeys(1, benchN)
		f := mustGeometry(b, GeometryFor(layout, benchN, benchBPK))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			f.Add(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

func BenchmarkContainsPresent(b *testing.B) {
	forLayouts(b, func(b *testing.B, layout Layout) {
		keys := benchKeys(1, benchN)
		f := benchFilter(b, layout, keys)
		b.ReportAllocs()
		i, found := 0, 0
		for b.Loop() {
			if f.Contains(keys[i]) {
				found++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		b.ReportMetric(f.BitsPerKey(), "bits/key")
		if found != b.N {
			b.Fatalf("%d of %d present keys found", found, b.N)
		}
	})
}

func BenchmarkContainsAbsent(b *testing.B) {
	forLayouts(b, func(b *testing.B, layout Layout) {
		f := benchFilter(b, layout, benchKeys(1, benchN))
		absent := benchKeys(2, benchN)
		b.ReportAllocs()
		i, fp := 0, 0
		for b.Loop() {
			if f.Contains(absent[i]) {
				fp++
			}
			if i++; i == len(absent) {
				i = 0
			}
		}
		b.ReportMetric(100*float64(fp)/float64(b.N), "FPR%")
		b.ReportMetric(f.BitsPerKey(), "bits/key")
	})
}

func BenchmarkHash(b *testing.B) {
	keys := benchKeys(1, 1024)
	b.ReportAllocs()
	var sink uint64
	i := 0
	for b.Loop() {
		sink += Hash(keys[i&1023])
		i++
	}
	_ = sink
}

func BenchmarkUnion(b *testing.B) {
	forLayouts(b, func(b *testing.B, layout Layout) {
		f := benchFilter(b, layout, benchKeys(1, benchN))
		other := benchFilter(b, layout, benchKeys(2, benchN))
		b.ReportAllocs()
		b.SetBytes(int64(f.SizeBytes()))
		for b.Loop() {
			if err := f.Union(other); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkFold(b *testing.B) {
	forLayouts(b, func(b *testing.B, layout Layout) {
		f := benchFilter(b, layout, benchKeys(1, benchN))
		b.ReportAllocs()
		b.SetBytes(int64(f.SizeBytes()))
		for b.Loop() {
			// Fold replaces the bit array and leaves the old one alone,
			// so a shallow copy of the full filter is a fresh input.
			h := *f
			if err := h.Fold(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
