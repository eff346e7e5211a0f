package segment

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// scanBenchCases are the segments the scan benchmarks walk: small and
// 100-byte values inline, 4 KiB values stored apart, and small values in
// blocks without a hash index, whose restart intervals hold 16 entries
// (as in segments of format versions before 4): there the prev cache
// holds 15 entries at a time, where elsewhere it holds one or none.
var scanBenchCases = []struct {
	name     string
	valueLen int
	apart    int
	noHash   bool
}{
	{"value=10", 10, 0, false},
	{"value=100", 100, 0, false},
	{"value=4096/apart", 4096, 1024, false},
	{"value=10/nohash", 10, 0, true},
}

// scanAll walks every entry of r, forward (First, Next) or backward
// (Last, Prev), reading each key and value length, and returns the bytes
// it counted.
func scanAll(b *testing.B, r *Reader, reverse bool) int {
	it := r.NewIter(false)
	defer it.Close()
	ok, step := it.First, it.Next
	if reverse {
		ok, step = it.Last, it.Prev
	}
	n := 0
	for valid := ok(); valid; valid = step() {
		n += len(it.Key()) + len(it.Value())
	}
	if err := it.Error(); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkScanMapped walks every entry of a mapped, uncompressed segment,
// forward (First, Next) or backward (Last, Prev), as a store's full scan
// does, reading each key and value length; the blocks and value records
// are resident and verified by an untimed first pass. It reports the CPU
// time per entry, steadier than wall time on a shared machine, so that the
// two directions compare within one run.
func BenchmarkScanMapped(b *testing.B) {
	for _, c := range scanBenchCases {
		for _, reverse := range []bool{false, true} {
			name := c.name + "/forward"
			if reverse {
				name = c.name + "/reverse"
			}
			b.Run(name, func(b *testing.B) {
				r := openMappedBench(b, c.valueLen, WriterOptions{BitsPerKey: 10, SeparateValues: c.apart, NoHashIndex: c.noHash})
				scan := func() int { return scanAll(b, r, reverse) }
				want := scan()
				b.ReportAllocs()
				c0 := cpuSeconds()
				for b.Loop() {
					if n := scan(); n != want {
						b.Fatalf("scan read %d bytes, want %d", n, want)
					}
				}
				b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N*benchEntries), "cpu-ns/entry")
			})
		}
	}
}

// openMappedBench writes benchEntries entries of valueLen-byte values to
// a file and opens it mapped.
func openMappedBench(b *testing.B, valueLen int, opts WriterOptions) *Reader {
	path := filepath.Join(b.TempDir(), "bench.seg")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	benchWriteValues(b, f, opts, valueLen)
	st, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Munmap(m) })
	r, err := Open(f, st.Size(), ReaderOptions{Counters: &Counters{}, FileNum: 1, Mapped: m})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkScanMappedBothWays is BenchmarkScanMapped with a forward and a
// backward scan in each iteration, one after the other, so that the two
// directions meet the same load on a shared machine: it reports each
// one's CPU time per entry and backward's rate relative to forward's
// (fwd/rev, 1 where backward is as fast).
func BenchmarkScanMappedBothWays(b *testing.B) {
	for _, c := range scanBenchCases {
		b.Run(c.name, func(b *testing.B) {
			r := openMappedBench(b, c.valueLen, WriterOptions{BitsPerKey: 10, SeparateValues: c.apart, NoHashIndex: c.noHash})
			scan := func(reverse bool) int { return scanAll(b, r, reverse) }
			want := scan(false)
			var fwd, rev float64
			for b.Loop() {
				c0 := cpuSeconds()
				n := scan(false)
				c1 := cpuSeconds()
				if m := scan(true); n != want || m != want {
					b.Fatalf("scans read %d and %d bytes, want %d", n, m, want)
				}
				fwd, rev = fwd+c1-c0, rev+cpuSeconds()-c1
			}
			b.ReportMetric(fwd*1e9/float64(b.N*benchEntries), "fwd-cpu-ns/entry")
			b.ReportMetric(rev*1e9/float64(b.N*benchEntries), "rev-cpu-ns/entry")
			b.ReportMetric(fwd/rev, "fwd/rev")
		})
	}
}
