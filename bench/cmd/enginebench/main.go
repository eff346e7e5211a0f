// Command enginebench runs one key-value workload (package engines) against
// bloomkv and other embedded Go stores.
//
//	enginebench -engine pebble        # one engine, one JSON line on stdout
//	enginebench -all                  # every engine, then a Markdown table
//	enginebench -all -readers 1,4,16  # also the get phases from 1, 4, 16 goroutines
//	enginebench -all -sync-scaling    # fsync'd Puts from 1, 4, 16, 64 goroutines
//	enginebench -all -cold            # Gets after evicting the store from the page cache
//	enginebench -all -fill-latency    # every Put's latency during a fill, against a memtable flush's time
//
// With -all the command re-executes its own binary once per engine, one
// after the other, so that no engine runs in a process whose heap, caches
// or background goroutines another engine has left behind. The table gives
// each engine's ops/s and its ratio to bloomkv's (above 1: faster than
// bloomkv).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/bloomkv/bloomkv/bench/engines"
)

func main() {
	cfg := engines.DefaultConfig()
	syncCfg := engines.DefaultSyncConfig()
	coldCfg := engines.DefaultColdConfig()
	engine := flag.String("engine", "", "run this engine only and print its result as JSON")
	all := flag.Bool("all", false, "run every engine, each in its own process, and print a Markdown table")
	syncScaling := flag.Bool("sync-scaling", false, "run the sync-write scaling workload instead: fsync'd Puts from 1, 4, 16, 64 goroutines (-sync-writers)")
	fillLatency := flag.Bool("fill-latency", false, "run the fill-latency workload instead: every Put's latency during a fill of -n keys, no fsync, and the store's timed memtable flush")
	fillCfg := engines.FillLatencyConfig{}
	flag.DurationVar(&fillCfg.Threshold, "fill-threshold", 0, "-fill-latency: list Puts slower than this (default: bloomkv's measured flush time with -all, the store's own with -engine)")
	flag.StringVar(&fillCfg.Trace, "fill-trace", "", "-fill-latency with -engine: write a runtime/trace flight-recorder snapshot of the seconds before the slow Put with the most latency not spent waiting for a CPU to `FILE`, and per slow Put the writer thread's run-queue wait (Linux)")
	cold := flag.Bool("cold", false, "run the cold-read workload instead: Gets after evicting the store from the page cache")
	flag.IntVar(&cfg.N, "n", cfg.N, "keys to write (default and -cold)")
	flag.IntVar(&cfg.ValueSize, "value-size", cfg.ValueSize, "bytes per value")
	flag.IntVar(&cfg.Ops, "ops", cfg.Ops, "lookups per get phase")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of keys, values and lookup order")
	flag.StringVar(&cfg.Dir, "dir", "", "parent directory of the stores (default: the system temp directory)")
	readers := flag.String("readers", "", "also run the get phases with this many reader goroutines each, comma-separated (e.g. 1,4,16); empty: none")
	writers := flag.String("sync-writers", strings.Join(intStrings(syncCfg.Writers), ","), "-sync-scaling: writer goroutine counts, comma-separated")
	flag.IntVar(&syncCfg.Ops, "sync-ops", syncCfg.Ops, "-sync-scaling: at most this many Puts per cell")
	flag.DurationVar(&syncCfg.Duration, "sync-duration", syncCfg.Duration, "-sync-scaling: at most this long per cell")
	flag.DurationVar(&engines.FakeFsync, "sync-fake-fsync", 0, "-sync-scaling: bloomkv's and Pebble's WAL fsyncs are each a sleep this long instead (nothing is durable): the commit paths without a shared disk's noise")
	flag.IntVar(&coldCfg.Ops, "cold-ops", coldCfg.Ops, "-cold: Gets per phase")
	flag.IntVar(&coldCfg.Warm, "cold-warm", coldCfg.Warm, "-cold: untimed misses before the eviction")
	flag.Parse()

	var err error
	fillCfg.N, fillCfg.ValueSize, fillCfg.Seed, fillCfg.Dir = cfg.N, cfg.ValueSize, cfg.Seed, cfg.Dir
	syncCfg.ValueSize, syncCfg.Seed, syncCfg.Dir = cfg.ValueSize, cfg.Seed, cfg.Dir
	coldCfg.N, coldCfg.ValueSize, coldCfg.Seed, coldCfg.Dir = cfg.N, cfg.ValueSize, cfg.Seed, cfg.Dir
	if *readers != "" {
		if cfg.Readers, err = parseInts(*readers); err != nil {
			fmt.Fprintln(os.Stderr, "enginebench: -readers:", err)
			os.Exit(2)
		}
	}
	if syncCfg.Writers, err = parseInts(*writers); err != nil {
		fmt.Fprintln(os.Stderr, "enginebench: -sync-writers:", err)
		os.Exit(2)
	}
	switch {
	case *all == (*engine != "") || btoi(*syncScaling)+btoi(*cold)+btoi(*fillLatency) > 1:
		fmt.Fprintln(os.Stderr, "enginebench: give exactly one of -engine NAME and -all, and at most one of -sync-scaling, -cold and -fill-latency")
		flag.Usage()
		os.Exit(2)
	case *all && *fillLatency:
		err = runAllFillLatency(os.Stdout, os.Stderr, fillCfg)
	case *fillLatency:
		err = runOneFillLatency(os.Stdout, *engine, fillCfg)
	case *all && *syncScaling:
		err = runAllSync(os.Stdout, os.Stderr, syncCfg)
	case *all && *cold:
		err = runAllCold(os.Stdout, os.Stderr, coldCfg)
	case *all:
		err = runAll(os.Stdout, os.Stderr, cfg)
	case *syncScaling:
		err = runOneSync(os.Stdout, *engine, syncCfg)
	case *cold:
		err = runOneCold(os.Stdout, *engine, coldCfg)
	default:
		err = runOne(os.Stdout, *engine, cfg)
	}
	if errors.Is(err, engines.ErrNoDeviceCounters) {
		fmt.Fprintln(os.Stderr, "enginebench: skipping the cold workload:", err)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "enginebench:", err)
		os.Exit(1)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseInts parses "1,4,16".
func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runOne runs the engine called name in this process and writes its
// Result as one JSON line.
func runOne(w io.Writer, name string, cfg engines.Config) error {
	spec, err := engines.Lookup(name)
	if err != nil {
		return err
	}
	res, err := engines.Run(spec, cfg)
	if err != nil {
		return err
	}
	res.Version = moduleVersion(spec.Module)
	return json.NewEncoder(w).Encode(res)
}

// moduleVersion returns the version of module path this binary was built
// with; "local" for a module replaced by a directory (bloomkv itself).
func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, m := range info.Deps {
		if m.Path != path {
			continue
		}
		if m.Replace != nil && isDir(m.Replace.Path) {
			return "local"
		}
		return m.Version
	}
	return ""
}

// isDir reports whether a replacement module path is a directory, as go.mod
// spells those.
func isDir(path string) bool {
	return strings.HasPrefix(path, "./") || strings.HasPrefix(path, "../") || filepath.IsAbs(path)
}

// runAll runs every engine in a child process of this binary, logging
// their JSON lines to progress, and writes the table to w. An engine that
// fails is reported and left out; the others still run.
func runAll(w, progress io.Writer, cfg engines.Config) error {
	var names []string
	for _, s := range engines.Specs() {
		names = append(names, s.Name)
	}
	results, err := runChildren[engines.Result](names, progress, func(name string) []string {
		return append([]string{"-engine", name}, configArgs(cfg)...)
	})
	writeTable(w, results)
	return err
}

// configArgs are the flags that give a child cfg.
func configArgs(cfg engines.Config) []string {
	return []string{
		"-n", strconv.Itoa(cfg.N),
		"-value-size", strconv.Itoa(cfg.ValueSize),
		"-ops", strconv.Itoa(cfg.Ops),
		"-seed", strconv.FormatUint(cfg.Seed, 10),
		"-dir", cfg.Dir,
		"-readers", strings.Join(intStrings(cfg.Readers), ","),
	}
}

// runOneSync runs the sync-write scaling workload on the store called
// name and writes its SyncResult as one JSON line.
func runOneSync(w io.Writer, name string, cfg engines.SyncConfig) error {
	spec, err := engines.LookupSync(name)
	if err != nil {
		return err
	}
	res, err := engines.RunSync(spec, cfg)
	if err != nil {
		return err
	}
	res.Version = moduleVersion(spec.Module)
	return json.NewEncoder(w).Encode(res)
}

// runAllSync runs the sync-write scaling workload on every store, each in
// a child process, and writes its table.
func runAllSync(w, progress io.Writer, cfg engines.SyncConfig) error {
	var names []string
	for _, s := range engines.SyncSpecs() {
		names = append(names, s.Name)
	}
	results, err := runChildren[engines.SyncResult](names, progress, func(name string) []string {
		return append([]string{"-sync-scaling", "-engine", name}, syncArgs(cfg)...)
	})
	writeSyncTable(w, results)
	return err
}

func syncArgs(cfg engines.SyncConfig) []string {
	ws := make([]string, len(cfg.Writers))
	for i, n := range cfg.Writers {
		ws[i] = strconv.Itoa(n)
	}
	return []string{
		"-sync-writers", strings.Join(ws, ","),
		"-sync-ops", strconv.Itoa(cfg.Ops),
		"-sync-duration", cfg.Duration.String(),
		"-sync-fake-fsync", engines.FakeFsync.String(),
		"-value-size", strconv.Itoa(cfg.ValueSize),
		"-seed", strconv.FormatUint(cfg.Seed, 10),
		"-dir", cfg.Dir,
	}
}

// runOneFillLatency runs the fill-latency workload on the store called
// name and writes its FillLatencyResult as one JSON line.
func runOneFillLatency(w io.Writer, name string, cfg engines.FillLatencyConfig) error {
	spec, err := engines.Lookup(name)
	if err != nil {
		return err
	}
	res, err := engines.RunFillLatency(spec, cfg)
	if err != nil {
		return err
	}
	res.Version = moduleVersion(spec.Module)
	return json.NewEncoder(w).Encode(res)
}

// runAllFillLatency runs the fill-latency workload on every store, each in
// a child process, bloomkv first: unless cfg.Threshold is set, bloomkv's
// measured flush time becomes every other store's threshold, so that all
// rows count Puts slower than the same time.
func runAllFillLatency(w, progress io.Writer, cfg engines.FillLatencyConfig) error {
	args := func(name string) []string {
		return []string{"-fill-latency", "-engine", name,
			"-n", strconv.Itoa(cfg.N),
			"-value-size", strconv.Itoa(cfg.ValueSize),
			"-seed", strconv.FormatUint(cfg.Seed, 10),
			"-fill-threshold", cfg.Threshold.String(),
			"-dir", cfg.Dir}
	}
	var rest []string
	for _, s := range engines.Specs()[1:] {
		rest = append(rest, s.Name)
	}
	results, err := runChildren[engines.FillLatencyResult]([]string{engines.Specs()[0].Name}, progress, args)
	if cfg.Threshold == 0 && len(results) > 0 {
		cfg.Threshold = time.Duration(results[0].ThresholdMicros * 1e3)
	}
	more, err2 := runChildren[engines.FillLatencyResult](rest, progress, args)
	writeFillLatencyTable(w, append(results, more...))
	return errors.Join(err, err2)
}

// runOneCold runs the cold-read workload on the store called name and
// writes one JSON line per read variant.
func runOneCold(w io.Writer, name string, cfg engines.ColdConfig) error {
	spec, err := engines.LookupCold(name)
	if err != nil {
		return err
	}
	results, err := engines.RunCold(spec, cfg)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	for _, r := range results {
		r.Version = moduleVersion(spec.Build.Module)
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// runAllCold runs the cold-read workload on every store, each in a child
// process, and writes its table. Without /proc/self/io it says so and
// runs nothing.
func runAllCold(w, progress io.Writer, cfg engines.ColdConfig) error {
	if err := engines.CheckDeviceCounters(); err != nil {
		return err
	}
	var names []string
	for _, s := range engines.ColdSpecs() {
		names = append(names, s.Build.Name)
	}
	results, err := runChildren[engines.ColdResult](names, progress, func(name string) []string {
		return []string{"-cold", "-engine", name,
			"-n", strconv.Itoa(cfg.N),
			"-value-size", strconv.Itoa(cfg.ValueSize),
			"-cold-ops", strconv.Itoa(cfg.Ops),
			"-cold-warm", strconv.Itoa(cfg.Warm),
			"-seed", strconv.FormatUint(cfg.Seed, 10),
			"-dir", cfg.Dir}
	})
	writeColdTable(w, results)
	return err
}

// runChildren runs this binary once per name with args(name), one after
// the other, and decodes the JSON lines each prints. A child that fails is
// reported to progress and left out; the others still run.
func runChildren[R any](names []string, progress io.Writer, args func(name string) []string) ([]R, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var (
		results []R
		errs    []error
	)
	for _, name := range names {
		fmt.Fprintf(progress, "running %s...\n", name)
		rs, err := runChild[R](exe, args(name), progress)
		if err != nil {
			fmt.Fprintf(progress, "%s failed: %v\n", name, err)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		results = append(results, rs...)
	}
	return results, errors.Join(errs...)
}

// runChild runs exe with args and decodes the JSON lines it prints. The
// child's stderr goes to progress.
func runChild[R any](exe string, args []string, progress io.Writer) ([]R, error) {
	cmd := exec.Command(exe, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, progress
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	progress.Write(out.Bytes())
	var results []R
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r R
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("decoding %q: %w", out.Bytes(), err)
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return nil, errors.New("no result printed")
	}
	return results, nil
}
