// Package bloomkv is an embedded key-value store: a log-structured merge
// tree whose on-disk segments each carry a Bloom filter, so that looking up
// a key that is not there costs no disk read at all for almost every
// segment.
//
// # Basics
//
// Open a directory (it is created if missing), then Put, Get, Delete,
// DeleteRange (every key in [start, end), in one write), or Write a Batch
// of them atomically; Has and ValueSize answer without copying a value. Keys and values are byte
// slices; keys are ordered bytewise (bytes.Compare), 1 byte to
// MaxKeySize, values up to MaxValueSize. NewIterator scans keys in order
// within bounds or a prefix; NewSnapshot fixes a point in time for Gets
// and iterators. Checkpoint copies a live store; Verify and VerifyDir
// check one without changing it; Stats (and StatsVar, for expvar) report
// what reads and writes cost. The zero Options (or nil) are the defaults.
//
//	db, err := bloomkv.Open(dir, nil)
//	if err != nil { ... }
//	defer db.Close()
//	err = db.Put([]byte("k"), []byte("v"))
//	v, err := db.Get([]byte("k")) // errors.Is(err, bloomkv.ErrNotFound) if absent
//
// # Data path
//
// A write (Put, Delete, Write of a Batch) is appended to the write-ahead log
// (wal/) as one record and then inserted into the memtable (memtable/), a
// sorted in-memory skiplist. When the memtable reaches Options.MemtableSize
// it becomes immutable, a new one takes the writes, and a background flush
// writes the immutable one to a segment file (segment/): sorted,
// prefix-compressed, compressed (snappy by default, or zstd), checksummed blocks, an index, and a
// Bloom filter (bloom/) of the segment's keys. The set of live segments is
// kept in a bbolt database (manifest/), changed in one ACID transaction per
// flush or compaction. A background, size-tiered compaction (compaction/)
// merges segments of one size so that their number stays logarithmic in
// the data.
//
// A Get looks in the memtable, then the immutable memtables, then the
// segments newest first. The key is hashed once; each segment's filter is
// asked with that hash, and a segment whose filter says "not here" is
// skipped without any I/O. Only a "maybe" leads to an index lookup and a
// block read, from the block cache or the file. Range tombstones (from
// DeleteRange) are held in memory, fragmented, by every memtable and
// segment; a Get consults them only once it has found a version or is
// about to read a block, so a lookup of an absent key never pays for them.
//
// Scans go through an Iterator (NewIterator): a merge of the memtables and
// every segment (internal/merge) that shows, for each key, the newest
// version the reader may see. A Snapshot fixes that "may see" to the
// moment it was taken.
//
// # Durability
//
// A write that returned nil survives a crash of the process: it is in the
// kernel's page cache (the WAL is appended through a shared mapping of a
// preallocated file, or with write(2)) before Write returns. With
// Options.Sync it also survives a crash of the machine (power loss): each
// commit is fsynced before it returns; concurrent writers share one write
// and one fsync (group commit). Without Sync, DB.WriteSync makes one batch
// (and everything before it) durable, DB.Sync everything acknowledged so
// far; otherwise a power loss can lose the writes of the last moments,
// and the store then opens holding a prefix of the acknowledged writes, in
// whole batches.
//
// # What is guaranteed, and what is not
//
// Guaranteed:
//   - A Batch is atomic: after any crash it is there in full or not at all.
//   - Reads see every write that returned before they began (a Get after a
//     Put returns its value), and an Iterator or Snapshot sees exactly the
//     writes committed before it was made, whatever flushes and compactions
//     do meanwhile.
//   - Damaged files are reported, never guessed around: every block, WAL
//     record and manifest record is checksummed, and damage is an error
//     matching ErrCorrupt that names the file and offset, never a wrong
//     value or a silently dropped key. Open refuses a store whose files and
//     manifest disagree rather than delete anything it cannot explain.
//   - After a failure that may break a durability promise (a failed WAL
//     write or fsync, flush, compaction or manifest commit), the DB refuses
//     further writes with ErrReadOnly instead of acknowledging them; reads
//     go on, and a reopen recovers every write acknowledged before it. A
//     flush or compaction that ran out of space, quota, descriptors or
//     memory before its manifest commit broke no promise: it is retried
//     with backoff, and writes stall once the memtables are full. Nor
//     did the creation of a new WAL that ran out: the writes that needed
//     it fail with the error, and a later one tries again.
//   - One writer per directory: a second Open, in this process or another,
//     gets ErrLocked (read-only opens share the store with each other).
//
// Not guaranteed:
//   - Durability across power loss of writes made without Options.Sync,
//     WriteSync or Sync: they may be lost (as a suffix, never a hole).
//   - Isolation for plain writes: a Write, Put or Delete reads nothing,
//     so two concurrent Writes are applied in some order, last one wins.
//     Read-modify-write needs a transaction (below).
//   - Error returns for device errors on mapped segments: segments are
//     read through a memory mapping by default, and an I/O error on a
//     mapped page kills the process with SIGBUS. Options.DisableMmap trades
//     speed for an error return.
//   - Stats are counters read one by one, not a consistent snapshot of all
//     of them at once.
//
// # Transactions
//
// NewTransaction, Update and View give optimistic transactions, as bbolt's
// and Badger's: a Txn reads a snapshot taken when it began plus its own
// pending writes (Get, Has, and TxnIterators that merge its writes over
// the snapshot, forward and backward), and Commit applies its writes as
// one Batch. Read-write transactions are serializable: Commit fails with
// an error matching ErrConflict, writing nothing, if any key the
// transaction read, or any key in a range its iterators traversed, was
// written after it began, by another transaction or by a plain write.
// So write skew, lost updates and phantoms are refused. Read-only
// transactions (View) never conflict; nor do blind writes. The check is
// made against an in-memory record of the keys written since the oldest
// open transaction began: by the committing goroutine, then by the commit
// leader for what committed meanwhile. A transaction older than that
// record's limit (64 MiB of memory) fails with ErrConflict rather than
// commit unchecked. While no read-write transaction is open
// nothing is recorded. UpdateWith retries conflicts; CompareAndSet is a
// transaction.
//
// # Concurrency
//
// DB and Snapshot methods are safe for concurrent use by any number of
// goroutines, including Close, after which DB methods that can fail
// return ErrClosed. An Iterator, a Txn and a Batch are not: each must be used by one
// goroutine at a time (a Batch must not be passed to two concurrent Writes
// either). Many Iterators may run at once, each in its own goroutine.
//
// Slices: the store never keeps a slice the caller passed in (Put, Delete,
// Batch.Put and Batch.Delete copy keys and values), and the slice Get
// returns belongs to the caller. An Iterator's Key and Value are the
// Iterator's: valid until its next positioning call or Close, and must
// not be modified; copy them to keep them. A Batch may be reused (Reset)
// as soon as Write returns. LIFETIMES.md lists every slice the store hands
// out without copying and when it ends; built with the invariants tag
// (go test -tags invariants), a use past the end faults at once.
//
// # Errors
//
// Match errors with errors.Is against the sentinels (ErrNotFound,
// ErrClosed, ErrCorrupt, ErrReadOnly, ErrLocked, ErrInvalidOptions, …),
// never by their text; most are wrapped with context. Some sentinels are
// cases of broader ones and match both: ErrIteratorClosed and
// ErrSnapshotReleased match ErrClosed, ErrPrefixExtractor matches
// ErrInvalidOptions. Closing a DB, an Iterator or a Snapshot a second time
// returns an error matching ErrClosed. For damage,
// errors.As with a *CorruptError gives the file (its name in the store's
// directory, e.g. "000003.seg") and the byte offset.
//
// Every error message the store produces carries the "bloomkv: " prefix
// exactly once, at its start: a sentinel placed first ("bloomkv:
// read-only: compaction: ...") or the outermost wrap ("bloomkv: get:
// corrupt data: 000003.seg at offset 0: block checksum mismatch"). Errors
// of the inner packages (segment, wal, manifest, and CorruptError's own
// text) never carry it; the sentinels do, so they read sensibly when
// returned bare. Errors the caller owns, such as ctx.Err() from Verify or
// WaitForCompactions, are returned as they are.
package bloomkv
