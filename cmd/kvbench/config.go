package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bloomkv/bloomkv"
	"gonum.org/v1/plot/vg/draw"
)

// config is everything a run depends on; main fills it from the flags and
// the tests build it directly.
type config struct {
	Keys         int
	ValueSize    int
	Seed         uint64
	BitsPerKey   float64
	Dir          string // parent of the work directory; "" means os.TempDir
	Keep         bool   // keep the work directory
	Duration     time.Duration
	Ops          int64 // if > 0, overrides Duration
	HitRatio     float64
	Sync         bool
	CacheSize    int64
	MemtableSize int64
	NoMmap       bool
	NoCompaction bool
	Compression  string // "snappy", "none" or "zstd" (Options.Compression)
	DropCache    bool
	NegSegments  int
	// ColdOps is the Gets of each cold row (at most Ops when that is set).
	// A count, not a duration: without filters every cold Get may go to
	// the device once per segment, so the rows' times differ tenfold and
	// more, and a duration would give the filtered rows too few of their
	// rare false positives.
	ColdOps int
	// FillReportKeys is the size of the fill report (0: skipped).
	FillReportKeys int
	// FilterMemoryKeys, if > 0, fills a fresh store of that many keys for
	// the filter-memory curve instead of using the fill-random store.
	FilterMemoryKeys int
	FPRKeys          int
	FPRProbes        int
	// Readers are the goroutine counts of the concurrent-reads section
	// (empty: skipped).
	Readers     []int
	Baseline    string
	JSON        string
	Plot        string
	Report      string // -report DIR: an HTML page with plots
	ReportPeers string // -report-peers FILE: enginebench JSON lines for the page
	Quiet       bool
}

// defaultConfig is what `kvbench` without flags runs: about a minute on a
// 2-core machine, with stores 20 times larger than the block cache. The
// sizes still give every section's counters to within a few percent from
// run to run: 2 s of reads are 10^5 to 10^6 Gets, and 10,000 cold Gets
// give several hundred of the filters' rare false positives. A fill of
// 10^6 keys costs about 3 s and is done three times (fill-seq,
// fill-random, the twin without filters), and the filter-memory curve
// rescans the store 14 times, so -keys is what sets the run's length most.
func defaultConfig() config {
	return config{
		Keys:           2_000_000,
		ValueSize:      100,
		Seed:           1,
		BitsPerKey:     10,
		Duration:       2 * time.Second,
		HitRatio:       0.5,
		CacheSize:      8 << 20,
		MemtableSize:   4 << 20,
		Compression:    "snappy",
		NegSegments:    200,
		ColdOps:        10_000,
		FillReportKeys: 500_000,
		FPRKeys:        200_000,
		FPRProbes:      1_000_000,
	}
}

const usageHead = `Usage: kvbench [flags]

kvbench measures bloomkv on data it generates itself. Without flags it
creates a temporary directory, runs everything below (about a minute on
two cores), prints a report to stdout and removes the directory. Progress
bars go to stderr when it is a terminal. Each section ends with the time it
took; -keys 3000000 -duration 4s -cold-ops 20000 is the larger run of
earlier versions (about a minute and a half).

Workloads, each fill on a fresh store (16-byte random keys, values of
-value-size bytes that snappy compresses to about half; -compression picks
the codec), one goroutine:
  fill-seq      -keys Puts in key order
  fill-random   -keys Puts in random order; the reads below use this store
  get-hit       Gets of present keys, uniformly chosen
  get-miss      Gets of keys known to be absent (each differs from a present
                key in its last bit, so it lands inside the key range)
  mixed         Gets, a -hit-ratio fraction of them for present keys
  scan-100      short range scans: Seek to a random present key, read 100
  scan-full     every key in order, once (keys/s)
After a fill, the store is flushed and left to finish its background
compactions ("settle") before anything reads it. Read workloads run for
-duration each, or exactly -ops operations.

Sections after the workloads:
  concurrent reads     with -readers N,...: get-hit and get-miss on the
                       fill-random store from N goroutines at once, each
                       its own random keys, for -duration (or -ops/N Gets
                       each); ops/s summed over the goroutines
  disk reads avoided   get-miss on the fill-random store and on a twin
                       store with the same data but no filters
                       (Options.DisableFilters), side by side; then both
                       cold, -cold-ops get-miss and get-hit each after
                       evicting the store's files from the page cache
                       (Linux)
  negative lookups     Bigtable-style: -keys/8 keys in -neg-segments
                       segments (a Flush every so many Puts, compaction
                       off), 90% of the Gets for absent keys, with filters
                       and without
  prefix lookups       -keys/8 keys under 8-byte prefixes, 16 keys each,
                       in -neg-segments segments (compaction off): prefix
                       scans of present and absent prefixes with prefix
                       filters (Options.Prefix = FixedPrefix(8)) and on a
                       twin store without; 1 s per workload at most
  filter memory        on the fill-random store (or a fresh one of
                       -filter-memory-keys keys): block reads per absent
                       Get against filter memory, 25%..150% of 10 bits per
                       key, for uniform bits per key, greedy folding and
                       the optimal allocation (Options.FilterAllocation),
                       predicted and measured (filters rebuilt
                       in memory with DB.RebuildFilters, files unchanged)
  fill report          a random fill of -fill-report-keys keys into a fresh
                       store, stopping 20 times to record write
                       amplification, segment count and the blocks an
                       absent-key Get touches against the filters'
                       prediction (-fill-report-keys 10000000
                       for the long run, a few minutes)
  FPR against theory   Bloom filters built directly at 2..20 bits per key,
                       both layouts, -fpr-keys keys and -fpr-probes absent
                       probes: measured FPR, bloom.FPR, EstimatedFPR
  baseline             with -baseline bbolt: fill-random, get-hit and
                       get-miss on go.etcd.io/bbolt (one bucket; the fill
                       commits a transaction every 1000 Puts, NoSync
                       unless -sync); adds about two thirds to the
                       default run's time, most of it bbolt's fill

Per workload: ops/s, latency mean/p50/p99/p99.9/max (log-bucketed
histogram, within 3.1%), and per operation the DB's counters (segments
probed, skipped by their filter, filter false positives, block reads,
block-cache hits, bytes read) and the process's I/O: syscr, rchar and
read_bytes from /proc/self/io, major page faults from getrusage. Segments
are mmapped by default, so block reads cost no syscall (use -no-mmap for
pread); read_bytes and majflt count device reads only, so they stay near 0
while the files are in the page cache (use -drop-cache).

-json FILE writes one JSON object per line: every workload result
("kind":"workload", counters as totals over "ops"), every FPR row
("kind":"fpr"), every point of the filter-memory curve
("kind":"filter-memory"), every checkpoint of the fill report
("kind":"fill-report") and, last, the process's memory ("kind":"memory").

Flags:
`

// parseFlags parses args (without the program name) into a config.
// It returns flag.ErrHelp after printing the usage for -h.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("kvbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "keys loaded by each fill")
	fs.IntVar(&cfg.ValueSize, "value-size", cfg.ValueSize, "value size in bytes")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the data set and of every workload's key choices")
	fs.Float64Var(&cfg.BitsPerKey, "bits-per-key", cfg.BitsPerKey, "Bloom filter bits per key of the stores (0: the library's default, 10; as Options.BitsPerKey)")
	noFilters := fs.Bool("disable-filters", false, "write the stores' segments without filters (Options.DisableFilters)")
	fs.StringVar(&cfg.Dir, "dir", "", "create the work directory under `DIR` instead of the system's temp dir (e.g. on the device to measure)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the work directory and its stores after the run")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "run time of each read workload")
	fs.Int64Var(&cfg.Ops, "ops", 0, "operations per read workload; overrides -duration when > 0")
	fs.Float64Var(&cfg.HitRatio, "hit-ratio", cfg.HitRatio, "fraction of mixed's Gets that are for present keys")
	fs.BoolVar(&cfg.Sync, "sync", false, "fsync every write (Options.Sync; bbolt: fsync every commit); use with small -keys")
	fs.Var((*sizeValue)(&cfg.CacheSize), "cache-size", "block cache `size` (bytes, or with a KiB/MiB/GiB suffix)")
	fs.Var((*sizeValue)(&cfg.MemtableSize), "memtable-size", "memtable `size` at which it is flushed to a segment")
	fs.BoolVar(&cfg.NoCompaction, "no-compaction", false, "turn background compaction off in the workload stores (Options.DisableAutoCompaction)")
	fs.StringVar(&cfg.Compression, "compression", cfg.Compression, "block codec of the stores: `snappy`, none or zstd (Options.Compression)")
	fs.BoolVar(&cfg.NoMmap, "no-mmap", false, "read segments with pread instead of mmap (Options.DisableMmap)")
	fs.BoolVar(&cfg.DropCache, "drop-cache", false, "before every read phase, close the store, evict its files from the OS page cache and reopen it (Linux)")
	fs.IntVar(&cfg.NegSegments, "neg-segments", cfg.NegSegments, "segments of the negative-lookup store")
	fs.IntVar(&cfg.ColdOps, "cold-ops", cfg.ColdOps, "Gets per row of the cold comparison (files evicted from the page cache first); at most -ops when that is set")
	fs.IntVar(&cfg.FillReportKeys, "fill-report-keys", cfg.FillReportKeys, "keys of the fill report (0 skips it; 10000000 for the full report)")
	fs.IntVar(&cfg.FilterMemoryKeys, "filter-memory-keys", 0, "keys of a fresh store for the filter-memory curve (0: the fill-random store; 10000000 for the long run)")
	fs.IntVar(&cfg.FPRKeys, "fpr-keys", cfg.FPRKeys, "keys per filter in the FPR sweep")
	fs.IntVar(&cfg.FPRProbes, "fpr-probes", cfg.FPRProbes, "absent keys probed per filter in the FPR sweep")
	readers := fs.String("readers", "", "also run get-hit and get-miss from this many goroutines at once, a comma-separated `list` (e.g. 1,4,16); empty: skipped")
	fs.StringVar(&cfg.Baseline, "baseline", "", "also run the workloads on `STORE` (only bbolt)")
	fs.StringVar(&cfg.JSON, "json", "", "write one JSON object per workload, FPR row, filter-memory point and fill-report checkpoint to `FILE` (JSON Lines); \"-\" writes them to stdout instead of the text report")
	fs.StringVar(&cfg.Plot, "plot", "", "write the FPR sweep as a plot to `FILE` (.svg, .png or .pdf)")
	fs.StringVar(&cfg.Report, "report", "", "write `DIR`/index.html, one self-contained page: a summary chart of filters on and off, throughput, latency percentiles, disk reads avoided, block reads against segments, filter memory, write amplification, the FPR sweep, then the text report")
	fs.StringVar(&cfg.ReportPeers, "report-peers", "", "with -report: plot other stores' throughput and sync-write scaling from `FILE`, the JSON lines of bench/'s enginebench -all (and -all -sync-scaling)")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "no progress bars (they are off anyway when stderr is not a terminal)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	var err error
	if cfg.Readers, err = parseCounts(*readers); err != nil {
		return config{}, fmt.Errorf("-readers: %w", err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return config{}, fmt.Errorf("unexpected arguments %q (kvbench has no subcommands)", fs.Args())
	}
	if err := cfg.validate(); err != nil {
		return config{}, err
	}
	// From here on BitsPerKey 0 means "no filters", as in validated
	// Options; on the command line 0 means the default, as in Options.
	switch {
	case *noFilters:
		cfg.BitsPerKey = 0
	case cfg.BitsPerKey == 0:
		cfg.BitsPerKey = bloomkv.DefaultOptions().BitsPerKey
	}
	return cfg, nil
}

// validate rejects settings no run can use.
func (c config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Keys >= 1 && c.Keys <= 1<<30, "-keys %d: want 1..2^30", c.Keys)
	check(c.ValueSize >= 0 && c.ValueSize <= 1<<20, "-value-size %d: want 0..1MiB", c.ValueSize)
	check(c.BitsPerKey == 0 || c.BitsPerKey >= 1 && c.BitsPerKey <= 64, "-bits-per-key %v: want 0 (the default) or 1..64", c.BitsPerKey)
	check(c.Ops >= 0, "-ops %d: want 0 (use -duration) or more", c.Ops)
	check(c.Ops > 0 || c.Duration > 0, "need -ops > 0 or -duration > 0")
	check(c.HitRatio >= 0 && c.HitRatio <= 1, "-hit-ratio %v: want 0..1", c.HitRatio)
	check(c.CacheSize > 0, "-cache-size must be positive")
	check(c.MemtableSize >= 64<<10 && c.MemtableSize <= 1<<30, "-memtable-size %d: want 64KiB..1GiB", c.MemtableSize)
	check(c.NegSegments >= 1 && c.NegSegments <= 10_000, "-neg-segments %d: want 1..10000", c.NegSegments)
	check(c.ColdOps >= 1 && c.ColdOps <= 1<<30, "-cold-ops %d: want 1..2^30", c.ColdOps)
	check(c.FillReportKeys >= 0 && c.FillReportKeys <= 1<<30, "-fill-report-keys %d: want 0..2^30", c.FillReportKeys)
	check(c.FilterMemoryKeys >= 0 && c.FilterMemoryKeys <= 1<<30, "-filter-memory-keys %d: want 0..2^30", c.FilterMemoryKeys)
	check(c.FPRKeys >= 1 && c.FPRKeys <= 1<<30, "-fpr-keys %d: want 1..2^30", c.FPRKeys)
	check(c.FPRProbes >= 1 && c.FPRProbes <= 1<<30, "-fpr-probes %d: want 1..2^30", c.FPRProbes)
	// The plot is written at the end of the run: a format gonum cannot
	// write must stop it before, not after, the minutes it takes.
	plotFormat := strings.ToLower(strings.TrimPrefix(filepath.Ext(c.Plot), "."))
	check(c.Plot == "" || slices.Contains(draw.Formats(), plotFormat), "-plot %q: want a file name ending in .%s", c.Plot, strings.Join(draw.Formats(), ", ."))
	_, err := bloomkv.ParseCompression(c.Compression)
	check(err == nil, "-compression %q: want snappy, none or zstd", c.Compression)
	check(c.Baseline == "" || c.Baseline == "bbolt", "-baseline %q: only bbolt is supported", c.Baseline)
	check(c.ReportPeers == "" || c.Report != "", "-report-peers needs -report")
	check(!c.DropCache || dropCacheSupported, "-drop-cache is supported on Linux only, not %s", runtime.GOOS)
	return errors.Join(errs...)
}

// sizeValue is a byte count flag that accepts 8388608, 8MiB, 8M or 8m.
type sizeValue int64

func (s *sizeValue) String() string { return formatBytes(float64(*s)) }

func (s *sizeValue) Set(text string) error {
	n, err := parseSize(text)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

// parseSize reads a byte count with an optional binary suffix (K, KB, KiB,
// M..., G...; any case). Decimal suffixes are taken as binary too: cache
// and memtable sizes are always thought of in powers of two.
func parseSize(text string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(text))
	shift := 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"KIB", 10}, {"MIB", 20}, {"GIB", 30}, {"KB", 10}, {"MB", 20}, {"GB", 30}, {"K", 10}, {"M", 20}, {"G", 30}, {"B", 0}} {
		if strings.HasSuffix(t, u.suffix) {
			t, shift = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("invalid size %q (want e.g. 8388608, 8MiB or 512KiB)", text)
	}
	return n << shift, nil
}
