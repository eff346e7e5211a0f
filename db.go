// Package bloomkv is an embedded key-value store: a log-structured merge
// tree whose on-disk segments each carry a Bloom filter, so that looking up
// a key that is not there costs no disk read at all for almost every
// segment.
//
// # Data path
//
// A write (Put, Delete, Write of a Batch) is appended to the write-ahead log
// (wal/) as one record and then inserted into the memtable (memtable/), a
// sorted in-memory skiplist. When the memtable reaches Options.MemtableSize
// it becomes immutable, a new one takes the writes, and a background flush
// writes the immutable one to a segment file (segment/): sorted,
// prefix-compressed, snappy-compressed, checksummed blocks, an index, and a
// Bloom filter (bloom/) of the segment's keys. The set of live segments is
// kept in a bbolt database (manifest/), changed in one ACID transaction per
// flush or compaction.
//
// A Get looks in the memtable, then the immutable memtables, then the
// segments newest first. The key is hashed once; each segment's filter is
// asked with that hash, and a segment whose filter says "not here" is
// skipped without any I/O. Only a "maybe" leads to an index lookup and a
// block read, from the block cache or the file.
//
// Scans go through an Iterator (NewIterator): a merge of the memtables and
// every segment (internal/merge) that shows, for each key, the newest
// version the reader may see. A Snapshot fixes that "may see" to the
// moment it was taken.
//
// # Guarantees
//
// Every method is safe for concurrent use. A write that returned nil
// survives a crash of the process: it is in the kernel's page cache (the
// WAL is appended through a shared mapping of a preallocated file, or with
// write(2)) before Write returns. With Options.Sync it also survives a
// crash of the machine (power loss): each commit is fsynced before it
// returns; concurrent writers share one write and one fsync (group
// commit). Without Sync, a power loss can lose the writes of the last
// moments, but never leaves a torn batch: a batch is all there or not at
// all.
//
// Damaged files are reported, never guessed around: an error matching
// ErrCorrupt names the file and offset.
package bloomkv

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/memtable"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/wal"
)

// Errors returned by the DB. Match them with errors.Is; most are wrapped
// with context.
var (
	// ErrNotFound is returned by Get for a key that has no value.
	ErrNotFound = errors.New("bloomkv: not found")
	// ErrClosed is returned by every operation on a closed DB.
	ErrClosed = errors.New("bloomkv: closed")
	// ErrLocked is returned by Open when another process (or another DB in
	// this process) has the directory open.
	ErrLocked = errors.New("bloomkv: directory locked by another process")
	// ErrCorrupt is matched by every error about damaged or hostile
	// on-disk data; the error is a *CorruptError naming the file and the
	// offset.
	ErrCorrupt = base.ErrCorrupt
	// ErrNotStore is returned by Open for a non-empty directory that holds
	// no bloomkv manifest: nothing in it is touched.
	ErrNotStore = errors.New("bloomkv: directory is not a bloomkv store")
	// ErrEmptyKey rejects zero-length keys.
	ErrEmptyKey = errors.New("bloomkv: empty key")
	// ErrKeyTooLarge rejects keys longer than MaxKeySize.
	ErrKeyTooLarge = errors.New("bloomkv: key too large")
	// ErrValueTooLarge rejects values longer than MaxValueSize.
	ErrValueTooLarge = errors.New("bloomkv: value too large")
	// ErrBatchTooLarge rejects batches whose encoding exceeds MaxBatchSize.
	ErrBatchTooLarge = errors.New("bloomkv: batch too large")
	// ErrReadOnly is returned by writes to a DB opened with
	// Options.ReadOnly, and by writes after a WAL write or sync, a flush or
	// a compaction failed: the DB can no longer promise durability, so it
	// stops accepting writes rather than guess. Reads still work; reopen to
	// recover.
	ErrReadOnly = errors.New("bloomkv: read-only after a write failure")
	// ErrInvalidOptions is returned by Open for an option out of its
	// documented range; the error names the option.
	ErrInvalidOptions = errors.New("bloomkv: invalid options")
	// ErrSnapshotReleased is returned by reads through a closed Snapshot.
	ErrSnapshotReleased = errors.New("bloomkv: snapshot released")
)

// CorruptError is the error behind every ErrCorrupt: the damaged file (its
// name within the store's directory) and the byte offset of the damaged
// structure (-1 if unknown). Find it with errors.As.
type CorruptError = base.CorruptError

// Size limits. Keys, values and batches beyond them are rejected with their
// own errors before anything is written; everything within them can be
// flushed, compacted, recovered and read back.
const (
	MaxKeySize   = base.MaxKeySize   // 64 KiB
	MaxValueSize = base.MaxValueSize // 32 MiB
	MaxBatchSize = base.MaxBatchSize // 256 MiB: one batch is one WAL record
)

// Options configure a DB. Start from DefaultOptions and change what you
// need: every zero size falls back to its default, but BitsPerKey 0 really
// means "no filters".
type Options struct {
	// BitsPerKey sizes each segment's Bloom filter. 10 gives a
	// false-positive rate of about 0.9% (bloom.FPR). 0 disables filters, so
	// every segment is searched (for A/B measurements).
	BitsPerKey float64
	// MemtableSize is the size at which the memtable is frozen and flushed
	// to a segment. Default 4 MiB.
	MemtableSize int
	// BlockSize is the target uncompressed size of a segment data block.
	// Default 4 KiB.
	BlockSize int
	// BlockCacheSize bounds the memory of decompressed blocks kept for
	// reuse, shared by all segments. Default 64 MiB.
	BlockCacheSize int64
	// DisableCompression stores blocks without snappy.
	DisableCompression bool
	// DisableMmap reads segments with pread instead of mapping them, and
	// appends to the WAL with write(2) instead of copying into a shared
	// mapping of its preallocated file (Linux). A mapping makes reads of
	// uncompressed blocks and group commits free of system calls, but a
	// device error on a mapped page kills the process (SIGBUS) instead of
	// returning an error.
	DisableMmap bool
	// FilterBudget caps the memory held by the filters of all segments, in
	// bytes; 0 means no cap. Over the cap, filters are halved (folded,
	// exactly: no false negatives) where that costs the fewest expected
	// extra block reads, the largest segments first, never below one bit
	// per key. Stats.FilterBytes and Stats.FilterExpectedReads show the
	// effect; DB.SetFilterBudget changes it at run time. (With DisableMmap
	// the stored filters stay on the heap too, so it saves no heap there.)
	FilterBudget int64
	// FilterAllocation chooses how the filter memory is spread over the
	// segments: FilterOptimal (the default) gives each segment, when it is
	// built, the bits per key that minimise the expected block reads per
	// absent Get for the memory (FilterBudget, or else what BitsPerKey for
	// every key would use), so large segments get fewer bits per key and
	// small ones more; FilterUniform gives every segment BitsPerKey, as
	// before issue 17, for comparison. compaction/DESIGN.md §4 has the
	// arithmetic and the measured gain.
	FilterAllocation FilterAllocation
	// Sync fsyncs the WAL before each commit returns, so acknowledged
	// writes survive power loss. Default off: they survive a process crash,
	// and a power cut leaves a prefix of them (in whole batches); DB.Sync
	// and DB.WriteSync make chosen writes durable without Sync.
	Sync bool
	// CompactionFanIn is how many segments of one size tier a background
	// compaction merges into one (size-tiered, as Bigtable's merging
	// compactions). Default 4: with equal flushes the store keeps at most
	// (FanIn-1)·tiers+1 segments at a write amplification of about
	// tiers+1 (compaction/DESIGN.md has the simulation).
	CompactionFanIn int
	// CompactionConcurrency is how many background compactions may run at
	// once, on disjoint runs of segments. Default 1, right for two cores:
	// a merge is CPU-bound (decode, compare, encode, compress), so a
	// second one competes with the foreground. More helps on larger
	// machines, where a long merge of an old tier would otherwise hold up
	// the cheap merges of fresh flushes behind it.
	CompactionConcurrency int
	// DisableAutoCompaction turns background compaction off; Compact
	// still merges everything on demand.
	DisableAutoCompaction bool
	// ReadOnly opens the store without changing a byte of it, so that it
	// can be inspected (bloomkv stats, get, scan) while no writer has it,
	// also on a read-only directory or file system. The WALs are replayed
	// into memory only; nothing is flushed, compacted or deleted, and every
	// write, Flush and Compact returns ErrReadOnly. Any number of read-only
	// opens share the store (a shared lock on LOCK, held if the file
	// exists); a writer's Open fails with ErrLocked meanwhile, and a
	// read-only Open fails with ErrLocked while a writer has it.
	ReadOnly bool
	// FS is the file system the store's files live in. Default: the
	// operating system's (vfs.Default). Tests use vfs.Faulty to inject
	// failures.
	FS vfs.FS
	// Logger receives background events (flushes, compactions, errors).
	// Default: discard.
	Logger *slog.Logger
}

// DefaultOptions returns the options Open uses when given nil.
func DefaultOptions() *Options {
	return &Options{
		BitsPerKey:     10,
		MemtableSize:   4 << 20,
		BlockSize:      4 << 10,
		BlockCacheSize: 64 << 20,
	}
}

// Limits of the options, checked by Open.
const (
	maxBitsPerKey   = 64      // beyond ~30 bits per key a filter no longer lowers the false-positive rate measurably
	maxMemtableSize = 1 << 30 // 1 GiB: recovery replays a whole memtable into memory
	maxBlockSize    = 8 << 20 // segment.MaxBlockSize leaves room for one largest entry beyond it
	maxFanIn        = 64
	maxConcurrency  = 64
)

// validated returns o with defaults filled in, or an error matching
// ErrInvalidOptions naming the first option out of range. Nothing is
// clamped silently: a value the store cannot honour is refused.
func (o *Options) validated() (Options, error) {
	if o == nil {
		o = DefaultOptions()
	}
	out, def := *o, DefaultOptions()
	bad := func(name string, v any, want string) (Options, error) {
		return Options{}, fmt.Errorf("%w: %s = %v, want %s", ErrInvalidOptions, name, v, want)
	}
	switch {
	case math.IsNaN(out.BitsPerKey) || out.BitsPerKey < 0 || out.BitsPerKey > maxBitsPerKey:
		return bad("BitsPerKey", out.BitsPerKey, fmt.Sprintf("0 (no filters) to %d", maxBitsPerKey))
	case out.MemtableSize < 0 || out.MemtableSize > maxMemtableSize:
		return bad("MemtableSize", out.MemtableSize, fmt.Sprintf("0 (default) to %d", maxMemtableSize))
	case out.BlockSize < 0 || out.BlockSize > maxBlockSize:
		return bad("BlockSize", out.BlockSize, fmt.Sprintf("0 (default) to %d", maxBlockSize))
	case out.BlockCacheSize < 0:
		return bad("BlockCacheSize", out.BlockCacheSize, "0 (default) or more")
	case out.FilterBudget < 0:
		return bad("FilterBudget", out.FilterBudget, "0 (no cap) or more")
	case out.FilterAllocation > FilterUniform: // issue 17 (filtermem.go)
		return bad("FilterAllocation", out.FilterAllocation, "FilterOptimal or FilterUniform")
	case out.CompactionFanIn == 1 || out.CompactionFanIn < 0 || out.CompactionFanIn > maxFanIn:
		return bad("CompactionFanIn", out.CompactionFanIn, fmt.Sprintf("0 (default) or 2 to %d", maxFanIn))
	case out.CompactionConcurrency < 0 || out.CompactionConcurrency > maxConcurrency:
		return bad("CompactionConcurrency", out.CompactionConcurrency, fmt.Sprintf("0 (default) to %d", maxConcurrency))
	}
	if out.MemtableSize == 0 {
		out.MemtableSize = def.MemtableSize
	}
	if out.BlockSize == 0 {
		out.BlockSize = def.BlockSize
	}
	if out.CompactionFanIn == 0 {
		out.CompactionFanIn = compaction.DefaultFanIn
	}
	out.CompactionConcurrency = max(out.CompactionConcurrency, 1)
	if out.BlockCacheSize == 0 {
		out.BlockCacheSize = def.BlockCacheSize
	}
	if out.FS == nil {
		out.FS = vfs.Default
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, nil
}

// DB is an open store. Open it with Open; close it with Close.
type DB struct {
	dir    string
	opts   Options
	logger *slog.Logger

	fs       vfs.FS
	bootID   [16]byte // this boot's identity, recorded in every new WAL
	lockFile io.Closer
	manifest *manifest.Manifest
	cache    *segment.Cache
	counters segment.Counters
	stats    counters

	// isClosed mirrors closed for iterators, which check it on every move
	// and must not take db.mu to do so.
	isClosed atomic.Bool
	// visibleSeq is the sequence number of the last write readers may see;
	// a batch becomes visible at once when its last entry is applied.
	visibleSeq atomic.Uint64
	// current is the read state: memtables and segments, ref-counted so
	// that files outlive the readers that use them.
	current atomic.Pointer[readState]

	commit commitQueue // group commit: one leader writes for many writers

	// lastSeq is the sequence number of the last committed write. Only the
	// commit leader (or Open, before any writer exists) touches it.
	lastSeq uint64

	// replayedLogs are the WALs a read-only DB replayed (and still needs).
	replayedLogs []uint64

	// compactMu is held shared by each background compaction and
	// exclusively by Compact, which merges everything and so must run
	// alone; policy picks the inputs.
	compactMu sync.RWMutex
	policy    compaction.SizeTiered

	// mu guards the fields below and the transitions of current.
	mu            sync.Mutex
	cond          *sync.Cond // signalled when a flush or compaction finishes
	closed        bool
	snapshots     list.List           // sequence numbers of open snapshots, oldest first
	bgErr         error               // first background failure; makes the DB read-only
	logw          *wal.Writer         // the WAL of mem
	logNum        uint64              // file number of logw
	mem           *memtable.Memtable  // takes the writes
	imm           []*frozen           // full memtables waiting for flush, oldest first
	segments      []*segHandle        // live segments, newest first
	flushing      bool                // the background flush goroutine is running
	compacting    int                 // background compactions scheduled or running
	busy          map[*segHandle]bool // inputs of the running compactions
	stallAt       int                 // segment count at which writers wait for compaction
	expectedReads float64             // predicted block reads per absent Get (filtermem.go)
	history       []CompactionInfo    // the latest compactions, oldest first
	bgWG          sync.WaitGroup

	// rebuilt holds the filters RebuildFilters built in memory, by
	// segment (nil: the segment gets none); issue 17, filtermem.go.
	rebuilt map[*segHandle]*bloom.Filter
}

// Get returns the value of key, or an error matching ErrNotFound if it has
// none. The returned slice is the caller's.
func (db *DB) Get(key []byte) ([]byte, error) {
	return db.get(key, latestSeq)
}

// get returns the newest value of key with a sequence number <= snapSeq
// (latestSeq: the newest committed).
func (db *DB) get(key []byte, snapSeq uint64) ([]byte, error) {
	if err := checkEntry(key, nil); err != nil {
		return nil, err
	}
	rs, seq := db.view()
	if rs == nil {
		return nil, ErrClosed
	}
	defer rs.release()
	seq = min(seq, snapSeq)
	db.stats.gets.Add(1)
	for _, m := range rs.mems { // newest first
		if v, kind, ok := m.Get(key, seq); ok {
			return valueOf(v, kind)
		}
	}
	return db.getFromSegments(rs.segments, key, seq)
}

// getFromSegments searches the segments newest first. The key is hashed
// once for every filter; a filter's "no" skips its segment with no I/O.
func (db *DB) getFromSegments(segments []*segHandle, key []byte, seq uint64) ([]byte, error) {
	h := bloom.Hash(key)
	// Counted locally and published once: a shared atomic per segment
	// probed would bounce a cache line between cores on every Get.
	var probed, negatives, falsePositives uint64
	defer func() {
		db.stats.segmentsProbed.Add(probed)
		db.stats.filterNegatives.Add(negatives)
		db.stats.filterFalsePositives.Add(falsePositives)
	}()
	for _, s := range segments {
		if !s.covers(key) {
			continue
		}
		probed++
		if !s.reader.MayContain(h) {
			negatives++
			continue
		}
		v, kind, ok, err := s.reader.Get(key, seq) // v is a fresh copy
		if err != nil {
			return nil, fmt.Errorf("bloomkv: get from segment %s: %w", s.name, err)
		}
		if ok {
			if kind == base.KindDelete {
				return nil, ErrNotFound
			}
			return v, nil
		}
		if s.reader.Filter() != nil {
			falsePositives++
		}
	}
	return nil, ErrNotFound
}

// valueOf turns the version found in a memtable into Get's result: a copy
// of the value, or ErrNotFound for a tombstone.
func valueOf(v []byte, kind base.Kind) ([]byte, error) {
	if kind == base.KindDelete {
		return nil, ErrNotFound
	}
	return append(make([]byte, 0, len(v)), v...), nil
}

// Put sets key to value.
func (db *DB) Put(key, value []byte) error {
	b := getBatch()
	defer putBatch(b)
	b.Put(key, value)
	return db.Write(b)
}

// Delete removes key. Deleting a key that does not exist is not an error.
func (db *DB) Delete(key []byte) error {
	b := getBatch()
	defer putBatch(b)
	b.Delete(key)
	return db.Write(b)
}

// Write applies the batch atomically. The batch may be reused once Write
// returns. It is durable as Options.Sync says: against a process crash
// always, against power loss only with Sync (or see WriteSync).
func (db *DB) Write(b *Batch) error { return db.write(b, false) }

// WriteSync is Write that also makes the batch, and every write
// acknowledged before it, survive power loss before it returns, whatever
// Options.Sync says: for the few writes that must be durable (a raft log
// append, a commit record) in a store that does not fsync every write.
// Concurrent writers share the fsync (group commit).
func (db *DB) WriteSync(b *Batch) error { return db.write(b, true) }

func (db *DB) write(b *Batch, sync bool) error {
	if b.err != nil {
		return b.err
	}
	if b.count == 0 {
		if sync {
			return db.Sync()
		}
		if db.isClosed.Load() {
			return ErrClosed
		}
		return nil
	}
	return db.commit.submit(db, b, sync)
}

var batchPool = sync.Pool{New: func() any { return NewBatch() }}

func getBatch() *Batch { return batchPool.Get().(*Batch) }

func putBatch(b *Batch) {
	if cap(b.data) <= 64<<10 { // do not pin huge buffers
		b.Reset()
		batchPool.Put(b)
	}
}

// Close waits for the commit in progress, stops background work and
// releases the directory. Reads in progress finish first; every later call
// returns ErrClosed. If a background flush or compaction failed earlier,
// Close returns that failure too (matching ErrReadOnly). Writes already acknowledged are in the WAL and will be
// recovered by the next Open.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	db.closed = true
	db.isClosed.Store(true)
	db.cond.Broadcast()
	db.mu.Unlock()

	db.commit.exclusive(db, func() {}) // wait out the current leader
	db.bgWG.Wait()                     // and the flush in progress
	db.compactMu.Lock()                // and the compaction in progress
	defer db.compactMu.Unlock()
	db.mu.Lock()
	defer db.mu.Unlock()
	err := db.closeFiles()
	if db.bgErr != nil {
		// A flush or compaction failed earlier: say so here too, so that
		// a caller who only checks Close still learns of it.
		err = errors.Join(fmt.Errorf("%w: %w", ErrReadOnly, db.bgErr), err)
	}
	return err
}
