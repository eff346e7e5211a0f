package metamorphic

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// kv is a key and its value as printed (describe).
type kv struct{ key, val string }

// model is what a store must answer: a map from key to value, the maps of
// the open snapshots, the transactions, and the open iterators, each over a
// sorted copy of the keys in its range when it was made (an iterator sees
// the writes before its creation only).
type model struct {
	state map[string]string
	snaps map[int]map[string]string
	iters map[int]*modelIter
	txns  map[int]*modelTxn // open and ended (until a reopen), to answer uses after the end

	// written is what each write since the oldest open read-write
	// transaction began wrote, in commit order: a point key as the span
	// [key, key+"\x00"), a range deletion as its range. A transaction's
	// commit conflicts if one of these, from its own beginning on, meets
	// its read set. Empty while no read-write transaction is open.
	written []span
	open    int // read-write transactions open
}

type modelIter struct {
	src map[string]string // what the iterator reads, for SetBounds; never changed
	kvs []kv
	pos int // -1: not positioned

	// A read-write transaction's iterator adds what it traverses to the
	// transaction's read set: for each positioning call, the span from
	// its target through every key it stopped at, to its bound if it ran
	// off the end (TxnIterator's doc).
	txn          *modelTxn
	lower, upper []byte // the bounds in force, nil: none
	inSpan       bool
	lo, hi       string // the span so far, [lo, hi); hi unbounded if hiInf
	loSet, hiSet bool
	hiInf        bool
}

// modelTxn is a transaction: its view (the snapshot it began with, its
// own writes applied in order), its writes, and, read-write, its read set
// and where in model.written its conflicts start.
type modelTxn struct {
	update bool
	done   bool // committed or discarded
	view   map[string]string
	writes []op   // put, delete, and the delete-ranges that delete a range
	reads  []span // point reads and the iterators' finished spans
	since  int    // len(model.written) when it began
}

// span is a key range [start, end), unbounded above if inf.
type span struct {
	start, end string
	inf        bool
}

func (a span) meets(b span) bool {
	return (a.inf || b.start < a.end) && (b.inf || a.start < b.end)
}

func newModel() *model {
	return &model{state: map[string]string{}, snaps: map[int]map[string]string{}, iters: map[int]*modelIter{}, txns: map[int]*modelTxn{}}
}

// Results shared by the model and the runner.
const (
	resOK       = "ok"
	resNotFound = "not-found"
	resInvalid  = "invalid"
	resNoSnap   = "no-such-snapshot"
	resNoIter   = "no-such-iterator"
	resNoTxn    = "no-such-txn"
	// The transaction errors, as errString prints them.
	resConflict     = "err-conflict"
	resTxnDiscarded = "err-txn-discarded"
	resTxnReadOnly  = "err-txn-read-only"
	// A closure's own error (errAbort), returned unchanged.
	resAborted = "aborted"
	// An interfere op of a closure's body in a run other than its own.
	resNotRun = "not-run"
)

func posResult(key, val string) string { return strconv.Quote(key) + " " + val }

// digest is how a whole scan prints: its count and one hash of every key
// and value in order.
func digest(kvs []kv) string {
	h := fnv.New64a()
	for _, e := range kvs {
		fmt.Fprintf(h, "%q=%s\n", e.key, e.val)
	}
	return fmt.Sprintf("%d keys %016x", len(kvs), h.Sum64())
}

// sortedRange returns the entries of m within the iterator bounds of o.
func sortedRange(m map[string]string, o op) []kv {
	var out []kv
	for k, v := range m {
		if inRange(k, o) {
			out = append(out, kv{k, v})
		}
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	return out
}

func inRange(k string, o op) bool {
	return (o.lower == nil || k >= string(o.lower)) &&
		(o.upper == nil || k < string(o.upper)) &&
		(o.prefix == nil || strings.HasPrefix(k, string(o.prefix)))
}

// write applies a committed write (a plain one, a batch's, a
// transaction's) and records what it wrote for the open transactions'
// conflict checks.
func (m *model) write(o op) {
	applyWrite(m.state, o)
	if m.open == 0 {
		return
	}
	switch {
	case o.kind != opDeleteRange && o.kind != opTxnDeleteRange:
		m.written = append(m.written, pointSpan(string(o.key)))
	case string(o.key) < string(o.end): // a range that deletes nothing writes nothing
		m.written = append(m.written, span{start: string(o.key), end: string(o.end)})
	}
}

func applyWrite(state map[string]string, o op) {
	switch o.kind {
	case opPut, opTxnPut:
		state[string(o.key)] = describe(o.val.bytes())
	case opDelete, opTxnDelete:
		delete(state, string(o.key))
	case opDeleteRange, opTxnDeleteRange:
		for k := range state {
			if k >= string(o.key) && k < string(o.end) {
				delete(state, k)
			}
		}
	}
}

func pointSpan(k string) span { return span{start: k, end: k + "\x00"} }

func lookup(m map[string]string, k []byte) string {
	if v, ok := m[string(k)]; ok {
		return v
	}
	return resNotFound
}

// apply runs o on the model and returns the line a correct store prints.
func (m *model) apply(o op) string {
	switch o.kind {
	case opPut, opDelete, opDeleteRange:
		m.write(o)
	case opBatch:
		for _, b := range o.batch {
			m.write(b)
		}
	case opGet:
		return lookup(m.state, o.key)
	case opHas:
		_, ok := m.state[string(o.key)]
		return strconv.FormatBool(ok)
	case opValueSize:
		v, ok := m.state[string(o.key)]
		if !ok {
			return resNotFound
		}
		n, _, _ := strings.Cut(v, ":")
		return n
	case opSnapNew:
		m.snaps[o.id] = maps.Clone(m.state)
	case opSnapGet:
		s, ok := m.snaps[o.id]
		if !ok {
			return resNoSnap
		}
		return lookup(s, o.key)
	case opSnapClose:
		if _, ok := m.snaps[o.id]; !ok {
			return resNoSnap
		}
		delete(m.snaps, o.id)
	case opIterNew:
		if o.txn != 0 {
			return m.newTxnIter(o)
		}
		src := m.state
		if o.snap != 0 {
			var ok bool
			if src, ok = m.snaps[o.snap]; !ok {
				return resNoSnap
			}
		}
		if _, ok := m.iters[o.id]; ok {
			return "duplicate-iterator"
		}
		if o.snap == 0 {
			src = maps.Clone(src) // the snapshots' maps are never changed
		}
		m.iters[o.id] = &modelIter{src: src, kvs: sortedRange(src, o), pos: -1}
	case opIterSetBounds, opIterSetPrefix, opIterSetPrefixOwn:
		it, ok := m.iters[o.id]
		if !ok {
			return resNoIter
		}
		r := op{lower: o.lower, upper: o.upper, prefix: o.prefix}
		if o.kind == opIterSetPrefixOwn {
			r = op{}
			if it.pos >= 0 {
				k := it.kvs[it.pos].key
				r.prefix = []byte(k[:min(int(o.n), len(k))])
			}
		}
		it.kvs, it.pos = sortedRange(it.src, r), -1
		// The read set keeps what the iterator traversed; the new bounds
		// are where the next scan runs off to.
		it.finishSpan()
		it.lower, it.upper = r.lower, r.upper
		if r.prefix != nil {
			it.lower, it.upper = r.prefix, prefixEnd(r.prefix)
		}
	case opIterFirst, opIterLast, opIterSeek, opIterSeekLT, opIterSeekOwn, opIterSeekLTOwn, opIterNext, opIterPrev:
		it, ok := m.iters[o.id]
		if !ok {
			return resNoIter
		}
		return it.move(o)
	case opIterClose:
		it, ok := m.iters[o.id]
		if !ok {
			return resNoIter
		}
		it.finishSpan()
		delete(m.iters, o.id)
	case opScan, opCheckpoint:
		return digest(sortedRange(m.state, op{}))
	case opReopen, opReadOnly:
		clear(m.iters)
		clear(m.snaps)
		clear(m.txns)
		m.written, m.open = nil, 0
		if o.kind == opReadOnly {
			return digest(sortedRange(m.state, op{}))
		}
	case opTxnNew:
		if _, ok := m.txns[o.id]; ok {
			return "duplicate-txn"
		}
		m.txns[o.id] = m.begin(o.update)
	case opTxnGet, opTxnHas, opTxnPut, opTxnDelete, opTxnDeleteRange, opTxnCommit, opTxnDiscard:
		return m.applyTxn(o)
	case opUpdate, opView:
		return m.closure(o)
	case opCAS:
		cur, ok := m.state[string(o.key)]
		if o.old == nil && ok || o.old != nil && (!ok || cur != describe(o.old.bytes())) {
			return "false" // a Get and no write: nothing to conflict with
		}
		w := op{kind: opDelete, key: o.key}
		if o.new != nil {
			w = op{kind: opPut, key: o.key, val: *o.new}
		}
		m.write(w)
		return "true"
	}
	return resOK
}

// closure runs an update or a view as the store's UpdateWith does: each
// run is a new transaction, of the DB as of the run's beginning, whose
// body ops are the transaction's reads and writes, and whose scans are
// iterators on it, open until the commit. The body's interfere ops of the
// run are plain writes committed while it is open: what they wrote is a
// commit like any other for every open transaction's conflicts, this
// run's included, and it stays written whatever the run does. A run
// whose commit conflicts writes nothing; an update with retries (with=1)
// runs again, up to retries more times, and returns the last conflict
// once they are spent. The line is each body op's result in the last
// run, how many runs there were if not one, and the closure's result.
func (m *model) closure(o op) string {
	retries := 0
	if o.kind == opUpdate && o.with {
		retries = max(o.retries, 0)
	}
	for run := 1; ; run++ {
		t := m.begin(o.kind == opUpdate)
		var res []string
		var its []*modelIter
		for _, b := range o.batch {
			switch b.kind {
			case opInterfere:
				if b.n != int64(run) {
					res = append(res, resNotRun)
					continue
				}
				for _, w := range b.batch {
					m.write(w)
				}
				res = append(res, resOK)
			case opRangeScan:
				it := txnIter(t, b)
				its = append(its, it)
				res = append(res, it.scan(b))
			default:
				b.kind = closureTxnOps[b.kind]
				res = append(res, t.apply(b))
			}
		}
		if run != 1 {
			res = append(res, fmt.Sprintf("ran %d times", run))
		}
		if o.abort {
			m.end(t)
			return strings.Join(append(res, resAborted), " | ")
		}
		// The scans' iterators are open at the commit: what they
		// traversed is read.
		for _, it := range its {
			it.finishSpan()
		}
		// commit applies the body's writes in the order made: the batch
		// the store writes differs (its range deletions first, and no
		// write one of them hid), but the state it leaves and the keys it
		// covers are the same.
		c := m.commit(t)
		if c != resConflict || run > retries {
			return strings.Join(append(res, c), " | ")
		}
	}
}

// scan runs a closure's range-scan on it, a new iterator: First (Last
// with reverse) and steps until it has shown b.n+1 keys or runs off the
// end, as the runner's scan does, so that a read-write transaction's
// iterator traverses what the store's does. It prints the keys shown.
func (it *modelIter) scan(b op) string {
	first, step := opIterFirst, opIterNext
	if b.reverse {
		first, step = opIterLast, opIterPrev
	}
	var kvs []kv
	for it.move(op{kind: first}); it.pos >= 0; it.move(op{kind: step}) {
		if kvs = append(kvs, it.kvs[it.pos]); len(kvs) > int(b.n) {
			break
		}
	}
	return digest(kvs)
}

// begin begins a transaction on the DB as it is now.
func (m *model) begin(update bool) *modelTxn {
	t := &modelTxn{update: update, view: maps.Clone(m.state), since: len(m.written)}
	if update {
		m.open++
	}
	return t
}

// applyTxn runs a transaction's op.
func (m *model) applyTxn(o op) string {
	t, ok := m.txns[o.id]
	switch {
	case !ok:
		return resNoTxn
	case o.kind == opTxnDiscard:
		m.end(t)
		return resOK
	case t.done:
		return resTxnDiscarded
	case o.kind == opTxnCommit:
		return m.commit(t)
	}
	return t.apply(o)
}

// apply runs a read or a write of t, which is open.
func (t *modelTxn) apply(o op) string {
	switch o.kind {
	case opTxnGet, opTxnHas:
		// A read of what the transaction wrote itself (a key it put or
		// deleted, or one in a range it deleted) is its own business;
		// any other read, found or not, joins the read set.
		if t.update && !t.wrote(string(o.key)) {
			t.reads = append(t.reads, pointSpan(string(o.key)))
		}
		if o.kind == opTxnHas {
			_, ok := t.view[string(o.key)]
			return strconv.FormatBool(ok)
		}
		return lookup(t.view, o.key)
	case opTxnPut, opTxnDelete, opTxnDeleteRange:
		if !t.update {
			return resTxnReadOnly
		}
		if o.kind == opTxnDeleteRange && string(o.key) >= string(o.end) {
			return resOK // deletes nothing, and is no write
		}
		applyWrite(t.view, o)
		t.writes = append(t.writes, o)
	}
	return resOK
}

// wrote reports whether the transaction wrote k: put or deleted it, or
// deleted a range holding it.
func (t *modelTxn) wrote(k string) bool {
	for _, w := range t.writes {
		if w.kind == opTxnDeleteRange && k >= string(w.key) && k < string(w.end) || string(w.key) == k {
			return true
		}
	}
	return false
}

// commit ends t and applies its writes unless it conflicts: a read-write
// transaction that wrote something conflicts if a write committed since
// it began (m.written from t.since) meets what it read, its point reads
// and every span its iterators traversed, open ones included. One that
// read nothing (blind writes) or wrote nothing commits unchecked.
func (m *model) commit(t *modelTxn) string {
	if !t.update || len(t.writes) == 0 {
		m.end(t)
		return resOK
	}
	for _, it := range m.iters {
		if it.txn == t {
			it.finishSpan()
		}
	}
	conflict := false
	for _, w := range m.written[t.since:] {
		for _, r := range t.reads {
			conflict = conflict || w.meets(r)
		}
	}
	m.end(t)
	if conflict {
		return resConflict
	}
	for _, w := range t.writes {
		m.write(w)
	}
	return resOK
}

// end ends t (a second end does nothing, as a second Discard). With the
// last read-write transaction gone, no write needs recording.
func (m *model) end(t *modelTxn) {
	if t.done {
		return
	}
	t.done = true
	if t.update {
		if m.open--; m.open == 0 {
			m.written = nil
		}
	}
}

// newTxnIter is iter-new on a transaction: it reads the transaction's
// view as it is now (its later writes are not seen).
func (m *model) newTxnIter(o op) string {
	if _, ok := m.iters[o.id]; ok {
		return "duplicate-iterator"
	}
	t, ok := m.txns[o.txn]
	switch {
	case !ok:
		return resNoTxn
	case t.done:
		return resTxnDiscarded
	}
	m.iters[o.id] = txnIter(t, o)
	return resOK
}

// txnIter is a new iterator on the open transaction t, with o's bounds.
func txnIter(t *modelTxn, o op) *modelIter {
	it := &modelIter{src: maps.Clone(t.view), kvs: sortedRange(t.view, o), pos: -1}
	if t.update {
		it.txn = t
		// The bounds as IterOptions makes them: the prefix narrows the
		// range [lower, upper).
		it.lower, it.upper = o.lower, o.upper
		if o.prefix != nil {
			if it.lower == nil || string(o.prefix) > string(it.lower) {
				it.lower = o.prefix
			}
			if end := prefixEnd(o.prefix); end != nil && (it.upper == nil || string(end) < string(it.upper)) {
				it.upper = end
			}
		}
	}
	return it
}

// prefixEnd is the first key after every key that begins with p, or nil
// if there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// beginSpan finishes the current span and begins one at target, a seek's
// target; a nil target is the smallest key, or with top the end of the key
// space (Last without an upper bound).
func (it *modelIter) beginSpan(target []byte, top bool) {
	it.finishSpan()
	it.inSpan, it.loSet, it.hiSet, it.hiInf = true, false, false, false
	if target == nil && top {
		it.hiInf = true
		return
	}
	it.extend(string(target), false)
}

// extend widens the span to hold p: the key p itself (inclusive) or the
// boundary before it.
func (it *modelIter) extend(p string, inclusive bool) {
	if !it.inSpan {
		return
	}
	if !it.loSet || p < it.lo {
		it.lo, it.loSet = p, true
	}
	if inclusive {
		p += "\x00"
	}
	if !it.hiInf && (!it.hiSet || p > it.hi) {
		it.hi, it.hiSet = p, true
	}
}

// stopSpan extends the span to the bound an iterator moving forward (or
// not) ran off to.
func (it *modelIter) stopSpan(forward bool) {
	switch {
	case !forward:
		it.extend(string(it.lower), false)
	case it.upper == nil:
		if it.inSpan {
			it.hiInf = true
		}
	default:
		it.extend(string(it.upper), false)
	}
}

// finishSpan adds the current span, if it holds anything, to the read set
// of the iterator's transaction while that is open.
func (it *modelIter) finishSpan() {
	if !it.inSpan {
		return
	}
	it.inSpan = false
	if it.txn == nil || it.txn.done || !it.loSet || !it.hiSet && !it.hiInf || !it.hiInf && it.lo >= it.hi {
		return
	}
	it.txn.reads = append(it.txn.reads, span{start: it.lo, end: it.hi, inf: it.hiInf})
}

// track follows the read span of a read-write transaction's iterator
// through one move: seeks begin a span at their target (a Seek below the
// lower bound seeks the bound, a SeekLT above the upper one seeks that),
// and every move extends it to the key it reached, or to the bound it ran
// off to. A step of an unpositioned iterator does nothing.
func (it *modelIter) track(o op, wasAt string, wasValid bool) {
	if it.txn == nil {
		return
	}
	forward := true
	switch o.kind {
	case opIterFirst:
		it.beginSpan(it.lower, false)
	case opIterLast:
		it.beginSpan(it.upper, true)
		forward = false
	case opIterSeek, opIterSeekOwn:
		k := o.key
		if o.kind == opIterSeekOwn {
			k = nil
			if wasValid {
				k = []byte(wasAt)
			}
		}
		if it.lower != nil && string(k) < string(it.lower) {
			k = it.lower
		}
		it.beginSpan(k, false)
	case opIterSeekLT, opIterSeekLTOwn:
		k := o.key
		if o.kind == opIterSeekLTOwn {
			k = nil
			if wasValid {
				k = []byte(wasAt)
			}
		}
		if it.upper != nil && string(k) > string(it.upper) {
			k = it.upper
		}
		it.beginSpan(k, false)
		forward = false
	case opIterNext, opIterPrev:
		if !wasValid {
			return
		}
		forward = o.kind == opIterNext
	}
	if it.pos >= 0 {
		it.extend(it.kvs[it.pos].key, true)
	} else {
		it.stopSpan(forward)
	}
}

func (it *modelIter) move(o op) string {
	var wasAt string
	wasValid := it.pos >= 0 && it.pos < len(it.kvs)
	if wasValid {
		wasAt = it.kvs[it.pos].key
	}
	res := it.step(o)
	it.track(o, wasAt, wasValid)
	return res
}

func (it *modelIter) step(o op) string {
	n := len(it.kvs)
	switch o.kind {
	case opIterFirst:
		it.pos = 0
	case opIterLast:
		it.pos = n - 1
	case opIterSeek:
		it.pos, _ = slices.BinarySearchFunc(it.kvs, string(o.key), func(e kv, k string) int { return strings.Compare(e.key, k) })
	case opIterSeekLT:
		i, _ := slices.BinarySearchFunc(it.kvs, string(o.key), func(e kv, k string) int { return strings.Compare(e.key, k) })
		it.pos = i - 1
	case opIterSeekOwn: // at a key: stays; at none: Seek(nil), the first key
		if it.pos < 0 || it.pos >= n {
			it.pos = 0
		}
	case opIterSeekLTOwn: // at a key: the one before; at none: SeekLT(nil), no key
		if it.pos < 0 || it.pos >= n {
			it.pos = -1
		} else {
			it.pos--
		}
	case opIterNext:
		if it.pos >= 0 {
			it.pos++
		}
	case opIterPrev:
		if it.pos >= 0 {
			it.pos--
		}
	}
	if it.pos < 0 || it.pos >= n {
		it.pos = -1
		return resInvalid
	}
	return posResult(it.kvs[it.pos].key, it.kvs[it.pos].val)
}
