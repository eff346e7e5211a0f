package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/bench/engines"
)

// TestRun runs the comparison with a small N: every store answers every
// lookup with the right count (run fails otherwise), and the table has a
// row per store, the first with ratios 1.
func TestRun(t *testing.T) {
	cfg := config{N: 4000, ValueSize: 20, Dur: 50 * time.Millisecond, Seed: 3, Dir: t.TempDir()}
	var out, progress bytes.Buffer
	if err := run(&out, &progress, cfg); err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	table := out.String()
	for _, s := range engines.PrefixSpecs() {
		if !strings.Contains(table, "| "+s.Name+" | ") {
			t.Errorf("no row for %s:\n%s", s.Name, table)
		}
	}
	if strings.Count(table, "| 1.00 |") < 2 || !strings.Contains(table, "N = 4000 keys") {
		t.Errorf("table:\n%s", table)
	}
	if entries, _ := os.ReadDir(cfg.Dir); len(entries) != 0 {
		t.Errorf("%d store directories left behind", len(entries))
	}
}
