package bloomkv

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
	"github.com/bloomkv/bloomkv/internal/rangedel"
	"github.com/bloomkv/bloomkv/memtable"
	"github.com/bloomkv/bloomkv/wal"
)

// How many full memtables may wait for flush before writers stall
// (frozenLimit): two let one flush run while the next memtable fills, and
// more absorb the flushes that run slow. On two cores a flush shares the
// CPU with the writer, merges and the GC, and took 12–30 ms inside a fill
// against 9 ms alone; each memtable of slack is one slow flush a writer
// does not wait for. Measured on two cores (enginebench -fill-latency,
// 2·10^6 keys, 4 MiB memtables): with two, 11–32 stalls per fill (median
// 20) and 82–269 ms stalled (median 128) over 16 runs; with four, 0–15
// stalls (median 8) and 0–157 ms (median 47) over 14. Large memtables
// take long to fill and hold much memory, so the slack is bounded in bytes
// too (frozenBytes), down to two.
const (
	minFrozen   = 2
	maxFrozen   = 4
	frozenBytes = 32 << 20
)

// frozenLimit is how many full memtables of memtableSize may wait for
// flush before writers stall: as many as fit in frozenBytes, from
// minFrozen to maxFrozen.
func frozenLimit(memtableSize int) int {
	return min(max(frozenBytes/memtableSize, minFrozen), maxFrozen)
}

// A range deletion rotates a memtable whose point entries fill at least
// 1/rangeDelRotateShare of it (makeRoom), so an iterator steps over
// at most that much of a memtable's covered data; the smallest segment
// this makes is as large. Only point entries count: a memtable that holds
// mostly range tombstones has little for an iterator to step over, and
// counting the tombstones would rotate at every later range deletion (a
// flush storm: thousands of tiny segments for a memtable's worth of
// bytes). Range tombstones count toward the memtable's size like any
// entry (memtable.AddRangeDeletes charges their real memory).
const rangeDelRotateShare = 16

// commitQueue implements pipelined group commit, in two stages.
//
// Writing: writers queue their batches; one of them at a time leads,
// takes everything queued as one group, gives it sequence numbers, writes
// it to the WAL in one write (a copy into the WAL's mapping, or one
// write(2)), applies it to the memtable, and hands the group to the second
// stage; then it passes leadership to the first writer queued meanwhile.
// (A group that needs an fsync is handed to the second stage before it is
// applied, so that its fsync may start at once; it is published only once
// applied: leadSynced.) The leader is the only goroutine that writes the
// WAL or the memtable, so neither needs a lock of its own.
//
// Syncing and publishing: written groups wait in a queue, in order, until
// they may be published — made visible to readers (visibleSeq) and
// acknowledged to their writers. A group that needs no fsync may be
// published once every group before it is, its bytes being in the kernel
// (which keeps them through a crash of the process). A group that needs
// one (Options.Sync or a WriteSync in it) is published when a completed
// fsync covers its bytes. One goroutine at a time holds the sync role: it
// fsyncs the WAL outside every lock while the next group is written, then
// publishes every group the fsync covered, and fsyncs again if groups are
// ready for it (a few times at most, maxSyncTurn) before it passes the
// role to a writer of the first group still waiting, or drops it. A group
// is ready once the writers the last fsync acknowledged have written
// again, or a short wait for them has passed (takeSyncLocked): so one
// fsync covers the writers that come straight back, not half of them, and
// the writer whose write ends the wait takes the role. So the fsync of
// group k never waits for the copy of group k+1, and a writer is never
// acknowledged before its own bytes are durable.
//
// Sequence numbers become visible in order: a group is published only
// after every group before it, and the entries of an unpublished group,
// though in the memtable, are above visibleSeq, which every reader
// filters by.
type commitQueue struct {
	mu      sync.Mutex
	idle    sync.Cond // signalled when the leader steps down
	leading bool
	// exclusives counts the goroutines waiting in exclusive. While one
	// waits, a leader steps down after its group even if writers are
	// queued, and a writer that finds no leader queues instead of
	// leading, so that the waiter gets leadership next: a writer woken
	// before it would otherwise take leadership first, every time (on one
	// CPU a Checkpoint under a steady stream of writes waited minutes).
	exclusives int
	pending    []*commitReq
	payloads   [][]byte             // leader only
	rangeDels  []rangedel.Tombstone // leader only: applyBatch's
	passed     *commitGroup         // leader only: the group passed with leadership (msgApply)
	// handOffs counts leaderships passed to a queued writer (a wakeup on
	// the way of the next group), for benchmarks: BenchmarkPutSyncWriters
	// reports them per fsync.
	handOffs uint64

	// pmu guards the second stage. Lock order: commit leadership, then
	// pmu, then txns.mu; pmu is never held while db.mu is taken or waited
	// for.
	pmu     sync.Mutex
	pidle   sync.Cond      // signalled when the sync role is released or the queue empties
	queue   []*commitGroup // written, not yet published, oldest first; the first needs an fsync
	syncing bool           // a goroutine holds the sync role (or it is on its way to one)
	// seals are the WALs rotations replaced that are not yet sealed or
	// dropped, oldest first; sealLoop handles them in order, and while
	// one waits no other goroutine takes the sync role (takeSyncLocked,
	// acquireSync). sealer says sealLoop runs. sealWanted says a goroutine
	// waits for the role behind them: sealLoop then seals at once instead
	// of waiting for the flushes that make the WALs obsolete.
	seals      []sealJob
	sealer     bool
	sealWanted bool
	failed     error // a WAL write or fsync failed: nothing more is published
	// pubWaiters counts goroutines in awaitPublished: publishLocked
	// wakes them (pidle) only when there are some.
	pubWaiters int

	// For takeSyncLocked: written counts the batches enqueued so far;
	// until it reaches expect, or until deadline, writers that the last
	// fsync acknowledged may still come back with their next writes,
	// which the next fsync should cover too.
	written  uint64
	expect   uint64
	deadline time.Time
	urgent   int           // goroutines in acquireSync or drain: no waiting for writers
	timer    *time.Timer   // ends a wait at its deadline (gatherTimeout)
	timerSet bool          // timer is running
	timerAt  time.Time     // when it fires
	timedOut bool          // a wait ran out since the last fsync ended
	syncTime time.Duration // fsyncs' duration, smoothed
	waitFor  time.Duration // tests: the wait's bound instead of syncTime × gatherShare
	// share replaces gatherShare when not 0: benchmarks sweep it
	// (BenchmarkPutSyncWriters, -bench.gather), a negative share turning
	// the wait off.
	share     float64
	waitStart time.Time // when the wait for writers now on began
	sync      syncCounts
	// gatherLeft is how many of the writers the last fsync acknowledged
	// the next fsync still waits for (expect - written while a wait is
	// on, else 0), for leaders to read without pmu (lead).
	gatherLeft atomic.Int64
	// groups counts the groups written and enqueued, for benchmarks as
	// handOffs.
	groups uint64
}

// syncCounts describe the sync role's fsyncs and its waits for writers
// (takeSyncLocked), for benchmarks: what an fsync cycle spends in the
// fsync and in the wait, which the ops/s of synced writers alone cannot
// tell apart. Counted under q.pmu.
type syncCounts struct {
	syncs    uint64        // fsyncs
	syncTime time.Duration // their duration, summed
	waits    uint64        // waits for writers that ended (each before an fsync)
	waitTime time.Duration // their duration, summed
	timeouts uint64        // waits that ran out (gatherTimeout)
}

// commitGroup is one group of batches between writing and publication.
type commitGroup struct {
	reqs []*commitReq
	logw *wal.Writer // the WAL it is in
	end  int64       // logw's size just after it
	last uint64      // its last sequence number
	sync bool        // published only once an fsync covers end
	ws   *writeSet   // its transactions' writes (txnState.admit), or nil
	n    int         // batches written

	mem *memtable.Memtable // the memtable it goes to
	// applied: it is in mem. A synced group is queued for publication
	// before its leader applies it (lead), so that its fsync need not
	// wait for the memtable inserts; it is published, or acknowledged at
	// all, only once applied.
	applied bool
}

var groupPool = sync.Pool{New: func() any { return new(commitGroup) }}

// Messages a waiting writer receives on its commitReq's done channel.
const (
	msgAck   = iota // published (or failed): r.err says which
	msgLead         // lead the next group
	msgSync         // take the sync role
	msgApply        // lead, once the group passed with leadership is applied (applyPassed)
)

type commitReq struct {
	b     *Batch
	sync  bool      // fsync before acknowledging, whatever Options.Sync says
	check *txnCheck // a transaction's reads, validated before b is written (txn_conflict.go); nil for a plain write
	err   error
	// done carries one message at a time: a writer is sent msgLead only
	// while queued, msgSync only while its group waits for an fsync (and
	// only its group's first writer, its leader), msgApply only while its
	// group waits to be applied (and never the leader), and msgAck once.
	done chan uint8
}

var reqPool = sync.Pool{New: func() any { return &commitReq{done: make(chan uint8, 1)} }}

// submit commits b and returns when it is durable (as Options.Sync says)
// and visible to readers.
func (q *commitQueue) submit(db *DB, b *Batch, sync bool) error {
	return q.submitChecked(db, b, sync, nil)
}

// submitChecked is submit for a transaction's batch: it is written only if
// check passes, else the commit fails with ErrConflict.
func (q *commitQueue) submitChecked(db *DB, b *Batch, sync bool, check *txnCheck) error {
	if b.err != nil {
		// A batch that refused an operation (ErrBatchTooLarge) holds the
		// ones before it: never written in part. DB.write and Txn.commit
		// check first; every commit passes here.
		return b.err
	}
	r := reqPool.Get().(*commitReq)
	r.b, r.sync, r.check, r.err = b, sync, check, nil
	q.mu.Lock()
	q.pending = append(q.pending, r)
	lead := !q.leading && q.exclusives == 0
	q.leading = q.leading || lead
	q.mu.Unlock()
	if lead {
		q.lead(db, r)
	}
	for m := range r.done {
		if m == msgAck {
			break
		}
		switch m {
		case msgLead:
			q.lead(db, r)
		case msgApply:
			q.applyPassed(db, r)
		default:
			q.syncRole(db)
		}
	}
	err := r.err
	r.b, r.check, r.err = nil, nil, nil
	reqPool.Put(r)
	return err
}

// exclusive runs fn while no group is being written (as the leader), then
// passes leadership on to whatever queued meanwhile. Groups written
// before may still wait for their fsync.
func (q *commitQueue) exclusive(db *DB, fn func()) {
	q.mu.Lock()
	q.exclusives++
	for q.leading {
		q.idle.Wait()
	}
	q.exclusives--
	q.leading = true
	q.mu.Unlock()
	fn()
	q.handOffToWriters()
}

// handOffToWriters ends an exclusive section: it passes leadership to the
// first writer queued even while another goroutine waits in exclusive,
// and steps down only if none is queued. That writer leads one group and
// then steps down for the waiter (stepDownIfIdleLocked), so exclusives and
// writers take turns. Stepping down for the next exclusive instead (as
// handOff does) let two goroutines calling Sync, Flush or Checkpoint back
// to back keep leadership between them for as long as they went on, while
// every writer stayed queued.
func (q *commitQueue) handOffToWriters() {
	q.mu.Lock()
	if len(q.pending) == 0 {
		q.stepDownLocked()
		q.mu.Unlock()
		return
	}
	q.passLocked()
}

// lead writes groups, each everything queued, until none is queued or a
// group needs an fsync; the caller holds leadership, and lead passes it
// on or steps down before it returns. A leader whose group needs an fsync
// stops leading, so that it is free to take the sync role when it is
// passed to it (to its group's first writer: a leader is always that).
// While groups need none, one leader writes them all, with no hand-off
// (a wakeup) between groups.
//
// A leader of r, a synced write, first yields the CPU while the next
// fsync waits for other writers than r's that the last one acknowledged
// (q.gatherLeft): those woken but not yet run then queue behind it, and
// it writes them all in one group, where each would otherwise lead a
// group of one or two, each costing a lock round, a WAL write and a
// publication. The fsync waits for them anyway; with 64 writers on 2
// CPUs the yield cut groups per fsync from about 35 to 3
// (BenchmarkPutSyncWriters).
func (q *commitQueue) lead(db *DB, r *commitReq) {
	if (r.sync || db.opts.Sync) && q.gatherLeft.Load() > 1 {
		runtime.Gosched()
	}
	for {
		g := groupPool.Get().(*commitGroup)
		q.mu.Lock()
		g.reqs = append(g.reqs[:0], q.pending...)
		clear(q.pending)
		q.pending = q.pending[:0]
		q.mu.Unlock()
		err := db.commitGroup(g)
		if err == nil && g.n > 0 && !g.applied {
			q.leadSynced(db, g)
			return
		}
		sync := err == nil && g.sync
		// Queued for publication before leadership passes on, so that
		// groups enter the queue in the order of their sequence numbers.
		mustSync := q.enqueue(db, g, err)
		if sync || mustSync {
			q.handOff()
			if mustSync {
				q.syncRole(db)
			}
			return
		}
		q.mu.Lock()
		idle := q.stepDownIfIdleLocked()
		q.mu.Unlock()
		if idle {
			return
		}
	}
}

// leadSynced queues g, a synced group in the WAL but not yet applied, for
// its fsync, applies it, and passes leadership on. If the enqueue gives
// the leader the sync role (the group completes what the next fsync
// waits for), the fsync starts at once and the memtable inserts run
// beside it: leadership passes, with the group to apply, to another of
// its writers (msgApply). With many writers the group holds most of
// them, and its memtable inserts, the biggest part of the CPU a small
// write costs, would otherwise delay the fsync.
func (q *commitQueue) leadSynced(db *DB, g *commitGroup) {
	mustSync := q.enqueue(db, g, nil)
	if mustSync && len(g.reqs) > 1 {
		q.passed = g
		g.reqs[1].done <- msgApply
		q.syncRole(db)
		return
	}
	q.apply(db, g)
	q.handOff()
	if mustSync {
		q.syncRole(db)
	}
}

// applyPassed applies the group whose leader passed leadership to the
// caller, one of its writers (r), and leads on or steps down.
func (q *commitQueue) applyPassed(db *DB, r *commitReq) {
	g := q.passed
	q.passed = nil
	q.apply(db, g)
	q.mu.Lock()
	idle := q.stepDownIfIdleLocked()
	q.mu.Unlock()
	if !idle {
		q.lead(db, r)
	}
}

// apply applies g, queued for publication before it was applied
// (leadSynced), to its memtable, as the leader; then publishes and
// acknowledges it if nothing waits before it and a completed fsync
// covers it (else synced will), or fails it if the WAL failed meanwhile.
func (q *commitQueue) apply(db *DB, g *commitGroup) {
	db.applyGroup(g)
	q.pmu.Lock()
	g.applied = true
	if q.queue[0] != g || q.failed == nil && g.end > g.logw.Synced() {
		q.pmu.Unlock()
		return
	}
	var err error
	if q.failed != nil {
		err = fmt.Errorf("%w: %w", ErrReadOnly, q.failed)
	} else {
		q.publishLocked(db, g)
	}
	// The last group queued: the next is written after it is applied.
	clear(q.queue)
	q.queue = q.queue[:0]
	q.pidle.Broadcast()
	q.pmu.Unlock()
	ackGroup(g, err)
}

// handOff passes leadership to the first writer queued, or steps down.
func (q *commitQueue) handOff() {
	q.mu.Lock()
	if q.stepDownIfIdleLocked() {
		q.mu.Unlock()
		return
	}
	q.passLocked()
}

// passLocked passes leadership to the first writer queued (there is one)
// and unlocks q.mu, which the caller holds.
func (q *commitQueue) passLocked() {
	next := q.pending[0]
	q.handOffs++
	q.mu.Unlock()
	next.done <- msgLead
}

// counts returns how many groups were enqueued and how many leaderships
// handed off so far (groups and handOffs), for benchmarks.
func (q *commitQueue) counts() (groups, handOffs uint64) {
	q.pmu.Lock()
	groups = q.groups
	q.pmu.Unlock()
	q.mu.Lock()
	handOffs = q.handOffs
	q.mu.Unlock()
	return groups, handOffs
}

// syncCounts returns the sync role's counts so far, for benchmarks.
func (q *commitQueue) syncCounts() syncCounts {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	return q.sync
}

// stepDownIfIdleLocked gives up leadership and reports true if no writer
// is queued, or if a goroutine waits in exclusive: the writers queued then
// stay queued, and exclusive passes leadership to them when it is done.
// q.mu is held.
func (q *commitQueue) stepDownIfIdleLocked() bool {
	if len(q.pending) > 0 && q.exclusives == 0 {
		return false
	}
	q.stepDownLocked()
	return true
}

// stepDownLocked gives up leadership, waking the goroutines waiting for
// it in exclusive. q.mu is held.
func (q *commitQueue) stepDownLocked() {
	q.leading = false
	q.idle.Broadcast()
}

// enqueue hands a written group (or one that failed with err) to the
// second stage. It publishes the group at once when it needs no fsync and
// nothing waits before it, and reports whether the caller took the sync
// role, which it must then exercise (syncRole).
func (q *commitQueue) enqueue(db *DB, g *commitGroup, err error) (mustSync bool) {
	q.pmu.Lock()
	q.groups++
	switch {
	case err == nil && g.n > 0 && !g.applied:
		// Acknowledged only once applied (apply), whatever happens
		// meanwhile: until then its writers' batches are in use.
		q.written += uint64(g.n)
		q.noteWrittenLocked()
		q.queue = append(q.queue, g)
		if q.failed == nil {
			mustSync = q.takeSyncLocked(db)
		}
		q.pmu.Unlock()
		return mustSync
	case err == nil && q.failed != nil:
		// Written after a failure: publishing it would also publish the
		// failed groups' entries, which its sequence numbers follow.
		err = fmt.Errorf("%w: %w", ErrReadOnly, q.failed)
	case err == nil && g.n > 0 && (g.sync || len(q.queue) > 0):
		q.written += uint64(g.n)
		q.noteWrittenLocked()
		q.queue = append(q.queue, g)
		mustSync = q.takeSyncLocked(db)
		q.pmu.Unlock()
		return mustSync
	case err == nil && g.n > 0:
		q.written += uint64(g.n)
		q.publishLocked(db, g)
	}
	q.pmu.Unlock()
	ackGroup(g, err)
	return false
}

// publishLocked makes g visible and records it for the open transactions.
// q.pmu is held, and every group before g is published.
func (q *commitQueue) publishLocked(db *DB, g *commitGroup) {
	db.visibleSeq.Store(g.last)
	if q.pubWaiters > 0 {
		q.pidle.Broadcast()
	}
	// After the publication, which an open transaction's conflict check
	// depends on (txnState.active); a no-op while none is open.
	if g.ws != nil || db.txns.active.Load() != 0 {
		payloads := make([][]byte, 0, len(g.reqs))
		for _, r := range g.reqs {
			if r.err == nil {
				payloads = append(payloads, r.b.data)
			}
		}
		db.txns.record(g.ws, payloads, g.last)
	}
	db.stats.writes.Add(uint64(g.n))
}

// ackGroup acknowledges g's writers (with err unless one has its own, a
// refused transaction's ErrConflict) and recycles g.
func ackGroup(g *commitGroup, err error) {
	for _, r := range g.reqs {
		if r.err == nil {
			r.err = err
		}
		r.done <- msgAck
	}
	clear(g.reqs)
	*g = commitGroup{reqs: g.reqs[:0]}
	groupPool.Put(g)
}

// maxSyncTurn bounds the fsyncs one holder of the sync role issues in a
// row. Passing the role on wakes a sleeping writer, and on a busy machine
// the device waits for that wakeup; a holder that finds groups ready for
// an fsync when its fsync ends (see takeSyncLocked) therefore starts the
// next one itself, as Pebble's LogWriter flush loop does. But the holder
// is a writer whose own write was acknowledged by its first fsync, and
// whose call returns only when it lets go of the role: the bound keeps its
// latency within a few fsyncs.
const maxSyncTurn = 4

// gatherShare is how long, at most, the groups queued for an fsync wait
// for the writers the last fsync acknowledged to write again
// (takeSyncLocked), as a share of the smoothed duration of an fsync.
const gatherShare = 1.0

// takeSyncLocked takes the sync role for the caller, and reports true, if
// the role is free, a group waits for an fsync, and it is time for one.
// q.pmu is held.
//
// It is time once every writer the last fsync acknowledged has written
// again (q.written has reached q.expect), once the wait for them has
// lasted gatherShare of an fsync (q.deadline), or at once while
// acquireSync or drain waits (q.urgent). This is what lets one fsync
// cover more than half the writers. An fsync covers only what was written
// before it began; if the next fsync began as soon as the last ended, it
// would cover only the writers that wrote during the last one, while
// those the last one acknowledged woke up, wrote again and then waited
// for the fsync after: with N writers each fsync would cover about N/2
// of them (Pebble's LogWriter does just that). Waiting for them costs the
// time they take to write again, a few microseconds each, and lets one
// fsync cover all N. The wait is made only for writers that do come back
// (see synced), and a timer ends it at its deadline (gatherTimeout).
func (q *commitQueue) takeSyncLocked(db *DB) bool {
	if q.syncing || len(q.queue) == 0 || q.failed != nil {
		// (After a failure there is nothing to fsync: synced failed the
		// groups it found, and apply fails the one still being applied;
		// passing the role to its leader then would leave two messages
		// for one writer.)
		return false
	}
	if len(q.seals) > 0 {
		q.wantSealsLocked() // sealLoop's turn first
		return false
	}
	if g := q.queue[0]; !g.applied && g.end <= g.logw.Synced() {
		return false // it waits only for its leader to apply it
	}
	if q.written < q.expect && q.urgent == 0 {
		if wait := time.Until(q.deadline); wait > 0 {
			if !q.timerSet || q.deadline.Before(q.timerAt) {
				q.timerSet, q.timerAt = true, q.deadline
				if q.timer == nil {
					q.timer = time.AfterFunc(wait, func() { q.gatherTimeout(db) })
				} else {
					q.timer.Reset(wait)
				}
			}
			return false
		}
	}
	q.syncing = true
	q.deadline = time.Time{} // the wait is over (synced sets the next)
	q.gatherLeft.Store(0)
	if !q.waitStart.IsZero() {
		q.sync.waits++
		q.sync.waitTime += time.Since(q.waitStart)
		q.waitStart = time.Time{}
	}
	if q.timerSet {
		// The wait is over before its deadline: stopped, its timer does
		// not start a goroutine for nothing once an fsync is under way.
		// (If it fires all the same, gatherTimeout finds nothing to do.)
		q.timer.Stop()
		q.timerSet = false
	}
	return true
}

// gatherTimeout ends a wait for writers (takeSyncLocked) that did not all
// come back: it runs the fsync the queued groups wait for, in the timer's
// goroutine.
func (q *commitQueue) gatherTimeout(db *DB) {
	q.pmu.Lock()
	q.timerSet = false
	// A timer set for an earlier wait may fire during a later one, which
	// takeSyncLocked then sets it for again.
	take := q.takeSyncLocked(db)
	// A wait that ran out cost the groups the time and their fsync the
	// writers still away: the next fsync does not wait (see synced).
	q.timedOut = q.timedOut || take
	if take {
		q.sync.timeouts++
	}
	q.pmu.Unlock()
	if take {
		q.syncRole(db)
	}
}

// syncRole exercises the sync role, which the caller holds: an fsync of
// the WAL of the first group waiting and the publication of what it
// covered, again while groups are ready for the next one (takeSyncLocked,
// up to maxSyncTurn fsyncs); then the role is dropped, or passed on to a
// writer of the first group still waiting if that group is ready, before
// the writers are woken, so that the next fsync starts at once.
func (q *commitQueue) syncRole(db *DB) {
	for turn := 1; ; turn++ {
		q.pmu.Lock()
		if len(q.queue) == 0 {
			q.releaseLocked()
			q.pmu.Unlock()
			return
		}
		logw := q.queue[0].logw
		q.pmu.Unlock()
		start := time.Now()
		err := logw.Sync()
		var buf [8]*commitGroup
		done, err := q.synced(db, err, time.Since(start), buf[:0])
		q.pmu.Lock()
		q.syncing = false
		again := q.takeSyncLocked(db)
		var next *commitReq
		switch {
		case !again:
			q.releaseLocked()
		case turn >= maxSyncTurn:
			next = q.queue[0].reqs[0] // the role stays taken, for next
		}
		q.pmu.Unlock()
		if next != nil {
			next.done <- msgSync
		}
		for _, g := range done {
			ackGroup(g, err)
		}
		if !again || next != nil {
			return
		}
	}
}

// synced takes the result of an fsync, which took took, by the sync
// role's holder: it publishes the groups now covered and returns them
// appended to done, with the error to acknowledge them with, for the
// caller to acknowledge outside q.pmu; and it sets the next fsync to wait
// for their writers (takeSyncLocked). A failed fsync fails every group
// waiting (the first waited for it, the others follow it) and makes the
// DB read-only.
func (q *commitQueue) synced(db *DB, err error, took time.Duration, done []*commitGroup) ([]*commitGroup, error) {
	if err != nil {
		db.fail(fmt.Errorf("WAL sync: %w", err))
		err = fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if err == nil && q.failed != nil {
		// A later fsync of a WAL whose predecessor's seal failed
		// (endWAL) promises nothing for the groups in it.
		err = q.failed
	}
	if err != nil {
		return q.failQueuedLocked(err, done), err
	}
	n, acked := 0, 0
	for _, g := range q.queue {
		if g.sync && g.end > g.logw.Synced() {
			break
		}
		if !g.applied {
			// Covered, and published by its leader once applied
			// (apply): its writers come back all the same.
			acked += g.n
			break
		}
		q.publishLocked(db, g)
		n++
		acked += g.n
	}
	done = append(done, q.queue[:n]...)
	q.queue = append(q.queue[:0], q.queue[n:]...)
	clear(q.queue[len(q.queue) : len(q.queue)+n])
	if len(q.queue) == 0 {
		q.pidle.Broadcast()
	}
	// The next fsync waits for the writers this one acknowledged only if
	// those the last one acknowledged all wrote again before this one
	// ended, and no wait ran out since: writers that come back at once (a
	// loop of synced writes), not one-off writes that a wait would only
	// delay, nor writers that come back slower than an fsync (on a busy
	// CPU), whom the pipeline serves better.
	returning := q.written >= q.expect && !q.timedOut
	q.timedOut = false
	q.expect = q.written + uint64(acked)
	q.deadline, q.waitStart = time.Time{}, time.Time{}
	// A smoothed fsync time, so that one slow fsync does not make the
	// next wait as long.
	if q.syncTime == 0 {
		q.syncTime = took
	} else {
		q.syncTime += (took - q.syncTime) / 8
	}
	q.sync.syncs++
	q.sync.syncTime += took
	share := gatherShare
	if q.share != 0 {
		share = q.share
	}
	if returning && share > 0 {
		wait := time.Duration(float64(q.syncTime) * share)
		if q.waitFor != 0 {
			wait = q.waitFor
		}
		q.waitStart = time.Now()
		q.deadline = q.waitStart.Add(wait)
	}
	q.noteWrittenLocked()
	return done, nil
}

// failQueuedLocked makes every later group fail with err (q.failed), and
// takes the applied groups waiting in the queue out of it, appended to
// done, for the caller to acknowledge with err outside q.pmu. A group not
// yet applied, the last, is failed by its leader once applied (apply).
// q.pmu is held.
func (q *commitQueue) failQueuedLocked(err error, done []*commitGroup) []*commitGroup {
	if q.failed == nil {
		q.failed = err
	}
	n := len(q.queue)
	if n > 0 && !q.queue[n-1].applied {
		n--
	}
	done = append(done, q.queue[:n]...)
	q.queue = append(q.queue[:0], q.queue[n:]...)
	clear(q.queue[len(q.queue) : len(q.queue)+n])
	q.pidle.Broadcast() // awaitPublished waits for this too
	return done
}

// awaitPublished waits until every write up to seq is published
// (visibleSeq), and returns nil, or until the queue has failed, and
// returns that error. A flush calls it before it writes a frozen
// memtable: writes of a group waiting for its fsync are in the memtable
// but not yet visible, and a flush keeps only the versions some reader
// may see, judging the newest the latest reader's; it would keep the
// unpublished version of a key and drop the one readers still see (or a
// deletion hiding an older segment's version), for as long as the fsync
// took, and for good if it failed.
func (q *commitQueue) awaitPublished(db *DB, seq uint64) error {
	if db.visibleSeq.Load() >= seq {
		return nil
	}
	q.pmu.Lock()
	defer q.pmu.Unlock()
	q.pubWaiters++
	defer func() { q.pubWaiters-- }()
	for db.visibleSeq.Load() < seq && q.failed == nil {
		q.pidle.Wait()
	}
	if db.visibleSeq.Load() >= seq {
		return nil
	}
	return q.failed
}

// failure returns the error the queue failed with (q.failed), or nil.
func (q *commitQueue) failure() error {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	return q.failed
}

// failQueued is failQueuedLocked for a caller without q.pmu, which
// acknowledges the groups it takes out.
func (q *commitQueue) failQueued(err error) {
	q.pmu.Lock()
	done := q.failQueuedLocked(err, nil)
	q.pmu.Unlock()
	for _, g := range done {
		ackGroup(g, err)
	}
}

// noteWrittenLocked updates gatherLeft after written, expect or deadline
// changed. q.pmu is held.
func (q *commitQueue) noteWrittenLocked() {
	left := int64(0)
	if !q.deadline.IsZero() && q.written < q.expect {
		left = int64(q.expect - q.written)
	}
	q.gatherLeft.Store(left)
}

// releaseLocked drops the sync role.
func (q *commitQueue) releaseLocked() {
	q.syncing = false
	q.pidle.Broadcast()
}

// acquireSync takes the sync role, waiting for its holder to finish and
// for every WAL a rotation replaced to be sealed (sealLoop). Only the
// commit leader calls it (DB.Sync, Close, Checkpoint), so no group can be
// queued meanwhile and, once the role is held, one fsync of the WAL
// covers every group waiting.
func (q *commitQueue) acquireSync() {
	q.pmu.Lock()
	q.urgent++
	for q.syncing || len(q.seals) > 0 {
		if len(q.seals) > 0 {
			q.wantSealsLocked()
		}
		q.pidle.Wait()
	}
	q.urgent--
	q.syncing = true
	q.pmu.Unlock()
}

// syncQueued takes the sync role (acquireSync: after its holder, and the
// seals of the WALs rotations replaced, are done), fsyncs the groups
// waiting, if any, and releases the role. The commit leader calls it (Close,
// Checkpoint), so that afterwards every group written is published and
// every WAL a rotation replaced is sealed. (With the role free, groups
// may wait for their writers: takeSyncLocked.)
func (q *commitQueue) syncQueued(db *DB) error {
	q.acquireSync()
	defer q.releaseSync(db)
	q.pmu.Lock()
	var logw *wal.Writer
	if len(q.queue) > 0 {
		logw = q.queue[0].logw
	}
	q.pmu.Unlock()
	if logw == nil {
		return nil
	}
	return q.syncHeld(db, logw)
}

// syncHeld fsyncs logw as the holder of the sync role (acquireSync),
// publishes and acknowledges the groups it covered, and keeps the role.
//
// Once the queue has failed it fsyncs nothing and fails the groups
// waiting. The failure may have left a WAL a rotation replaced unsealed
// (a failed fsync or seal in endWAL or sealNow), and recovery takes a
// mark in a newer WAL that claims synced bytes past its creation for
// proof that every older WAL was sealed (wal/FORMAT.md): a newer WAL
// fsynced now would get such a mark with its next write or its seal.
// Nothing would be published by the fsync anyway (synced).
func (q *commitQueue) syncHeld(db *DB, logw *wal.Writer) error {
	if err := q.failure(); err != nil {
		q.failQueued(err)
		return err
	}
	start := time.Now()
	err := logw.Sync()
	done, err := q.synced(db, err, time.Since(start), nil)
	for _, g := range done {
		ackGroup(g, err)
	}
	return err
}

// releaseSync drops the sync role taken with acquireSync, passing it on
// if a group is ready for an fsync (takeSyncLocked).
func (q *commitQueue) releaseSync(db *DB) {
	q.pmu.Lock()
	q.syncing = false
	var next *commitReq
	if q.takeSyncLocked(db) {
		next = q.queue[0].reqs[0]
	} else {
		q.releaseLocked()
	}
	q.pmu.Unlock()
	if next != nil {
		next.done <- msgSync
	}
}

// drain waits until every written group is published. The commit leader
// calls it before it admits a transaction: the conflict check needs the
// writes of every earlier group in the history, which publication records.
func (q *commitQueue) drain(db *DB) {
	q.pmu.Lock()
	q.urgent++ // no wait for writers: the caller, leading, keeps them out
	for len(q.queue) > 0 {
		if q.takeSyncLocked(db) {
			q.pmu.Unlock()
			q.syncRole(db)
			q.pmu.Lock()
			continue
		}
		q.pidle.Wait()
	}
	q.urgent--
	q.pmu.Unlock()
}

// commitGroup writes one group of batches: sequence numbers, one WAL
// write, the memtable inserts. Publication (and the fsync it may wait
// for) is the second stage's (enqueue).
func (db *DB) commitGroup(g *commitGroup) error {
	size, rangeDels, txn := 0, false, false
	for _, r := range g.reqs {
		// What the memtable will charge (makeRoom compares it with the
		// memtable's size): the encoded batch counts a few bytes per
		// operation, the memtable a node, so a batch of tiny operations
		// admitted by its encoded size took up to 16 times the room
		// left.
		size += r.b.Size() + int(r.b.count)*memtable.EntryOverhead
		rangeDels = rangeDels || r.b.rangeDels > 0
		txn = txn || r.check != nil
	}
	if txn {
		db.commit.drain(db)
	}
	logw, mem, err := db.makeRoom(size, rangeDels)
	if err != nil {
		return err
	}
	return db.writeGroup(g, logw, mem)
}

// writeGroup writes g to logw and gives it sequence numbers; it applies
// g to mem too unless g needs an fsync (and holds no transaction, whose
// publication the next transaction's check waits for: drain), which its
// leader applies once it is queued for the fsync (leadSynced).
func (db *DB) writeGroup(g *commitGroup, logw *wal.Writer, mem *memtable.Memtable) error {
	payloads := db.commit.payloads[:0]
	seq := db.lastSeq + 1
	sync := db.opts.Sync
	// Transactions are validated here, as the leader, so that no write
	// can commit between a transaction's check and its sequence numbers;
	// a refused one gets ErrConflict and takes no sequence number.
	g.ws = db.txns.admit(g.reqs, seq)
	for _, r := range g.reqs {
		if r.err != nil {
			continue
		}
		payloads = append(payloads, r.b.setSeq(seq))
		seq += uint64(r.b.count)
		sync = sync || r.sync
	}
	g.n = len(payloads)
	if len(payloads) == 0 {
		return nil // every batch was a refused transaction
	}
	n, err := logw.WriteRecords(payloads...)
	db.commit.payloads = payloads
	db.stats.walBytes.Add(uint64(n))
	if err != nil {
		clear(payloads)
		// The WAL may now hold part of the group: refuse all further
		// writes rather than acknowledge anything on top of it.
		db.fail(fmt.Errorf("WAL write: %w", err))
		return fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	clear(payloads) // do not pin the batches until the next group
	db.lastSeq = seq - 1
	g.logw, g.end, g.last, g.sync, g.mem = logw, logw.Size(), db.lastSeq, sync, mem
	if !sync || g.ws != nil {
		db.applyGroup(g)
		g.applied = true
	}
	return nil
}

// applyGroup applies g's written batches to its memtable. Only the
// leader calls it.
func (db *DB) applyGroup(g *commitGroup) {
	for _, r := range g.reqs {
		if r.err == nil {
			db.commit.rangeDels, _, _ = applyBatch(g.mem, r.b.data, "", 0, 0, db.commit.rangeDels)
		}
	}
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

// makeRoom makes sure the memtable can take size more bytes, and returns
// the WAL and memtable to write to: it freezes a full memtable and starts
// a new one with a new WAL (rotate). It stalls (waits, never fails) while
// db.frozenLimit memtables already wait for flush, or while the segment count
// is past the compaction policy's stall threshold and a compaction is
// running to bring it down. Only the commit leader calls it.
//
// A group with a range deletion also rotates a memtable that holds
// rangeDelRotateShare of MemtableSize or more: the versions the deletion
// covers then sit in sources older than its tombstone, which an iterator
// jumps over in one seek, instead of among newer writes in the memtable
// the tombstone joins, which it would have to step over one by one. (A
// raft log truncated behind each snapshot: finding the first index took
// 2.4 ms among the covered entries of a 4 MiB memtable, and takes
// microseconds after the rotation.)
func (db *DB) makeRoom(size int, rangeDels bool) (*wal.Writer, *memtable.Memtable, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	var st stallTimer
	defer st.record(&db.stats)
	for {
		if err := db.writableLocked(); err != nil {
			return nil, nil, err
		}
		if db.compacting > 0 && len(db.segments) >= db.stallAt {
			// Compaction fell behind: every Get would probe more and more
			// segments. Wait for it rather than let reads degrade.
			st.wait(&db.stats, db.cond, false)
			continue
		}
		used := db.mem.ApproximateSize()
		if db.mem.Empty() || used+size <= db.opts.MemtableSize &&
			!(rangeDels && db.mem.PointBytes() >= db.opts.MemtableSize/rangeDelRotateShare) {
			return db.logw, db.mem, nil
		}
		if len(db.imm) >= db.frozenLimit {
			db.flushWaiters.Add(1)
			st.wait(&db.stats, db.cond, true)
			if db.flushWaiters.Add(-1) == 0 {
				db.cond.Broadcast() // merges paused for the flush go on
			}
			continue
		}
		db.mu.Unlock()
		_, err := db.rotate(false)
		db.mu.Lock()
		if err != nil {
			return nil, nil, err
		}
	}
}

// stallTimer times one makeRoom's waits for room, for Stats: the time a
// slow Put spent stalled, told apart from the time its goroutine waited
// for a CPU or the device.
type stallTimer struct {
	total, flush time.Duration
}

// wait counts a stall and waits on cond (db.mu held), timing the wait;
// flush says it waits for a flush rather than for a compaction.
func (st *stallTimer) wait(c *counters, cond *sync.Cond, flush bool) {
	c.writeStalls.Add(1)
	start := time.Now()
	cond.Wait()
	d := time.Since(start)
	st.total += d
	if flush {
		st.flush += d
	}
}

// record adds the stall's time to c, and keeps the longest.
func (st *stallTimer) record(c *counters) {
	if st.total == 0 {
		return
	}
	c.writeStallNanos.Add(uint64(st.total))
	c.flushStallNanos.Add(uint64(st.flush))
	for {
		longest := c.longestStallNanos.Load()
		if uint64(st.total) <= longest || c.longestStallNanos.CompareAndSwap(longest, uint64(st.total)) {
			return
		}
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
	// durable is set once the flush is committed: the WAL is obsolete.
	durable atomic.Bool
	// sealed is closed once sealLoop is done with the WAL (sealed and
	// closed, or failed): the flush removes the file only then, so that
	// no file is unlinked while it is open (which Windows refuses).
	sealed chan struct{}
}

// rotate freezes the memtable and starts a new one with a new WAL, and
// returns the frozen memtable. Only the commit leader calls it (from
// makeRoom, or Flush through exclusive), without db.mu, which it holds
// only to swap the memtable and WAL in one step, so that readers and
// checkpoints see either both old or both new.
//
// The writer that rotates waits for no fsync. The new WAL is usually the
// spare made ahead (makeSpare: a creation costs two fsyncs, the file's and
// the directory's). The old WAL is left to sealLoop, in a goroutine of its
// own, while the leader goes on writing the new WAL; nor does the
// rotation wait for an earlier rotation's seal, which took up to 95 ms on
// two cores beside a merge and was then the slowest Put of a fill. Until
// a replaced WAL is sealed, or obsolete, no other goroutine takes the sync
// role, so no group in a newer WAL is acknowledged as synced before every
// older live WAL is sealed, which recovery relies on (mayHaveLostTail).
//
// If creating a WAL ran out of a resource lately, a rotation for a write
// fails at once with that error until the backoff has passed; now (an
// explicit Flush) tries whatever the backoff.
func (db *DB) rotate(now bool) (*frozen, error) {
	old, oldNum := db.logw, db.logNum // the leader's: they change only here
	db.mu.Lock()
	if len(db.spares) == 0 && db.spareMade != nil {
		// Wait for it rather than create a WAL beside it: a WAL created
		// now would be numbered above the spare, which would then sit
		// below the active WAL. Even removed, it could come back after a
		// power cut (an unlink is not durable until the directory's
		// fsync), an empty, unsealed WAL between two live ones that would
		// end the store's history there (mayHaveLostTail) and lose the
		// synced writes of the WALs after it.
		made := db.spareMade
		db.mu.Unlock()
		<-made
		db.mu.Lock()
	}
	var logw *wal.Writer
	var num uint64
	if len(db.spares) > 0 {
		logw, num = db.spares[0].w, db.spares[0].num
		db.spares[0] = spareWAL{}
		db.spares = db.spares[1:]
	}
	if logw == nil && !now {
		if err := db.walRetry.tooSoonLocked(); err != nil {
			db.mu.Unlock()
			return nil, fmt.Errorf("rotate the WAL: %w", err)
		}
	}
	db.mu.Unlock()
	if logw == nil {
		var err error
		num, err = db.manifest.NewFileNum()
		if err == nil {
			logw, err = db.createWAL(num, false)
		}
		if isRetryable(err) {
			// Out of a resource before anything was synced that
			// matters: no rotation. The old WAL and memtable stay
			// active, and the writes that needed the room fail with
			// the errno (not acknowledged); the next write that needs
			// room tries again, and succeeds once the resource is back.
			db.mu.Lock()
			db.retryFailedLocked(&db.walRetry, err)
			err = db.walRetry.err // with fileLimitHint's count
			db.mu.Unlock()
			return nil, fmt.Errorf("rotate the WAL: %w", err)
		}
		if err != nil {
			// The old WAL stays the active one, unsealed: the DB is
			// read-only from here, and Close syncs and seals it.
			db.fail(err)
			return nil, fmt.Errorf("%w: %w", ErrReadOnly, err)
		}
	}
	f := &frozen{mem: db.mem, logNum: oldNum, done: make(chan struct{}), sealed: make(chan struct{})}
	job := sealJob{w: old, f: f, next: logw}
	if db.bootID == ([16]byte{}) {
		// Without a boot ID recovery cannot tell a process crash, after
		// which the page cache held all of the old WAL, from a power cut,
		// which may have lost its tail: it stops at an unsealed WAL that
		// has a successor (mayHaveLostTail), and a crash of the process
		// would lose every write acknowledged in the new WAL. So the old
		// WAL is sealed here, before the new one takes a write: an fsync
		// per rotation in the writers' path, where the boot is unknown.
		if err := db.sealNow(old); err != nil {
			// The DB is read-only now, and the old WAL stays the active
			// one, as when the new WAL cannot be made; the new one,
			// never written, is closed rather than left open.
			logw.Close()
			return nil, err
		}
		if err := db.markPrevSealed(logw); err != nil {
			logw.Close()
			return nil, err
		}
		job.sealed = true
	}
	// Queued before the swap publishes the new WAL, and so before any
	// group is written to it.
	db.commit.queueSeal(db, job)
	db.mu.Lock()
	f.maxSeq = db.lastSeq
	db.imm = append(db.imm, f)
	db.mem = memtable.New(db.opts.MemtableSize)
	db.logw, db.logNum = logw, num
	db.publishLocked()
	db.scheduleFlushLocked()
	db.retrySucceededLocked(&db.walRetry)
	db.startSpareLocked()
	db.mu.Unlock()
	return f, nil
}

// A sealJob is a WAL a rotation replaced, for sealLoop.
type sealJob struct {
	w    *wal.Writer
	next *wal.Writer // the WAL that replaced w, which gets the mark that proves w's seal
	f    *frozen     // the memtable it holds (f.logNum names w); f.sealed is closed once w is closed
	// sealed says the rotation sealed w already (sealNow): sealLoop only
	// closes it.
	sealed bool
}

// sealNow seals w, the active WAL that a rotation is about to replace,
// as the holder of the sync role: it fsyncs w (publishing the groups that
// covers), then appends the seal mark and fsyncs again, as endWAL does
// for sealLoop. Only the commit leader calls it (rotate), so no group is
// being written meanwhile. A failure fails the groups still queued and
// makes the DB read-only, as a failed seal in endWAL does.
func (db *DB) sealNow(w *wal.Writer) error {
	q := &db.commit
	q.acquireSync()
	err := q.syncHeld(db, w)
	if err == nil {
		if err = w.Seal(); err != nil {
			err = fmt.Errorf("seal WAL: %w", err)
			db.fail(err)
			q.failQueued(fmt.Errorf("%w: %w", ErrReadOnly, err))
		}
	}
	q.releaseSync(db)
	if err != nil && !errors.Is(err, ErrReadOnly) {
		err = fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	return err
}

// markPrevSealed writes, in next, the WAL after one whose seal has just
// been made durable, the mark that proves that seal (wal.Writer.
// MarkPrevSealed), as the holder of the sync role, or as the rotation's
// leader before next is in use: before any fsync of next, so the first
// fsync that acknowledges writes in it makes the proof
// durable with them. Without it, writes acknowledged by that first fsync,
// with nothing written or sealed after them, would carry no proof, and
// damage to the older seal would drop them after a power cut as the torn
// tail of an unsealed WAL. Every older WAL is sealed or obsolete by then:
// seals run oldest first, and a WAL is dropped only once its memtable,
// and every older one, is flushed. A failure fails the groups queued and
// makes the DB read-only, as a failed seal does.
func (db *DB) markPrevSealed(next *wal.Writer) error {
	err := next.MarkPrevSealed()
	if err != nil {
		err = fmt.Errorf("mark WAL: %w", err)
		db.fail(err)
		db.commit.failQueued(fmt.Errorf("%w: %w", ErrReadOnly, err))
		err = fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	return err
}

// queueSeal queues job for sealLoop, starting it if it is not running.
func (q *commitQueue) queueSeal(db *DB, job sealJob) {
	q.pmu.Lock()
	q.seals = append(q.seals, job)
	start := !q.sealer
	q.sealer = true
	q.pmu.Unlock()
	if start {
		db.bgWG.Add(1)
		go db.sealLoop()
	}
}

// sealLoop ends the queued WALs, oldest first, each as the holder of the
// sync role, in one of two ways:
//
//   - Dropped: once the flush of its memtable is committed (f.durable) and
//     no group waits for its fsync, the WAL is obsolete. It is closed
//     without an fsync and removed by the flush, so that a store whose
//     writes are not synced never writes its WALs to the device at all
//     (the kernel writes dirty pages back after 30 s; a memtable is
//     flushed in well under one) and spends no fsync on them: 7 to 13%
//     of the CPU of a fill on two cores.
//   - Sealed: when a goroutine needs the sync role first (a synced write
//     in a newer WAL, DB.Sync, Close, Checkpoint: sealWanted), it is
//     fsynced, which publishes the groups that fsync covers, then gets the
//     seal mark, a second fsync and is closed, so that the next fsync (of
//     a newer WAL) follows the seal.
//
// A job leaves the queue only once done, so the role goes to no other
// goroutine before the last one (takeSyncLocked, acquireSync). Until a
// reason comes, sealLoop waits without the role. A failed fsync or seal
// makes the DB read-only; the later WALs are still closed and their jobs
// done.
func (db *DB) sealLoop() {
	defer db.bgWG.Done()
	q := &db.commit
	for {
		q.pmu.Lock()
		for len(q.seals) > 0 && !q.sealWanted && !q.seals[0].f.durable.Load() {
			q.pidle.Wait()
		}
		if len(q.seals) == 0 {
			q.sealer = false
			q.pmu.Unlock()
			return
		}
		for q.syncing {
			q.pidle.Wait()
		}
		q.syncing = true
		q.pmu.Unlock()
		// The role is kept from one job to the next, so that it goes to
		// no other goroutine between them.
		for more := true; more; {
			q.pmu.Lock()
			job := q.seals[0]
			drop := job.sealed || job.f.durable.Load() && !q.usesLocked(job.w)
			q.pmu.Unlock()
			db.endWAL(job, !drop)
			q.pmu.Lock()
			q.seals[0] = sealJob{}
			q.seals = q.seals[1:]
			if len(q.seals) == 0 {
				q.sealWanted = false
			}
			more = len(q.seals) > 0 && (q.sealWanted || q.seals[0].f.durable.Load())
			q.pmu.Unlock()
		}
		q.releaseSync(db)
	}
}

// wantSealsLocked asks sealLoop to seal the queued WALs now. q.pmu is
// held.
func (q *commitQueue) wantSealsLocked() {
	if !q.sealWanted {
		q.sealWanted = true
		q.pidle.Broadcast()
	}
}

// sealerWake wakes sealLoop after a flush made a queued WAL obsolete.
func (q *commitQueue) sealerWake() {
	q.pmu.Lock()
	q.pidle.Broadcast()
	q.pmu.Unlock()
}

// usesLocked reports whether a group waiting for an fsync was written to
// w. q.pmu is held.
func (q *commitQueue) usesLocked(w *wal.Writer) bool {
	for _, g := range q.queue {
		if g.logw == w {
			return true
		}
	}
	return false
}

// endWAL closes job's WAL, as the holder of the sync role, and closes
// job.f.sealed. With seal it first fsyncs it (publishing the groups that
// fsync covers), appends the seal mark and fsyncs again, then leaves the
// mark that proves the seal in the next WAL (markPrevSealed); without,
// the WAL is obsolete and closed unsynced, for the flush to remove.
func (db *DB) endWAL(job sealJob, seal bool) {
	var err error
	if seal {
		if err = db.commit.syncHeld(db, job.w); err == nil {
			if err = job.w.Seal(); err != nil {
				// The groups queued in later WALs must not be
				// acknowledged as synced now: recovery after a power
				// loss stops at this WAL, marked and unsealed, and
				// replays none of them. They fail as after a failed
				// fsync.
				err = fmt.Errorf("seal WAL: %w", err)
				db.fail(err)
				db.commit.failQueued(fmt.Errorf("%w: %w", ErrReadOnly, err))
			} else {
				err = db.markPrevSealed(job.next)
			}
		}
	}
	if cerr := job.w.Close(); cerr != nil && err == nil {
		db.logger.Warn("closing WAL", "num", job.f.logNum, "err", cerr)
	}
	close(job.f.sealed)
}

// spareWALs is how many WALs are made ahead of the rotations that start
// them. One was not enough: beside a merge's writes a creation (two
// fsyncs) took up to 14 ms more than a memtable took to fill, and the
// rotation waited for it.
const spareWALs = 2

// A spareWAL is a WAL made ahead for a rotation (makeSpare).
type spareWAL struct {
	w   *wal.Writer
	num uint64
}

// startSpareLocked starts makeSpare in a goroutine unless spareWALs are
// ready or one is on its way. db.mu is held.
func (db *DB) startSpareLocked() {
	if len(db.spares) >= spareWALs || db.spareMade != nil || db.closed || db.bgErr != nil {
		return
	}
	db.spareMade = make(chan struct{})
	db.bgWG.Add(1)
	go func() {
		defer db.bgWG.Done()
		db.makeSpare()
	}()
}

// makeSpare creates a WAL for a later rotation, closes and clears
// db.spareMade, and starts the next one if fewer than spareWALs are
// ready. A failure makes
// the DB read-only, as it would in the rotation. One makeSpare runs at a
// time, and a rotation that finds no spare waits for it rather than
// create a WAL beside it, so the spares' numbers are above the active
// WAL's and rise in the order they are started, as the order of the
// writes wants (recovery replays WALs in the order of their numbers).
func (db *DB) makeSpare() {
	num, err := db.manifest.NewFileNum()
	var w *wal.Writer
	if err == nil {
		w, err = db.createWAL(num, false)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	close(db.spareMade)
	db.spareMade = nil
	if isRetryable(err) {
		// Out of a resource, before anything was synced that matters:
		// no spare then. The next rotation creates its WAL itself, and
		// starts makeSpare again once it has.
		db.retryFailedLocked(&db.walRetry, err)
		return
	}
	if err != nil {
		// The same failure as a rotation's own creation of the WAL, which
		// makes the DB read-only: the file system that holds the WALs
		// failed a creation or an fsync.
		db.failLocked(fmt.Errorf("create the next WAL: %w", err))
		return
	}
	db.retrySucceededLocked(&db.walRetry)
	if num > db.logNum && !db.closed && db.bgErr == nil {
		db.spares = append(db.spares, spareWAL{w, num})
		db.startSpareLocked()
		return
	}
	w.Close()
	db.removeFile(base.WALFileName(num))
}

// dropSpareLocked closes and removes the spare WALs: Close does, once no
// makeSpare runs. They hold no write: a crash that leaves them behind
// leaves empty logs, which the next Open replays and removes.
func (db *DB) dropSpareLocked() {
	for _, s := range db.spares {
		if err := s.w.Close(); err != nil {
			db.logger.Warn("closing a spare WAL", "num", s.num, "err", err)
		}
		db.removeFile(base.WALFileName(s.num))
	}
	db.spares = nil
}

// createWAL creates WAL file num, begins it with a mark (wal.Mark: this
// boot, and whether the previous WAL was synced to its end), and syncs the
// file and the directory, so that the new file's name and first mark
// survive power loss: a manifest commit may name it as the log number, and
// Open refuses a store whose log number names a missing WAL. A failed
// create leaves no file behind.
//
// A failure that ran out of a resource while the file was created,
// begun or synced is marked retryable (retry.go), as writeSegment's are:
// nothing was ever written to the file, and a failed fsync of it drops
// only its own pages. A failed sync of the directory is not (it covers
// other files' entries), unless the directory could not be opened for
// want of descriptors, when nothing was synced.
func (db *DB) createWAL(num uint64, prevSynced bool) (*wal.Writer, error) {
	name := base.WALFileName(num)
	f, err := db.fs.Create(db.path(name))
	if err != nil {
		return nil, markRetryable(fmt.Errorf("create WAL: %w", err))
	}
	discard := func(err error) error {
		f.Close()
		db.removeFile(name)
		return fmt.Errorf("create WAL %s: %w", name, err)
	}
	w, err := wal.NewMarkedWriter(f, name, wal.Mark{BootID: db.bootID, PrevSynced: prevSynced})
	if err == nil {
		err = w.Sync()
	}
	if err != nil {
		return nil, markRetryable(discard(err))
	}
	if err := db.fs.SyncDir(db.dir); err != nil {
		return nil, markDirSyncRetryable(discard(err))
	}
	db.mapWAL(f, w)
	return w, nil
}

// Sync makes every write acknowledged before the call durable: it survives
// power loss when Sync returns. It costs one fsync of the WAL, taken while
// no group is being written; writes made with Options.Sync are durable
// already. A failed fsync makes the DB read-only, as a failed WAL write
// does.
func (db *DB) Sync() error {
	var err error
	db.commit.exclusive(db, func() {
		// As the commit leader this goroutine owns the WAL: no group is
		// written and no rotation runs meanwhile, and db.mu need not be
		// held across the fsync.
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
		db.commit.acquireSync()
		err = db.commit.syncHeld(db, logw)
		db.commit.releaseSync(db)
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
		db.bgErr = fileLimitHint(err, len(db.segments))
		db.logger.Error("bloomkv is now read-only", "err", db.bgErr)
	}
	db.cond.Broadcast()
}
