package bloomkv

import (
	"bytes"
	"fmt"
	"iter"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/invariants"
	"github.com/bloomkv/bloomkv/internal/merge"
	"github.com/bloomkv/bloomkv/internal/rangedel"
	"github.com/bloomkv/bloomkv/internal/stripe"
	"github.com/bloomkv/bloomkv/segment"
)

// IterOptions bound an Iterator. The zero value iterates over every key.
type IterOptions struct {
	// LowerBound, if set, is the smallest key the iterator shows
	// (inclusive).
	LowerBound []byte
	// UpperBound, if set, is the end of the range (exclusive).
	UpperBound []byte
	// Prefix, if set, narrows the range to the keys that start with it
	// (within LowerBound and UpperBound when those are set too). If it is
	// a whole prefix of Options.Prefix, segments whose prefix filter says
	// it is absent are skipped with no I/O (PrefixExtractor).
	Prefix []byte
	// FillCache puts the blocks the iterator reads into the block cache.
	// Off by default, so a full scan does not evict the blocks that Gets
	// keep hot; blocks already in the cache are used either way.
	FillCache bool
}

// ErrIteratorClosed is what Error reports once an Iterator is closed: using
// a closed Iterator is a programming error, so its positioning methods
// return false and say why here rather than panic. It matches ErrClosed.
var ErrIteratorClosed error = &narrowError{"bloomkv: iterator closed", ErrClosed}

// An Iterator walks the keys of the DB (or of a Snapshot) in order,
// showing for each key its newest value as of the moment the Iterator was
// made; later writes are not seen. It holds the memtables and segment
// files of that moment open until Close, so close it when done.
//
// The positioning methods (First, Last, Seek, SeekLT, Next, Prev) report
// whether the Iterator is now at a key, as Valid does. Key and Value
// return slices owned by the Iterator: they stay valid and unchanged until
// the next positioning call or Close, and must not be modified. Copy them
// to keep them.
//
// Moving forward is the fast direction. Changing direction (Next after
// Prev, or Prev after Next) re-seeks every source, and Prev on a memtable
// costs a search, as in LevelDB.
//
// If the DB is closed while an Iterator is open, its next move fails with
// ErrClosed (Error reports it); its files stay open until its own Close.
// An Iterator is not safe for concurrent use.
type Iterator struct {
	db     *DB
	rs     *readState
	pin    int    // the stripe rs is pinned on (readState.pin)
	seq    uint64 // the newest version visible
	segIts []*segment.Iter
	m      *merge.Iter
	// rangeDels are the range tombstones of the iterator's memtables and
	// segments, one cursor per source that has any; maxSeqs[i] is the
	// largest sequence number of the i-th merge source, which decides
	// whether a covering tombstone lets the iterator jump over the source's
	// entries (skipCovered).
	rangeDels []rangedel.Cursor
	maxSeqs   []uint64
	chain     []chainStep // skipCovered's, reused
	lower     []byte
	upper     []byte
	reverse   bool // moving backward: m is before the current key, which is a copy
	valid     bool
	key       []byte
	value     []byte
	keyBuf    []byte
	valBuf    []byte
	err       error
	// lease guards key and value in an invariants build: it expires at
	// the next positioning call and at Close, when the Iterator's promise
	// about them ends.
	lease invariants.Lease
}

// NewIterator returns an unpositioned iterator over the current state of
// the DB; opts may be nil.
func (db *DB) NewIterator(opts *IterOptions) (*Iterator, error) {
	return db.newIterator(opts, latestSeq)
}

func (db *DB) newIterator(opts *IterOptions, snapSeq uint64) (*Iterator, error) {
	if opts == nil {
		opts = &IterOptions{}
	}
	pin := stripe.Pick()
	rs, seq := db.view(pin)
	if rs == nil {
		return nil, ErrClosed
	}
	it := &Iterator{db: db, rs: rs, pin: pin, seq: min(seq, snapSeq)}
	it.lower, it.upper = bounds(opts)
	srcs := make([]base.InternalIterator, 0, len(rs.mems)+len(rs.segments))
	for _, m := range rs.mems {
		// What a memtable gains from now on is newer than it.seq, which
		// the iterator would hide anyway.
		for _, l := range m.RangeDelLists() {
			it.addRangeDels(l)
		}
		if m.Len() > 0 {
			srcs = append(srcs, m.NewIter())
			it.maxSeqs = append(it.maxSeqs, m.MaxSeq())
		}
	}
	pp := db.newPrefixProbe(opts.Prefix)
	defer pp.publish(&db.stats, pin)
	for _, s := range rs.segments {
		// A segment's range tombstones apply even where its prefix filter
		// rules out its entries: they hide older versions elsewhere.
		it.addRangeDels(s.reader.RangeDels())
		if !s.overlaps(it.lower, it.upper) || pp.skip(s) {
			continue
		}
		si := s.reader.NewIter(opts.FillCache)
		it.segIts = append(it.segIts, si)
		srcs = append(srcs, si)
		it.maxSeqs = append(it.maxSeqs, s.meta.MaxSeq)
	}
	it.m = merge.New(srcs...)
	return it, nil
}

// addRangeDels adds l's tombstones to those the iterator applies, if any
// of them meet its bounds.
func (it *Iterator) addRangeDels(l *rangedel.List) {
	start, end := l.Bounds()
	if l.Empty() || (it.upper != nil && bytes.Compare(start, it.upper) >= 0) ||
		(it.lower != nil && bytes.Compare(end, it.lower) <= 0) {
		return
	}
	it.rangeDels = append(it.rangeDels, rangedel.NewCursor(l))
}

// covering returns the newest range tombstone visible to the iterator that
// covers key (0 if none), and the cursor whose fragment holds it.
func (it *Iterator) covering(key []byte) (seq uint64, cur *rangedel.Cursor) {
	for i := range it.rangeDels {
		if f := it.rangeDels[i].At(key); f != nil {
			if s := f.Visible(it.seq); s > seq {
				seq, cur = s, &it.rangeDels[i]
			}
		}
	}
	return seq, cur
}

// maxChain bounds how many touching fragments skipCovered follows; past
// it, the next covered key starts another chain.
const maxChain = 64

// chainStep is a bound skipCovered can move sources to, and the oldest
// tombstone that deletes everything before it.
type chainStep struct {
	bound  []byte
	oldest uint64
}

// skipCovered moves each source whose every entry is older than the
// tombstones covering the fragment cur is at, and the touching fragments
// after it (before it, backward), past as many of them as delete all it
// holds there: one seek over a run of deletions (a raft log truncated a
// thousand entries at a time) instead of one per fragment. Forward that is
// to a fragment's end, backward to below its start.
func (it *Iterator) skipCovered(cur *rangedel.Cursor) {
	it.chain = it.chain[:0]
	cur.Reach(it.seq, !it.reverse, maxChain, func(bound []byte, oldest uint64) {
		it.chain = append(it.chain, chainStep{bound, oldest})
	})
	// oldest only falls along the chain: move the sources older than the
	// whole chain to its far end first, then, at each bound where oldest
	// changes, those older than the chain up to there.
	for i := len(it.chain) - 1; i >= 0; i-- {
		step := it.chain[i]
		if i+1 < len(it.chain) && it.chain[i+1].oldest == step.oldest {
			continue
		}
		older := func(j int) bool { return it.maxSeqs[j] < step.oldest }
		if it.reverse {
			it.m.SkipBackTo(step.bound, older)
		} else {
			it.m.SkipTo(step.bound, older)
		}
	}
}

// bounds returns the effective [lower, upper) of opts, nil for no bound.
func bounds(opts *IterOptions) (lower, upper []byte) {
	lower, upper = opts.LowerBound, opts.UpperBound
	if opts.Prefix != nil {
		if lower == nil || bytes.Compare(opts.Prefix, lower) > 0 {
			lower = opts.Prefix
		}
		if end := prefixEnd(opts.Prefix); end != nil && (upper == nil || bytes.Compare(end, upper) < 0) {
			upper = end
		}
	}
	return bytes.Clone(lower), bytes.Clone(upper)
}

// prefixEnd returns the smallest key greater than every key with the
// prefix p, or nil if there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// overlaps reports whether the segment's key range meets [lower, upper).
func (s *segHandle) overlaps(lower, upper []byte) bool {
	return (upper == nil || bytes.Compare(s.meta.Smallest, upper) < 0) &&
		(lower == nil || bytes.Compare(s.meta.Largest, lower) >= 0)
}

// First moves to the first key in range.
func (it *Iterator) First() bool {
	if !it.usable() {
		return false
	}
	if it.lower != nil {
		return it.seekGE(it.lower)
	}
	it.m.First()
	return it.findNext()
}

// Last moves to the last key in range.
func (it *Iterator) Last() bool {
	if !it.usable() {
		return false
	}
	if it.upper != nil {
		it.m.SeekLT(it.upper)
	} else {
		it.m.Last()
	}
	return it.findPrev()
}

// Seek moves to the first key >= key (and in range).
func (it *Iterator) Seek(key []byte) bool {
	if !it.usable() {
		return false
	}
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	return it.seekGE(key)
}

// SeekLT moves to the last key < key (and in range).
func (it *Iterator) SeekLT(key []byte) bool {
	if !it.usable() {
		return false
	}
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	}
	it.m.SeekLT(key)
	return it.findPrev()
}

func (it *Iterator) seekGE(key []byte) bool {
	it.m.SeekGE(key)
	return it.findNext()
}

// Next moves to the following key.
func (it *Iterator) Next() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if it.reverse {
		// m is before the current key (kept in keyBuf): seek back to it,
		// then step over its versions as in the forward case.
		it.m.SeekGE(it.keyBuf)
	} else {
		it.keyBuf = append(it.keyBuf[:0], it.key...)
	}
	it.skipVersions()
	return it.findNext()
}

// Prev moves to the preceding key.
func (it *Iterator) Prev() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if !it.reverse {
		it.keyBuf = append(it.keyBuf[:0], it.key...)
		it.m.SeekLT(it.keyBuf)
	}
	return it.findPrev()
}

// skipVersions moves m past every remaining version of keyBuf.
func (it *Iterator) skipVersions() {
	for it.m.Valid() && bytes.Equal(it.m.Key(), it.keyBuf) {
		it.m.Next()
	}
}

// findNext moves m forward to the newest visible version of the next key
// that has a value, and stops there.
func (it *Iterator) findNext() bool {
	it.lease.Expire()
	it.reverse = false
	for it.m.Valid() {
		k := it.m.Key()
		if it.upper != nil && bytes.Compare(k, it.upper) >= 0 {
			break
		}
		if it.m.Seq() > it.seq { // written after the iterator was made
			it.m.Next()
			continue
		}
		// m is at the newest visible version of k.
		deleted, cur := it.covering(k)
		if hidden := it.m.Seq() < deleted; hidden || it.m.Kind() == base.KindDelete {
			it.keyBuf = append(it.keyBuf[:0], k...)
			it.skipVersions()
			if hidden {
				it.skipCovered(cur)
			}
			continue
		}
		it.key, it.value, it.valid = it.lease.Guard(k), it.lease.Guard(it.m.Value()), true
		return true
	}
	return it.stop()
}

// findPrev moves m backward over the versions of the previous key that
// has a visible value. Backward, a key's versions come oldest first, so
// the last visible one seen is the newest; key and value are copied
// because m has moved on by the time the key is known to be shown.
func (it *Iterator) findPrev() bool {
	it.lease.Expire()
	it.reverse = true
	for it.m.Valid() {
		if it.lower != nil && bytes.Compare(it.m.Key(), it.lower) < 0 {
			break
		}
		it.keyBuf = append(it.keyBuf[:0], it.m.Key()...)
		found, newest := false, uint64(0) // the newest visible version: a put?
		for it.m.Valid() && bytes.Equal(it.m.Key(), it.keyBuf) {
			if seq := it.m.Seq(); seq <= it.seq {
				found, newest = it.m.Kind() == base.KindPut, seq
				if found {
					it.valBuf = append(it.valBuf[:0], it.m.Value()...)
				}
			}
			it.m.Prev()
		}
		if it.m.Error() != nil {
			break
		}
		if deleted, cur := it.covering(it.keyBuf); newest < deleted {
			it.skipCovered(cur)
			continue
		}
		if found {
			it.key, it.value, it.valid = it.lease.Guard(it.keyBuf), it.lease.Guard(it.valBuf), true
			return true
		}
	}
	return it.stop()
}

// stop leaves the iterator unpositioned, keeping a source's error.
func (it *Iterator) stop() bool {
	it.valid, it.key, it.value = false, nil, nil
	if err := it.m.Error(); err != nil && it.err == nil {
		it.err = fmt.Errorf("bloomkv: iterator: %w", err) // sources name their file
	}
	return false
}

// usable reports whether the iterator may move: not closed, no error, its
// DB still open.
func (it *Iterator) usable() bool {
	if it.err == nil && it.db.isClosed.Load() {
		it.err = ErrClosed
	}
	if it.err != nil {
		it.valid = false
		return false
	}
	return true
}

// Valid reports whether the iterator is at a key.
func (it *Iterator) Valid() bool { return it.valid }

// Key returns the current key; see Iterator for how long it stays valid.
func (it *Iterator) Key() []byte { return it.key }

// Value returns the current value; see Iterator for how long it stays
// valid.
func (it *Iterator) Value() []byte { return it.value }

// Error returns the error that stopped the iteration: ErrCorrupt (naming
// file and offset) for damaged data, ErrClosed if the DB was closed, and
// ErrIteratorClosed once Close has been called (Close itself returns the
// iteration's error). An iterator that simply ran out of keys has no
// error.
func (it *Iterator) Error() error { return it.err }

// Close releases the iterator's memtables and files and returns the
// iteration's error, if any. After Close the positioning methods return
// false and Error returns ErrIteratorClosed. Closing again does nothing
// but return ErrIteratorClosed (which matches ErrClosed), as closing a DB
// or a Snapshot twice does; a deferred Close after an explicit one is
// harmless, its error ignored.
func (it *Iterator) Close() error {
	if it.err == ErrIteratorClosed {
		return ErrIteratorClosed
	}
	err := it.err
	it.lease.Expire()
	for _, si := range it.segIts {
		si.Close()
	}
	it.rs.unpin(it.pin)
	it.rs, it.segIts, it.m = nil, nil, nil
	it.err, it.valid, it.key, it.value = ErrIteratorClosed, false, nil, nil
	return err
}

// All returns a range function over the keys from First onward, for
//
//	for k, v := range it.All() { ... }
//	if err := it.Error(); err != nil { ... }
//
// The slices follow the Key and Value rules: copy them to keep them.
func (it *Iterator) All() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for ok := it.First(); ok; ok = it.Next() {
			if !yield(it.key, it.value) {
				return
			}
		}
	}
}

// Backward is All in reverse, from Last.
func (it *Iterator) Backward() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for ok := it.Last(); ok; ok = it.Prev() {
			if !yield(it.key, it.value) {
				return
			}
		}
	}
}
