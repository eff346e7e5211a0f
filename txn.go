package bloomkv

import (
	"bytes"
	"container/list"
	"errors"
	"slices"
)

// Errors of transactions.
var (
	// ErrConflict is returned by Txn.Commit (and Update, and
	// CompareAndSet once its retries are spent) when a key the
	// transaction read, or a key in a range its iterators traversed, was
	// written by another commit after the transaction began. Nothing of
	// the transaction was written; run it again from the start.
	ErrConflict = errors.New("bloomkv: transaction conflict")
	// ErrTxnDiscarded is returned by every use of a transaction after
	// Commit or Discard.
	ErrTxnDiscarded = errors.New("bloomkv: transaction discarded")
	// ErrTxnReadOnly is returned by writes to a read-only transaction
	// (NewTransaction(false), View).
	ErrTxnReadOnly = errors.New("bloomkv: write in a read-only transaction")
)

// A Txn is an optimistic transaction: its reads see a snapshot of the DB
// taken when it began, plus its own writes; its writes are buffered in
// memory and applied atomically, as one Batch, by Commit.
//
// # Isolation
//
// Read-write transactions are serializable (strictly: in commit order).
// Commit succeeds only if nothing the transaction read has changed since
// it began: no commit after its snapshot — of another transaction, or a
// plain Put, Delete, DeleteRange or Write — wrote a key it read with Get
// or Has (found or not), or any key in a range one of its iterators
// traversed (from where it was positioned to where it stopped, or to its
// bound if it ran off the end). Otherwise Commit writes nothing and
// returns an error matching ErrConflict. So every committed transaction
// that writes behaves as if it ran alone at the moment of its commit:
// write skew, lost updates and phantoms are refused. One that writes
// nothing (or only empty range deletions) commits without a check: it is
// serializable at its snapshot, not at its commit. To learn at commit
// that what it read still holds, a transaction writes something, such as
// a key it read, back.
//
// Not conflicts: writes to keys the transaction only wrote (blind writes:
// the later commit wins), reads of its own writes, and reads in a range it
// deleted itself. Plain writes never fail because of a transaction: they
// do not read.
//
// The check is conservative: a commit in a traversed range conflicts even
// where the transaction's own writes hid that key from it, and so does a
// transaction that began before the DB's record of writes reached its
// limit (64 MiB of memory for the keys written while it was open),
// because it can no longer be checked. A conflict is always safe to
// retry.
//
// Read-only transactions (NewTransaction(false), View) read a consistent
// snapshot and never conflict; they are Snapshots with the Txn API.
//
// # Use
//
// A Txn is not safe for concurrent use. Discard it when done (a deferred
// Discard after Commit does nothing): an open transaction pins the
// versions of its snapshot, as a Snapshot does, and a read-write one keeps
// the DB recording the keys written since it began. Update and View do
// all of this; Update retries conflicts if asked (UpdateWith).
type Txn struct {
	db     *DB
	update bool
	snap   *Snapshot
	elem   *list.Element // in db.txns.open; read-write only
	err    error         // why it could not begin (ErrClosed)
	done   bool          // committed or discarded

	// pending is the write set: for each key written, its last write,
	// unless a DeleteRange of the transaction made after it deleted it
	// (dels.deletes), which leaves it here and hides it. Entries are never
	// changed, only replaced, so that an iterator may keep the runs it
	// was made with.
	pending map[string]*pendingWrite
	writes  uint64 // the transaction's writes so far, DeleteRange included: the next one's order
	// runs and tail are the pending writes as iterators need them, by
	// key (sortedRuns): runs as of the last iterator made, tail the
	// writes since (a key's latest only: a write replaces its key's
	// earlier one in place, setPending), and cut the ranges deleted
	// since.
	runs [][]*pendingWrite
	tail []*pendingWrite
	cut  []keySpan
	// live is the memory of the writes in pending; stale that of the
	// writes in runs that a later write of their key replaced, which runs
	// keep until a merge drops them (sortedRuns).
	live, stale int
	// dels is the union of the transaction's range deletions; replaced,
	// never changed, as runs.
	dels txnDels

	// reads is the read set of Gets and closed iterators; iters the open
	// iterators, whose spans Commit adds to it.
	reads readSpans
	iters []*TxnIterator
}

// pendingWrite is a transaction's last write of key: a value, or a delete.
type pendingWrite struct {
	key, value []byte
	del        bool
	order      uint64 // the write's place among the transaction's writes (Txn.writes)
	inRun      bool   // in one of Txn.runs
	tailAt     int    // its index in Txn.tail, if it is there
}

// size approximates the memory a pending write holds.
func (w *pendingWrite) size() int { return 64 + len(w.key) + len(w.value) }

// NewTransaction begins a transaction: read-write if update, else
// read-only. Its reads see the DB as of now, plus its own writes. It
// never fails: on a closed DB, every method of the Txn returns ErrClosed.
// Discard it when done.
func (db *DB) NewTransaction(update bool) *Txn {
	t := &Txn{db: db, update: update}
	if !update {
		t.snap, t.err = db.NewSnapshot()
		return t
	}
	ts := &db.txns
	ts.mu.Lock()
	defer ts.mu.Unlock()
	// Counted before the snapshot loads its sequence number: see
	// txnState.active for why the order matters.
	ts.active.Add(1)
	t.snap, t.err = db.NewSnapshot()
	if t.err != nil {
		ts.active.Add(-1)
		return t
	}
	t.elem = ts.open.PushBack(t.snap.seq)
	t.pending = map[string]*pendingWrite{}
	return t
}

// usable returns why t may not be used, if it may not. A transaction
// begun before its DB was closed is refused too: its writes could only
// fail at Commit, and a read of its own pending writes would answer from
// a store that no longer exists.
func (t *Txn) usable() error {
	switch {
	case t.done:
		return ErrTxnDiscarded
	case t.err != nil:
		return t.err
	case t.db.isClosed.Load():
		return ErrClosed
	}
	return nil
}

func (t *Txn) writable() error {
	if err := t.usable(); err != nil {
		return err
	}
	if !t.update {
		return ErrTxnReadOnly
	}
	return nil
}

// Get returns the value of key: the transaction's own last write of it if
// it wrote it, else its value in the snapshot. Absent keys give an error
// matching ErrNotFound. The returned slice is the caller's. In a
// read-write transaction, a read of the snapshot joins the read set.
func (t *Txn) Get(key []byte) ([]byte, error) {
	v, err := t.get(key)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(v), nil
}

// get is Get without the copy of a pending value (snapshot values are
// copies already).
func (t *Txn) get(key []byte) ([]byte, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if err := checkEntry(key, nil); err != nil {
		return nil, err
	}
	if t.update {
		if w, ok := t.pending[string(key)]; ok && !t.dels.deletes(key, w.order) {
			if w.del {
				return nil, ErrNotFound
			}
			return w.value, nil
		}
		if t.dels.covering(key) != nil {
			return nil, ErrNotFound // deleted by this transaction, whatever others wrote
		}
		t.reads.add(pointSpan(key))
	}
	return t.snap.Get(key)
}

// Has reports whether key has a value, as Get would find it.
func (t *Txn) Has(key []byte) (bool, error) {
	_, err := t.get(key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// readSpans is a read set: the spans read, in the order read, merged
// (mergeSpans) each time their number has doubled since the last merge,
// so that it holds about as many spans as the reads cover disjoint ranges
// of keys, not one per read, for O(log n) amortized a read. A transaction
// that read one key 10^6 times held 10^6 copies of it, 78 MB, and its
// commit sorted them all.
type readSpans struct {
	spans  []keySpan
	merged int // len(spans) after the last merge
}

// minReadSpans is how many spans a read set holds before its first merge.
const minReadSpans = 64

// add appends spans to the set.
func (r *readSpans) add(spans ...keySpan) {
	r.spans = append(r.spans, spans...)
	if n := len(r.spans); n >= max(2*r.merged, minReadSpans) {
		r.spans = mergeSpans(r.spans)
		clear(r.spans[len(r.spans):n]) // the merged-away spans' keys
		r.merged = len(r.spans)
	}
}

// pointSpan is the read span of one key, [key, key+"\x00"), in one
// allocation.
func pointSpan(key []byte) keySpan {
	buf := make([]byte, len(key)+1)
	copy(buf, key)
	return keySpan{start: buf[:len(key):len(key)], end: buf}
}

// Put sets key to value when the transaction commits. Both are copied.
func (t *Txn) Put(key, value []byte) error {
	if err := t.writable(); err != nil {
		return err
	}
	if err := checkEntry(key, value); err != nil {
		return err
	}
	t.setPending(&pendingWrite{key: bytes.Clone(key), value: append([]byte{}, value...)})
	return nil
}

// Delete removes key when the transaction commits. Deleting a key that
// does not exist is not an error.
func (t *Txn) Delete(key []byte) error {
	if err := t.writable(); err != nil {
		return err
	}
	if err := checkEntry(key, nil); err != nil {
		return err
	}
	t.setPending(&pendingWrite{key: bytes.Clone(key), del: true})
	return nil
}

func (t *Txn) setPending(w *pendingWrite) {
	t.writes++
	w.order = t.writes
	w.tailAt = -1
	if old, ok := t.pending[string(w.key)]; ok {
		t.live -= old.size()
		if old.inRun {
			t.stale += old.size()
		}
		if i := old.tailAt; i >= 0 && i < len(t.tail) && t.tail[i] == old {
			// Replaced in place: the tail is sorted by key when it
			// becomes a run, so its order does not matter, and a
			// transaction that writes one key n times without making an
			// iterator held all n values (10^5 Puts of one 1 KiB value:
			// 114 MB).
			t.tail[i], w.tailAt = w, i
		}
	}
	t.pending[string(w.key)] = w
	t.live += w.size()
	if w.tailAt < 0 {
		w.tailAt = len(t.tail)
		t.tail = append(t.tail, w)
	}
}

// DeleteRange deletes every key in [start, end) when the transaction
// commits: those in the DB then and those the transaction wrote before,
// not those it writes after. An empty start means "from the first key";
// start >= end deletes nothing. As DB.DeleteRange, it is one range
// tombstone however many keys the range holds; it reads nothing, so it
// adds nothing to the read set.
func (t *Txn) DeleteRange(start, end []byte) error {
	if err := t.writable(); err != nil {
		return err
	}
	if err := checkRange(start, end); err != nil {
		return err
	}
	if bytes.Compare(start, end) >= 0 {
		return nil
	}
	r := keySpan{start: append([]byte{}, start...), end: bytes.Clone(end)}
	// A new value: iterators keep the one they were made with. The
	// pending writes it deletes stay in t.pending, hidden (dels.deletes).
	t.writes++
	t.dels = t.dels.add(r, t.writes)
	if len(t.runs) > 0 {
		t.cut = append(t.cut, r)
	}
	return nil
}

// sortedPending returns the pending writes not deleted, by key: the
// batch Commit writes.
func (t *Txn) sortedPending() []*pendingWrite {
	s := make([]*pendingWrite, 0, len(t.pending))
	for _, w := range t.pending {
		if !t.dels.deletes(w.key, w.order) {
			s = append(s, w)
		}
	}
	slices.SortFunc(s, comparePendingWrites)
	return s
}

func comparePendingWrites(a, b *pendingWrite) int { return bytes.Compare(a.key, b.key) }

// sortedRuns returns the pending writes as an iterator sees them: a few
// runs, each sorted by key with one write per key, where the newest
// write of a key that several runs hold is its pending write (older
// ones are stale, and hidden by it). No write of the runs is deleted by
// a DeleteRange: the runs are cut where one deleted since they were
// made (cutRuns). Neither the runs nor the slice of them change
// afterwards: an iterator keeps them.
//
// The writes since the last call are sorted into a new run, and the
// newest runs merged while a run holds at least half the writes of the
// one before it, so that runs grow geometrically (about log₂ n of them)
// and each write is copied O(log n) times, amortized, as a memtable's
// range tombstones are. Sorting every pending write again for each
// iterator made a scan after each write O(n log n): 140 ms an iterator at
// 10^5 pending writes. A merge keeps only writes still pending and not
// deleted; once the stale writes hold more memory than the pending ones,
// all runs are merged, so that runs never hold much more than the write
// set does.
func (t *Txn) sortedRuns() [][]*pendingWrite {
	if len(t.tail) == 0 && len(t.cut) == 0 && t.stale <= t.live {
		return t.runs
	}
	run := t.keep(nil, t.tail)
	t.tail = nil
	slices.SortFunc(run, comparePendingWrites)
	runs := make([][]*pendingWrite, len(t.runs), len(t.runs)+1)
	copy(runs, t.runs)
	if len(t.cut) > 0 {
		cutRuns(runs, mergeSpans(t.cut))
		t.cut = nil
	}
	if len(run) > 0 {
		for _, w := range run {
			w.inRun = true
		}
		runs = append(runs, run)
	}
	all := t.stale > t.live
	for n := len(runs); n >= 2 && (all || 2*len(runs[n-1]) >= len(runs[n-2])); n-- {
		runs = append(runs[:n-2], t.mergeRuns(runs[n-2], runs[n-1]))
	}
	if all {
		if len(runs) == 1 {
			runs[0] = t.keep(nil, runs[0]) // a merge with no run
		}
		t.stale = 0
	}
	t.runs = slices.DeleteFunc(runs, func(r []*pendingWrite) bool { return len(r) == 0 }) // cut to nothing
	return t.runs
}

// cutRuns replaces each run of runs that holds a write in cut (sorted,
// disjoint spans: mergeSpans) by a copy without those writes. The spans
// were deleted after every write of the runs was made, so the writes in
// them are exactly those of the runs a DeleteRange deleted since. A run
// cut meets no span is kept as it is: a DeleteRange costs the binary
// searches of its span and the copy of the runs it deleted writes of.
func cutRuns(runs [][]*pendingWrite, cut []keySpan) {
	for i, run := range runs {
		var out []*pendingWrite
		from := 0 // the first write of run not yet copied or cut
		for _, s := range cut {
			lo, _ := slices.BinarySearchFunc(run, s.start, comparePending)
			lo = max(lo, from)
			hi := len(run)
			if s.end != nil {
				hi, _ = slices.BinarySearchFunc(run, s.end, comparePending)
			}
			if lo >= hi {
				continue
			}
			if out == nil {
				out = make([]*pendingWrite, 0, len(run)-(hi-lo))
			}
			out = append(out, run[from:lo]...)
			from = hi
		}
		if out != nil {
			runs[i] = append(out, run[from:]...)
		}
	}
}

// keep appends to dst the writes of ws that are still pending and not
// deleted.
func (t *Txn) keep(dst, ws []*pendingWrite) []*pendingWrite {
	for _, w := range ws {
		if t.pending[string(w.key)] == w && !t.dels.deletes(w.key, w.order) {
			dst = append(dst, w)
		}
	}
	return dst
}

// mergeRuns merges two sorted runs into a new one, keeping the writes
// still pending and not deleted: a key's pending write is in one run at
// most, so the result holds a key once.
func (t *Txn) mergeRuns(a, b []*pendingWrite) []*pendingWrite {
	out := make([]*pendingWrite, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if bytes.Compare(a[0].key, b[0].key) <= 0 {
			out, a = t.keep(out, a[:1]), a[1:]
		} else {
			out, b = t.keep(out, b[:1]), b[1:]
		}
	}
	out = t.keep(out, a)
	return t.keep(out, b)
}

// Commit applies the transaction's writes atomically, as one Batch (so
// durable as Options.Sync says), if none of its reads has changed since
// it began; otherwise it writes nothing and returns an error matching
// ErrConflict (see Txn for exactly what conflicts). A transaction that
// wrote nothing commits at once, with no check: its reads were one
// snapshot. A batch that would exceed MaxBatchSize fails with
// ErrBatchTooLarge. Commit ends the transaction, whatever it returns;
// its iterators stay usable until closed.
func (t *Txn) Commit() error { return t.commit(false) }

// testHookPrevalidated, if set (by tests), runs in a commit between the
// check outside commit leadership and the submission to the leader.
var testHookPrevalidated func()

func (t *Txn) commit(sync bool) error {
	if t.done {
		return ErrTxnDiscarded
	}
	defer t.Discard() // whatever Commit returns, as documented
	if err := t.usable(); err != nil {
		return err
	}
	if !t.update || len(t.pending) == 0 && t.dels.empty() {
		return nil
	}
	b := NewBatch()
	// The range deletions first: every pending write postdates the
	// deletions covering its key (DeleteRange drops the writes before
	// it), so it must survive them.
	for _, r := range t.dels.merged() {
		b.DeleteRange(r.start, r.end)
	}
	for _, w := range t.sortedPending() {
		if w.del {
			b.Delete(w.key)
		} else {
			b.Put(w.key, w.value)
		}
	}
	if b.err != nil {
		return b.err // ErrBatchTooLarge; the entries were checked when added
	}
	for _, it := range t.iters {
		it.addSpansTo(&t.reads)
	}
	check := &txnCheck{readSeq: t.snap.seq, reads: mergeSpans(t.reads.spans)}
	if err := t.db.txns.prevalidate(check); err != nil {
		return err
	}
	if testHookPrevalidated != nil {
		testHookPrevalidated()
	}
	return t.db.commit.submitChecked(t.db, b, sync, check)
}

// Discard ends the transaction without writing anything, releasing its
// snapshot. Discarding after Commit or Discard does nothing, so it may be
// deferred. Iterators of the transaction stay usable until closed.
func (t *Txn) Discard() {
	if t.done {
		return
	}
	t.done = true
	if t.err != nil {
		return
	}
	t.snap.Close()
	if t.elem != nil {
		ts := &t.db.txns
		ts.mu.Lock()
		ts.open.Remove(t.elem)
		ts.active.Add(-1)
		ts.trimLocked()
		ts.mu.Unlock()
	}
	t.pending, t.runs, t.tail, t.dels, t.reads, t.iters = nil, nil, nil, txnDels{}, readSpans{}, nil
}

// View runs fn in a read-only transaction: every read in it sees one
// snapshot of the DB. It returns fn's error.
func (db *DB) View(fn func(*Txn) error) error {
	t := db.NewTransaction(false)
	defer t.Discard()
	if err := t.usable(); err != nil {
		return err
	}
	return fn(t)
}

// Update runs fn in a read-write transaction and commits it if fn returns
// nil (fn's error otherwise, with nothing written). A conflict is returned
// as an error matching ErrConflict; UpdateWith can retry it.
func (db *DB) Update(fn func(*Txn) error) error { return db.UpdateWith(nil, fn) }

// UpdateOptions tune UpdateWith. The zero value (or nil) is Update.
type UpdateOptions struct {
	// Retries is how many more times to run fn, in a new transaction
	// each time, while its commit fails with ErrConflict. A conflict means
	// another commit changed what fn read, so a retry sees new data. fn
	// must be safe to run again: no effects outside the transaction, or
	// none that matter twice.
	Retries int
	// Sync makes the commit durable against power loss before it
	// returns, as DB.WriteSync, whatever Options.Sync says.
	Sync bool
}

// UpdateWith is Update with options: retries of conflicts, a synced
// commit. It returns fn's error (never retried), the commit's, or the
// last conflict once the retries are spent.
func (db *DB) UpdateWith(o *UpdateOptions, fn func(*Txn) error) error {
	if o == nil {
		o = &UpdateOptions{}
	}
	for attempt := 0; ; attempt++ {
		err, committed := db.updateOnce(o.Sync, fn)
		if !committed || !errors.Is(err, ErrConflict) || attempt >= o.Retries {
			return err
		}
	}
}

// updateOnce runs fn once and commits; committed says whether err (if any)
// is the commit's rather than fn's.
func (db *DB) updateOnce(sync bool, fn func(*Txn) error) (err error, committed bool) {
	t := db.NewTransaction(true)
	defer t.Discard() // also when fn panics
	if err := t.usable(); err != nil {
		return err, false
	}
	if err := fn(t); err != nil {
		return err, false
	}
	return t.commit(sync), true
}

// casRetries bounds CompareAndSet's retries of conflicts. Each conflict
// means another commit wrote the key meanwhile, so running out of them
// takes a thousand writes of one key while the compare was in flight.
const casRetries = 1000

// CompareAndSet sets key to new if its value is old, atomically, and
// reports whether it did. A nil old means "key must be absent" (an empty
// non-nil old matches an empty value); a nil new deletes the key (use an
// empty non-nil new to store an empty value). A false result with a nil
// error means the value was not old when the comparison ran. It is a
// read-write transaction (a Get, then a Put or Delete) retried on
// conflict, so it is linearizable with every other write and transaction.
func (db *DB) CompareAndSet(key, old, new []byte) (bool, error) {
	var swapped bool
	err := db.UpdateWith(&UpdateOptions{Retries: casRetries}, func(t *Txn) error {
		swapped = false
		v, err := t.Get(key)
		switch {
		case errors.Is(err, ErrNotFound):
			if old != nil {
				return nil
			}
		case err != nil:
			return err
		case old == nil || !bytes.Equal(v, old):
			return nil
		}
		swapped = true
		if new == nil {
			return t.Delete(key)
		}
		return t.Put(key, new)
	})
	if err != nil {
		return false, err
	}
	return swapped, nil
}
