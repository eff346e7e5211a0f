package segment

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

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

// BenchmarkSeekMapped is an Iter's SeekGE in a mapped, verified segment
// of 100-byte values, one Iter reused, over every key in a random order:
// to keys the segment holds (present, which a data block's hash index
// answers) and to keys just after them (absent, which take the binary
// search of the block's restart points). The segment's blocks are
// uncompressed, or (snappy) compressed: an Iter that does not fill the
// cache, as a store's scans do not, decodes such a block at every seek.
// It reports CPU time per seek.
func BenchmarkSeekMapped(b *testing.B) {
	for _, c := range []struct {
		name    string
		present bool
		codec   Compression
	}{
		{"present", true, NoCompression},
		{"absent", false, NoCompression},
		{"present/snappy", true, SnappyCompression},
	} {
		present := c.present
		b.Run(c.name, func(b *testing.B) {
			r := openMappedBench(b, 100, WriterOptions{BitsPerKey: 10, Compression: c.codec})
			scanAll(b, r, false) // reads and verifies every block
			keys := make([][]byte, benchEntries-1)
			for i, j := range rand.New(rand.NewPCG(1, 2)).Perm(len(keys)) {
				keys[i] = benchKey(nil, j)
				if !present {
					keys[i] = append(keys[i], 0)
				}
			}
			it := r.NewIter(false)
			defer it.Close()
			b.ReportAllocs()
			c0 := cpuSeconds()
			i := 0
			for b.Loop() {
				if !it.SeekGE(keys[i%len(keys)]) {
					b.Fatal(it.Error())
				}
				i++
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkLookupMappedFirstRead is a point read of a mapped segment whose
// pages are in the page cache but which this Reader has not read yet: the
// first read of each block or value record, which the Reader verifies and
// (warm segment) may ask the page cache about (firstResident). Each pass
// looks every key up once in a random order, on a fresh mapping and
// Reader, so every read touches pages new to the mapping (page faults,
// TLB and cache misses) as a store's first reads do. cpu-ns/op is the
// process's CPU time per read, the reopening left out.
func BenchmarkLookupMappedFirstRead(b *testing.B) {
	const entries = 20_000
	for _, c := range []struct {
		name  string
		apart int
	}{
		{"value=4096/inline", 0},
		{"value=4096/apart", 1024},
	} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "first.seg")
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			w := NewWriter(f, WriterOptions{BitsPerKey: 10, SeparateValues: c.apart})
			value := make([]byte, 4096)
			for i := range entries {
				binary.LittleEndian.PutUint64(value, uint64(i))
				if err := w.Add(benchKey(nil, i), 1, base.KindPut, value); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := w.Finish(); err != nil {
				b.Fatal(err)
			}
			st, err := f.Stat()
			if err != nil {
				b.Fatal(err)
			}
			order := rand.New(rand.NewPCG(1, 2)).Perm(entries)
			keys := make([][]byte, entries)
			for i, k := range order {
				keys[i] = benchKey(nil, k)
			}
			var r *Reader
			var m []byte
			reopen := func() {
				if m != nil {
					unix.Munmap(m)
				}
				if m, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED); err != nil {
					b.Fatal(err)
				}
				if err := unix.Madvise(m, unix.MADV_RANDOM); err != nil {
					b.Fatal(err)
				}
				if r, err = Open(f, st.Size(), ReaderOptions{Counters: &Counters{}, FileNum: 1, Mapped: m}); err != nil {
					b.Fatal(err)
				}
			}
			reopen()
			defer func() { unix.Munmap(m) }()
			b.ReportAllocs()
			cpu, reopens := cpuSeconds(), 0.0
			i := 0
			for b.Loop() {
				if i == len(keys) {
					b.StopTimer()
					c0 := cpuSeconds()
					reopen()
					reopens += cpuSeconds() - c0
					i = 0
					b.StartTimer()
				}
				k := keys[i]
				v, _, _, found, err := r.Lookup(k, bloom.Hash(k), base.MaxSeq)
				if !found || err != nil || binary.LittleEndian.Uint64(v) != uint64(order[i]) {
					b.Fatal(found, err)
				}
				i++
			}
			b.ReportMetric((cpuSeconds()-cpu-reopens)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}
