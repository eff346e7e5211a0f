package bloomkv

import (
	"fmt"
	"time"

	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/memtable"
)

// Flush writes the memtable to a segment and returns when it, and every
// memtable frozen before it, is on disk and in the manifest. While the
// flushes fail for want of a resource (ENOSPC, EDQUOT, EMFILE, ENFILE,
// ENOMEM: retried in the background), it asks for an attempt at once and
// returns that attempt's failure, which matches the errno with errors.Is
// and not ErrReadOnly; the memtables stay queued, and a later Flush that
// succeeds has flushed them all.
func (db *DB) Flush() error {
	var (
		last *frozen
		err  error
	)
	db.commit.exclusive(db, func() {
		db.mu.Lock()
		defer db.mu.Unlock()
		if err = db.writableLocked(); err != nil {
			return
		}
		if !db.mem.Empty() {
			err = db.awaitFlushLocked(func() bool {
				return len(db.imm) < db.frozenLimit || db.writableLocked() != nil
			})
			if err != nil {
				return
			}
			if err = db.writableLocked(); err != nil {
				return
			}
			db.mu.Unlock()
			// As the leader: its file work outside db.mu. Its frozen
			// memtable, not the last of db.imm, is what to wait for: the
			// flush may have taken it from db.imm already (while its WAL
			// is still to be removed).
			last, err = db.rotate(true)
			db.mu.Lock()
			return
		}
		if n := len(db.imm); n > 0 {
			last = db.imm[n-1]
		}
	})
	if err != nil || last == nil {
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.awaitFlushLocked(func() bool { return isDone(last.done) }); err != nil {
		return err
	}
	if db.bgErr != nil {
		return fmt.Errorf("%w: %w", ErrReadOnly, db.bgErr)
	}
	if !last.durable.Load() {
		// Close stopped the flushes first: the writes are in the WALs,
		// for the next Open, but not in a segment, as nil would say.
		return ErrClosed
	}
	return nil
}

// scheduleFlushLocked starts the background flush goroutine unless it
// runs. After Close none starts, and the memtables waiting are released
// as flushLoop releases them when Close stops it: a Flush that rotated
// the memtable as Close began waits for its done, which nothing else
// would close.
func (db *DB) scheduleFlushLocked() {
	if db.flushing || len(db.imm) == 0 {
		return
	}
	if db.closed {
		for _, f := range db.imm {
			closeOnce(f.done)
		}
		db.cond.Broadcast() // for Flush, which waits for done on cond
		return
	}
	db.flushing = true
	db.bgWG.Add(1)
	go db.flushLoop()
}

// flushLoop flushes frozen memtables, oldest first, until none is left.
func (db *DB) flushLoop() {
	defer db.bgWG.Done()
	db.mu.Lock()
	defer db.mu.Unlock()
	for len(db.imm) > 0 && db.bgErr == nil && !db.closed {
		f := db.imm[0]
		db.mu.Unlock()
		s, err := db.flushFrozen(f)
		if err == nil {
			f.durable.Store(true)
			db.commit.sealerWake() // its WAL may now be dropped unsynced
		}
		db.mu.Lock()
		if err != nil {
			if isRetryable(err) {
				// Nothing durable changed: f stays first in db.imm, its
				// writes in its WAL; try again after the backoff. Writes
				// go on into memtables until db.frozenLimit wait here,
				// then stall in makeRoom as behind a slow flush.
				db.retryFailedLocked(&db.flushRetry, err)
				db.retryWaitLocked(&db.flushRetry)
				continue
			}
			db.failLocked(fmt.Errorf("flush: %w", err))
			break
		}
		db.retrySucceededLocked(&db.flushRetry)
		if s != nil { // nil: the memtable held no entries
			db.stats.flushBytes.Add(uint64(s.meta.Size))
		}
		db.stats.flushes.Add(1)
		db.scheduleCompactionLocked()
		// Only now, with the segment in place of the memtable (under
		// db.mu), is the WAL unneeded: a Checkpoint reading imm and the
		// segments under db.mu must find the writes in one or the other.
		// The unlink itself needs no lock; it waits for sealLoop to close
		// the file (usually long done: a flush takes longer than an
		// fsync). It comes before Flush's caller is woken, so that a
		// store flushed and then copied file by file holds no WAL of
		// memtables already in segments.
		db.mu.Unlock()
		<-f.sealed
		db.removeFile(base.WALFileName(f.logNum))
		db.mu.Lock()
		close(f.done)
		db.cond.Broadcast()
	}
	for _, f := range db.imm { // on failure or close: wake Flush callers
		closeOnce(f.done)
	}
	db.flushing = false
	db.cond.Broadcast()
}

// awaitFlushLocked waits on db.cond until done reports true. While the
// flushes fail for want of a resource (retry.go) it asks for an attempt
// now rather than after the backoff, and returns the failure of the first
// attempt that fails after the call began: a Flush reports the failure
// its caller can act on (free space, raise RLIMIT_NOFILE) instead of
// waiting for the shortage to end. The memtables stay queued, and the
// background goes on retrying them.
func (db *DB) awaitFlushLocked(done func() bool) error {
	fails, kicked := db.flushRetry.fails, false
	for !done() {
		if err := db.flushRetry.failedSince(fails); err != nil {
			return err
		}
		if !kicked && db.flushRetry.err != nil {
			kicked = true
			db.kickLocked(&db.flushRetry)
		}
		db.cond.Wait()
	}
	return nil
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// flushFrozen writes f to a new segment and installs it in f's place
// (logAndApply), committed to the manifest together with the advanced
// FlushedSeq and LogNum; flushLoop removes f's WAL afterwards.
func (db *DB) flushFrozen(f *frozen) (*segHandle, error) {
	start := time.Now()
	// Every write f holds is published first (awaitPublished): the
	// versions the flush keeps are those the snapshots and the latest
	// reader see.
	if err := db.commit.awaitPublished(db, f.maxSeq); err != nil {
		return nil, err
	}
	s, err := db.writeMemtable(f.mem, db.snapshotSeqs())
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	nextLog := db.logNum // the WAL of the memtable after f
	if len(db.imm) > 1 {
		nextLog = db.imm[1].logNum
	}
	db.mu.Unlock()
	e := shapeEdit{Edit: manifest.Edit{FlushedSeq: &f.maxSeq, LogNum: &nextLog}, added: s, flushed: f}
	if s != nil {
		e.Add = []base.SegmentMeta{s.meta}
	}
	if err := db.logAndApply(e); err != nil {
		return nil, err
	}
	db.logger.Info("flushed memtable", "entries", f.mem.Len(), "segment", segName(s), "took", time.Since(start))
	return s, nil
}

// writeMemtable writes mem to a new segment of tier 0: the versions and
// range tombstones some reader can still see (none that its own range
// tombstones cover within a snapshot stripe).
func (db *DB) writeMemtable(mem *memtable.Memtable, snapshots []uint64) (*segHandle, error) {
	rangeDels := mem.RangeDels() // merges the memtable's lists: once
	it := compaction.NewDedup(mem.NewIter(), snapshots, false)
	it.SetRangeDels(rangeDels)
	return db.writeSegment(it, compaction.KeepRangeDels(rangeDels, snapshots, false), nil, 0, nil, mem.Len())
}
