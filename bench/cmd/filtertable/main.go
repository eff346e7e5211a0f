// Command filtertable measures bloomkv's Bloom filter and the other Go
// libraries in package filters on one deterministic key set and prints the
// results as a Markdown table.
//
// Each timing is the fastest of several passes over the whole key set: a
// pass touches every key once, and the filter's cache lines in random
// order as in real use. The fastest pass is the one least disturbed by
// other work on the machine, which is what varies between runs.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/bloomkv/bloomkv/bench/filters"
)

func main() {
	n := flag.Int("n", filters.N, "keys per filter")
	reps := flag.Int("reps", 7, "timed passes per measurement (the fastest is reported)")
	flag.Parse()
	if *n < 1 || *reps < 1 {
		fmt.Fprintln(os.Stderr, "filtertable: -n and -reps must be positive")
		os.Exit(2)
	}
	if err := run(os.Stdout, *n, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "filtertable:", err)
		os.Exit(1)
	}
}

// row is one line of the table; the timings are ns per key.
type row struct {
	im                   filters.Impl
	f                    filters.Filter
	q                    filters.Quality
	add, present, absent float64
}

func run(w io.Writer, n, reps int) error {
	present, absent := filters.GenerateKeys(n, filters.Seed)
	var rows []*row
	for _, im := range filters.Impls() {
		f := filters.Build(im, &present)
		q := filters.Measure(f, &present, &absent)
		if q.FalseNeg != 0 {
			return fmt.Errorf("%s: %d false negatives", im.Name(), q.FalseNeg)
		}
		inf := math.Inf(1)
		rows = append(rows, &row{im: im, f: f, q: q, add: inf, present: inf, absent: inf})
	}
	// Rounds interleave the libraries, so a burst of load from elsewhere
	// on the machine spoils one pass of each rather than every pass of one.
	for range reps {
		for _, r := range rows {
			r.add = min(r.add, timeAdd(r.im, &present))
			r.present = min(r.present, timeContains(r.f, &present))
			r.absent = min(r.absent, timeContains(r.f, &absent))
		}
	}
	return printTable(w, n, rows)
}

// timeAdd times building a filter of all keys into a fresh empty filter
// (allocating it is not timed). For Pebble this includes the Finish that
// sets the bits.
func timeAdd(im filters.Impl, ks *filters.Keys) float64 {
	f := im.New(ks.Len())
	start := time.Now()
	f.AddLoop(ks, ks.Len())
	f.Seal()
	return perKey(time.Since(start), ks.Len())
}

// timeContains times one query of every key of ks.
func timeContains(f filters.Filter, ks *filters.Keys) float64 {
	start := time.Now()
	f.ContainsLoop(ks, ks.Len())
	return perKey(time.Since(start), ks.Len())
}

func perKey(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }

func printTable(w io.Writer, n int, rows []*row) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "n = %d random %d-byte keys (seed %d), %d bits/key budget; %s %s/%s, %d CPUs, %s\n\n",
		n, filters.KeyLen, filters.Seed, filters.BitsPerKey,
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel())
	fmt.Fprintln(bw, "| library | layout | bits/key | k | measured FPR | add ns/op | contains-present ns/op | contains-absent ns/op |")
	fmt.Fprintln(bw, "|---|---|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		lib := r.im.Library
		switch r.im.Variant {
		case filters.VariantHash:
			lib += " (AddHash/ContainsHash, hash precomputed)"
		case filters.VariantExact:
			lib += " (NewGeometry, exactly n·10 bits)"
		}
		fmt.Fprintf(bw, "| %s | %s | %.2f | %d | %.3f%% | %.1f | %.1f | %.1f |\n",
			lib, r.im.Layout, r.q.BitsPerKey, r.q.K, 100*r.q.FPR, r.add, r.present, r.absent)
	}
	return bw.Flush()
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "unknown CPU".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
