package bloomkv

import (
	"bytes"
	"iter"
	"slices"
)

// A TxnIterator walks the keys a transaction sees: the snapshot's, merged
// with the transaction's own writes made before the iterator (its puts
// shown, its deletes and range deletions hiding the snapshot's keys).
// Writes the transaction makes later are not seen; make a new iterator to
// see them. It has an Iterator's methods and rules: Key and Value are
// valid until the next positioning call or Close and must not be
// modified, and it must be closed.
//
// In a read-write transaction, what it traverses joins the read set: the
// keys from where each First, Last, Seek or SeekLT positioned it through
// every key it stopped at, up to its bound if it ran off the end. Only
// that range can make the commit conflict, not the whole of its bounds.
type TxnIterator struct {
	t    *Txn
	base *Iterator
	all  [][]*pendingWrite // the pending writes when the iterator was made (Txn.sortedRuns)
	pend pendCursor        // over those within bounds
	// allLen is the number of writes in all, and steps how many times
	// pend stepped over several runs: see stepPending.
	allLen, steps int
	dels          txnDels // the transaction's range deletions
	idx           int     // in t.iters while open, in a read-write transaction

	lower, upper []byte
	reverse      bool
	valid        bool
	fromPend     bool // the current key is pend.cur's
	key          []byte
	value        []byte
	keyBuf       []byte
	seekBuf      []byte // Seek's and SeekLT's copy of their key
	closed       bool

	// The span traversed since the last seek (read-write only): [lo, hi),
	// hi unbounded if hiInf; empty until a seek begins one.
	track  bool
	inSpan bool
	lo, hi []byte
	loSet  bool
	hiSet  bool
	hiPast bool // the span ends just past hi (hi was a key), not at it
	hiInf  bool
	spans  readSpans // finished spans
}

// NewIterator returns an unpositioned iterator over what the transaction
// sees within opts' bounds (nil: every key); see TxnIterator.
func (t *Txn) NewIterator(opts *IterOptions) (*TxnIterator, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &IterOptions{}
	}
	b, err := t.snap.NewIterator(opts)
	if err != nil {
		return nil, err
	}
	it := &TxnIterator{t: t, base: b, all: t.sortedRuns(), dels: t.dels, track: t.update}
	for _, run := range it.all {
		it.allLen += len(run)
	}
	it.lower, it.upper = bounds(opts)
	it.boundPending()
	if t.update {
		it.idx = len(t.iters)
		t.iters = append(t.iters, it)
	}
	return it, nil
}

// boundPending sets pend to the pending writes within the bounds.
func (it *TxnIterator) boundPending() {
	c := &it.pend
	c.runs, c.pos, c.cur = c.runs[:0], c.pos[:0], nil
	for _, run := range it.all {
		lo, hi := 0, len(run)
		if it.lower != nil {
			lo, _ = slices.BinarySearchFunc(run, it.lower, comparePending)
		}
		if it.upper != nil {
			hi, _ = slices.BinarySearchFunc(run, it.upper, comparePending)
		}
		if lo < hi {
			c.runs = append(c.runs, run[lo:hi])
			c.pos = append(c.pos, 0)
		}
	}
}

// SetBounds changes the iterator's bounds to [lower, upper) as
// Iterator.SetBounds does, so that one iterator serves many scans: the
// bounds are copied, the iterator becomes unpositioned, and the next use
// must be First, Last, Seek or SeekLT. The transaction's writes it shows
// stay those made before the iterator was. What it traversed before
// stays in a read-write transaction's read set. On a closed iterator, or
// one stopped by an error, SetBounds does nothing.
func (it *TxnIterator) SetBounds(lower, upper []byte) {
	if it.closed || it.base.err != nil {
		return
	}
	it.finishSpan()
	// Copied before the base iterator moves: they may alias its Key.
	it.lower, it.upper = bytes.Clone(lower), bytes.Clone(upper)
	it.base.SetBounds(it.lower, it.upper)
	it.boundPending()
	it.valid, it.key, it.value, it.fromPend, it.reverse = false, nil, nil, false, false
}

// SetPrefix narrows the iterator to the keys that start with p, as
// SetBounds(p, the first key after them) does.
func (it *TxnIterator) SetPrefix(p []byte) { it.SetBounds(p, prefixEnd(p)) }

func comparePending(w *pendingWrite, key []byte) int { return bytes.Compare(w.key, key) }

// pendCursor walks the pending writes an iterator shows, within its
// bounds: the merge of the runs of Txn.sortedRuns, where of the writes of
// one key the newest is the one shown. A run holds a key once, so the
// runs at the current key are those whose position holds it. A change of
// direction is a new seek.
type pendCursor struct {
	runs [][]*pendingWrite
	// pos is, for each run, forward, the index of its first write at or
	// after the position; backward, that of its last one at or before
	// it (-1: none).
	pos []int
	cur *pendingWrite // the write at the position, or nil: none left
}

// seekGE positions at the first write at or after key.
func (c *pendCursor) seekGE(key []byte) {
	for i, run := range c.runs {
		c.pos[i], _ = slices.BinarySearchFunc(run, key, comparePending)
	}
	c.settle(true)
}

// seekLT positions at the last write before key.
func (c *pendCursor) seekLT(key []byte) {
	for i, run := range c.runs {
		j, _ := slices.BinarySearchFunc(run, key, comparePending)
		c.pos[i] = j - 1
	}
	c.settle(false)
}

func (c *pendCursor) first() {
	clear(c.pos)
	c.settle(true)
}

func (c *pendCursor) last() {
	for i, run := range c.runs {
		c.pos[i] = len(run) - 1
	}
	c.settle(false)
}

// step moves past the current key, forward or backward (the direction of
// the last seek).
func (c *pendCursor) step(forward bool) {
	key := c.cur.key
	for i, run := range c.runs {
		if p := c.pos[i]; p >= 0 && p < len(run) && bytes.Equal(run[p].key, key) {
			if forward {
				c.pos[i]++
			} else {
				c.pos[i]--
			}
		}
	}
	c.settle(forward)
}

// seekLE positions, backward, at the last write at or before key.
func (c *pendCursor) seekLE(key []byte) {
	for i, run := range c.runs {
		j, found := slices.BinarySearchFunc(run, key, comparePending)
		if found {
			j++
		}
		c.pos[i] = j - 1
	}
	c.settle(false)
}

// settle sets cur to the newest write of the nearest key the runs hold
// in the direction of travel.
func (c *pendCursor) settle(forward bool) {
	var best *pendingWrite
	for i, run := range c.runs {
		p := c.pos[i]
		if p < 0 || p >= len(run) {
			continue
		}
		w := run[p]
		if best == nil {
			best = w
			continue
		}
		cmp := bytes.Compare(w.key, best.key)
		if !forward {
			cmp = -cmp
		}
		if cmp < 0 || cmp == 0 && w.order > best.order {
			best = w
		}
	}
	c.cur = best
}

// stepPending moves pend past its current key. A step over several runs
// compares the head of each: an iterator that has taken as many of them
// as its runs hold writes merges the runs into one, which costs about as
// much as the steps did, so that a long scan costs what a scan of one
// sorted list does. The merged run replaces the transaction's runs too
// if they are still those the iterator was made with.
func (it *TxnIterator) stepPending(forward bool) {
	it.pend.step(forward)
	if len(it.all) < 2 {
		return
	}
	if it.steps++; it.steps < it.allLen {
		return
	}
	// The newest write of each key, in key order.
	all := pendCursor{runs: it.all, pos: make([]int, len(it.all))}
	merged := make([]*pendingWrite, 0, it.allLen)
	for all.first(); all.cur != nil; all.step(true) {
		merged = append(merged, all.cur)
	}
	if t := it.t; !t.done && len(t.runs) == len(it.all) && &t.runs[0] == &it.all[0] {
		t.runs = [][]*pendingWrite{merged}
	}
	it.all, it.allLen = [][]*pendingWrite{merged}, len(merged)
	cur := it.pend.cur
	it.boundPending()
	switch {
	case cur == nil: // none left: the next use of pend is a seek
	case forward:
		it.pend.seekGE(cur.key)
	default:
		it.pend.seekLE(cur.key)
	}
}

// First moves to the first key in range.
func (it *TxnIterator) First() bool {
	if !it.usable() {
		return false
	}
	it.begin(it.lower, false)
	it.base.First()
	it.pend.first()
	return it.findNext()
}

// Last moves to the last key in range.
func (it *TxnIterator) Last() bool {
	if !it.usable() {
		return false
	}
	it.begin(it.upper, true)
	it.base.Last()
	it.pend.last()
	return it.findPrev()
}

// Seek moves to the first key >= key (and in range). key may be one the
// iterator returned (Key): it is copied before anything moves, as
// Iterator.Seek copies its key.
func (it *TxnIterator) Seek(key []byte) bool {
	if !it.usable() {
		return false
	}
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	} else {
		it.seekBuf = append(it.seekBuf[:0], key...)
		key = it.seekBuf
	}
	it.begin(key, false)
	return it.seekGE(key)
}

// SeekLT moves to the last key < key (and in range). key may be one the
// iterator returned, as for Seek.
func (it *TxnIterator) SeekLT(key []byte) bool {
	if !it.usable() {
		return false
	}
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	} else {
		it.seekBuf = append(it.seekBuf[:0], key...)
		key = it.seekBuf
	}
	it.begin(key, false)
	return it.seekLT(key)
}

func (it *TxnIterator) seekGE(key []byte) bool {
	it.base.Seek(key)
	it.pend.seekGE(key)
	return it.findNext()
}

func (it *TxnIterator) seekLT(key []byte) bool {
	it.base.SeekLT(key)
	it.pend.seekLT(key)
	return it.findPrev()
}

// Next moves to the following key.
func (it *TxnIterator) Next() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if it.reverse {
		// Re-seek both sides just past the current key.
		it.keyBuf = append(append(it.keyBuf[:0], it.key...), 0)
		return it.seekGE(it.keyBuf)
	}
	if it.fromPend {
		if it.base.Valid() && bytes.Equal(it.base.Key(), it.key) {
			it.base.Next() // the snapshot's version, hidden by ours
		}
		it.stepPending(true)
	} else {
		it.base.Next()
	}
	return it.findNext()
}

// Prev moves to the preceding key.
func (it *TxnIterator) Prev() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if !it.reverse {
		it.keyBuf = append(it.keyBuf[:0], it.key...)
		return it.seekLT(it.keyBuf)
	}
	if it.fromPend {
		if it.base.Valid() && bytes.Equal(it.base.Key(), it.key) {
			it.base.Prev()
		}
		it.stepPending(false)
	} else {
		it.base.Prev()
	}
	return it.findPrev()
}

// findNext settles forward on the smaller of the snapshot's next key not
// deleted by the transaction and the next pending write, the pending one
// on a tie; pending deletes hide a key and are stepped over.
func (it *TxnIterator) findNext() bool {
	it.reverse = false
	for {
		for it.base.Valid() {
			r := it.dels.covering(it.base.Key())
			if r == nil {
				break
			}
			it.base.Seek(r.end) // deleted by the transaction
		}
		bv, pv := it.base.Valid(), it.pend.cur != nil
		if !bv && !pv || it.base.Error() != nil {
			return it.stop() // the end, or the snapshot's error: Error reports it
		}
		c := -1
		switch {
		case !bv:
			c = 1
		case pv:
			c = bytes.Compare(it.base.Key(), it.pend.cur.key)
		}
		if c < 0 {
			return it.at(it.base.Key(), it.base.Value(), false)
		}
		if w := it.pend.cur; !w.del {
			return it.at(w.key, w.value, true)
		}
		it.stepPending(true)
		if c == 0 {
			it.base.Next()
		}
	}
}

// findPrev is findNext backward: the larger key wins.
func (it *TxnIterator) findPrev() bool {
	it.reverse = true
	for {
		for it.base.Valid() {
			r := it.dels.covering(it.base.Key())
			if r == nil {
				break
			}
			it.base.SeekLT(r.start)
		}
		bv, pv := it.base.Valid(), it.pend.cur != nil
		if !bv && !pv || it.base.Error() != nil {
			return it.stop() // the end, or the snapshot's error: Error reports it
		}
		c := 1
		switch {
		case !bv:
			c = -1
		case pv:
			c = bytes.Compare(it.base.Key(), it.pend.cur.key)
		}
		if c > 0 {
			return it.at(it.base.Key(), it.base.Value(), false)
		}
		if w := it.pend.cur; !w.del {
			return it.at(w.key, w.value, true)
		}
		it.stepPending(false)
		if c == 0 {
			it.base.Prev()
		}
	}
}

func (it *TxnIterator) at(key, value []byte, fromPend bool) bool {
	it.key, it.value, it.fromPend, it.valid = key, value, fromPend, true
	if it.track {
		it.extendKey(key)
	}
	return true
}

// stop leaves the iterator unpositioned. Having run off the end, it has
// seen that nothing lies between its last key and its bound.
func (it *TxnIterator) stop() bool {
	it.valid, it.key, it.value, it.fromPend = false, nil, nil, false
	if it.track && it.inSpan {
		if it.reverse {
			it.extend(it.lower, false) // nil lower: the empty key, the smallest
		} else if it.upper == nil {
			it.hiInf = true
		} else {
			it.extend(it.upper, false)
		}
	}
	return false
}

// The read span. A positioning call begins one (begin), every key it
// stops at extends it (extendKey), running off an end extends it to the
// bound (stop), and the next positioning call or Close (or the
// transaction's Commit, for an open iterator) finishes it.

// begin finishes the current span and starts one at target, the seek's
// target (First: the lower bound; Last: the upper one). A nil target is
// the end of an unbounded range: the smallest key, or with top the
// largest.
func (it *TxnIterator) begin(target []byte, top bool) {
	if !it.track {
		return
	}
	it.finishSpan()
	it.inSpan, it.loSet, it.hiSet, it.hiInf = true, false, false, false
	if target == nil && top {
		it.hiInf = true
		return
	}
	it.extend(target, false) // nil: the empty key, smaller than any
}

// extendKey widens the span to hold key.
func (it *TxnIterator) extendKey(key []byte) { it.extend(key, true) }

// extend widens the span to hold p: the key itself (inclusive) or the
// boundary before it.
func (it *TxnIterator) extend(p []byte, inclusive bool) {
	if !it.inSpan {
		return
	}
	if !it.loSet || bytes.Compare(p, it.lo) < 0 {
		it.lo, it.loSet = append(it.lo[:0], p...), true
	}
	if it.hiInf {
		return
	}
	// The exclusive end: p, or just past it.
	c := bytes.Compare(p, it.hi)
	if !it.hiSet || c > 0 || c == 0 && inclusive && !it.hiPast {
		it.hi, it.hiSet, it.hiPast = append(it.hi[:0], p...), true, inclusive
	}
}

// finishSpan moves the current span, if any, to spans.
func (it *TxnIterator) finishSpan() {
	if !it.inSpan || !it.loSet || !(it.hiSet || it.hiInf) {
		it.inSpan = false
		return
	}
	it.inSpan = false
	s := keySpan{start: bytes.Clone(it.lo)}
	if !it.hiInf {
		s.end = bytes.Clone(it.hi)
		if it.hiPast {
			s.end = append(s.end, 0)
		}
		if bytes.Compare(s.start, s.end) >= 0 {
			return // nothing traversed
		}
	}
	if s.start == nil {
		s.start = []byte{}
	}
	it.spans.add(s)
}

// addSpansTo adds the spans the iterator traversed to reads, the current
// one included (it stays current).
func (it *TxnIterator) addSpansTo(reads *readSpans) {
	it.finishSpan()
	reads.add(it.spans.spans...)
	it.spans = readSpans{}
}

// usable reports whether the iterator may move.
func (it *TxnIterator) usable() bool {
	if it.closed {
		return false
	}
	if !it.base.usable() {
		it.valid, it.key, it.value = false, nil, nil
		return false
	}
	return true
}

// Valid reports whether the iterator is at a key.
func (it *TxnIterator) Valid() bool { return it.valid }

// Key returns the current key; see TxnIterator for how long it stays
// valid.
func (it *TxnIterator) Key() []byte { return it.key }

// Value returns the current value; see TxnIterator for how long it stays
// valid.
func (it *TxnIterator) Value() []byte { return it.value }

// Error returns the error that stopped the iteration, as Iterator.Error
// does: ErrIteratorClosed once closed.
func (it *TxnIterator) Error() error {
	if it.closed {
		return ErrIteratorClosed
	}
	return it.base.Error()
}

// Close releases the iterator and returns the iteration's error, if any.
// In a read-write transaction still open, what it traversed stays in the
// read set. Closing again does nothing but return ErrIteratorClosed, as
// Iterator.Close does.
func (it *TxnIterator) Close() error {
	if it.closed {
		return ErrIteratorClosed
	}
	t := it.t
	if it.track && !t.done {
		it.addSpansTo(&t.reads)
		// The last one takes its place: Commit reads every open
		// iterator's spans in any order, and a search and a shift made
		// closing n open iterators O(n²).
		last := t.iters[len(t.iters)-1]
		last.idx = it.idx
		t.iters[it.idx] = last
		t.iters[len(t.iters)-1] = nil
		t.iters = t.iters[:len(t.iters)-1]
	}
	err := it.base.Close()
	it.closed, it.valid, it.key, it.value, it.pend, it.all = true, false, nil, nil, pendCursor{}, nil
	return err
}

// All returns a range function over the keys from First onward; see
// Iterator.All.
func (it *TxnIterator) All() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for ok := it.First(); ok; ok = it.Next() {
			if !yield(it.key, it.value) {
				return
			}
		}
	}
}

// Backward is All in reverse, from Last.
func (it *TxnIterator) Backward() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for ok := it.Last(); ok; ok = it.Prev() {
			if !yield(it.key, it.value) {
				return
			}
		}
	}
}
