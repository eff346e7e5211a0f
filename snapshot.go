package bloomkv

import (
	"container/list"
	"sync/atomic"
)

// A Snapshot is a consistent, read-only view of the DB as of the moment it
// was taken: it sees exactly the writes committed before NewSnapshot
// returned, and none after, across flushes and compactions (which keep
// every version an open snapshot can see). It is safe for concurrent use.
//
// An open snapshot pins old versions on disk: Close it when done.
type Snapshot struct {
	db     *DB
	seq    uint64
	closed atomic.Bool
	elem   *list.Element // in db.snapshots; guarded by db.mu
}

// NewSnapshot returns a snapshot of the current state of the DB.
func (db *DB) NewSnapshot() (*Snapshot, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, ErrClosed
	}
	// Under db.mu, so no flush or compaction can read the snapshot list
	// between the load and the insert and then drop a version it needs.
	s := &Snapshot{db: db, seq: db.visibleSeq.Load()}
	s.elem = db.snapshots.PushBack(s.seq)
	return s, nil
}

// testHookSnapshotChecked, if set (by tests), runs in Snapshot.Get and
// Snapshot.NewIterator after their first check of released.
var testHookSnapshotChecked func()

// Get returns the value key had when the snapshot was taken, or an error
// matching ErrNotFound. The returned slice is the caller's.
func (s *Snapshot) Get(key []byte) ([]byte, error) {
	if s.released() {
		return nil, ErrSnapshotReleased
	}
	if testHookSnapshotChecked != nil {
		testHookSnapshotChecked()
	}
	return s.db.getAt(key, s)
}

// GetFunc calls fn with the value key had when the snapshot was taken,
// without copying it. See DB.GetFunc: value is valid only until fn
// returns.
func (s *Snapshot) GetFunc(key []byte, fn func(value []byte) error) error {
	if s.released() {
		return ErrSnapshotReleased
	}
	return s.db.getFuncAt(key, s, fn)
}

// Has reports whether key had a value when the snapshot was taken,
// without copying the value.
func (s *Snapshot) Has(key []byte) (bool, error) {
	if s.released() {
		return false, ErrSnapshotReleased
	}
	return s.db.hasAt(key, s)
}

// ValueSize returns the length of the value key had when the snapshot was
// taken, or an error matching ErrNotFound, without copying the value.
func (s *Snapshot) ValueSize(key []byte) (int, error) {
	if s.released() {
		return 0, ErrSnapshotReleased
	}
	return s.db.valueSizeAt(key, s)
}

// NewIterator returns an iterator over the snapshot's view; opts may be
// nil. See DB.NewIterator.
func (s *Snapshot) NewIterator(opts *IterOptions) (*Iterator, error) {
	if s.released() {
		return nil, ErrSnapshotReleased
	}
	if testHookSnapshotChecked != nil {
		testHookSnapshotChecked()
	}
	return s.db.newIterator(opts, s)
}

// Close releases the snapshot, letting compaction drop the versions only it
// could see. Iterators made from it stay usable until closed. Closing again
// returns ErrSnapshotReleased (which matches ErrClosed), as closing a DB or
// an Iterator twice does.
func (s *Snapshot) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrSnapshotReleased
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	db.snapshots.Remove(s.elem)
	if db.snapshots.Len() == 0 && db.garbageMergeLocked() != nil {
		// The merge that drops what the snapshots kept waited for the last
		// of them (garbageMergeLocked); nothing else would start it before
		// the next flush, which a store that no longer writes never makes.
		// Asked only when it is due, since every transaction ends here.
		db.scheduleCompactionLocked()
	}
	return nil
}

// released reports whether the snapshot is closed.
//
// Its reads check it twice: first, and again once they have pinned the
// read state they will read (DB.get, DB.newIterator). The first check
// alone let a read that passed it just before a concurrent Close read the
// versions of s.seq from a read state published after the Close: a flush
// or compaction that began after the Close may have dropped them there,
// and the read returned an older version, or ErrNotFound, as the
// snapshot's value. Close marks the snapshot released before it leaves
// the list of snapshots that flushes and compactions keep versions for,
// so a read state built without its versions is published only after
// released reports true; a read that pinned an earlier one reads the
// versions that one still holds.
func (s *Snapshot) released() bool { return s.closed.Load() }

// snapshotSeqs returns the sequence numbers of the open snapshots, the
// versions a flush or compaction must keep besides the newest.
func (db *DB) snapshotSeqs() []uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.snapshotSeqsLocked()
}

func (db *DB) snapshotSeqsLocked() []uint64 {
	seqs := make([]uint64, 0, db.snapshots.Len())
	for e := db.snapshots.Front(); e != nil; e = e.Next() {
		seqs = append(seqs, e.Value.(uint64))
	}
	return seqs
}
