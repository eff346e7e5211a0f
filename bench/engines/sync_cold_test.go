package engines

import (
	"errors"
	"testing"
	"time"
)

// TestSyncSmoke runs the sync-write scaling workload on every store with a
// few Puts per cell (fsync per Put makes it the slow part of the suite).
func TestSyncSmoke(t *testing.T) {
	cfg := SyncConfig{Writers: []int{1, 4}, Ops: 40, Duration: 10 * time.Second, ValueSize: 100, Seed: 1, Dir: t.TempDir()}
	for _, spec := range SyncSpecs() {
		t.Run(spec.Name, func(t *testing.T) {
			res, err := RunSync(spec, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Cells) != 2 || res.Scaling <= 0 {
				t.Fatalf("result %+v", res)
			}
			for _, c := range res.Cells {
				if c.Puts != cfg.Ops || c.OpsPerSec <= 0 || c.P99Micros < c.P50Micros {
					t.Errorf("cell %+v", c)
				}
			}
		})
	}
}

// TestSyncDeadline checks that a cell stops at Duration.
func TestSyncDeadline(t *testing.T) {
	spec, err := LookupSync("bloomkv")
	if err != nil {
		t.Fatal(err)
	}
	cfg := SyncConfig{Writers: []int{2}, Ops: 100_000, Duration: 200 * time.Millisecond, ValueSize: 10, Seed: 1, Dir: t.TempDir()}
	start := time.Now()
	res, err := RunSync(spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second || res.Cells[0].Puts == 0 || res.Cells[0].Puts == cfg.Ops {
		t.Errorf("took %v for %d puts", d, res.Cells[0].Puts)
	}
}

// TestColdSmoke runs the cold-read workload on every store with a small N,
// checking that eviction leaves nothing resident and that the device
// counters moved. Skipped where /proc/self/io is unavailable.
func TestColdSmoke(t *testing.T) {
	if err := CheckDeviceCounters(); err != nil {
		t.Skip(err)
	}
	cfg := ColdConfig{N: 3000, ValueSize: 100, Ops: 400, Warm: 50, Seed: 2, Dir: t.TempDir()}
	for _, spec := range ColdSpecs() {
		t.Run(spec.Build.Name, func(t *testing.T) {
			results, err := RunCold(spec, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != len(spec.Variants) {
				t.Fatalf("%d results for %d variants", len(results), len(spec.Variants))
			}
			for _, r := range results {
				t.Logf("%+v", r)
				for _, p := range []ColdPhase{r.Hit, r.Miss} {
					// A page or two can stay (a store writing a file of its
					// own meanwhile, a page still dirty): eviction is
					// advice. The tables report the count; more is a bug.
					if p.ResidentAfterEvict > 4 {
						t.Errorf("%s: %d pages resident after eviction", r.Engine, p.ResidentAfterEvict)
					}
					if p.OpsPerSec <= 0 || p.First != coldFirst(cfg.Ops) {
						t.Errorf("%s: phase %+v", r.Engine, p)
					}
				}
				// Every hit reads a data block: with nothing cached the
				// device must have been read.
				if r.Hit.ReadBytesPerGet <= 0 {
					t.Errorf("%s: get-hit read nothing from the device after eviction", r.Engine)
				}
			}
		})
	}
}

// TestEvictDir checks eviction on a plain file, and that a missing
// /proc/self/io is reported as ErrNoDeviceCounters.
func TestEvictDir(t *testing.T) {
	if err := CheckDeviceCounters(); err != nil {
		if !errors.Is(err, ErrNoDeviceCounters) {
			t.Fatalf("CheckDeviceCounters: %v", err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	if err := writeFile(dir+"/f", 1<<20); err != nil {
		t.Fatal(err)
	}
	if n, err := residentDir(dir); err != nil || n == 0 {
		t.Fatalf("freshly written file: %d pages resident, %v", n, err)
	}
	if n, err := evictDir(dir); err != nil || n != 0 {
		t.Fatalf("after evictDir: %d pages resident, %v", n, err)
	}
}
