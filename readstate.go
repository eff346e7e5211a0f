package bloomkv

import (
	"sync/atomic"

	"github.com/bloomkv/bloomkv/internal/invariants"
	"github.com/bloomkv/bloomkv/memtable"
)

// readState is one consistent view for readers: the memtables and the live
// segments at some moment. It is immutable once published in DB.current;
// a change (a flush, a compaction, a memtable rotation) publishes a new one.
// Reference counts keep a segment's file open, and on disk, until the last
// reader that can see it is done — so compaction can remove its inputs while
// reads go on.
type readState struct {
	refs     atomic.Int32
	mems     []*memtable.Memtable // the active memtable, then the frozen ones, newest first
	segments []*segHandle         // newest first
}

// acquire returns the current read state with a reference, or nil after
// Close. The compare-and-swap refuses a state whose count already reached
// zero: it was replaced, and the next Load sees its successor.
func (db *DB) acquire() *readState {
	for {
		rs := db.current.Load()
		if rs == nil {
			return nil
		}
		if n := rs.refs.Load(); n > 0 && rs.refs.CompareAndSwap(n, n+1) {
			return rs
		}
	}
}

// latestSeq asks a read for the newest committed data.
const latestSeq = ^uint64(0)

// view returns the current read state, with a reference, and the sequence
// number of the newest write a reader may see in it; nil after Close.
// The state is taken before the sequence number and checked to be still
// current after: so every write up to seq is in its memtables or segments
// (a memtable rotation in between would have replaced it), and no
// compaction it reflects dropped a version that seq needs.
func (db *DB) view() (*readState, uint64) {
	for {
		rs := db.acquire()
		if rs == nil {
			return nil, 0
		}
		seq := db.visibleSeq.Load()
		if db.current.Load() == rs {
			return rs, seq
		}
		rs.release()
	}
}

func (rs *readState) release() {
	n := rs.refs.Add(-1)
	invariants.Check(n >= 0, "read state released more often than acquired")
	if n == 0 {
		for _, s := range rs.segments {
			s.unref()
		}
	}
}

// segmentsChangedLocked is what follows a change of db.segments (a flush,
// a compaction, recovery): the filters are refitted into
// Options.FilterBudget, the write stall threshold is recomputed for the new
// tiers, and the new read state is published. A memtable rotation, which
// leaves the segments alone, only publishes. db.mu must be held.
func (db *DB) segmentsChangedLocked() {
	db.applyFilterBudgetLocked()
	db.stallAt = db.policy.StallThreshold(db.policy.Tiers(db.metasLocked()))
	db.publishLocked()
}

// publishLocked replaces the read state with one built from db.mem, db.imm
// and db.segments. db.mu must be held.
func (db *DB) publishLocked() {
	rs := &readState{mems: make([]*memtable.Memtable, 0, 1+len(db.imm))}
	rs.mems = append(rs.mems, db.mem)
	for i := len(db.imm) - 1; i >= 0; i-- {
		rs.mems = append(rs.mems, db.imm[i].mem)
	}
	rs.segments = append([]*segHandle(nil), db.segments...)
	for _, s := range rs.segments {
		s.refs.Add(1)
	}
	rs.refs.Store(1) // the DB's own reference, dropped when replaced
	if old := db.current.Swap(rs); old != nil {
		old.release()
	}
}
