package bloomkv

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// A flush or compaction that runs out of a resource (disk space, quota,
// file descriptors, memory) while it writes its new segment has changed
// nothing durable: the segment is not in the manifest, its file is
// removed, the memtable's writes are still in their WAL and a merge's
// inputs are still live. Such a failure is retried with backoff rather
// than making the store read-only, since space or descriptors freed by
// the operator, or by the store's own compactions and closed iterators,
// often end it: a long-running process then goes on without a restart.
//
// Everything else stays sticky (failLocked): a manifest commit failure
// (the commit may or may not be on disk), any WAL write, sync or creation
// (after a failed fsync the kernel may have dropped the dirty pages, and
// writes were acknowledged on them), a directory sync (it covers entries
// of other files too), EIO, a short write without such an errno, and
// ErrCorrupt.

// retryableError marks a failure that writeSegment classed as retryable:
// it ran out of a resource before the manifest commit, and the partial
// file is gone. Only writeSegment makes one, so an errno of the same kind
// from a manifest commit or a WAL is never taken for it.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// resourceExhausted reports whether err says a resource ran out: disk
// space, a disk quota, file descriptors (the process's or the system's)
// or memory.
func resourceExhausted(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		outOfFiles(err) || errors.Is(err, syscall.ENOMEM)
}

// markRetryable marks err retryable if it says a resource ran out.
func markRetryable(err error) error {
	if err == nil || !resourceExhausted(err) {
		return err
	}
	return &retryableError{err}
}

// markDirSyncRetryable marks a failed sync of the store's directory
// retryable only if the directory could not be opened for want of
// descriptors: then nothing was synced. A sync that failed otherwise, even
// for want of space, covers other files' entries too, which it may have
// dropped: that stays sticky.
func markDirSyncRetryable(err error) error {
	if !outOfFiles(err) {
		return err
	}
	return markRetryable(err)
}

// isRetryable reports whether err carries writeSegment's mark.
func isRetryable(err error) bool {
	var r *retryableError
	return errors.As(err, &r)
}

// The background retries wait minRetryDelay after the first failure of a
// streak and twice as long after each further one, up to maxRetryDelay:
// soon enough for a brief shortage, rarely enough not to spin on a full
// disk. A success ends the streak and resets the delay.
const (
	minRetryDelay = 50 * time.Millisecond
	maxRetryDelay = 5 * time.Second
)

// retryingThen is what goes on while flushes or compactions fail, for the
// log.
const retryingThen = "retrying in the background (writes stall once the memtables are full)"

// retryState is the failure streak of the flushes or of the background
// compactions; db.mu guards it.
type retryState struct {
	what  string        // "flush", "compaction" or "WAL creation", for the log
	then  string        // what goes on meanwhile, for the log
	err   error         // the last attempt's failure; nil once one succeeded
	fails uint64        // attempts failed, every streak together
	delay time.Duration // the next backoff
	kick  bool          // retry now: a Flush asks
	at    time.Time     // when the last attempt failed
}

// maxWALRetryDelay caps how long after a failed creation of a WAL the
// writes that need one fail at once, without trying (tooSoonLocked): a
// write loop does not spend a file number and a failing creation per
// write, and once the resource is back writes succeed within a second.
const maxWALRetryDelay = time.Second

// tooSoonLocked returns r's failure if the last attempt failed less than
// its backoff (at most maxWALRetryDelay) ago, else nil: time to try.
func (r *retryState) tooSoonLocked() error {
	if r.err != nil && time.Since(r.at) < min(r.delay, maxWALRetryDelay) {
		return r.err
	}
	return nil
}

// retryFailedLocked records a retryable failure of an attempt: one warning
// per streak, not one per retry.
func (db *DB) retryFailedLocked(r *retryState, err error) {
	err = fileLimitHint(err, len(db.segments))
	if r.err == nil {
		db.logger.Warn("bloomkv: "+r.what+" ran out of a resource; "+r.then, "err", err)
		r.delay = db.retryMin
	} else {
		r.delay = min(2*r.delay, db.retryMax)
	}
	r.err, r.at = err, time.Now()
	r.fails++
	db.retried++
	db.lastRetried = err
	db.cond.Broadcast()
}

// retrySucceededLocked ends r's streak, if one is on.
func (db *DB) retrySucceededLocked(r *retryState) {
	if r.err != nil {
		db.logger.Info("bloomkv: "+r.what+" succeeded again after failures", "last", r.err)
		r.err = nil
	}
}

// retryWaitLocked waits out r's backoff (db.mu held, released while
// waiting). It returns early when the DB closes or fails, or when a
// Flush asks for a retry now (r.kick): Close must not wait for the
// backoff.
func (db *DB) retryWaitLocked(r *retryState) {
	expired := false
	t := time.AfterFunc(r.delay, func() {
		db.mu.Lock()
		expired = true
		db.cond.Broadcast()
		db.mu.Unlock()
	})
	for !expired && !r.kick && !db.closed && db.bgErr == nil {
		db.cond.Wait()
	}
	r.kick = false
	t.Stop()
}

// failedSince returns r's failure if an attempt failed since r.fails was
// since and the streak is still on: what Flush and WaitForCompactions
// return instead of waiting for the shortage to end.
func (r *retryState) failedSince(since uint64) error {
	if r.fails != since && r.err != nil {
		return fmt.Errorf("bloomkv: %s: %w", r.what, r.err)
	}
	return nil
}

// kickLocked asks r's retry loop, if it is in a streak, to try again now
// rather than after its backoff: the caller waits for the outcome.
func (db *DB) kickLocked(r *retryState) {
	if r.err != nil && !r.kick {
		r.kick = true
		db.cond.Broadcast()
	}
}
