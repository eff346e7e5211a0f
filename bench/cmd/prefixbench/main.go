// Command prefixbench compares prefix lookups on bloomkv, with its prefix
// filters (Options.Prefix) and without, against Pebble's SeekPrefixGE
// under a Comparer.Split with its bloom filter policy, on the same data:
// N 16-byte keys, each an 8-byte prefix and an 8-byte suffix, 16 keys per
// prefix, written a prefix at a time in random prefix order; then, on the
// settled store, lookups of random present prefixes (16 keys each, read
// to the end) and of absent ones (a prefix one bit from a present one),
// for -dur each. It prints a Markdown table with ratios to bloomkv with
// prefix filters.
//
//	go run ./cmd/prefixbench [-n 1000000] [-value 100] [-dur 2s]
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/bloomkv/bloomkv/bench/engines"
)

const keysPerPrefix = 16

type config struct {
	N         int
	ValueSize int
	Dur       time.Duration
	Seed      uint64
	Dir       string
}

// result is one store's row.
type result struct {
	Name            string
	Layout          string
	FillPerSec      float64
	Present, Absent float64 // lookups per second
}

func main() {
	var cfg config
	flag.IntVar(&cfg.N, "n", 1_000_000, "keys (16 per prefix)")
	flag.IntVar(&cfg.ValueSize, "value", 100, "value size in bytes")
	flag.DurationVar(&cfg.Dur, "dur", 2*time.Second, "time per lookup workload")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	flag.StringVar(&cfg.Dir, "dir", "", "where the temporary stores go (default: the system's temp dir)")
	flag.Parse()
	if err := run(os.Stdout, os.Stderr, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "prefixbench:", err)
		os.Exit(1)
	}
}

func run(out, progress io.Writer, cfg config) error {
	if cfg.N < keysPerPrefix || cfg.ValueSize < 0 || cfg.Dur <= 0 {
		return fmt.Errorf("want -n >= %d, -value >= 0, -dur > 0", keysPerPrefix)
	}
	prefixes := makePrefixes(cfg.N/keysPerPrefix, cfg.Seed)
	var results []result
	for _, spec := range engines.PrefixSpecs() {
		fmt.Fprintf(progress, "%s ...\n", spec.Name)
		r, err := runOne(spec, prefixes, cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", spec.Name, err)
		}
		results = append(results, r)
	}
	writeTable(out, cfg, len(prefixes), results)
	return nil
}

// makePrefixes returns n distinct random prefixes with their last bit
// clear (with it set, a prefix is certainly absent), in random order:
// the fill order.
func makePrefixes(n int, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, 0x707265666978))
	seen := make(map[uint64]bool, n)
	ps := make([]uint64, 0, n)
	for len(ps) < n {
		if p := r.Uint64() &^ 1; !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	return ps
}

func runOne(spec engines.PrefixSpec, prefixes []uint64, cfg config) (_ result, err error) {
	dir, err := os.MkdirTemp(cfg.Dir, "prefixbench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	e, err := spec.Open(filepath.Join(dir, "db"))
	if err != nil {
		return result{}, err
	}
	defer func() {
		if cerr := e.Close(); err == nil {
			err = cerr
		}
	}()
	value := make([]byte, cfg.ValueSize)
	vr := rand.New(rand.NewPCG(cfg.Seed, 2))
	for i := range value {
		value[i] = byte(vr.IntN(256))
	}
	start := time.Now()
	key := make([]byte, 16)
	for _, p := range prefixes {
		for j := range keysPerPrefix {
			binary.BigEndian.PutUint64(key, p)
			binary.BigEndian.PutUint64(key[8:], uint64(j))
			binary.LittleEndian.PutUint32(value, uint32(j)) // values differ
			if err := e.Put(key, value); err != nil {
				return result{}, err
			}
		}
	}
	if err := e.Settle(); err != nil {
		return result{}, err
	}
	r := result{Name: spec.Name, Layout: e.Layout(),
		FillPerSec: float64(len(prefixes)*keysPerPrefix) / time.Since(start).Seconds()}
	runtime.GC()
	for _, absent := range []bool{false, true} {
		rate, err := lookups(e, prefixes, absent, cfg)
		if err != nil {
			return result{}, err
		}
		if absent {
			r.Absent = rate
		} else {
			r.Present = rate
		}
	}
	return r, nil
}

// lookups counts the keys of random present (or absent) prefixes for
// cfg.Dur and returns the lookups per second; a wrong count is an error.
func lookups(e engines.PrefixEngine, prefixes []uint64, absent bool, cfg config) (float64, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 3))
	want := keysPerPrefix
	if absent {
		want = 0
	}
	p := make([]byte, engines.PrefixLen)
	n := 0
	start := time.Now()
	for ; n%256 != 0 || time.Since(start) < cfg.Dur; n++ {
		x := prefixes[rng.IntN(len(prefixes))]
		if absent {
			x |= 1
		}
		binary.BigEndian.PutUint64(p, x)
		got, err := e.Count(p)
		if err != nil {
			return 0, err
		}
		if got != want {
			return 0, fmt.Errorf("prefix %x: %d keys, want %d", p, got, want)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func writeTable(w io.Writer, cfg config, prefixes int, rs []result) {
	fmt.Fprintf(w, "N = %d keys of 16 B (%d prefixes of %d B, %d keys each), %d B values, written a prefix at a time in random prefix order, then settled; %s per lookup workload; %s, %d CPUs.\n\n",
		prefixes*keysPerPrefix, prefixes, engines.PrefixLen, keysPerPrefix, cfg.ValueSize, cfg.Dur, runtime.Version(), runtime.NumCPU())
	fmt.Fprintln(w, "| store | layout | fill keys/s | present prefixes/s | ratio | absent prefixes/s | ratio |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|")
	ref := rs[0]
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.2f | %.0f | %.2f |\n", r.Name, r.Layout, r.FillPerSec,
			r.Present, r.Present/ref.Present, r.Absent, r.Absent/ref.Absent)
	}
}
