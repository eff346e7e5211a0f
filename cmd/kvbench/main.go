// Command kvbench measures bloomkv: fills, point reads that hit and miss,
// how many disk reads the Bloom filters avoid, a Bigtable-style scenario of
// lookups for absent keys over many segments, the filters' false-positive
// rates against theory, and optionally the same workloads on bbolt.
//
// Without flags it runs everything on a generated data set in a temporary
// directory, in about a minute on two cores. `kvbench -h` documents every
// flag and every line of the report.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

func main() { os.Exit(runMain()) }

// runMain is main with an exit code, so that deferred calls run first.
func runMain() int {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvbench:", err)
		return 2
	}
	// Progress bars only for a person watching: not into a log file or CI.
	cfg.Quiet = cfg.Quiet || !term.IsTerminal(int(os.Stderr.Fd()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kvbench:", err)
		return 1
	}
	return 0
}
