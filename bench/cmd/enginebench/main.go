// Command enginebench runs one key-value workload (package engines) against
// bloomkv and other embedded Go stores.
//
//	enginebench -engine pebble        # one engine, one JSON line on stdout
//	enginebench -all                  # every engine, then a Markdown table
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

	"github.com/bloomkv/bloomkv/bench/engines"
)

func main() {
	cfg := engines.DefaultConfig()
	engine := flag.String("engine", "", "run this engine only and print its result as JSON")
	all := flag.Bool("all", false, "run every engine, each in its own process, and print a Markdown table")
	flag.IntVar(&cfg.N, "n", cfg.N, "keys to write")
	flag.IntVar(&cfg.ValueSize, "value-size", cfg.ValueSize, "bytes per value")
	flag.IntVar(&cfg.Ops, "ops", cfg.Ops, "lookups per get phase")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of keys, values and lookup order")
	flag.StringVar(&cfg.Dir, "dir", "", "parent directory of the stores (default: the system temp directory)")
	flag.Parse()

	var err error
	switch {
	case *all == (*engine != ""):
		fmt.Fprintln(os.Stderr, "enginebench: give exactly one of -engine NAME and -all")
		flag.Usage()
		os.Exit(2)
	case *all:
		err = runAll(os.Stdout, os.Stderr, cfg)
	default:
		err = runOne(os.Stdout, *engine, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "enginebench:", err)
		os.Exit(1)
	}
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
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var (
		results []engines.Result
		errs    []error
	)
	for _, spec := range engines.Specs() {
		fmt.Fprintf(progress, "running %s...\n", spec.Name)
		res, err := runChild(exe, spec.Name, cfg, progress)
		if err != nil {
			fmt.Fprintf(progress, "%s failed: %v\n", spec.Name, err)
			errs = append(errs, fmt.Errorf("%s: %w", spec.Name, err))
			continue
		}
		results = append(results, res)
	}
	writeTable(w, results)
	return errors.Join(errs...)
}

// runChild runs exe -engine name with cfg's flags and decodes its Result.
// The child's stderr goes to progress.
func runChild(exe, name string, cfg engines.Config, progress io.Writer) (engines.Result, error) {
	cmd := exec.Command(exe, "-engine", name,
		"-n", strconv.Itoa(cfg.N),
		"-value-size", strconv.Itoa(cfg.ValueSize),
		"-ops", strconv.Itoa(cfg.Ops),
		"-seed", strconv.FormatUint(cfg.Seed, 10),
		"-dir", cfg.Dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, progress
	if err := cmd.Run(); err != nil {
		return engines.Result{}, err
	}
	progress.Write(out.Bytes())
	var res engines.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return engines.Result{}, fmt.Errorf("decoding %q: %w", out.Bytes(), err)
	}
	return res, nil
}
