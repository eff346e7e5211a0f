package engines

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/bloomkv/bloomkv"

	"github.com/bloomkv/bloomkv/bench/filters"
)

// ColdConfig is the cold-read workload: a compacted store of N keys, then,
// per read variant and per phase (get-hit, get-miss), the store is opened,
// Warm untimed misses load what each store loads lazily (index and filter
// blocks), every file of the store is evicted from the page cache with the
// store still open (evictDir), and Ops Gets are timed while the process's
// device reads (/proc/self/io read_bytes) and major faults are counted.
type ColdConfig struct {
	N         int
	ValueSize int
	Ops       int // Gets per phase
	Warm      int // untimed misses before the eviction
	Seed      uint64
	Dir       string // parent of the store; "" means os.TempDir()
}

// DefaultColdConfig: 10^6 keys, 100-byte values, 2·10^4 Gets per phase
// after 1000 warm-up misses.
func DefaultColdConfig() ColdConfig {
	return ColdConfig{N: 1_000_000, ValueSize: 100, Ops: 20_000, Warm: 1000, Seed: filters.Seed}
}

// ColdVariant is one way of reading a store built by its ColdSpec.
type ColdVariant struct {
	Name     string
	Settings string
	Open     func(dir string) (Engine, error)
	// Iter reads through the engine's IterGetter instead of Get.
	Iter bool
}

// ColdSpec is a store of the cold workload: built (filled and compacted)
// once with Build, then read by each of its variants.
type ColdSpec struct {
	Build    Spec
	Variants []ColdVariant
}

// ColdSpecs returns the stores of the cold workload, bloomkv first.
func ColdSpecs() []ColdSpec {
	specs := Specs()
	byName := map[string]Spec{}
	for _, s := range specs {
		byName[s.Name] = s
	}
	return []ColdSpec{
		{byName["bloomkv"], []ColdVariant{
			{"bloomkv", "DefaultOptions: segments mmap'd with MADV_RANDOM, Gets pread blocks the page cache lacks (FADV_RANDOM); filter and index on the heap", openBloomkv, false},
			{"bloomkv-nommap", "DisableMmap: true: pread per block (FADV_RANDOM); filter and index on the heap", openBloomkvNoMmap, false},
		}},
		{byName["pebble"], []ColdVariant{
			{"pebble", "DB.Get (does not consult L6 filters)", openPebble, false},
			{"pebble-l6filters", "iterator with UseL6Filters, SeekPrefixGE", openPebble, true},
		}},
		{byName["goleveldb"], []ColdVariant{{"goleveldb", "Bloom filter 10 bits/key, Get", openGoleveldb, false}}},
		{byName["badger"], []ColdVariant{{"badger", "default (tables mmap'd), txn.Get", openBadger, false}}},
		{byName["bbolt"], []ColdVariant{{"bbolt", "mmap (bbolt sets MADV_RANDOM), one View per Get", openBbolt, false}}},
	}
}

// LookupCold returns the ColdSpec whose store is called name.
func LookupCold(name string) (ColdSpec, error) {
	for _, s := range ColdSpecs() {
		if s.Build.Name == name {
			return s, nil
		}
	}
	return ColdSpec{}, fmt.Errorf("unknown engine %q", name)
}

func openBloomkvNoMmap(dir string) (Engine, error) {
	o := bloomkv.DefaultOptions()
	o.DisableMmap = true
	db, err := bloomkv.Open(dir, o)
	if err != nil {
		return nil, err
	}
	return &bloomkvEngine{db}, nil
}

// ColdPhase is what one phase (get-hit or get-miss) measured.
type ColdPhase struct {
	OpsPerSec float64 `json:"ops_per_sec"`
	// Per Get, over the timed loop: bytes read from the device
	// (read_bytes delta), major and minor page faults.
	ReadBytesPerGet float64 `json:"read_bytes_per_get"`
	MajFaultsPerGet float64 `json:"maj_faults_per_get"`
	MinFaultsPerGet float64 `json:"min_faults_per_get"`
	// CPUMicrosPerGet is the process's CPU time (user + system, all
	// threads) per Get: the rest of 1/OpsPerSec is mostly waiting for
	// the device.
	CPUMicrosPerGet float64 `json:"cpu_us_per_get"`
	// ResidentAfterEvict is the store's pages still in the page cache
	// right after the eviction (mincore; should be 0), CachedAfter the
	// bytes of the store in the page cache after the loop: everything
	// the Gets pulled in, read-ahead included.
	ResidentAfterEvict int64 `json:"resident_pages_after_evict"`
	// The same for the first First Gets of the loop alone (Ops/20), while
	// the page cache holds almost nothing of the store: the cost of a Get
	// that finds nothing cached, before read-ahead of earlier Gets helps.
	First                int     `json:"first"`
	FirstOpsPerSec       float64 `json:"first_ops_per_sec"`
	FirstReadBytesPerGet float64 `json:"first_read_bytes_per_get"`
	FirstMajFaultsPerGet float64 `json:"first_maj_faults_per_get"`
	CachedAfter          int64   `json:"cached_bytes_after"`
}

// ColdResult is one read variant of one store, one JSON line in
// enginebench -cold.
type ColdResult struct {
	Workload  string `json:"workload"` // "cold"
	Engine    string `json:"engine"`   // the variant
	Store     string `json:"store"`    // the store (Spec.Name)
	Version   string `json:"version,omitempty"`
	Settings  string `json:"settings"`
	N         int    `json:"n"`
	ValueSize int    `json:"value_size"`
	Ops       int    `json:"ops"`
	Warm      int    `json:"warm"`
	Seed      uint64 `json:"seed"`
	DiskBytes int64  `json:"disk_bytes"`
	Layout    string `json:"layout"`

	// ReadAheadKB is read_ahead_kb of the device holding the store (-1:
	// unknown): the most a fault on a mapping reads around the page it
	// needs, and the largest read-ahead window of read(2).
	ReadAheadKB int `json:"read_ahead_kb"`

	Hit  ColdPhase `json:"get_hit"`
	Miss ColdPhase `json:"get_miss"`
}

// RunCold builds spec's store under cfg.Dir and runs every variant's cold
// phases on it; the directory is removed afterwards. Without
// /proc/self/io it returns an error matching ErrNoDeviceCounters before
// building anything.
func RunCold(spec ColdSpec, cfg ColdConfig) (results []ColdResult, err error) {
	if cfg.N < 1 || cfg.ValueSize < 1 || cfg.Ops < 1 || cfg.Warm < 0 {
		return nil, errors.New("engines: cold workload needs positive N, ValueSize, Ops")
	}
	if _, err := readIOCounters(); err != nil {
		return nil, err
	}
	w := newWorkload(Config{N: cfg.N, ValueSize: cfg.ValueSize, Ops: cfg.Ops, Seed: cfg.Seed})
	dir, err := os.MkdirTemp(cfg.Dir, "enginebench-cold-"+spec.Build.Name+"-")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	var built Result
	if err := w.build(spec.Build, dir, &built); err != nil {
		return nil, fmt.Errorf("%s: %w", spec.Build.Name, err)
	}
	for _, v := range spec.Variants {
		res := ColdResult{Workload: "cold", Engine: v.Name, Store: spec.Build.Name, Settings: v.Settings,
			N: cfg.N, ValueSize: cfg.ValueSize, Ops: cfg.Ops, Warm: cfg.Warm, Seed: cfg.Seed, DiskBytes: built.DiskBytes,
			ReadAheadKB: readAheadKB(dir)}
		for _, hit := range []bool{true, false} {
			ph, layout, err := w.coldPhase(v, dir, cfg, hit)
			if err != nil {
				return results, fmt.Errorf("%s: %w", v.Name, err)
			}
			res.Layout = layout
			if hit {
				res.Hit = ph
			} else {
				res.Miss = ph
			}
		}
		results = append(results, res)
	}
	return results, nil
}

// ErrNoDeviceCounters matches RunCold's error where /proc/self/io is
// unavailable.
var ErrNoDeviceCounters = errNoProcIO

// coldPhase opens the store with v, warms it, evicts its files and times
// cfg.Ops hits (hit) or misses.
func (w *workload) coldPhase(v ColdVariant, dir string, cfg ColdConfig, hit bool) (ph ColdPhase, layout string, err error) {
	e, err := v.Open(dir)
	if err != nil {
		return ph, "", fmt.Errorf("open: %w", err)
	}
	defer func() { err = errors.Join(err, e.Close()) }()
	layout = e.Layout()
	get := e.Get
	if v.Iter {
		ig, ok := e.(IterGetter)
		if !ok {
			return ph, layout, errors.New("no IterGetter")
		}
		get = ig.GetIter
	}
	// Warm-up misses from the far end of the absent keys, disjoint from
	// the timed ones while Warm + Ops <= N.
	if _, err := w.getMissesFrom(get, len(w.absent)-cfg.Warm, cfg.Warm); err != nil {
		return ph, layout, fmt.Errorf("warm-up: %w", err)
	}
	if ph.ResidentAfterEvict, err = evictDir(dir); err != nil {
		return ph, layout, fmt.Errorf("evict: %w", err)
	}
	// The timed loop in two parts: the first coldFirst(Ops) Gets, while
	// the page cache holds (almost) nothing of the store, then the rest.
	first := coldFirst(cfg.Ops)
	gets := func(from, ops int) error {
		var err error
		if hit {
			_, err = w.getHitsFrom(get, from, ops)
		} else {
			_, err = w.getMissesFrom(get, from, ops)
		}
		return err
	}
	io0, err := readIOCounters()
	if err != nil {
		return ph, layout, err
	}
	start := time.Now()
	if err := gets(0, first); err != nil {
		return ph, layout, err
	}
	ioFirst, err := readIOCounters()
	if err != nil {
		return ph, layout, err
	}
	dFirst := time.Since(start)
	if err := gets(first, cfg.Ops-first); err != nil {
		return ph, layout, err
	}
	d := time.Since(start)
	io1, err := readIOCounters()
	if err != nil {
		return ph, layout, err
	}
	ops := float64(cfg.Ops)
	ph.OpsPerSec = rate(cfg.Ops, d)
	ph.ReadBytesPerGet = float64(io1.ReadBytes-io0.ReadBytes) / ops
	ph.MajFaultsPerGet = float64(io1.MajFaults-io0.MajFaults) / ops
	ph.MinFaultsPerGet = float64(io1.MinFaults-io0.MinFaults) / ops
	ph.CPUMicrosPerGet = float64(io1.CPUNanos-io0.CPUNanos) / 1e3 / ops
	ph.First = first
	ph.FirstOpsPerSec = rate(first, dFirst)
	ph.FirstReadBytesPerGet = float64(ioFirst.ReadBytes-io0.ReadBytes) / float64(first)
	ph.FirstMajFaultsPerGet = float64(ioFirst.MajFaults-io0.MajFaults) / float64(first)
	pages, err := residentDir(dir)
	ph.CachedAfter = pages * int64(os.Getpagesize())
	return ph, layout, err
}

// CheckDeviceCounters returns an error matching ErrNoDeviceCounters where
// the cold workload cannot count device reads.
func CheckDeviceCounters() error {
	_, err := readIOCounters()
	return err
}

// coldFirst is how many of ops Gets form the cold loop's first part.
func coldFirst(ops int) int { return max(ops/20, 1) }

// ColdPaired is what RunColdPaired measured for one variant: its cold
// hits, with the device counters taken around each of its own Gets.
type ColdPaired struct {
	Engine          string  `json:"engine"`
	OpsPerSec       float64 `json:"ops_per_sec"`        // Gets over the summed time of its Gets
	ReadBytesPerGet float64 `json:"read_bytes_per_get"` // /proc/self/io read_bytes
	MajFaultsPerGet float64 `json:"maj_faults_per_get"`
	CPUMicrosPerGet float64 `json:"cpu_us_per_get"` // user + system, all threads
}

// ColdPairs is the stores of a paired cold run, open and warmed: made by
// NewColdPairs, measured by Run (as often as wanted: each run after the
// first reopens the stores, so that no block cache keeps what an earlier
// run read, and each run evicts them from the page cache), removed by
// Close.
type ColdPairs struct {
	w       *workload
	cfg     ColdConfig
	dir     string
	names   []string
	engines []Engine
	gets    []getFunc
	ran     bool // Run was called: the stores' caches hold what it read
}

// NewColdPairs builds, for each named cold variant (ColdSpecs' variant
// names: "bloomkv", "pebble", …), a store of cfg.N keys in a directory of
// its own under cfg.Dir, opens it with that variant and warms it with
// cfg.Warm misses, as the cold workload does.
func NewColdPairs(names []string, cfg ColdConfig) (p *ColdPairs, err error) {
	if cfg.N < 1 || cfg.ValueSize < 1 || cfg.Warm < 0 || len(names) == 0 {
		return nil, errors.New("engines: paired cold run needs positive N, ValueSize and a variant")
	}
	if _, err := readIOCounters(); err != nil {
		return nil, err
	}
	p = &ColdPairs{w: newWorkload(Config{N: cfg.N, ValueSize: cfg.ValueSize, Ops: 1, Seed: cfg.Seed}), cfg: cfg, names: names}
	if p.dir, err = os.MkdirTemp(cfg.Dir, "enginebench-cold-paired-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
		}
	}()
	for i, name := range names {
		_, build, err := lookupColdVariant(name)
		if err != nil {
			return p, err
		}
		var built Result
		if err := p.w.build(build, p.storeDir(i), &built); err != nil {
			return p, fmt.Errorf("%s: %w", name, err)
		}
	}
	return p, p.open()
}

// storeDir is the directory of the i-th variant's store.
func (p *ColdPairs) storeDir(i int) string {
	return fmt.Sprintf("%s/%d-%s", p.dir, i, p.names[i])
}

// open opens every store with its variant and warms it with cfg.Warm
// misses, as the cold workload does.
func (p *ColdPairs) open() error {
	for i, name := range p.names {
		v, _, err := lookupColdVariant(name)
		if err != nil {
			return err
		}
		e, err := v.Open(p.storeDir(i))
		if err != nil {
			return fmt.Errorf("%s: open: %w", name, err)
		}
		p.engines = append(p.engines, e)
		get := e.Get
		if v.Iter {
			ig, ok := e.(IterGetter)
			if !ok {
				return fmt.Errorf("%s: no IterGetter", name)
			}
			get = ig.GetIter
		}
		p.gets = append(p.gets, get)
		if _, err := p.w.getMissesFrom(get, len(p.w.absent)-p.cfg.Warm, p.cfg.Warm); err != nil {
			return fmt.Errorf("%s: warm-up: %w", name, err)
		}
	}
	return nil
}

// reopen closes the stores and opens them again: their block caches and
// other state in memory are gone, as after a restart.
func (p *ColdPairs) reopen() error {
	if err := p.closeStores(); err != nil {
		return err
	}
	return p.open()
}

// closeStores closes the stores, leaving their files.
func (p *ColdPairs) closeStores() error {
	var err error
	for _, e := range p.engines {
		err = errors.Join(err, e.Close())
	}
	p.engines, p.gets = nil, nil
	return err
}

func lookupColdVariant(name string) (ColdVariant, Spec, error) {
	for _, s := range ColdSpecs() {
		for _, v := range s.Variants {
			if v.Name == name {
				return v, s.Build, nil
			}
		}
	}
	return ColdVariant{}, Spec{}, fmt.Errorf("unknown cold variant %q", name)
}

// Run evicts every store from the page cache and times ops rounds of
// cold hits: in each round every store, in turn (starting with the next
// one each round), Gets the same present key (the workload's order), and
// the Get's time, device bytes, faults
// and CPU time are added to that store's totals. All stores thus run over
// the same span of time on a machine in the same state: on a shared,
// loaded machine their ratios are much steadier than those of separate
// runs (-cold), whose load differs by minutes. The counters are
// process-wide but read around each Get alone, so each Get's are its own
// (what background goroutines of a store do meanwhile is counted to
// whichever Get is running).
func (p *ColdPairs) Run(ops int) ([]ColdPaired, error) {
	if p.ran {
		if err := p.reopen(); err != nil {
			return nil, fmt.Errorf("reopen: %w", err)
		}
	}
	p.ran = true
	if _, err := evictDir(p.dir); err != nil {
		return nil, fmt.Errorf("evict: %w", err)
	}
	type total struct {
		d               time.Duration
		bytes, maj, cpu int64
	}
	tot := make([]total, len(p.gets))
	var buf []byte
	for j := range ops {
		i := int(p.w.order[j%len(p.w.order)])
		for r := range p.gets {
			// Each round starts with the next store, so that none is
			// always first (or last) after the counters are read.
			k := (r + j) % len(p.gets)
			get := p.gets[k]
			io0, err := readIOCounters()
			if err != nil {
				return nil, err
			}
			start := time.Now()
			v, found, err := get(buf[:0], p.w.present[i])
			d := time.Since(start)
			cpu1 := cpuNanos() // before reading /proc, which costs CPU too
			io1, err2 := readIOCounters()
			switch {
			case err != nil || err2 != nil:
				return nil, fmt.Errorf("%s: get present key %d: %w", p.names[k], i, errors.Join(err, err2))
			case !found || !bytes.Equal(v, p.w.value(i)):
				return nil, fmt.Errorf("%s: get present key %d: found %v, wrong value or none", p.names[k], i, found)
			}
			buf = v
			t := &tot[k]
			t.d += d
			t.bytes += io1.ReadBytes - io0.ReadBytes
			t.maj += io1.MajFaults - io0.MajFaults
			t.cpu += cpu1 - io0.CPUNanos
		}
	}
	res := make([]ColdPaired, len(p.gets))
	for k, t := range tot {
		n := float64(max(ops, 1))
		res[k] = ColdPaired{Engine: p.names[k], OpsPerSec: rate(ops, t.d),
			ReadBytesPerGet: float64(t.bytes) / n, MajFaultsPerGet: float64(t.maj) / n, CPUMicrosPerGet: float64(t.cpu) / 1e3 / n}
	}
	return res, nil
}

// Close closes the stores and removes their directories.
func (p *ColdPairs) Close() error {
	return errors.Join(p.closeStores(), os.RemoveAll(p.dir))
}
