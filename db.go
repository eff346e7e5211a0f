package bloomkv

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/invariants"
	"github.com/bloomkv/bloomkv/internal/stripe"
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
	// ErrLocked is returned by Open when the directory is open in another
	// DB, in another process or in this one.
	ErrLocked = errors.New("bloomkv: directory locked")
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
	// ErrReadOnly is returned by writes (and Flush, Compact) to a DB
	// opened with Options.ReadOnly, and by writes after a WAL write or
	// sync, a flush, a compaction or a manifest commit failed, including
	// a background compaction that found damage: the DB can no longer
	// promise durability, so it stops accepting writes rather than guess.
	// The error wraps the failure that caused it. Reads still work;
	// reopen to recover. A flush or compaction that only ran out of disk
	// space, quota, file descriptors or memory while writing its new
	// segment is the exception: nothing durable changed, so it is
	// retried in the background and the DB stays writable (README,
	// "Limits and errors"); so is the creation of a new WAL that ran out
	// the same way, which fails only the writes that needed it.
	ErrReadOnly = errors.New("bloomkv: read-only")
	// ErrInvalidOptions is returned by Open for an option out of its
	// documented range; the error names the option.
	ErrInvalidOptions = errors.New("bloomkv: invalid options")
	// ErrSnapshotReleased is returned by reads through a closed Snapshot,
	// and by its second Close. It matches ErrClosed.
	ErrSnapshotReleased error = &narrowError{"bloomkv: snapshot released", ErrClosed}
	// ErrInvalidRange rejects a range deletion without an end: an empty
	// end is no key, and reading it as "to the last key" would delete
	// keys written concurrently after the range was chosen.
	ErrInvalidRange = errors.New("bloomkv: invalid range")
)

// narrowError is a sentinel that is a case of a broader one: errors.Is
// matches both, and the message carries the one "bloomkv:" prefix of its
// own text (wrapping the broader sentinel with %w would print two).
type narrowError struct {
	msg   string
	broad error
}

func (e *narrowError) Error() string        { return e.msg }
func (e *narrowError) Is(target error) bool { return target == e.broad }

// CorruptError is the error behind every ErrCorrupt. Find it with
// errors.As. Its fields:
//
//	File   string // the damaged file: its name within the store's directory
//	Offset int64  // byte offset of the damaged structure, -1 if unknown
//	Reason string // what is wrong there
//
// (It is defined in an internal package, which every layer that reads a
// file shares, and so go doc shows its fields only here.)
type CorruptError = base.CorruptError

// Size limits. Keys, values and batches beyond them are rejected with their
// own errors before anything is written; everything within them can be
// flushed, compacted, recovered and read back.
const (
	MaxKeySize   = base.MaxKeySize   // 64 KiB
	MaxValueSize = base.MaxValueSize // 32 MiB
	MaxBatchSize = base.MaxBatchSize // 256 MiB: one batch is one WAL record
)

// Options configure a DB. The zero value is the defaults (as is a nil
// *Options, and DefaultOptions()): every zero field means its default, so
// a caller sets only what it changes. Switches that turn something off are
// named Disable… and default to false. Open refuses a value out of range
// with ErrInvalidOptions naming the option; nothing is clamped silently.
type Options struct {
	// BitsPerKey sizes each segment's Bloom filter, in bits of filter per
	// distinct key. 10 (the default, used for 0) gives a false-positive
	// rate of about 0.9% (bloom.FPR); each extra bit divides it by about
	// 1.6. Valid: 0 or 1 to 64. Filters written with other settings stay
	// as they were written.
	BitsPerKey float64
	// DisableFilters writes segments without Bloom filters, so every Get
	// searches every segment whose key range holds the key: for A/B
	// measurements of what the filters save. BitsPerKey is then ignored
	// (but still checked). Segments written earlier keep their filters.
	DisableFilters bool
	// MemtableSize is the size at which the memtable is frozen and flushed
	// to a segment. Default 4 MiB. Full memtables wait for their flush
	// while writes go on in a new one: up to four of them, or as many as
	// fit in 32 MiB if that is fewer, but at least two. Only beyond that
	// do writers wait for a flush. Valid: 0 (default) to 1 GiB (recovery
	// replays a whole memtable into memory). On Linux (without
	// DisableMmap) each WAL is preallocated to about 1.25 times
	// MemtableSize, and up to two spare WALs are made ahead of rotations,
	// so the store's directory holds that much disk for WALs three times
	// over, plus the WALs of the memtables waiting for their flush.
	MemtableSize int
	// BlockSize is the target uncompressed size of a segment data block.
	// Default 4 KiB. Valid: 0 (default) to 8 MiB.
	BlockSize int
	// LargeValueSize is the size from which a segment stores a value apart
	// from its key, as a value record just before the data block that
	// holds the key (segment/FORMAT.md, "Value records"): data blocks then
	// hold keys densely, so scans, and Gets' searches, touch far fewer
	// pages (with 4 KiB values a block would hold one entry), while such a
	// value costs a Get a second read. Default 1 KiB. Valid: 0 (default)
	// or 1 to MaxValueSize. Segments written earlier stay as written.
	LargeValueSize int
	// DisableValueSeparation keeps every value beside its key in its data
	// block, as segments of format version 4 and earlier do, for readers
	// that predate value records; LargeValueSize is then ignored (but
	// still checked).
	DisableValueSeparation bool
	// BlockCacheSize bounds the memory of decompressed blocks kept for
	// reuse, shared by all segments: each block is charged its bytes, an
	// eighth more for the allocator's rounding and about 200 bytes of
	// bookkeeping. Default 64 MiB. Valid: 0 (default) or more.
	BlockCacheSize int64
	// DisableCompression stores blocks without compression. It is
	// equivalent to Compression = NoCompression, kept for the programs that
	// set it; with ZstdCompression it is refused (ErrInvalidOptions).
	DisableCompression bool
	// Compression is the codec of segment blocks: SnappyCompression (the
	// zero value and default), NoCompression or ZstdCompression.
	Compression Compression
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
	// small ones more; FilterUniform gives every segment BitsPerKey, the
	// earlier behaviour, for comparison. compaction/DESIGN.md §4 has the
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
	// tiers+1 (compaction/DESIGN.md has the simulation). Valid: 0
	// (default) or 2 to 64.
	CompactionFanIn int
	// CompactionConcurrency is how many background compactions may run at
	// once, on disjoint runs of segments. Default 1, right for two cores:
	// a merge is CPU-bound (decode, compare, encode, compress), so a
	// second one competes with the foreground. More helps on larger
	// machines, where a long merge of an old tier would otherwise hold up
	// the cheap merges of fresh flushes behind it. Valid: 0 (default) to
	// 64.
	CompactionConcurrency int
	// DisableAutoCompaction turns background compaction off; Compact
	// still merges everything on demand. Each flush then adds a live
	// segment, and each holds an open file (and a mapping) until merged:
	// README, "Limits and errors", sizes the limit on open files.
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
	// operating system's (vfs.Default). Tests use vfs/errorfs to inject
	// failures.
	FS vfs.FS
	// Logger receives background events (flushes, compactions, errors).
	// Default: discard.
	Logger *slog.Logger
	// Prefix, if set, is the store's prefix extractor: segments then also
	// carry a Bloom filter of their keys' prefixes (at BitsPerKey bits per
	// prefix; none with DisableFilters), and an Iterator whose
	// IterOptions.Prefix is a whole prefix skips the segments whose prefix
	// filter says no. It is recorded when the store is created and fixed
	// from then on (see PrefixExtractor and ErrPrefixExtractor). Default:
	// none.
	Prefix *PrefixExtractor
}

// DefaultOptions returns the defaults spelled out: what Open uses for nil
// and for every zero field, so the result opens the same store as
// &Options{}. It is there to read or print the defaults, or to start from
// them.
func DefaultOptions() *Options {
	return &Options{
		BitsPerKey:     10,
		MemtableSize:   4 << 20,
		BlockSize:      4 << 10,
		LargeValueSize: 1 << 10,
		BlockCacheSize: 64 << 20,
	}
}

// Limits of the options, checked by Open.
const (
	minBitsPerKey   = 1       // bloom.GeometryFor gives no filter less than one bit per key
	maxBitsPerKey   = 64      // beyond ~30 bits per key a filter no longer lowers the false-positive rate measurably
	maxMemtableSize = 1 << 30 // 1 GiB: recovery replays a whole memtable into memory
	maxBlockSize    = 8 << 20 // segment.MaxBlockSize leaves room for one largest entry beyond it
	maxFanIn        = 64
	maxConcurrency  = 64
)

// validated returns o with defaults filled in, or an error matching
// ErrInvalidOptions naming the first option out of range. Nothing is
// clamped silently: a value the store cannot honour is refused.
//
// In the result, BitsPerKey 0 means "write no filters" (DisableFilters)
// and LargeValueSize 0 "keep every value in its block"
// (DisableValueSeparation): that is how the flush and compaction code, and
// segment.WriterOptions, read them.
func (o *Options) validated() (Options, error) {
	if o == nil {
		o = DefaultOptions()
	}
	out, def := *o, DefaultOptions()
	bad := func(name string, v any, want string) (Options, error) {
		return Options{}, fmt.Errorf("%w: %s = %v, want %s", ErrInvalidOptions, name, v, want)
	}
	switch {
	case math.IsNaN(out.BitsPerKey) || out.BitsPerKey < 0 || out.BitsPerKey > maxBitsPerKey ||
		out.BitsPerKey > 0 && out.BitsPerKey < minBitsPerKey:
		return bad("BitsPerKey", out.BitsPerKey, fmt.Sprintf("0 (default %v) or %d to %d (DisableFilters turns filters off)",
			def.BitsPerKey, minBitsPerKey, maxBitsPerKey))
	case out.MemtableSize < 0 || out.MemtableSize > maxMemtableSize:
		return bad("MemtableSize", out.MemtableSize, fmt.Sprintf("0 (default) to %d", maxMemtableSize))
	case out.BlockSize < 0 || out.BlockSize > maxBlockSize:
		return bad("BlockSize", out.BlockSize, fmt.Sprintf("0 (default) to %d", maxBlockSize))
	case out.LargeValueSize < 0 || out.LargeValueSize > MaxValueSize:
		return bad("LargeValueSize", out.LargeValueSize, fmt.Sprintf("0 (default %d) or 1 to %d", def.LargeValueSize, MaxValueSize))
	case out.BlockCacheSize < 0:
		return bad("BlockCacheSize", out.BlockCacheSize, "0 (default) or more")
	case out.FilterBudget < 0:
		return bad("FilterBudget", out.FilterBudget, "0 (no cap) or more")
	case out.FilterAllocation > FilterUniform: // filtermem.go
		return bad("FilterAllocation", out.FilterAllocation, "FilterOptimal or FilterUniform")
	case out.CompactionFanIn == 1 || out.CompactionFanIn < 0 || out.CompactionFanIn > maxFanIn:
		return bad("CompactionFanIn", out.CompactionFanIn, fmt.Sprintf("0 (default) or 2 to %d", maxFanIn))
	case out.CompactionConcurrency < 0 || out.CompactionConcurrency > maxConcurrency:
		return bad("CompactionConcurrency", out.CompactionConcurrency, fmt.Sprintf("0 (default) to %d", maxConcurrency))
	}
	if err := validatePrefix(out.Prefix); err != nil {
		return Options{}, err
	}
	if err := checkCompression(&out); err != nil {
		return Options{}, err
	}
	switch {
	case out.DisableFilters:
		out.BitsPerKey = 0
	case out.BitsPerKey == 0:
		out.BitsPerKey = def.BitsPerKey
	}
	if out.MemtableSize == 0 {
		out.MemtableSize = def.MemtableSize
	}
	if out.BlockSize == 0 {
		out.BlockSize = def.BlockSize
	}
	switch {
	case out.DisableValueSeparation:
		out.LargeValueSize = 0
	case out.LargeValueSize == 0:
		out.LargeValueSize = def.LargeValueSize
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
//
// Its locks, outermost first. A goroutine holding one of them may take
// those below it but never waits for one above it, so no two goroutines
// can wait on each other:
//
//  1. Commit leadership (commitQueue: leading a group in submit, or
//     exclusive): one goroutine at a time writes the WAL and the
//     memtable, advances lastSeq and rotates the memtable.
//  2. compactMu: held shared by each background compaction while it
//     merges, exclusively by Compact and Close.
//  3. mu: the fields grouped after it, and every change of current.
//  4. The manifest's own lock (Apply, NewFileNum), taken with or without
//     mu; the manifest never calls back into the DB.
//
// commit.mu only guards the commit queue and is released before any of
// the above is taken. The fields before the atomics are set by Open and
// only read after it (counters and stats are atomic) — but for
// opts.FilterBudget, which SetFilterBudget changes under mu, and which is
// read only under mu; the atomics need no lock.
//
// txns.mu (the transactions' conflict record, txn_conflict.go) sits
// between 1 and 3: the commit leader takes it holding none of 2 to 4, and
// NewTransaction takes mu inside it.
//
// The sync role (commitQueue.syncRole) sits between 1 and 2: one
// goroutine at a time fsyncs the WAL and publishes the groups written.
// The leader may wait for it (a rotation, DB.Sync, Close, a transaction's
// commit); its holder never waits for leadership, and takes commit.pmu,
// then txns.mu, and db.mu only without pmu (to fail the DB).
type DB struct {
	dir    string
	opts   Options
	logger *slog.Logger

	fs       vfs.FS
	bootID   [16]byte // this boot's identity, recorded in every new WAL
	lockFile io.Closer
	manifest *manifest.Manifest
	cache    *segment.Cache
	counters segment.Counters // reads of Gets and scans
	// compactionCounters are the reads of compaction inputs, kept apart
	// so that Stats' read counters describe what readers cost.
	compactionCounters segment.Counters
	stats              counters

	// replayedLogs are the WALs a read-only DB replayed (and still needs).
	replayedLogs []uint64

	// isClosed mirrors closed for iterators, which check it on every move
	// and must not take db.mu to do so.
	isClosed atomic.Bool
	// visibleSeq is the sequence number of the last write readers may see;
	// a batch becomes visible at once when its last entry is applied.
	visibleSeq atomic.Uint64
	// current is the read state: memtables and segments, ref-counted so
	// that files outlive the readers that use them.
	current atomic.Pointer[readState]

	// Lock 1, commit leadership, and what it guards.
	commit commitQueue // group commit: one leader writes for many writers

	// txns tracks the open read-write transactions and what was written
	// since the oldest began, for their conflict checks (txn_conflict.go).
	// Its lock is taken by the commit leader with no other lock held.
	txns txnState

	// lastSeq is the sequence number of the last committed write. Only the
	// commit leader (or Open, before any writer exists) touches it.
	lastSeq uint64

	// recordPrefix is the prefix extractor name Open records in a new
	// store's manifest ("" if none or already recorded).
	recordPrefix string

	// compactMu (lock 2) is held shared by each background merge (one
	// compactSegments call; concurrent merges take disjoint runs) and
	// exclusively by Compact, which merges everything and so must run
	// alone, and by Close, to wait out a Compact in progress. policy picks
	// the inputs of background merges; it is set by Open and only read.
	compactMu sync.RWMutex
	policy    compaction.SizeTiered

	// mu (lock 3) guards the fields below and the transitions of current.
	// logw, logNum and mem change only under mu and by the commit leader,
	// so the leader may use them without mu.
	//
	// mu guards memory. A memtable rotation (rotate) does its file work —
	// the new WAL's file number, creation, preallocation and mapping, if
	// no spare WAL is ready — as the commit leader without mu, and takes mu
	// only to swap the memtable and WAL; the old WAL's fsync, seal and
	// close are sealLoop's, and the next spare WAL makeSpare's, each in a
	// goroutine;
	// WAL writes and fsyncs, manifest commits (logAndApply), segment
	// writes, and the closing, unmapping and removal of obsolete segments
	// (the closer) all run outside it. What still holds it across a
	// system call, and why: Checkpoint opens the WAL files under it (an
	// open(2) each), so that the WALs and segments it captures are one
	// moment's; Close seals the WAL and closes the files under it, when no
	// other operation may run. The filter refit of SetFilterBudget runs
	// under it too, in memory.
	mu            sync.Mutex
	cond          *sync.Cond // signalled when a flush or compaction finishes
	closed        bool
	snapshots     list.List           // sequence numbers of open snapshots, oldest first
	bgErr         error               // first sticky background failure; makes the DB read-only
	logw          *wal.Writer         // the WAL of mem
	logNum        uint64              // file number of logw
	spares        []spareWAL          // WALs makeSpare made ahead for the next rotations, by number
	spareMade     chan struct{}       // while makeSpare runs: closed (and cleared) when it ends
	mem           *memtable.Memtable  // takes the writes
	imm           []*frozen           // full memtables waiting for flush, oldest first
	segments      []*segHandle        // live segments, newest first
	flushing      bool                // the background flush goroutine is running
	compacting    int                 // background compactions scheduled or running
	busy          map[*segHandle]bool // inputs of the running compactions
	stallAt       int                 // segment count at which writers wait for compaction
	frozenLimit   int                 // full memtables that may wait for flush before writers wait (commit.go)
	flushWaiters  atomic.Int32        // writers stalled until a flush frees a memtable; merges pause meanwhile
	urgentAt      int                 // segment count from which merges of the newest segments start beyond CompactionConcurrency
	expectedReads float64             // predicted block reads per absent Get (filtermem.go)
	history       []CompactionInfo    // the latest compactions, oldest first
	// flushRetry and compactRetry are the streaks of flushes and
	// background compactions that ran out of a resource and are retried
	// (retry.go), walRetry the WAL creations that did (makeSpare, rotate:
	// tried again by the next write that needs room); retried counts
	// those failures since Open and lastRetried is the latest, for
	// Stats. retryMin and retryMax bound the backoff (tests shorten them).
	flushRetry, compactRetry, walRetry retryState
	retried                            uint64
	lastRetried                        error
	retryMin, retryMax                 time.Duration
	// bgWG counts the background goroutines: the flush loop, every
	// background compaction loop, sealLoop and makeSpare. Close waits
	// for it.
	bgWG sync.WaitGroup

	// closer closes and removes segments whose last reference went,
	// outside db.mu and off the readers' path (segHandle.unref).
	closer closer

	// rebuilt holds the filters RebuildFilters built in memory, by
	// segment (nil: the segment gets none); filtermem.go.
	rebuilt map[*segHandle]*bloom.Filter
}

// Get returns the value of key, or an error matching ErrNotFound if it has
// none. The returned slice is the caller's.
func (db *DB) Get(key []byte) ([]byte, error) { return db.getAt(key, nil) }

// GetFunc calls fn with key's value without copying it, and returns fn's
// error; if key has no value it returns an error matching ErrNotFound and
// does not call fn. value aliases the store's memory (a memtable, or a
// segment's file mapping that a compaction may unmap once fn returns): it
// is valid only until fn returns, and fn must not modify it or keep it.
// For callers that use a value in place (decode it, hash it, append it to
// a buffer of their own), GetFunc saves Get's allocation and copy. An
// invariants build (LIFETIMES.md) faults on a use of value after fn
// returns.
func (db *DB) GetFunc(key []byte, fn func(value []byte) error) error {
	return db.getFuncAt(key, nil, fn)
}

// Has reports whether key has a value. It finds the value as Get does but
// does not copy it: cheaper than Get for large values.
func (db *DB) Has(key []byte) (bool, error) { return db.hasAt(key, nil) }

// ValueSize returns the length of key's value, or an error matching
// ErrNotFound if it has none, without copying the value.
func (db *DB) ValueSize(key []byte) (int, error) { return db.valueSizeAt(key, nil) }

// getAt, getFuncAt, hasAt and valueSizeAt are Get, GetFunc, Has and
// ValueSize as of snapshot s, or of the newest write for nil, for DB and
// Snapshot.
func (db *DB) getAt(key []byte, s *Snapshot) ([]byte, error) {
	var value []byte
	err := db.get(key, s, func(v []byte) { value = bytes.Clone(v) })
	return value, err
}

func (db *DB) getFuncAt(key []byte, s *Snapshot, fn func(value []byte) error) error {
	var fnErr error
	if err := db.get(key, s, func(v []byte) { fnErr = fn(v) }); err != nil {
		return err
	}
	return fnErr
}

func (db *DB) hasAt(key []byte, s *Snapshot) (bool, error) {
	err := db.get(key, s, nil)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (db *DB) valueSizeAt(key []byte, s *Snapshot) (int, error) {
	n := 0
	err := db.get(key, s, func(v []byte) { n = len(v) })
	return n, err
}

// get finds the newest value of key as of snapshot snap (nil: the newest
// committed) and, if use is not nil, calls use with it.
//
// The value found aliases memtable or segment memory (a segment's file
// mapping, which is unmapped once the last read state that holds the
// segment is released), so use runs here, while the read state is held:
// after get returns, a compaction may already have unmapped it. In an
// invariants build the value use sees is guarded by a lease that expires
// with the read state, so a use of it after the release faults at once.
func (db *DB) get(key []byte, snap *Snapshot, use func(value []byte)) error {
	if err := checkEntry(key, nil); err != nil {
		return err
	}
	pin := stripe.Pick()
	rs, seq := db.view(pin)
	if rs == nil {
		return ErrClosed
	}
	defer rs.unpin(pin)
	snapSeq := latestSeq
	if snap != nil {
		if snap.released() {
			return ErrSnapshotReleased // see Snapshot.released
		}
		snapSeq = snap.seq
	}
	var lease invariants.Lease
	if invariants.Enabled {
		defer lease.Expire()
	}
	seq = min(seq, snapSeq)
	db.stats.reads.Add(pin, readGets, 1)
	v, err := db.find(rs, key, seq, pin, use != nil)
	if err != nil {
		return err
	}
	if use != nil {
		use(lease.Guard(v))
	}
	return nil
}

// find returns the newest visible value of key as of seq in rs, aliasing
// rs's memory: valid only while the caller holds rs.
func (db *DB) find(rs *readState, key []byte, seq uint64, pin int, withValue bool) ([]byte, error) {
	ts := rangeCover{rs: rs, key: key, seq: seq, withValue: withValue}
	for i, m := range rs.mems {
		if v, vseq, kind, ok := m.GetVersion(key, seq); ok {
			return visible(v, vseq, kind, ts.through(i+1))
		}
	}
	return db.getFromSegments(&ts, pin)
}

// visible turns the version found into get's result: its value, or
// ErrNotFound for a tombstone or a version older than the range tombstone
// deleted (0: none) that covers it.
func visible(v []byte, seq uint64, kind base.Kind, deleted uint64) ([]byte, error) {
	if kind == base.KindDelete || seq < deleted {
		return nil, ErrNotFound
	}
	return v, nil
}

// rangeCover finds, when a Get needs it, the newest range tombstone
// visible to it that covers its key in the sources it has searched so far
// (the memtables, then the segments, newest first). Only a version found,
// or a segment about to be read, needs it: a version can be hidden only by
// a tombstone in its own source or a newer one. So a Get of an absent key,
// which the filters answer with no I/O, never pays for range tombstones.
type rangeCover struct {
	rs        *readState
	key       []byte
	seq       uint64
	withValue bool   // the caller reads the value (not Has)
	checked   int    // sources whose tombstones are in newest
	newest    uint64 // the newest covering tombstone among them, 0 if none
}

// through returns the newest covering tombstone in the first n sources.
func (t *rangeCover) through(n int) uint64 {
	for ; t.checked < n; t.checked++ {
		if m := len(t.rs.mems); t.checked < m {
			for _, l := range t.rs.mems[t.checked].RangeDelLists() {
				t.newest = max(t.newest, l.Covering(t.key, t.seq))
			}
		} else {
			t.newest = max(t.newest, t.rs.segments[t.checked-m].reader.RangeDels().Covering(t.key, t.seq))
		}
	}
	return t.newest
}

// getFromSegments searches the segments newest first. The key is hashed
// once for every filter; a filter's "no" skips its segment with no I/O.
// Before a segment is read, the range tombstones of it and every newer
// source are checked, in memory: one newer than all the segment's versions
// means the key is deleted here and in every older segment, with no read.
func (db *DB) getFromSegments(ts *rangeCover, pin int) ([]byte, error) {
	p := probe{key: ts.key, hash: bloom.Hash(ts.key)}
	defer p.publish(&db.stats, pin)
	for j, s := range ts.rs.segments {
		if !p.mayHold(s) {
			continue
		}
		deleted := ts.through(len(ts.rs.mems) + j + 1)
		if deleted > s.meta.MaxSeq {
			return nil, ErrNotFound
		}
		v, vseq, kind, ok, err := s.lookup(ts.key, p.hash, ts.seq, ts.withValue)
		if err != nil {
			return nil, fmt.Errorf("bloomkv: get: %w", err)
		}
		if ok {
			return visible(v, vseq, kind, deleted)
		}
		// A false positive if the filter asked (RebuildFilters may have
		// left none) and s holds no version of the key. A Get that sees
		// every version in s knows that; one older than some of them (a
		// Snapshot's, a transaction's) does not: s may hold only versions
		// it cannot see, and then the filter's "maybe" was right.
		if s.reader.ResidentFilter() != nil && ts.seq >= s.meta.MaxSeq {
			p.falsePositives++
		}
	}
	return nil, ErrNotFound
}

// lookup is the segment's Lookup, or LookupKey where the caller needs no
// value (Has): a value stored apart from its key is then not read.
func (s *segHandle) lookup(key []byte, hash, seq uint64, withValue bool) ([]byte, uint64, base.Kind, bool, error) {
	if withValue {
		return s.reader.Lookup(key, hash, seq)
	}
	return s.reader.LookupKey(key, hash, seq)
}

// probe counts one Get's filter probes: counted locally and published
// once, since a shared atomic per segment probed would bounce a cache line
// between cores on every Get.
type probe struct {
	key                               []byte
	hash                              uint64
	negatives, maybes, falsePositives uint64
}

// mayHold reports whether segment s may hold the key: its key range holds
// it and its filter says "maybe". Neither costs I/O.
func (p *probe) mayHold(s *segHandle) bool {
	if !s.covers(p.key) {
		return false
	}
	if !s.reader.MayContain(p.hash) {
		p.negatives++
		return false
	}
	p.maybes++
	return true
}

// publish adds the probe's counts on stripe pin (internal/stripe), only
// those that are not zero: each add is an atomic write.
func (p *probe) publish(c *counters, pin int) {
	if p.negatives > 0 {
		c.reads.Add(pin, readFilterNegatives, int64(p.negatives))
	}
	if p.maybes > 0 {
		c.reads.Add(pin, readFilterMaybes, int64(p.maybes))
	}
	if p.falsePositives > 0 {
		c.reads.Add(pin, readFilterFalsePositives, int64(p.falsePositives))
	}
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

// DeleteRange deletes every key in [start, end) that exists now, in one
// write however many keys the range holds: a range tombstone, which hides
// the older versions of the keys in its range from every later read (a
// Snapshot taken before it still sees them) and lets compaction drop them.
// Keys written after DeleteRange returns are not affected. An empty start
// means "from the first key"; an empty end is refused (ErrInvalidRange);
// start >= end deletes nothing.
//
// Reads stay fast over deleted ranges: a Get checks the tombstones in
// memory, and an iterator steps over a deleted range in one seek per
// segment rather than key by key.
func (db *DB) DeleteRange(start, end []byte) error {
	b := getBatch()
	defer putBatch(b)
	if err := b.DeleteRange(start, end); err != nil {
		return err
	}
	return db.Write(b)
}

// Write applies the batch atomically. The batch may be reused once Write
// returns. It is durable as Options.Sync says: against a process crash
// always, against power loss only with Sync (or see WriteSync). A nil
// batch is an empty one; an empty batch changes nothing, and returns what
// a write would (ErrClosed, ErrReadOnly) if the DB takes none.
func (db *DB) Write(b *Batch) error { return db.write(b, false) }

// WriteSync is Write that also makes the batch, and every write
// acknowledged before it, survive power loss before it returns, whatever
// Options.Sync says: for the few writes that must be durable (a raft log
// append, a commit record) in a store that does not fsync every write.
// Concurrent writers share the fsync (group commit).
func (db *DB) WriteSync(b *Batch) error { return db.write(b, true) }

func (db *DB) write(b *Batch, sync bool) error {
	if b == nil || b.count == 0 && b.err == nil {
		db.mu.Lock()
		err := db.writableLocked()
		db.mu.Unlock()
		if err != nil || !sync {
			return err
		}
		return db.Sync()
	}
	if b.err != nil {
		return b.err
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
// releases the directory; every later call returns ErrClosed. Reads in
// progress are not waited for: a Get (or GetFunc's fn) that began before
// Close finishes on the memtables and segments it pinned, and the files
// of those segments are closed when the last such read, or open
// Iterator, lets go of them, which may be after Close returns. If a
// background flush or compaction failed earlier and made the DB
// read-only, Close returns that failure too (matching ErrReadOnly). One
// being retried for want of a resource is ended at once, not waited for,
// and is no error of Close's. Writes already acknowledged are in the WAL
// and will be recovered by the next Open.
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

	db.commit.exclusive(db, func() {
		// Wait out the current leader, and the fsyncs of the groups
		// written before: the sync role is dropped only once none waits.
		db.commit.syncQueued(db)
	})
	db.bgWG.Wait()      // and the background flush and compactions
	db.compactMu.Lock() // and a Compact in progress
	defer db.compactMu.Unlock()
	db.mu.Lock()
	defer db.mu.Unlock()
	err := db.closeFiles()
	if err != nil {
		err = fmt.Errorf("bloomkv: close: %w", err)
	}
	if db.bgErr != nil {
		// A flush or compaction failed earlier: say so here too, so that
		// a caller who only checks Close still learns of it.
		err = errors.Join(fmt.Errorf("%w: %w", ErrReadOnly, db.bgErr), err)
	}
	return err
}
