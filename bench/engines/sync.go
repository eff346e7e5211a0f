package engines

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomkv/bloomkv"
	bkvfs "github.com/bloomkv/bloomkv/vfs"
	"github.com/cockroachdb/pebble/v2"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dgraph-io/badger/v4"
	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/bench/filters"
)

// SyncWriter is a store opened for durable writes: Put returns only once
// the write would survive power loss (the store has fsynced it, alone or
// in a group commit). Put is safe for concurrent use.
type SyncWriter interface {
	Put(key, value []byte) error
	Close() error
}

// SyncSpec names a store opened for durable writes.
type SyncSpec struct {
	Name   string
	Module string
	// Settings says how the store is made durable, for the table.
	Settings string
	Open     func(dir string) (SyncWriter, error)
}

// SyncSpecs returns the stores of the sync-write scaling workload,
// bloomkv first. Every store has its ordinary settings otherwise (the
// same as Specs: filters, 64 MiB cache), but fsyncs every acknowledged
// write.
func SyncSpecs() []SyncSpec {
	return []SyncSpec{
		{"bloomkv", "github.com/bloomkv/bloomkv", "Options.Sync = true; DB.Put", openBloomkvSync},
		{"pebble", "github.com/cockroachdb/pebble/v2", "Set(k, v, pebble.Sync)", openPebbleSync},
		{"goleveldb", "github.com/syndtr/goleveldb", "Put(k, v, &WriteOptions{Sync: true})", openGoleveldbSync},
		{"badger", "github.com/dgraph-io/badger/v4", "WithSyncWrites(true); db.Update, one txn.Set", openBadgerSync},
		{"bbolt", "go.etcd.io/bbolt", "default Options (fsync on commit); one db.Update per Put", openBboltSync(false)},
		{"bbolt-batch", "go.etcd.io/bbolt", "default Options; one db.Batch per Put (bbolt's group commit: up to 1000 calls or 10 ms)", openBboltSync(true)},
	}
}

// LookupSync returns the SyncSpec called name.
func LookupSync(name string) (SyncSpec, error) {
	specs := SyncSpecs()
	i := slices.IndexFunc(specs, func(s SyncSpec) bool { return s.Name == name })
	if i < 0 {
		return SyncSpec{}, fmt.Errorf("unknown sync engine %q", name)
	}
	return specs[i], nil
}

// FakeFsync, if set, replaces each WAL fsync of bloomkv and Pebble (the
// stores whose fsyncs are counted) by a sleep of the thread this long:
// on a shared machine, whose other work makes one fsync take twice as
// long as the next, what is left to compare is the commit paths' CPU and
// wakeups. Nothing is durable then. The other stores ignore it.
var FakeFsync time.Duration

// walSyncer is a SyncWriter that counts the fsyncs of its write-ahead
// log, for puts per fsync: how many writers one group commit served.
type walSyncer interface {
	WALSyncs() int64
}

type bloomkvSync struct {
	*bloomkv.DB // Put and Close, safe for concurrent use
	fs          *bloomkvSyncCountFS
}

func (b bloomkvSync) WALSyncs() int64 { return b.fs.syncs.Load() }

func openBloomkvSync(dir string) (SyncWriter, error) {
	o := bloomkv.DefaultOptions()
	fs := &bloomkvSyncCountFS{FS: bkvfs.Default}
	o.Sync, o.FS = true, fs
	db, err := bloomkv.Open(dir, o)
	if err != nil {
		return nil, err
	}
	return bloomkvSync{db, fs}, nil
}

// bloomkvSyncCountFS is the operating system's file system, counting the
// fsyncs of WAL files, which bloomkv can still map (vfs.Mapper).
type bloomkvSyncCountFS struct {
	bkvfs.FS
	syncs atomic.Int64
}

func (c *bloomkvSyncCountFS) Create(name string) (bkvfs.File, error) {
	f, err := c.FS.Create(name)
	if err != nil || !strings.HasSuffix(name, ".wal") {
		return f, err
	}
	return &bloomkvSyncCountFile{File: f, n: &c.syncs}, nil
}

type bloomkvSyncCountFile struct {
	bkvfs.File
	n *atomic.Int64
}

func (f *bloomkvSyncCountFile) Sync() error {
	f.n.Add(1)
	if FakeFsync > 0 {
		sleepThread(FakeFsync)
		return nil
	}
	return f.File.Sync()
}

func (f *bloomkvSyncCountFile) WriteAt(b []byte, off int64) (int, error) {
	return f.File.(io.WriterAt).WriteAt(b, off)
}

func (f *bloomkvSyncCountFile) MapFd() (uintptr, bool) { return bkvfs.MapFd(f.File) }

type pebbleSync struct {
	db    *pebble.DB
	syncs *atomic.Int64
}

func openPebbleSync(dir string) (SyncWriter, error) {
	syncs := new(atomic.Int64)
	db, err := openPebbleDBWith(dir, func(o *pebble.Options) { o.FS = pebbleSyncCountFS{pebblevfs.Default, syncs} })
	if err != nil {
		return nil, err
	}
	return pebbleSync{db, syncs}, nil
}

func (p pebbleSync) Put(k, v []byte) error { return p.db.Set(k, v, pebble.Sync) }
func (p pebbleSync) Close() error          { return p.db.Close() }
func (p pebbleSync) WALSyncs() int64       { return p.syncs.Load() }

// pebbleSyncCountFS counts the fsyncs (Sync or SyncData) of Pebble's WAL
// files, new or recycled.
type pebbleSyncCountFS struct {
	pebblevfs.FS
	syncs *atomic.Int64
}

func (c pebbleSyncCountFS) Create(name string, cat pebblevfs.DiskWriteCategory) (pebblevfs.File, error) {
	f, err := c.FS.Create(name, cat)
	return c.wrap(name, f, err)
}

func (c pebbleSyncCountFS) ReuseForWrite(old, name string, cat pebblevfs.DiskWriteCategory) (pebblevfs.File, error) {
	f, err := c.FS.ReuseForWrite(old, name, cat)
	return c.wrap(name, f, err)
}

func (c pebbleSyncCountFS) wrap(name string, f pebblevfs.File, err error) (pebblevfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return pebbleSyncCountFile{f, c.syncs}, nil
}

type pebbleSyncCountFile struct {
	pebblevfs.File
	syncs *atomic.Int64
}

func (f pebbleSyncCountFile) Sync() error {
	f.syncs.Add(1)
	if FakeFsync > 0 {
		sleepThread(FakeFsync)
		return nil
	}
	return f.File.Sync()
}

func (f pebbleSyncCountFile) SyncData() error {
	f.syncs.Add(1)
	if FakeFsync > 0 {
		sleepThread(FakeFsync)
		return nil
	}
	return f.File.SyncData()
}

type goleveldbSync struct{ db *leveldb.DB }

var goleveldbSyncWrite = &opt.WriteOptions{Sync: true}

func openGoleveldbSync(dir string) (SyncWriter, error) {
	db, err := leveldb.OpenFile(dir, goleveldbOptions())
	if err != nil {
		return nil, err
	}
	return goleveldbSync{db}, nil
}

func (g goleveldbSync) Put(k, v []byte) error { return g.db.Put(k, v, goleveldbSyncWrite) }
func (g goleveldbSync) Close() error          { return g.db.Close() }

type badgerSync struct{ db *badger.DB }

func openBadgerSync(dir string) (SyncWriter, error) {
	db, err := badger.Open(badgerOptions(dir).WithSyncWrites(true))
	if err != nil {
		return nil, err
	}
	return badgerSync{db}, nil
}

func (b badgerSync) Put(k, v []byte) error {
	return b.db.Update(func(txn *badger.Txn) error { return txn.Set(k, v) })
}
func (b badgerSync) Close() error { return b.db.Close() }

type bboltSync struct {
	db    *bolt.DB
	batch bool
}

// openBboltSync opens bbolt with its default options: NoSync false, so
// every commit fsyncs (fdatasync) the data file.
func openBboltSync(batch bool) func(string) (SyncWriter, error) {
	return func(dir string) (SyncWriter, error) {
		db, err := bolt.Open(filepath.Join(dir, "bolt.db"), 0o600, nil)
		if err != nil {
			return nil, err
		}
		err = db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(bboltBucket)
			return err
		})
		if err != nil {
			return nil, errors.Join(err, db.Close())
		}
		return bboltSync{db, batch}, nil
	}
}

func (b bboltSync) Put(k, v []byte) error {
	fn := func(tx *bolt.Tx) error { return tx.Bucket(bboltBucket).Put(k, v) }
	if b.batch {
		return b.db.Batch(fn)
	}
	return b.db.Update(fn)
}
func (b bboltSync) Close() error { return b.db.Close() }

// SyncConfig is the sync-write scaling workload: for each writer count, a
// fresh store takes up to Ops durable Puts of distinct random 16-byte keys
// (filters.GenerateKeys) with ValueSize-byte incompressible values, shared
// out among that many goroutines, stopping early at Duration.
type SyncConfig struct {
	Writers   []int
	Ops       int
	Duration  time.Duration
	ValueSize int
	Seed      uint64
	Dir       string // parent of the stores; "" means os.TempDir()
}

// DefaultSyncConfig: 1, 4, 16 and 64 writers, 20,000 Puts or 5 s per
// cell.
func DefaultSyncConfig() SyncConfig {
	return SyncConfig{Writers: []int{1, 4, 16, 64}, Ops: 20_000, Duration: 5 * time.Second, ValueSize: 100, Seed: filters.Seed}
}

// SyncCell is one store × writer count.
type SyncCell struct {
	Writers   int     `json:"writers"`
	Puts      int     `json:"puts"` // acknowledged within the cell
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// Latency of one Put as its goroutine saw it, microseconds.
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
	// WriteBytesPerPut is /proc/self/io write_bytes over the cell ÷ Puts
	// (0 where unavailable): what the device was asked to write per Put.
	WriteBytesPerPut float64 `json:"write_bytes_per_put,omitempty"`
	// PutsPerFsync is Puts ÷ fsyncs of the write-ahead log in the cell,
	// for the stores whose WAL fsyncs are counted (bloomkv, Pebble; 0
	// otherwise): how many writers one group commit's fsync served.
	PutsPerFsync float64 `json:"puts_per_fsync,omitempty"`
}

// SyncResult is one store's sync-write scaling, one JSON line in
// enginebench -sync-scaling.
type SyncResult struct {
	Workload  string  `json:"workload"` // "sync-scaling"
	Engine    string  `json:"engine"`
	Version   string  `json:"version,omitempty"` // filled in by the caller
	Settings  string  `json:"settings"`
	ValueSize int     `json:"value_size"`
	MaxOps    int     `json:"max_ops"`
	MaxSecs   float64 `json:"max_seconds"`
	Seed      uint64  `json:"seed"`
	// CPUs is runtime.NumCPU of the process, GOMAXPROCS its GOMAXPROCS:
	// with more writers than CPUs, writers queue for the cores as well as
	// for the fsync.
	CPUs       int        `json:"cpus"`
	GOMAXPROCS int        `json:"gomaxprocs"`
	Cells      []SyncCell `json:"cells"`
	// Scaling is OpsPerSec of the most writers ÷ that of the fewest.
	Scaling float64 `json:"scaling"`
}

// RunSync runs the sync-write scaling workload on spec, a fresh store
// directory per writer count (removed afterwards).
func RunSync(spec SyncSpec, cfg SyncConfig) (SyncResult, error) {
	res := SyncResult{Workload: "sync-scaling", Engine: spec.Name, Settings: spec.Settings, ValueSize: cfg.ValueSize,
		MaxOps: cfg.Ops, MaxSecs: cfg.Duration.Seconds(), Seed: cfg.Seed, CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if cfg.Ops < 1 || cfg.ValueSize < 1 || len(cfg.Writers) == 0 || cfg.Duration <= 0 {
		return res, errors.New("engines: sync workload needs Ops, ValueSize, Writers and Duration")
	}
	w := newWorkload(Config{N: cfg.Ops, ValueSize: cfg.ValueSize, Ops: 1, Seed: cfg.Seed})
	for _, n := range cfg.Writers {
		cell, err := runSyncCell(spec, w, n, cfg)
		if err != nil {
			return res, fmt.Errorf("%s, %d writers: %w", spec.Name, n, err)
		}
		res.Cells = append(res.Cells, cell)
	}
	if first := res.Cells[0].OpsPerSec; first > 0 {
		res.Scaling = res.Cells[len(res.Cells)-1].OpsPerSec / first
	}
	return res, nil
}

func runSyncCell(spec SyncSpec, w *workload, writers int, cfg SyncConfig) (cell SyncCell, err error) {
	if writers < 1 {
		return cell, fmt.Errorf("%d writers", writers)
	}
	dir, err := os.MkdirTemp(cfg.Dir, "enginebench-sync-"+spec.Name+"-")
	if err != nil {
		return cell, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	s, err := spec.Open(dir)
	if err != nil {
		return cell, fmt.Errorf("open: %w", err)
	}
	defer func() { err = errors.Join(err, s.Close()) }()

	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		putErr  error
		lat     = make([][]time.Duration, writers)
	)
	counted, _ := s.(walSyncer)
	var syncs0 int64
	if counted != nil {
		syncs0 = counted.WALSyncs()
	}
	io0, ioErr := readIOCounters()
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for g := range writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.Ops || time.Now().After(deadline) {
					return
				}
				t := time.Now()
				if err := s.Put(w.present[i], w.value(i)); err != nil {
					errOnce.Do(func() { putErr = fmt.Errorf("put %d: %w", i, err) })
					return
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if putErr != nil {
		return cell, putErr
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	cell = SyncCell{Writers: writers, Puts: len(all), Seconds: d.Seconds(), OpsPerSec: rate(len(all), d)}
	if len(all) > 0 {
		cell.P50Micros = float64(all[len(all)/2].Nanoseconds()) / 1e3
		cell.P99Micros = float64(all[len(all)*99/100].Nanoseconds()) / 1e3
	}
	if io1, err := readIOCounters(); ioErr == nil && err == nil && len(all) > 0 {
		cell.WriteBytesPerPut = float64(io1.WriteBytes-io0.WriteBytes) / float64(len(all))
	}
	if counted != nil {
		if n := counted.WALSyncs() - syncs0; n > 0 {
			cell.PutsPerFsync = float64(len(all)) / float64(n)
		}
	}
	return cell, nil
}
