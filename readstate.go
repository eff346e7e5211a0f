package bloomkv

import (
	"sync/atomic"

	"github.com/bloomkv/bloomkv/internal/invariants"
	"github.com/bloomkv/bloomkv/internal/stripe"
	"github.com/bloomkv/bloomkv/memtable"
)

// readState is one consistent view for readers: the memtables and the live
// segments at some moment. It is immutable once published in DB.current;
// a change (a flush, a compaction, a memtable rotation) publishes a new one
// and retires the old. The segments it holds stay open, and on disk, until
// it is retired and the last reader that pinned it is done — so compaction
// can remove its inputs while reads go on.
//
// Pins are counted in stripes (internal/stripe): a Get on one core does
// not write the cache line a Get on another core writes, where one shared
// count made every Get bounce it (16 readers did fewer Gets than one). A
// pin adds 1 to one stripe and takes it back from the same stripe, so no
// stripe ever reads below what its pins hold, and a sum of zero means no
// pin is held: the last one out frees the state.
type readState struct {
	pins     stripe.Counter
	retired  atomic.Bool          // no longer published: freed once no pin is held
	freed    atomic.Bool          // the segments' references were dropped
	mems     []*memtable.Memtable // the active memtable, then the frozen ones, newest first
	segments []*segHandle         // newest first
}

// heavyStripe is the stripe of the pins that acquire and release take:
// iterators' setup, Stats, Verify, tests. The Get path, where the cost of
// a shared line shows, pins on a stripe of its own (pin).
const heavyStripe = 0

// pin returns the current read state, pinned on stripe i (which the
// caller passes back to unpin), or nil after Close. A state retired
// between the load and the pin is let go: its successor is in current.
func (db *DB) pin(i int) *readState {
	for {
		rs := db.current.Load()
		if rs == nil {
			return nil
		}
		rs.pins.Add(i, 1)
		// Atomics are sequentially consistent: if retire's store is not
		// seen here, this pin was counted before retire's sum.
		if !rs.retired.Load() {
			return rs
		}
		rs.unpin(i)
	}
}

// unpin takes back a pin taken on stripe i; the last pin of a retired
// state frees it.
func (rs *readState) unpin(i int) {
	n := rs.pins.Add(i, -1)
	invariants.Check(n >= 0, "read state unpinned more often than pinned")
	if rs.retired.Load() {
		rs.freeIfUnpinned()
	}
}

// retire is the DB letting go of a state it no longer publishes.
func (rs *readState) retire() {
	rs.retired.Store(true)
	rs.freeIfUnpinned()
}

func (rs *readState) freeIfUnpinned() {
	if rs.pins.Load() == 0 && rs.freed.CompareAndSwap(false, true) {
		for _, s := range rs.segments {
			s.unref()
		}
	}
}

// acquire returns the current read state, pinned, or nil after Close; its
// holder calls release.
func (db *DB) acquire() *readState { return db.pin(heavyStripe) }

func (rs *readState) release() { rs.unpin(heavyStripe) }

// latestSeq asks a read for the newest committed data.
const latestSeq = ^uint64(0)

// view returns the current read state, pinned on stripe i, and the
// sequence number of the newest write a reader may see in it; nil after
// Close. The state is taken before the sequence number and checked to be
// still current after: so every write up to seq is in its memtables or
// segments (a memtable rotation in between would have replaced it), and no
// compaction it reflects dropped a version that seq needs.
func (db *DB) view(i int) (*readState, uint64) {
	for {
		rs := db.pin(i)
		if rs == nil {
			return nil, 0
		}
		seq := db.visibleSeq.Load()
		if db.current.Load() == rs {
			return rs, seq
		}
		rs.unpin(i)
	}
}

// segmentsChangedLocked is what follows a change of db.segments (a flush,
// a compaction, recovery): the filters are refitted into
// Options.FilterBudget, the write stall and urgent-merge thresholds are
// recomputed for the new tiers, and the new read state is published. A
// memtable rotation, which leaves the segments alone, only publishes.
// db.mu must be held.
func (db *DB) segmentsChangedLocked() {
	db.applyFilterBudgetLocked()
	tiers := db.policy.Tiers(db.metasLocked())
	db.stallAt = db.policy.StallThreshold(tiers)
	db.urgentAt = db.policy.UrgentThreshold(tiers)
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
	if old := db.current.Swap(rs); old != nil {
		old.retire()
	}
}
