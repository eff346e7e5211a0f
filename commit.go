package bloomkv

import (
	"fmt"
	"sync"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
	"github.com/bloomkv/bloomkv/internal/rangedel"
	"github.com/bloomkv/bloomkv/memtable"
	"github.com/bloomkv/bloomkv/wal"
)

// maxFrozen is how many full memtables may wait for flush before writers
// stall. Two lets one flush run while the next memtable fills.
const maxFrozen = 2

// A range deletion rotates a memtable whose point entries fill at least
// 1/rangeDelRotateShare of it (makeRoomLocked), so an iterator steps over
// at most that much of a memtable's covered data; the smallest segment
// this makes is as large. Only point entries count: a memtable that holds
// mostly range tombstones has little for an iterator to step over, and
// counting the tombstones would rotate at every later range deletion (a
// flush storm: thousands of tiny segments for a memtable's worth of
// bytes). Range tombstones count toward the memtable's size like any
// entry (memtable.AddRangeDeletes charges their real memory).
const rangeDelRotateShare = 16

// commitQueue implements group commit. Writers queue their batches; the
// first to find no leader becomes the leader and commits everything queued
// in one WAL write (and one fsync with Options.Sync), then applies the
// batches to the memtable, while later writers queue behind it for the
// next group. The leader is the only goroutine that writes the WAL or the
// memtable, so neither needs a lock of its own.
type commitQueue struct {
	mu        sync.Mutex
	idle      sync.Cond // signalled when the leader steps down
	leading   bool
	pending   []*commitReq
	spare     []*commitReq
	payloads  [][]byte             // leader only
	rangeDels []rangedel.Tombstone // leader only: applyBatch's
}

type commitReq struct {
	b     *Batch
	sync  bool      // fsync before acknowledging, whatever Options.Sync says
	check *txnCheck // a transaction's reads, validated before b is written (txn_conflict.go); nil for a plain write
	err   error
	done  chan struct{}
}

var reqPool = sync.Pool{New: func() any { return &commitReq{done: make(chan struct{}, 1)} }}

// submit commits b and returns when it is durable (as Options.Sync says)
// and visible to readers.
func (q *commitQueue) submit(db *DB, b *Batch, sync bool) error {
	return q.submitChecked(db, b, sync, nil)
}

// submitChecked is submit for a transaction's batch: it is written only if
// check passes, else the commit fails with ErrConflict.
func (q *commitQueue) submitChecked(db *DB, b *Batch, sync bool, check *txnCheck) error {
	r := reqPool.Get().(*commitReq)
	r.b, r.sync, r.check, r.err = b, sync, check, nil
	q.mu.Lock()
	q.pending = append(q.pending, r)
	if !q.leading {
		q.leading = true
		q.lead(db)
	}
	q.mu.Unlock()
	<-r.done
	err := r.err
	r.b, r.check, r.err = nil, nil, nil
	reqPool.Put(r)
	return err
}

// exclusive runs fn while no commit is in progress (as the leader), then
// commits whatever queued meanwhile.
func (q *commitQueue) exclusive(db *DB, fn func()) {
	q.mu.Lock()
	for q.leading {
		q.idle.Wait()
	}
	q.leading = true
	q.mu.Unlock()
	fn()
	q.mu.Lock()
	q.lead(db)
	q.mu.Unlock()
}

// lead commits queued groups until none is left. q.mu is held on entry and
// exit, released while a group is written.
func (q *commitQueue) lead(db *DB) {
	for len(q.pending) > 0 {
		group := q.pending
		q.pending = q.spare[:0]
		q.mu.Unlock()
		db.commitGroup(group)
		clear(group)
		q.mu.Lock()
		q.spare = group[:0]
	}
	q.leading = false
	q.idle.Broadcast()
}

// commitGroup writes one group of batches: sequence numbers, one WAL write,
// optionally one fsync, the memtable inserts, then visibility.
func (db *DB) commitGroup(group []*commitReq) {
	size, rangeDels := 0, false
	for _, r := range group {
		size += r.b.Size()
		rangeDels = rangeDels || r.b.rangeDels > 0
	}
	db.mu.Lock()
	err := db.makeRoomLocked(size, rangeDels)
	logw, mem := db.logw, db.mem
	db.mu.Unlock()
	if err == nil {
		err = db.writeGroup(group, logw, mem)
	}
	for _, r := range group {
		if r.err == nil { // not already refused for a conflict (writeGroup)
			r.err = err
		}
		r.done <- struct{}{}
	}
}

func (db *DB) writeGroup(group []*commitReq, logw *wal.Writer, mem *memtable.Memtable) error {
	payloads := db.commit.payloads[:0]
	seq := db.lastSeq + 1
	sync := db.opts.Sync
	// Transactions are validated here, as the leader, so that no write
	// can commit between a transaction's check and its sequence numbers;
	// a refused one gets ErrConflict and takes no sequence number.
	ws := db.txns.admit(group, seq)
	for _, r := range group {
		if r.err != nil {
			continue
		}
		payloads = append(payloads, r.b.setSeq(seq))
		seq += uint64(r.b.count)
		sync = sync || r.sync
	}
	if len(payloads) == 0 {
		return nil // every batch was a refused transaction
	}
	n, err := logw.WriteRecords(payloads...)
	db.commit.payloads = payloads
	if err == nil && sync {
		// One fsync for the whole group: a writer that asked for it
		// makes every batch before it in the WAL durable too.
		err = logw.Sync()
	}
	db.stats.walBytes.Add(uint64(n))
	if err != nil {
		// The WAL may now hold part of the group: refuse all further
		// writes rather than acknowledge anything on top of it.
		db.fail(fmt.Errorf("WAL write: %w", err))
		return fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	for _, p := range payloads {
		db.commit.rangeDels, _, _ = applyBatch(mem, p, "", 0, 0, db.commit.rangeDels)
	}
	db.lastSeq = seq - 1
	db.visibleSeq.Store(db.lastSeq)
	// After the publication, which an open transaction's conflict check
	// depends on (txnState.active); a no-op while none is open.
	db.txns.record(ws, payloads, db.lastSeq)
	clear(payloads) // do not pin the batches until the next group
	db.stats.writes.Add(uint64(len(payloads)))
	return nil
}

// applyBatch adds the operations of the encoded batch rec whose sequence
// numbers are above after to mem, and returns the largest sequence number
// it saw. The batch's range deletions go in together, once it is decoded
// (memtable.AddRangeDeletes): one fragmentation for the whole batch, so a
// batch of n range deletions costs O(n log n) to commit and to replay, not
// n copies of the memtable's tombstones. dels is scratch space, returned
// for reuse.
func applyBatch(mem *memtable.Memtable, rec []byte, name string, offset int64, after uint64, dels []rangedel.Tombstone) ([]rangedel.Tombstone, uint64, error) {
	dels = dels[:0]
	var last uint64
	err := batch.Decode(rec, name, offset, func(seq uint64, op batch.Op) {
		last = max(last, seq)
		switch {
		case seq <= after:
		case op.Kind == base.KindRangeDelete:
			dels = append(dels, rangedel.Tombstone{Start: op.Key, End: op.Value, Seq: seq})
		default:
			mem.Add(seq, op.Kind, op.Key, op.Value)
		}
	})
	if err == nil {
		mem.AddRangeDeletes(dels)
	}
	clear(dels) // do not pin rec
	return dels[:0], last, err
}

// makeRoomLocked makes sure the memtable can take size more bytes: it
// freezes a full memtable and starts a new one with a new WAL. It stalls
// (waits, never fails) while maxFrozen memtables already wait for flush,
// or while the segment count is past the compaction policy's stall
// threshold and a compaction is running to bring it down.
//
// A group with a range deletion also rotates a memtable that holds
// rangeDelRotateShare of MemtableSize or more: the versions the deletion
// covers then sit in sources older than its tombstone, which an iterator
// jumps over in one seek, instead of among newer writes in the memtable
// the tombstone joins, which it would have to step over one by one. (A
// raft log truncated behind each snapshot: finding the first index took
// 2.4 ms among the covered entries of a 4 MiB memtable, and takes
// microseconds after the rotation.)
func (db *DB) makeRoomLocked(size int, rangeDels bool) error {
	for {
		if err := db.writableLocked(); err != nil {
			return err
		}
		if db.compacting > 0 && len(db.segments) >= db.stallAt {
			// Compaction fell behind: every Get would probe more and more
			// segments. Wait for it rather than let reads degrade.
			db.stats.writeStalls.Add(1)
			db.cond.Wait()
			continue
		}
		used := db.mem.ApproximateSize()
		if db.mem.Empty() || used+size <= db.opts.MemtableSize &&
			!(rangeDels && db.mem.PointBytes() >= db.opts.MemtableSize/rangeDelRotateShare) {
			return nil
		}
		if len(db.imm) >= maxFrozen {
			db.stats.writeStalls.Add(1)
			db.cond.Wait()
			continue
		}
		return db.rotateLocked()
	}
}

func (db *DB) writableLocked() error {
	switch {
	case db.closed:
		return ErrClosed
	case db.opts.ReadOnly:
		return fmt.Errorf("%w: opened with Options.ReadOnly", ErrReadOnly)
	case db.bgErr != nil:
		return fmt.Errorf("%w: %w", ErrReadOnly, db.bgErr)
	}
	return nil
}

// frozen is a full memtable waiting for its flush.
type frozen struct {
	mem    *memtable.Memtable
	maxSeq uint64        // last sequence number it holds
	logNum uint64        // the WAL that holds the same writes
	done   chan struct{} // closed when flushed (or when the flush failed)
}

// rotateLocked freezes the memtable and starts a new one with a new WAL.
// Only the commit leader calls it (directly or through exclusive).
func (db *DB) rotateLocked() error {
	// The old WAL is synced before the next one exists, so only the newest
	// WAL can hold unsynced writes: Sync needs one fsync, and after a power
	// cut every WAL but the newest was complete on disk.
	err := db.logw.Sync()
	var num uint64
	if err == nil {
		num, err = db.manifest.NewFileNum()
	}
	var logw *wal.Writer
	if err == nil {
		logw, err = db.createWAL(num, true)
	}
	if err != nil {
		db.failLocked(err)
		return fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	if err := db.logw.Close(); err != nil {
		db.logger.Warn("closing WAL", "num", db.logNum, "err", err)
	}
	db.imm = append(db.imm, &frozen{mem: db.mem, maxSeq: db.lastSeq, logNum: db.logNum, done: make(chan struct{})})
	db.mem = memtable.New(db.opts.MemtableSize)
	db.logw, db.logNum = logw, num
	db.publishLocked()
	db.scheduleFlushLocked()
	return nil
}

// createWAL creates WAL file num, begins it with a mark (wal.Mark: this
// boot, and whether the previous WAL was synced to its end), and syncs the
// file and the directory, so that the new file's name and first mark
// survive power loss: a manifest commit may name it as the log number, and
// Open refuses a store whose log number names a missing WAL. A failed
// create leaves no file behind.
func (db *DB) createWAL(num uint64, prevSynced bool) (*wal.Writer, error) {
	name := base.WALFileName(num)
	f, err := db.fs.Create(db.path(name))
	if err != nil {
		return nil, fmt.Errorf("create WAL: %w", err)
	}
	w, err := wal.NewMarkedWriter(f, name, wal.Mark{BootID: db.bootID, PrevSynced: prevSynced})
	if err == nil {
		err = w.Sync()
	}
	if err == nil {
		err = db.fs.SyncDir(db.dir)
	}
	if err != nil {
		f.Close()
		db.removeFile(name)
		return nil, fmt.Errorf("create WAL %s: %w", name, err)
	}
	db.mapWAL(f, w)
	return w, nil
}

// Sync makes every write acknowledged before the call durable: it survives
// power loss when Sync returns. It costs one fsync of the WAL, taken while
// no commit is in progress; writes made with Options.Sync are durable
// already. A failed fsync makes the DB read-only, as a failed WAL write
// does.
func (db *DB) Sync() error {
	var err error
	db.commit.exclusive(db, func() {
		// As the commit leader this goroutine owns the WAL: no commit or
		// rotation runs meanwhile, and db.mu need not be held across the
		// fsync.
		db.mu.Lock()
		logw := db.logw
		if db.opts.ReadOnly && !db.closed {
			logw = nil // nothing was written
		} else {
			err = db.writableLocked()
		}
		db.mu.Unlock()
		if err != nil || logw == nil {
			return
		}
		if err = logw.Sync(); err != nil {
			db.fail(fmt.Errorf("WAL sync: %w", err))
			err = fmt.Errorf("%w: %w", ErrReadOnly, err)
		}
	})
	return err
}

// fail puts the DB in the read-only state after a failure that may have
// broken a durability promise.
func (db *DB) fail(err error) {
	db.mu.Lock()
	db.failLocked(err)
	db.mu.Unlock()
}

func (db *DB) failLocked(err error) {
	if db.bgErr == nil {
		db.bgErr = err
		db.logger.Error("bloomkv is now read-only", "err", err)
	}
	db.cond.Broadcast()
}
