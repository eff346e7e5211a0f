package engines

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestSmoke runs the whole workload on every engine with a small N. Run
// checks every lookup (all present keys found with their values, no absent
// key found), so an adapter that drops, invents or garbles data fails here.
func TestSmoke(t *testing.T) {
	cfg := Config{N: 2000, ValueSize: 100, Ops: 3000, Seed: 1, Dir: t.TempDir(), Readers: []int{1, 3}}
	for _, spec := range Specs() {
		t.Run(spec.Name, func(t *testing.T) {
			res, err := Run(spec, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			if res.Fill <= 0 || res.GetHit <= 0 || res.GetMiss <= 0 || res.ScanFull <= 0 || res.Scan100 <= 0 {
				t.Errorf("rates not measured: %+v", res)
			}
			if wantIter := spec.Name == "pebble"; wantIter != (res.GetMissIter > 0) {
				t.Errorf("GetMissIter = %v, want > 0: %v", res.GetMissIter, wantIter)
			}
			if len(res.Readers) != len(cfg.Readers) {
				t.Fatalf("%d reader cells, want %d", len(res.Readers), len(cfg.Readers))
			}
			for i, c := range res.Readers {
				if c.Readers != cfg.Readers[i] || c.GetHit <= 0 || c.GetMiss <= 0 || (spec.Name == "pebble") != (c.GetMissIter > 0) {
					t.Errorf("reader cell %d: %+v", i, c)
				}
			}
			if res.DiskBytes <= 0 || res.Layout == "" {
				t.Errorf("DiskBytes %d, Layout %q: store not described", res.DiskBytes, res.Layout)
			}
		})
	}
}

// mapEngine is a model store: a Go map, with optional faults that Run
// must notice.
type mapEngine struct {
	m          map[string][]byte
	dropEvery  int                          // Put silently drops every dropEvery-th key (0: none)
	corrupt    bool                         // Get returns a changed value
	inventMiss bool                         // Get reports absent keys present
	scanFault  func(keys []string) []string // Scan sees these keys instead
	shortScans bool                         // a range scan of n keys reads n-1
	puts       int
}

// Scan reads the map's keys in order, through scanFault if set.
func (e *mapEngine) Scan(start []byte, n int) (keys int, bytes int64, err error) {
	sorted := slices.Sorted(maps.Keys(e.m))
	if e.scanFault != nil {
		sorted = e.scanFault(sorted)
	}
	if e.shortScans && n > 0 {
		n--
	}
	i, _ := slices.BinarySearch(sorted, string(start))
	for _, k := range sorted[i:] {
		if keys == n {
			break
		}
		keys++
		bytes += int64(len(k) + len(e.m[k]))
	}
	return keys, bytes, nil
}

func (e *mapEngine) Put(key, value []byte) error {
	if e.puts++; e.dropEvery > 0 && e.puts%e.dropEvery == 0 {
		return nil
	}
	e.m[string(key)] = value
	return nil
}

func (e *mapEngine) Get(dst, key []byte) ([]byte, bool, error) {
	v, ok := e.m[string(key)]
	if !ok {
		return dst[:0], e.inventMiss, nil
	}
	dst = append(dst[:0], v...)
	if e.corrupt {
		dst[0] ^= 1
	}
	return dst, true, nil
}

func (e *mapEngine) Compact() error { return nil }
func (e *mapEngine) Layout() string { return "map" }
func (e *mapEngine) Close() error   { return nil }

// TestRunChecksAnswers runs the harness on the model store, faultless and
// with each fault: only the faultless one may pass.
func TestRunChecksAnswers(t *testing.T) {
	tests := []struct {
		name    string
		e       mapEngine
		wantErr bool
	}{
		{"correct", mapEngine{}, false},
		{"drops keys", mapEngine{dropEvery: 97}, true},
		{"corrupts values", mapEngine{corrupt: true}, true},
		{"invents keys", mapEngine{inventMiss: true}, true},
		{"scans skip a key", mapEngine{scanFault: func(k []string) []string { return slices.Delete(k, 500, 501) }}, true},
		{"scans repeat a key", mapEngine{scanFault: func(k []string) []string { return slices.Insert(k, 10, k[10]) }}, true},
		{"scans stop early", mapEngine{scanFault: func(k []string) []string { return k[:len(k)-1] }}, true},
		{"range scans one key short", mapEngine{shortScans: true}, true},
	}
	cfg := Config{N: 1000, ValueSize: 20, Ops: 1000, Seed: 3, Dir: t.TempDir()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One map for the whole run: Run reopens the store after
			// Compact, and the reopened store must see the same data.
			m := map[string][]byte{}
			spec := Spec{Name: "map", Open: func(string) (Engine, error) {
				e := tt.e
				e.m = m
				return &e, nil
			}}
			_, err := Run(spec, cfg)
			if (err != nil) != tt.wantErr {
				t.Errorf("Run error = %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}

// TestWorkloadDeterministic checks that a Config always yields the same
// keys, values and lookup order, which is what makes runs of different
// engines (in different processes) comparable.
func TestWorkloadDeterministic(t *testing.T) {
	cfg := Config{N: 500, ValueSize: 100, Ops: 1, Seed: 7}
	a, b := newWorkload(cfg), newWorkload(cfg)
	for i := range cfg.N {
		if !bytes.Equal(a.present[i], b.present[i]) || !bytes.Equal(a.absent[i], b.absent[i]) ||
			a.order[i] != b.order[i] || !bytes.Equal(a.value(i), b.value(i)) {
			t.Fatalf("index %d differs between two workloads of one Config", i)
		}
	}
	if other := newWorkload(Config{N: 500, ValueSize: 100, Ops: 1, Seed: 8}); bytes.Equal(a.present[0], other.present[0]) {
		t.Error("seeds 7 and 8 gave the same first key")
	}
	if bytes.Equal(a.value(0), a.value(1)) || len(a.value(0)) != cfg.ValueSize {
		t.Errorf("values 0 and 1: %x, %x", a.value(0), a.value(1))
	}
}

// TestRunRejectsBadConfig checks the argument guard.
func TestRunRejectsBadConfig(t *testing.T) {
	spec, err := Lookup("bloomkv")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{{N: 0, ValueSize: 1, Ops: 1}, {N: 1, ValueSize: 0, Ops: 1}, {N: 1, ValueSize: 1, Ops: 0}} {
		if _, err := Run(spec, cfg); err == nil {
			t.Errorf("Run(%+v) = nil error", cfg)
		}
	}
	if _, err := Lookup("nosuch"); err == nil {
		t.Error(`Lookup("nosuch") = nil error`)
	}
}

// countingEngine is a read-only model store that counts the lookups of
// each key, from many goroutines.
type countingEngine struct {
	mapEngine
	mu   sync.Mutex
	seen map[string]int
}

func (e *countingEngine) Get(dst, key []byte) ([]byte, bool, error) {
	e.mu.Lock()
	e.seen[string(key)]++
	e.mu.Unlock()
	return e.mapEngine.Get(dst, key)
}

// mapWorkload returns the workload of cfg and its present keys' values,
// for a mapEngine to serve.
func mapWorkload(cfg Config) (*workload, map[string][]byte) {
	w := newWorkload(cfg)
	m := map[string][]byte{}
	for i, k := range w.present {
		m[string(k)] = w.value(i)
	}
	return w, m
}

// TestParallelGetsShareWork checks that the concurrent phases look up
// exactly the single-reader phase's keys, each once, however many
// goroutines share them, and still check every answer.
func TestParallelGetsShareWork(t *testing.T) {
	cfg := Config{N: 500, ValueSize: 20, Ops: 1000, Seed: 3}
	w, m := mapWorkload(cfg)
	for _, readers := range []int{1, 3, 7, 1500} {
		for _, hit := range []bool{true, false} {
			e := &countingEngine{mapEngine: mapEngine{m: m}, seen: map[string]int{}}
			shared := func() (getFunc, func() error, error) { return e.Get, func() error { return nil }, nil }
			if _, err := w.parallelGets(shared, readers, hit, 0); err != nil {
				t.Fatalf("%d readers, hit %v: %v", readers, hit, err)
			}
			want := map[string]int{}
			for j := range cfg.Ops {
				if hit {
					want[string(w.present[w.order[j%cfg.N]])]++
				} else {
					want[string(w.absent[j%cfg.N])]++
				}
			}
			if !maps.Equal(e.seen, want) {
				t.Errorf("%d readers, hit %v: looked up %d distinct keys, want %d with the sequence's counts", readers, hit, len(e.seen), len(want))
			}
		}
	}
	// A wrong answer seen by any goroutine fails the phase.
	bad := &countingEngine{mapEngine: mapEngine{m: m, corrupt: true}, seen: map[string]int{}}
	if _, err := w.parallelGets(func() (getFunc, func() error, error) { return bad.Get, func() error { return nil }, nil }, 4, true, 0); err == nil {
		t.Error("corrupted values passed the concurrent get-hit phase")
	}
}

// TestParallelGetsRunLongEnough checks that a concurrent phase whose
// lookups are over sooner goes on for its minimum time, along the same
// sequence, and reports the lookups it did, not Ops, per second.
func TestParallelGetsRunLongEnough(t *testing.T) {
	cfg := Config{N: 500, ValueSize: 20, Ops: 1000, Seed: 3}
	w, m := mapWorkload(cfg)
	const atLeast = 50 * time.Millisecond
	for _, readers := range []int{1, 3, 1500} {
		e := &countingEngine{mapEngine: mapEngine{m: m}, seen: map[string]int{}}
		shared := func() (getFunc, func() error, error) { return e.Get, func() error { return nil }, nil }
		began := time.Now()
		r, err := w.parallelGets(shared, readers, false, atLeast)
		took := time.Since(began)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for k, n := range e.seen {
			if !slices.ContainsFunc(w.absent, func(a []byte) bool { return string(a) == k }) {
				t.Fatalf("%d readers: looked up %q, not in the sequence", readers, k)
			}
			total += n
		}
		switch {
		case took < atLeast:
			t.Errorf("%d readers: the phase took %v, want at least %v", readers, took, atLeast)
		case total < cfg.Ops || len(e.seen) != cfg.N:
			t.Errorf("%d readers: %d lookups of %d keys, want at least %d of all %d", readers, total, len(e.seen), cfg.Ops, cfg.N)
		case r*took.Seconds() < float64(total) || r*atLeast.Seconds() > float64(total):
			t.Errorf("%d readers: %.0f lookups/s over %v, but %d lookups done", readers, r, took, total)
		}
	}
}

// TestFillLatencySmoke runs the fill-latency workload on every engine
// with a small N (6 MB, so that bloomkv flushes at least once) and a
// threshold every Put exceeds: the histogram must
// hold every Put, the slow-Put list must be capped, and the stores with a
// public flush must report a flush time.
func TestFillLatencySmoke(t *testing.T) {
	for _, spec := range Specs() {
		t.Run(spec.Name, func(t *testing.T) {
			cfg := FillLatencyConfig{N: 3000, ValueSize: 2000, Seed: 1, Dir: t.TempDir(), Threshold: 1, FlushBytes: 64 << 10}
			if spec.Name == "bloomkv" {
				cfg.Trace = filepath.Join(t.TempDir(), "trace.out")
			}
			res, err := RunFillLatency(spec, cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := HistogramOf(res.Histogram, time.Duration(res.Max))
			if h.Count() != uint64(cfg.N) || res.OpsPerSec <= 0 {
				t.Errorf("histogram holds %d Puts, want %d; %v ops/s", h.Count(), cfg.N, res.OpsPerSec)
			}
			if !(0 < res.P50 && res.P50 <= res.P99 && res.P99 <= res.P999 && res.P999 <= res.Max) {
				t.Errorf("percentiles out of order: %d %d %d %d", res.P50, res.P99, res.P999, res.Max)
			}
			if res.SlowCount != cfg.N || len(res.SlowPuts) != maxSlowPuts || res.ThresholdMicros != 1e-3 {
				t.Errorf("threshold 1 ns: %d slow Puts, %d listed, threshold %v µs", res.SlowCount, len(res.SlowPuts), res.ThresholdMicros)
			}
			_, flusher := map[string]bool{"bloomkv": true, "pebble": true}[spec.Name]
			if flusher != (res.FlushMicros > 0) {
				t.Errorf("flush time %v µs; want one: %v", res.FlushMicros, flusher)
			}
			if spec.Name == "bloomkv" {
				if res.Flushes == 0 {
					t.Errorf("bloomkv counters not read: %+v", res)
				}
				if fi, err := os.Stat(cfg.Trace); err != nil || fi.Size() == 0 {
					t.Errorf("no trace snapshot written: %v", err)
				}
				if _, ok := threadRunqueueWait(); ok && res.SlowPuts[0].SpanMicros <= 0 {
					t.Errorf("traced fill without run-queue samples: %+v", res.SlowPuts[0])
				}
			}
		})
	}
}
