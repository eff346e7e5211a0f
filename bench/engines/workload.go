package engines

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/bloomkv/bloomkv/bench/filters"
)

// Config is the workload. The same Config gives every engine the same keys,
// values and lookups in the same order.
type Config struct {
	N         int    // keys written
	ValueSize int    // bytes per value
	Ops       int    // lookups per get phase
	Seed      uint64 // seeds keys, values and lookup order
	Dir       string // parent of the store's directory; "" means os.TempDir()
	// Readers are the goroutine counts of the concurrent get phases: for
	// each, Ops lookups shared out among that many goroutines. Empty: no
	// concurrent phases.
	Readers []int
}

// DefaultConfig matches the project's reference benchmarks: 10^6 random
// 16-byte keys (the filter comparison's key set), 100-byte values.
func DefaultConfig() Config {
	return Config{N: 1_000_000, ValueSize: 100, Ops: 500_000, Seed: filters.Seed}
}

// Result is what Run measured, one JSON line per engine in cmd/enginebench.
type Result struct {
	Engine    string `json:"engine"`
	Version   string `json:"version,omitempty"` // filled in by the caller
	N         int    `json:"n"`
	ValueSize int    `json:"value_size"`
	Ops       int    `json:"ops"`
	Seed      uint64 `json:"seed"`

	Fill float64 `json:"fill_ops_per_sec"`
	// FillCPU is the process's CPU time (user and system, the store's
	// background goroutines included) per Put during the fill, in
	// nanoseconds; 0 where it cannot be read (cpuNanos). A shared, loaded machine
	// disturbs it less than Fill.
	FillCPU float64 `json:"fill_cpu_ns_per_op,omitempty"`
	GetHit  float64 `json:"get_hit_ops_per_sec"`
	GetMiss float64 `json:"get_miss_ops_per_sec"`
	// GetMissIter is the IterGetter path's get-miss rate, 0 if none.
	GetMissIter float64 `json:"get_miss_iter_ops_per_sec,omitempty"`
	// Readers are the concurrent get phases, one per Config.Readers.
	Readers []ReaderCell `json:"readers,omitempty"`

	// ScanFull is keys per second over a scan of the whole store in
	// order (the best of scanFullRuns), ScanFullMB the same scan's key and
	// value bytes in MB (10^6 bytes) per second. Scan100 is short range
	// scans per second (a new iterator, a seek to a random present key,
	// then up to 100 keys), Scan100Keys their keys per second.
	ScanFull    float64 `json:"scan_full_keys_per_sec,omitempty"`
	ScanFullMB  float64 `json:"scan_full_mb_per_sec,omitempty"`
	Scan100     float64 `json:"scan_100_per_sec,omitempty"`
	Scan100Keys float64 `json:"scan_100_keys_per_sec,omitempty"`
	// ScanSeconds is the wall time of the whole scan phase, untimed
	// passes and checks included: what scans add to a run.
	ScanSeconds float64 `json:"scan_seconds,omitempty"`

	// Memory of the process (Linux; 0 elsewhere), in bytes. PeakRSS is
	// VmHWM at the end of the run; RSSAnon and RSSFile are RssAnon and
	// RssFile with the store still open after the last read phase;
	// RSSAnonMax the largest RssAnon of the samples taken after fill,
	// after Compact and after the reads; HarnessAnon the RssAnon before
	// the store was first opened (the workload's keys, values and order:
	// the harness's share, in every engine's numbers alike).
	PeakRSS     int64 `json:"rss_peak_bytes,omitempty"`
	RSSAnon     int64 `json:"rss_anon_bytes,omitempty"`
	RSSAnonMax  int64 `json:"rss_anon_max_bytes,omitempty"`
	RSSFile     int64 `json:"rss_file_bytes,omitempty"`
	HarnessAnon int64 `json:"harness_anon_bytes,omitempty"`

	CompactSeconds float64 `json:"compact_seconds"`
	DiskBytes      int64   `json:"disk_bytes"` // store directory after Compact
	Layout         string  `json:"layout"`     // Engine.Layout after reopening
}

// sampleMem records the process's memory: RSSAnonMax always, the end
// values if last.
func (r *Result) sampleMem(last bool) {
	m, err := readMemStatus()
	if err != nil {
		return
	}
	r.RSSAnonMax = max(r.RSSAnonMax, m.Anon)
	if last {
		r.PeakRSS, r.RSSAnon, r.RSSFile = m.PeakRSS, m.Anon, m.File
	}
}

// BestGetMiss returns the faster get-miss path and its name ("get" or
// "iter").
func (r Result) BestGetMiss() (opsPerSec float64, path string) {
	if r.GetMissIter > r.GetMiss {
		return r.GetMissIter, "iter"
	}
	return r.GetMiss, "get"
}

// iterCheckKeys is how many present keys the IterGetter path must find
// (untimed) before its get-miss rate is believed: a lookup that never finds
// anything would be fast for the wrong reason.
const iterCheckKeys = 1000

// Run creates a store for spec in a fresh directory under cfg.Dir and runs
// the workload on it: fill, Compact, close and reopen, warm the page cache,
// then the get phases. Every lookup's answer is checked; a missing or
// wrong value, or an absent key reported present, is an error. The store's
// directory is removed afterwards.
func Run(spec Spec, cfg Config) (res Result, err error) {
	if cfg.N < 1 || cfg.ValueSize < 1 || cfg.Ops < 1 || slices.ContainsFunc(cfg.Readers, func(n int) bool { return n < 1 }) {
		return res, errors.New("engines: N, ValueSize, Ops and Readers must be positive")
	}
	w := newWorkload(cfg)
	dir, err := os.MkdirTemp(cfg.Dir, "enginebench-"+spec.Name+"-")
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()

	res = Result{Engine: spec.Name, N: cfg.N, ValueSize: cfg.ValueSize, Ops: cfg.Ops, Seed: cfg.Seed}
	if m, err := readMemStatus(); err == nil {
		res.HarnessAnon = m.Anon
	}
	if err := w.build(spec, dir, &res); err != nil {
		return res, fmt.Errorf("%s: %w", spec.Name, err)
	}
	if err := w.read(spec, dir, &res); err != nil {
		return res, fmt.Errorf("%s: %w", spec.Name, err)
	}
	return res, nil
}

// workload holds the keys, values and lookup order of one Config.
type workload struct {
	cfg     Config
	present [][]byte
	absent  [][]byte
	order   []int32 // random permutation of present for get-hit
	pool    []byte  // random bytes that values are cut from
}

func newWorkload(cfg Config) *workload {
	present, absent := filters.GenerateKeys(cfg.N, cfg.Seed)
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	w := &workload{cfg: cfg, present: present.Keys, absent: absent.Keys}
	w.order = make([]int32, cfg.N)
	for i, j := range rng.Perm(cfg.N) {
		w.order[i] = int32(j)
	}
	// Random bytes make values incompressible, so that no store gains
	// from compressing an artefact of the generator.
	w.pool = make([]byte, valuePool+cfg.ValueSize)
	for i := range w.pool {
		w.pool[i] = byte(rng.Uint32())
	}
	return w
}

// valuePool is the span of w.pool that value offsets are drawn from.
const valuePool = 1 << 20

// value returns key i's value: a window of the pool at an offset spread by
// a multiplicative hash of i, so neighbouring keys share no bytes.
func (w *workload) value(i int) []byte {
	off := (uint64(i) * 0x9E3779B97F4A7C15) >> 44 // 20 bits: [0, valuePool)
	return w.pool[off : off+uint64(w.cfg.ValueSize) : off+uint64(w.cfg.ValueSize)]
}

// build fills a new store and compacts it.
func (w *workload) build(spec Spec, dir string, res *Result) error {
	e, err := spec.Open(dir)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	start, cpu := time.Now(), cpuNanos()
	for i, k := range w.present {
		if err := e.Put(k, w.value(i)); err != nil {
			e.Close()
			return fmt.Errorf("put %d: %w", i, err)
		}
	}
	res.Fill = rate(len(w.present), time.Since(start))
	if cpu > 0 {
		res.FillCPU = float64(cpuNanos()-cpu) / float64(len(w.present))
	}
	res.sampleMem(false)

	start = time.Now()
	if err := e.Compact(); err != nil {
		e.Close()
		return fmt.Errorf("compact: %w", err)
	}
	res.CompactSeconds = time.Since(start).Seconds()
	res.sampleMem(false)
	if err := e.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	res.DiskBytes, err = dirSize(dir)
	return err
}

// read reopens the compacted store, so that every engine starts its reads
// with empty caches of its own but a warm OS page cache, and runs the get
// phases.
func (w *workload) read(spec Spec, dir string, res *Result) (err error) {
	if err := warmPageCache(dir); err != nil {
		return err
	}
	e, err := spec.Open(dir)
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	defer func() {
		res.sampleMem(true) // store still open, after every read phase
		err = errors.Join(err, e.Close())
	}()
	res.Layout = e.Layout()

	// An untimed tenth of each phase first: the first lookups load index
	// and filter blocks, which is not what a steady-state rate measures.
	warm := max(w.cfg.Ops/10, 1)
	if _, err := w.getHits(e.Get, warm); err != nil {
		return err
	}
	if _, err := w.getMisses(e.Get, warm); err != nil {
		return err
	}
	if res.GetHit, err = w.getHits(e.Get, w.cfg.Ops); err != nil {
		return err
	}
	if res.GetMiss, err = w.getMisses(e.Get, w.cfg.Ops); err != nil {
		return err
	}
	for _, n := range w.cfg.Readers {
		cell, err := w.readerCell(e, n)
		if err != nil {
			return fmt.Errorf("%d readers: %w", n, err)
		}
		res.Readers = append(res.Readers, cell)
	}
	if sc, ok := e.(Scanner); ok {
		if err := w.scans(sc, res); err != nil {
			return err
		}
	}
	if ig, ok := e.(IterGetter); ok {
		if _, err := w.getHits(ig.GetIter, min(iterCheckKeys, w.cfg.N)); err != nil {
			return fmt.Errorf("iter path: %w", err)
		}
		if _, err := w.getMisses(ig.GetIter, warm); err != nil {
			return fmt.Errorf("iter path: %w", err)
		}
		if res.GetMissIter, err = w.getMisses(ig.GetIter, w.cfg.Ops); err != nil {
			return fmt.Errorf("iter path: %w", err)
		}
	}
	return nil
}

// scanFullRuns full scans are timed (after one untimed); the best counts,
// as the one least disturbed by the machine's other work.
const scanFullRuns = 3

// scanLen is the length of a short range scan.
const scanLen = 100

// scans measures a full scan and short range scans. Every full scan must
// return all N keys and exactly their key and value bytes; each short one
// must return min(scanLen, keys from its start to the end) keys with
// their bytes, so a scan that skips, repeats or truncates fails.
func (w *workload) scans(sc Scanner, res *Result) error {
	began := time.Now()
	defer func() { res.ScanSeconds = time.Since(began).Seconds() }()
	var total int64
	for _, k := range w.present {
		total += int64(len(k) + w.cfg.ValueSize)
	}
	for run := range scanFullRuns + 1 {
		start := time.Now()
		keys, n, err := sc.Scan(nil, -1)
		d := time.Since(start)
		if err != nil {
			return fmt.Errorf("full scan: %w", err)
		}
		if keys != w.cfg.N || n != total {
			return fmt.Errorf("full scan: %d keys, %d bytes, want %d, %d", keys, n, w.cfg.N, total)
		}
		if run > 0 && rate(keys, d) > res.ScanFull {
			res.ScanFull, res.ScanFullMB = rate(keys, d), float64(n)/1e6/d.Seconds()
		}
	}
	return w.shortScans(sc, res)
}

// shortScans times Ops/25 short range scans from present keys in the
// get-hit order (a 100-key scan costs about as much as 25 lookups).
func (w *workload) shortScans(sc Scanner, res *Result) error {
	rank := w.ranks()
	scans := max(w.cfg.Ops/25, 1)
	keysRead := 0
	start := time.Now()
	for j := range scans {
		i := w.order[j%len(w.order)]
		keys, n, err := sc.Scan(w.present[i], scanLen)
		if err != nil {
			return fmt.Errorf("range scan from key %d: %w", i, err)
		}
		want := min(scanLen, w.cfg.N-int(rank[i]))
		// Every key has the same length (GenerateKeys: 16 bytes).
		if keys != want || n != int64(keys*(len(w.present[i])+w.cfg.ValueSize)) {
			return fmt.Errorf("range scan from key %d: %d keys, %d bytes, want %d keys", i, keys, n, want)
		}
		keysRead += keys
	}
	d := time.Since(start)
	res.Scan100, res.Scan100Keys = rate(scans, d), rate(keysRead, d)
	return nil
}

// ranks returns each present key's position in key order.
func (w *workload) ranks() []int32 {
	byKey := make([]int32, len(w.present))
	for i := range byKey {
		byKey[i] = int32(i)
	}
	slices.SortFunc(byKey, func(a, b int32) int { return bytes.Compare(w.present[a], w.present[b]) })
	rank := make([]int32, len(byKey))
	for r, i := range byKey {
		rank[i] = int32(r)
	}
	return rank
}

type getFunc func(dst, key []byte) ([]byte, bool, error)

// getHits looks up ops present keys in random order (cycling through the
// permutation if ops > N), checks each value, and returns ops per second.
func (w *workload) getHits(get getFunc, ops int) (float64, error) {
	return w.getHitsFrom(get, 0, ops)
}

// getHitsFrom is getHits starting at position from of the order.
func (w *workload) getHitsFrom(get getFunc, from, ops int) (float64, error) {
	var buf []byte
	start := time.Now()
	for j := from; j < from+ops; j++ {
		i := int(w.order[j%len(w.order)])
		v, found, err := get(buf[:0], w.present[i])
		if err != nil {
			return 0, fmt.Errorf("get present key %d: %w", i, err)
		}
		if !found {
			return 0, fmt.Errorf("get present key %d: not found", i)
		}
		if !bytes.Equal(v, w.value(i)) {
			return 0, fmt.Errorf("get present key %d: wrong value", i)
		}
		buf = v
	}
	return rate(ops, time.Since(start)), nil
}

// getMisses looks up ops absent keys (cycling through them if ops > N),
// checks that none is found, and returns ops per second.
func (w *workload) getMisses(get getFunc, ops int) (float64, error) {
	return w.getMissesFrom(get, 0, ops)
}

// getMissesFrom is getMisses starting at absent key from (wrapping round).
func (w *workload) getMissesFrom(get getFunc, from, ops int) (float64, error) {
	var buf []byte
	from = ((from % len(w.absent)) + len(w.absent)) % len(w.absent)
	start := time.Now()
	for j := range ops {
		i := (from + j) % len(w.absent)
		v, found, err := get(buf[:0], w.absent[i])
		if err != nil {
			return 0, fmt.Errorf("get absent key %d: %w", i, err)
		}
		if found {
			return 0, fmt.Errorf("get absent key %d: found", i)
		}
		buf = v
	}
	return rate(ops, time.Since(start)), nil
}

func rate(ops int, d time.Duration) float64 { return float64(ops) / d.Seconds() }

// dirSize returns the total size of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		return nil
	})
	return total, err
}

// warmPageCache reads every file under dir once, so that no engine's first
// reads pay for the disk and all of them read from the OS page cache.
func warmPageCache(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(io.Discard, f)
		return err
	})
}
