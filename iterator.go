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
	// (within LowerBound and UpperBound when those are set too). If it is,
	// or begins with, a whole prefix of Options.Prefix, segments whose
	// prefix filter says that prefix is absent are skipped with no I/O
	// (PrefixExtractor).
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
// Moving forward is the fast direction. Backward, a segment decodes each
// restart interval of a block once and steps back through the decoded
// entries, but Prev on a memtable costs a search, as in LevelDB. Past a
// key with many versions (overwritten many times since the last flush),
// Next and Prev step over a few and seek past the rest. Changing
// direction (Next after Prev, or Prev after Next) re-seeks every source.
// When only one segment has keys in the range and no range deletion
// applies, the Iterator reads that segment without merging (and,
// when its entries are all visible puts of distinct keys, Next after Prev
// is one step).
//
// SetBounds and SetPrefix change the range of an open Iterator, so one
// Iterator can serve many short scans or prefix lookups; the versions it
// shows stay those of the moment it was made.
//
// If the DB is closed while an Iterator is open, its next move fails with
// ErrClosed (Error reports it); its files stay open until its own Close.
// An Iterator is not safe for concurrent use.
type Iterator struct {
	db  *DB
	rs  *readState
	pin int    // the stripe rs is pinned on (readState.pin)
	seq uint64 // the newest version visible
	// The sources the iterator was made with, kept so that SetBounds can
	// choose among them again: mems[i] is rs.mems[i]'s iterator and range
	// tombstones, segIts[i] rs.segments[i]'s iterator, made on first
	// use.
	mems      []memSource
	segIts    []*segment.Iter
	fillCache bool
	srcs      []base.InternalIterator // the sources in use, m's
	m         *merge.Iter
	merge     merge.Iter // m points here: one allocation with the Iterator
	// seg is the one source, when exactly one segment has entries in the
	// range and no range tombstone applies: the iterator then reads it
	// directly (no merge, no key copies, no tombstone checks). segUpper
	// and segLower say whether its keys reach past upper or below lower
	// (else no key needs comparing with them). segAll says every entry
	// of seg is a visible put of a key of its own (AllVisible): forward,
	// the next key is seg's next entry.
	seg                        *segment.Iter
	segUpper, segLower, segAll bool
	// segAt says seg is at the current key rather than before it, while
	// moving backward (reverse) over a segment of segAll below which no
	// key reaches past lower: each key is then one entry, shown where it
	// is (prevSegAll), with no look at the entry before it for a newer
	// version.
	segAt bool
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
	lowerBuf  []byte // SetBounds' copies, reused
	upperBuf  []byte
	endBuf    []byte // SetPrefix's
	seekBuf   []byte // Seek's and SeekLT's copy of their key
	reverse   bool   // moving backward: m is before the current key, which is a copy
	valid     bool
	key       []byte
	value     []byte
	keyBuf    []byte
	succBuf   []byte           // keyBuf+"\x00": the first user key after it (skipVersions)
	valBuf    []byte           // a value copied to be shown (copyValue)
	valBufLen int              // the length of the last copy into valBuf, this positioning call; see expire
	valRef    segment.ValueRef // findPrevSeg's record of the version it shows
	err       error
	// lease guards key and value in an invariants build: it expires at
	// the next positioning call and at Close, when the Iterator's promise
	// about them ends.
	lease invariants.Lease
	// inline backs mems, segIts, srcs and maxSeqs, and the first segment
	// iterator, in a store of few sources: an Iterator is then one
	// allocation, where it was ten (a short scan spent a fifth of its
	// time allocating and in the garbage collector's write barriers).
	inline struct {
		mems    [2]memSource
		segIts  [4]*segment.Iter
		srcs    [6]base.InternalIterator
		maxSeqs [6]uint64
		segIter segment.Iter
		used    bool // segIter is taken
	}
}

// sliceOf returns arr[:n] if n fits in it, else a new slice of length n.
func sliceOf[T any](arr []T, n int) []T {
	if n <= len(arr) {
		return arr[:n:n]
	}
	return make([]T, n)
}

// NewIterator returns an unpositioned iterator over the current state of
// the DB; opts may be nil.
func (db *DB) NewIterator(opts *IterOptions) (*Iterator, error) {
	return db.newIterator(opts, nil)
}

// newIterator makes an iterator as of snapshot snap, or of the newest
// write for nil.
func (db *DB) newIterator(opts *IterOptions, snap *Snapshot) (*Iterator, error) {
	if opts == nil {
		opts = &IterOptions{}
	}
	pin := stripe.Pick()
	rs, seq := db.view(pin)
	if rs == nil {
		return nil, ErrClosed
	}
	snapSeq := latestSeq
	if snap != nil {
		if snap.released() {
			rs.unpin(pin)
			return nil, ErrSnapshotReleased // see Snapshot.released
		}
		snapSeq = snap.seq
	}
	it := &Iterator{db: db, rs: rs, pin: pin, seq: min(seq, snapSeq), fillCache: opts.FillCache}
	it.lower, it.upper = bounds(opts)
	it.mems = sliceOf(it.inline.mems[:], len(rs.mems))
	for i, m := range rs.mems {
		// What a memtable gains from now on is newer than it.seq, which
		// the iterator would hide anyway.
		it.mems[i].dels = m.RangeDelLists()
		if m.Len() > 0 {
			it.mems[i].it = m.NewIter()
		}
	}
	n := len(rs.mems) + len(rs.segments)
	it.segIts = sliceOf(it.inline.segIts[:], len(rs.segments))
	it.srcs, it.maxSeqs = sliceOf(it.inline.srcs[:], n)[:0], sliceOf(it.inline.maxSeqs[:], n)[:0]
	it.m = &it.merge
	prefix := opts.Prefix
	if prefix == nil {
		prefix = boundsPrefix(it.lower, it.upper)
	}
	it.build(prefix)
	return it, nil
}

// memSource is one memtable of an Iterator: its iterator (nil if it was
// empty when the Iterator was made) and its range tombstones then.
type memSource struct {
	it   base.InternalIterator
	dels []*rangedel.List
}

// build chooses the sources and range tombstones that meet the bounds
// (and, for a whole prefix, pass the prefix filters), reusing the
// iterators already made, and resets the merge over them.
func (it *Iterator) build(prefix []byte) {
	db, rs := it.db, it.rs
	it.srcs, it.maxSeqs, it.rangeDels = it.srcs[:0], it.maxSeqs[:0], it.rangeDels[:0]
	for i, m := range rs.mems {
		for _, l := range it.mems[i].dels {
			it.addRangeDels(l)
		}
		if mi := it.mems[i].it; mi != nil && it.memOverlaps(mi) {
			it.srcs = append(it.srcs, mi)
			it.maxSeqs = append(it.maxSeqs, m.MaxSeq())
		}
	}
	pp := db.newPrefixProbe(prefix)
	defer pp.publish(&db.stats, it.pin)
	var single *segHandle
	for i, s := range rs.segments {
		// A segment's range tombstones apply even where its prefix filter
		// rules out its entries: they hide older versions elsewhere.
		it.addRangeDels(s.reader.RangeDels())
		if !s.overlaps(it.lower, it.upper) || pp.skip(s) {
			continue
		}
		si := it.segIts[i]
		if si == nil {
			if !it.inline.used {
				it.inline.used = true
				si = &it.inline.segIter
				s.reader.InitIter(si, it.fillCache)
			} else {
				si = s.reader.NewIter(it.fillCache)
			}
			it.segIts[i] = si
		}
		it.srcs = append(it.srcs, si)
		it.maxSeqs = append(it.maxSeqs, s.meta.MaxSeq)
		single = s
	}
	it.seg = nil
	if len(it.srcs) == 1 && len(it.rangeDels) == 0 && single != nil {
		it.m.Reset() // unused: the one segment is read directly
		it.seg = it.srcs[0].(*segment.Iter)
		it.seg.DeferValueRecords(false) // findPrevSeg defers them itself
		it.segUpper = it.upper != nil && bytes.Compare(single.meta.Largest, it.upper) >= 0
		it.segLower = it.lower != nil && bytes.Compare(single.meta.Smallest, it.lower) < 0
		it.segAll = !it.segUpper && it.seg.AllVisible(it.seq)
		return
	}
	for _, src := range it.srcs {
		if si, ok := src.(*segment.Iter); ok {
			si.DeferValueRecords(true) // mergeValue reads the record shown
		}
	}
	it.m.Reset(it.srcs...)
}

// memOverlaps reports whether the memtable iterator mi holds an entry
// within the iterator's bounds (or fails, for the merge to report it): a
// memtable with none is left out of the merge, as a segment whose key
// range misses the bounds is, so that a bounded scan of one segment keeps
// the single-segment path while the memtable holds writes elsewhere. The
// probe's seek replaces the merge's seek of a memtable left out. Entries
// the memtable gained after the iterator was made may make it count as
// meeting the bounds; that costs a source, never a key.
func (it *Iterator) memOverlaps(mi base.InternalIterator) bool {
	if it.lower == nil && it.upper == nil {
		return true
	}
	var ok bool
	if it.lower != nil {
		ok = mi.SeekGE(it.lower)
	} else {
		ok = mi.First()
	}
	if !ok {
		return mi.Error() != nil
	}
	key, _ := mi.InternalKey()
	return it.upper == nil || bytes.Compare(key, it.upper) < 0
}

// boundsPrefix returns lower if [lower, upper) is exactly the range of
// the keys that start with lower (upper is prefixEnd(lower)), else nil:
// such bounds are a prefix scan, which the prefix filters can serve.
func boundsPrefix(lower, upper []byte) []byte {
	n := len(upper)
	if n == 0 || n > len(lower) {
		return nil
	}
	for _, c := range lower[n:] {
		if c != 0xff {
			return nil
		}
	}
	if lower[n-1] == 0xff || upper[n-1] != lower[n-1]+1 || !bytes.Equal(upper[:n-1], lower[:n-1]) {
		return nil
	}
	return lower
}

// SetBounds changes the iterator's range to [lower, upper) (nil for no
// bound), as Pebble's Iterator.SetBounds does, so that one iterator can
// serve many short scans: it keeps its memtables, segments and their block
// iterators, and costs no allocation once warm. The bounds are copied:
// the caller may change lower and upper afterwards, and they may be the
// iterator's own Key or part of it. They replace those of
// IterOptions, Prefix included. The iterator becomes unpositioned, its
// Key and Value end, and the next use must be First, Last, Seek or
// SeekLT (Next and Prev return false until then). The versions it shows
// stay those of the moment it was made. If [lower, upper) is the range of
// the keys that begin with p (lower = p, upper = p with its last byte that
// is not 0xff incremented, as SetPrefix sets) and p is or begins with a
// whole prefix, segments whose prefix filter rules that prefix out are
// skipped with no I/O. On a closed iterator, or one stopped by
// an error, SetBounds does nothing.
func (it *Iterator) SetBounds(lower, upper []byte) {
	if it.err != nil {
		return
	}
	// The bounds are copied before the lease ends: they may be (parts
	// of) the current Key, as a skip scan's SetPrefix(it.Key()[:n]) is.
	it.lower = copyBound(&it.lowerBuf, lower)
	it.upper = copyBound(&it.upperBuf, upper)
	it.lease.Expire()
	it.valid, it.key, it.value, it.reverse, it.segAt = false, nil, nil, false, false
	it.build(boundsPrefix(it.lower, it.upper))
}

// SetPrefix narrows the iterator to the keys that start with p, as
// SetBounds(p, the first key after them) does: where p is or begins with
// a whole prefix of Options.Prefix, segments whose prefix filter rules it
// out are skipped.
// A reused iterator serves a prefix lookup with SetPrefix and First.
func (it *Iterator) SetPrefix(p []byte) {
	end := append(it.endBuf[:0], p...)
	for len(end) > 0 && end[len(end)-1] == 0xff {
		end = end[:len(end)-1]
	}
	if it.endBuf = end; len(end) == 0 {
		end = nil // p is all 0xff (or empty): no key is past every key with it
	} else {
		end[len(end)-1]++
	}
	it.SetBounds(p, end)
}

// copyBound copies b into *buf (its capacity reused) and returns the
// copy; nil stays nil, an empty bound stays an empty one.
func copyBound(buf *[]byte, b []byte) []byte {
	if b == nil {
		return nil
	}
	*buf = append((*buf)[:0], b...)
	if *buf == nil {
		*buf = []byte{}
	}
	return *buf
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
	if it.seg != nil {
		it.seg.First()
		return it.findNextSeg()
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
		return it.seekLT(it.upper)
	}
	if it.seg != nil {
		if it.segAllBack() {
			return it.prevSegAll(it.seg.Last())
		}
		it.seg.DeferValueRecords(true) // findPrevSeg reads the record it shows
		it.seg.Last()
		return it.findPrevSeg()
	}
	it.m.Last()
	return it.findPrev()
}

// Seek moves to the first key >= key (and in range). key may be one the
// iterator returned (Key), which the move itself may overwrite: it is
// copied first.
func (it *Iterator) Seek(key []byte) bool {
	if !it.usable() {
		return false
	}
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	} else {
		key = it.ownSeekKey(key)
	}
	return it.seekGE(key)
}

// SeekLT moves to the last key < key (and in range). key may be one the
// iterator returned, as for Seek.
func (it *Iterator) SeekLT(key []byte) bool {
	if !it.usable() {
		return false
	}
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	} else {
		key = it.ownSeekKey(key)
	}
	return it.seekLT(key)
}

// ownSeekKey copies a seek's key into the iterator's own buffer. The
// sources search with the key while they decode entries into the buffers
// that the iterator's current Key aliases (a block's prefix-compressed
// key, rebuilt at each step), so Seek(it.Key()) compared the key with
// itself as it was being rewritten and stopped at the first entry it
// decoded. A copy of a few bytes is nothing beside a seek.
func (it *Iterator) ownSeekKey(key []byte) []byte {
	it.seekBuf = append(it.seekBuf[:0], key...)
	return it.seekBuf
}

func (it *Iterator) seekGE(key []byte) bool {
	if it.seg != nil {
		it.seg.SeekGE(key)
		return it.findNextSeg()
	}
	it.m.SeekGE(key)
	return it.findNext()
}

func (it *Iterator) seekLT(key []byte) bool {
	if it.seg != nil {
		if it.segAllBack() {
			return it.prevSegAll(it.seg.SeekLT(key))
		}
		it.seg.DeferValueRecords(true)
		it.seg.SeekLT(key)
		return it.findPrevSeg()
	}
	it.m.SeekLT(key)
	return it.findPrev()
}

// Next moves to the following key.
func (it *Iterator) Next() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if s := it.seg; s != nil {
		if it.segAt {
			return it.atSeg(s.Next()) // s is at the current key, the last of its versions
		}
		if it.reverse {
			// s is before the current key: seek back to it, then step over
			// its versions as in the forward case. The key may alias s's
			// block, which the seek may leave: it is copied first.
			it.keyBuf = append(it.keyBuf[:0], it.key...)
			if s.SeekGE(it.keyBuf) && bytes.Equal(s.Key(), it.keyBuf) {
				s.NextUserKey()
			}
			return it.findNextSeg()
		}
		if it.segAll {
			return it.atSeg(s.Next())
		}
		// The common step of a scan: one loop in the segment over
		// versions, seq, tombstones and the bound.
		return it.atSeg(s.NextVisible(it.seq, it.segBound()))
	}
	if it.reverse {
		// m is before the current key (kept in keyBuf): seek past it and
		// its versions, however many there are.
		it.m.SeekGE(it.successor())
	} else {
		it.keyBuf = append(it.keyBuf[:0], it.key...)
		it.skipVersions()
	}
	return it.findNext()
}

// Prev moves to the preceding key.
func (it *Iterator) Prev() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if !it.reverse {
		it.keyBuf = append(it.keyBuf[:0], it.key...)
		return it.seekLT(it.keyBuf)
	}
	if it.segAt {
		return it.prevSegAll(it.seg.Prev())
	}
	if it.seg != nil {
		return it.findPrevSeg()
	}
	return it.findPrev()
}

// versionSteps is how many versions of a key skipVersions steps over
// before it seeks past the rest. A step costs a few nanoseconds and a
// seek a search in each source at the key, but a key overwritten v times
// since the last flush has v versions in the memtable (a snapshot is not
// needed for that), and a scan stepped over all of them: a counter
// updated 10^6 times cost every scan that passed it 10^6 steps.
const versionSteps = 8

// skipVersions moves m past every remaining version of keyBuf: a few
// steps, then, if versions remain, one seek of the sources still at it.
func (it *Iterator) skipVersions() {
	for range versionSteps {
		if !it.m.Valid() || !bytes.Equal(it.m.Key(), it.keyBuf) {
			return
		}
		it.m.Next()
	}
	if it.m.Valid() && bytes.Equal(it.m.Key(), it.keyBuf) {
		it.m.SkipTo(it.successor(), merge.EverySource)
	}
}

// passNewer moves m, at a version of keyBuf written after the Iterator
// was made, to keyBuf's newest version the Iterator sees, or past keyBuf
// if it sees none: a few steps, then one seek of the sources still above
// it. Versions written since an Iterator was made are in the memtable it
// holds, as many as were written: an Iterator kept for lookups beside a
// counter updated in place stepped over every update at each pass.
func (it *Iterator) passNewer() {
	for range versionSteps {
		if !it.m.Next() || it.m.Seq() <= it.seq || !bytes.Equal(it.m.Key(), it.keyBuf) {
			return
		}
	}
	it.m.SkipToVersion(it.keyBuf, it.seq)
}

// successor returns keyBuf+"\x00" (in succBuf): no user key lies between
// keyBuf and it, so a seek to it passes every version of keyBuf and
// nothing else.
func (it *Iterator) successor() []byte {
	it.succBuf = append(append(it.succBuf[:0], it.keyBuf...), 0)
	return it.succBuf
}

// findNextSeg is findNext reading the one segment seg directly: with no
// range tombstone to apply, a key is shown at its newest visible version
// unless that is a deletion, and the segment steps over the older
// versions by itself (SkipToVisible, NextVisible). Key and Value alias the
// segment's block, as its Iter's do.
func (it *Iterator) findNextSeg() bool {
	return it.atSeg(it.seg.SkipToVisible(it.seq, it.segBound()))
}

// atSeg ends a forward move over the one segment seg: at its current
// entry if ok, else unpositioned.
func (it *Iterator) atSeg(ok bool) bool {
	return it.landSeg(ok, false, false)
}

// landSeg ends a move over the one segment seg, in the direction reverse
// says: at seg's current entry if ok, else unpositioned.
func (it *Iterator) landSeg(ok, reverse, segAt bool) bool {
	it.expire()
	it.reverse, it.segAt = reverse, segAt
	if !ok {
		return it.stop()
	}
	s := it.seg
	it.key, it.value, it.valid = it.lease.Guard(s.Key()), it.lease.Guard(s.Value()), true
	return true
}

// segBound is the bound a move over seg stops at: nil when seg has no key
// at or above upper.
func (it *Iterator) segBound() []byte {
	if it.segUpper {
		return it.upper
	}
	return nil
}

// findPrevSeg is findPrev reading the one segment seg directly. The key
// and the value stay aliases of the block unless the step past them
// leaves the block, whose memory the next block may be decoded into; a
// key that is not in the block (the segment rebuilds it at each step) is
// copied. A value stored apart from its key (a value record) is read only
// for the version shown: seg leaves the records of the versions it steps
// over unread (DeferValueRecords), so a key with many large versions
// costs one record's read, not one per version.
func (it *Iterator) findPrevSeg() bool {
	it.expire()
	it.reverse, it.segAt = true, false
	s := it.seg
	s.DeferValueRecords(true)
	for s.Valid() {
		k, trailer := s.InternalKey()
		if it.segLower && bytes.Compare(k, it.lower) < 0 {
			break
		}
		key, keyAliased := k, s.KeyInBlock()
		if !keyAliased {
			it.keyBuf = append(it.keyBuf[:0], k...)
			key = it.keyBuf
		}
		found, value, aliased, deferred := false, []byte(nil), false, false
		for {
			// Backward, a key's versions come oldest first: the last
			// visible one is its newest.
			if seq, kind := base.SplitTrailer(trailer); seq <= it.seq {
				found, value, aliased, deferred = kind == base.KindPut, nil, false, false
				if found {
					// A value record does not live in the block; it is
					// read once the version shown is known.
					if it.valRef, deferred = s.DeferredValue(); !deferred {
						value, aliased = s.Value(), s.ValueInBlock()
					}
				}
			}
			if (aliased || keyAliased) && s.LeavesBlock() {
				// The step below may decode the previous block over the
				// one value and key alias (a newer version of the key can
				// be the first entry of its block).
				if aliased {
					value, aliased = it.copyValue(value), false
				}
				if keyAliased {
					it.keyBuf = append(it.keyBuf[:0], key...)
					key, keyAliased = it.keyBuf, false
				}
			}
			if !s.Prev() || !s.SameUserKey() {
				break
			}
			_, trailer = s.InternalKey()
		}
		if s.Error() != nil {
			break
		}
		if found && deferred {
			var err error
			if value, err = s.LoadValue(&it.valRef); err != nil {
				break
			}
		}
		if found {
			s.DeferValueRecords(false)
			it.key, it.value, it.valid = it.lease.Guard(key), it.lease.Guard(value), true
			return true
		}
	}
	s.DeferValueRecords(false)
	return it.stop()
}

// segAllBack reports whether a backward move over seg may show each entry
// where it is (prevSegAll): every entry is a visible put of a key of its
// own (segAll), and none lies below lower.
func (it *Iterator) segAllBack() bool { return it.segAll && !it.segLower }

// prevSegAll ends a backward move over seg when segAllBack: at its
// current entry if ok (a key whose one version is a visible put), which
// seg stays at (segAt), else unpositioned. Key and Value alias seg's
// block, as forward (atSeg): seg moves from them only at the next call.
func (it *Iterator) prevSegAll(ok bool) bool {
	return it.landSeg(ok, true, ok)
}

// findNext moves m forward to the newest visible version of the next key
// that has a value, and stops there.
func (it *Iterator) findNext() bool {
	it.expire()
	it.reverse, it.segAt = false, false
	for it.m.Valid() {
		k := it.m.Key()
		if it.upper != nil && bytes.Compare(k, it.upper) >= 0 {
			break
		}
		if it.m.Seq() > it.seq { // written after the iterator was made
			it.keyBuf = append(it.keyBuf[:0], k...)
			it.passNewer()
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
		v, ok := it.mergeValue()
		if !ok {
			break
		}
		it.key, it.value, it.valid = it.lease.Guard(k), it.lease.Guard(v), true
		return true
	}
	return it.stop()
}

// mergeValue returns the value of m's current entry. The segments below
// the merge leave the value records of the entries they step over unread
// (DeferValueRecords, set in build), so that a step past a key's older
// versions reads none of their values (with 64 KiB values kept by
// snapshots, a step over a key of 100 versions read them all: 7.4 ms);
// the record of the version shown is read here. It reports false, the
// iterator's error set, for a damaged record.
func (it *Iterator) mergeValue() ([]byte, bool) {
	s, ok := it.m.Source().(*segment.Iter)
	if !ok || !s.ValueDeferred() {
		return it.m.Value(), true
	}
	v, err := s.LoadDeferred()
	if err != nil {
		if it.err == nil {
			it.err = fmt.Errorf("bloomkv: iterator: %w", err) // the segment names its file
		}
		return nil, false
	}
	return v, true
}

// deferredAt reports whether m's current entry is a value record its
// segment has not read.
func (it *Iterator) deferredAt() bool {
	s, ok := it.m.Source().(*segment.Iter)
	return ok && s.ValueDeferred()
}

// maxEagerCopy is the largest value findPrev copies from a version that
// a newer visible version of its key may replace: a larger one is read
// again, once its version is known to be the newest (newestVisible).
const maxEagerCopy = 4 << 10

// findPrev moves m backward over the versions of the previous key that
// has a visible value. Backward, a key's versions come oldest first, so
// the last visible one seen is the newest; key and value are copied
// because m has moved on by the time the key is known to be shown. Only
// the first visible value of a key and small ones are copied as m passes
// them: copying each visible version's value made a step over a key
// written v times with 64 KiB values copy v·64 KiB (1 ms at v=100, where
// a forward step took 4 µs).
func (it *Iterator) findPrev() bool {
	it.expire()
	it.reverse, it.segAt = true, false
	for it.m.Valid() {
		if it.lower != nil && bytes.Compare(it.m.Key(), it.lower) < 0 {
			break
		}
		it.keyBuf = append(it.keyBuf[:0], it.m.Key()...)
		found, newest := false, uint64(0) // the newest visible version: a put?
		copied, later := false, false     // a value in valBuf; the newest's is not
		for steps := 0; it.m.Valid() && bytes.Equal(it.m.Key(), it.keyBuf); steps++ {
			if steps == versionSteps {
				// Many versions (oldest first, this way): find the newest
				// from above instead, and seek past them all.
				var ok bool
				if found, newest, ok = it.newestVisible(); !ok {
					return it.stop()
				}
				copied, later = found, false
				break
			}
			if seq := it.m.Seq(); seq <= it.seq {
				found, newest, later = it.m.Kind() == base.KindPut, seq, false
				if found && copied && it.deferredAt() {
					later = true // its record is read if it proves the newest
				} else if found {
					v, ok := it.mergeValue()
					if !ok {
						return it.stop()
					}
					if !copied || len(v) <= maxEagerCopy {
						it.copyValue(v)
						copied = true
					} else {
						later = true
					}
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
		if found && later {
			// Read the newest's value now that it is known: it was passed
			// unread, or too large to copy on speculation.
			if f, seq, ok := it.newestVisible(); !ok || !f || seq != newest {
				break // a source failed: the version was there
			}
		}
		if found {
			it.key, it.value, it.valid = it.lease.Guard(it.keyBuf), it.lease.Guard(it.valBuf), true
			return true
		}
	}
	return it.stop()
}

// newestVisible finds keyBuf's newest version the Iterator sees from
// above: it seeks to keyBuf's newest version, steps over those written
// after the Iterator was made, copies the value into valBuf if it is a
// put, and leaves m at the last entry before keyBuf. findPrev calls it
// past a key of many versions, where stepping back over every version
// cost one step each (O(v) for a key overwritten v times since the last
// flush), and to read the value of a newest version it passed unread or
// did not copy. found and seq are that version's, as findPrev keeps them
// (false and 0 if the Iterator sees none); ok is false if a source
// failed.
func (it *Iterator) newestVisible() (found bool, seq uint64, ok bool) {
	if it.m.SeekGE(it.keyBuf) && it.m.Seq() > it.seq && bytes.Equal(it.m.Key(), it.keyBuf) {
		it.passNewer()
	}
	if it.m.Valid() && bytes.Equal(it.m.Key(), it.keyBuf) {
		seq = it.m.Seq()
		if found = it.m.Kind() == base.KindPut; found {
			v, vok := it.mergeValue()
			if !vok {
				return false, 0, false
			}
			it.copyValue(v)
		}
	}
	if it.m.Error() != nil {
		return false, 0, false
	}
	it.m.SeekLT(it.keyBuf)
	return found, seq, it.m.Error() == nil
}

// maxKeptValBuf is the largest valBuf an Iterator keeps past a
// positioning call that did not use a quarter of it.
const maxKeptValBuf = 64 << 10

// expire begins the end of a positioning call: the Key and Value it
// returned last end (their lease expires), and valBuf goes if it is
// larger than maxKeptValBuf and the last call copied less than a
// quarter of it there. Backward steps copy values (copyValue), so an
// Iterator that once stepped back over a large value (up to
// MaxValueSize) kept a buffer of its size for as long as it lived, though
// it showed small values since, or moved forward, where values are not
// copied; steps back over large values one after another still reuse it.
func (it *Iterator) expire() {
	it.lease.Expire()
	if cap(it.valBuf) > maxKeptValBuf && 4*it.valBufLen < cap(it.valBuf) {
		it.valBuf = nil
	}
	it.valBufLen = 0
}

// copyValue copies v into valBuf and returns the copy.
func (it *Iterator) copyValue(v []byte) []byte {
	it.valBuf = append(it.valBuf[:0], v...)
	it.valBufLen = len(v)
	return it.valBuf
}

// stop leaves the iterator unpositioned, keeping a source's error.
func (it *Iterator) stop() bool {
	it.valid, it.key, it.value = false, nil, nil
	err := it.m.Error()
	if it.seg != nil {
		err = it.seg.Error()
	}
	if err != nil && it.err == nil {
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
		return it.unusable()
	}
	return true
}

// unusable ends a positioning call that cannot move: the iterator is at
// no key, and the Key and Value it returned last end here, as at any
// positioning call (in an invariants build, using them afterwards
// faults). Apart from usable so that usable inlines.
func (it *Iterator) unusable() bool {
	it.expire()
	it.valid, it.key, it.value = false, nil, nil
	return false
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
		if si != nil {
			si.Close()
		}
	}
	it.rs.unpin(it.pin)
	it.rs, it.segIts, it.mems, it.srcs, it.m, it.seg = nil, nil, nil, nil, nil, nil
	it.merge = merge.Iter{}
	// A closed Iterator the program still refers to holds no copies.
	it.keyBuf, it.succBuf, it.valBuf, it.seekBuf = nil, nil, nil, nil
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
