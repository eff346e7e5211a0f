package segment

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/invariants"
)

var errIterClosed = errors.New("segment: iterator closed")

// Iter walks a segment's entries in internal-key order: user keys
// ascending, versions of a key newest first. It is a two-level iterator:
// a position in the in-memory index selects a data block, and a block
// iterator walks that block.
//
// The positioning methods report whether the Iter is now at an entry.
// Next and Prev require a valid position. Key and Value stay valid until
// the next positioning call. An Iter is not safe for concurrent use.
type Iter struct {
	r        *Reader
	mode     cacheMode
	idx      int // index entry of the loaded block; -1 if none
	blk      blockIter
	ra       readahead
	err      error
	left     []byte // the user key a step leaves a block with, for sameUser
	keysOnly bool   // SkipValueRecords: settle does not read value records
	// deferRecords (DeferValueRecords): settle leaves a value record
	// unread, and says so in deferred, until LoadValue reads it.
	deferRecords, deferred bool
	// distinct: the segment holds one entry per user key, so no step
	// lands on another version of the key it left (blockIter.distinct),
	// where its properties say so truly (blockIter.checking).
	distinct bool
	// gapLo and gapHi bound the value records of the loaded block's
	// entries (the gap between the block before it and it), for
	// valueMapped.
	gapLo, gapHi uint64
	// buf backs the block iterator's key buffer and left, so that an
	// Iter is one allocation (or none, inside a caller's: InitIter).
	buf [96]byte
	// apart is the value of the current entry when it is a value record
	// (values.go, inApart), resolved by settle when the Iter moves there;
	// otherwise Value returns the value in the block. inApart is a flag
	// rather than apart's being nil so that settle, which every step
	// calls, stores no pointer (and inlines).
	apart   []byte
	inApart bool
	// KeepValueRecords: rawMin > 0 keeps value records of at least rawMin
	// decoded bytes as stored. At such an entry (inApart) rawKept is set,
	// raw is the record (valueRecord) and rawLen the length of its value,
	// and apart is nil. settleApart clears rawKept; settle, which every
	// step calls, only inApart, so that it stays cheap enough to inline.
	rawMin  int
	rawKept bool
	raw     []byte
	rawLen  int
	rawBuf  []byte // the records read with pread, reused
}

// NewIter returns an unpositioned iterator. With fillCache false, blocks
// found in the cache are used but blocks read from the file are not
// inserted, so a compaction or long scan does not evict the hot set.
func (r *Reader) NewIter(fillCache bool) *Iter {
	it := new(Iter)
	r.InitIter(it, fillCache)
	return it
}

// InitIter makes *it an unpositioned iterator, as NewIter does, for a
// caller that keeps the Iter inside a larger object (one allocation
// instead of two). it must not be in use.
func (r *Reader) InitIter(it *Iter, fillCache bool) {
	mode := cacheLookup
	if fillCache {
		mode = cacheFill
	}
	*it = Iter{r: r, mode: mode, idx: -1, distinct: r.props.Entries == r.props.DistinctKeys}
	it.ra.reuseDecoded = !fillCache
	it.blk.own, it.left = it.buf[:0:64], it.buf[64:64:96]
}

// SkipValueRecords makes the Iter leave value records unread: Value is
// empty for an entry whose value is stored apart from its key. For a
// caller that reads keys only (rebuilding a filter, checking one), which
// would otherwise read, and at first checksum, every large value.
func (it *Iter) SkipValueRecords() { it.keysOnly = true }

// DeferValueRecords makes the steps that follow it (until it is called
// with false) leave value records unread: at an entry whose value is one,
// ValueDeferred is true, Value must not be called (in an invariants build
// it panics), and DeferredValue names the record for LoadValue to read
// later, after the Iter has moved on. A backward scan meets a key's
// versions oldest first and shows only the newest one visible: it reads
// that one record rather than every version's.
func (it *Iter) DeferValueRecords(on bool) { it.deferRecords = on }

// ValueDeferred reports whether the current entry's value is a value
// record left unread (DeferValueRecords).
func (it *Iter) ValueDeferred() bool { return it.inApart && it.deferred }

// A ValueRef names the value record of an entry that an Iter stepped over
// without reading it (DeferValueRecords), for LoadValue.
type ValueRef struct {
	block int // the data block of the entry
	n     int
	enc   [maxValueHandleLen]byte // the entry's handle: enc[:n]
}

// DeferredValue returns the ref of the current entry's unread value
// record; ok is false at an entry whose value is not one.
func (it *Iter) DeferredValue() (ref ValueRef, ok bool) {
	if !it.ValueDeferred() {
		return ValueRef{}, false
	}
	ref.block, ref.n = it.idx, len(it.blk.val) // too long a handle: LoadValue reports it
	copy(ref.enc[:], it.blk.val)
	return ref, true
}

// LoadValue reads the value record ref names, checking it as a step that
// read it would have. The value lives in the file's mapping or a buffer
// of its own, not in a block: later steps of the Iter leave it valid,
// until the Iter is closed. A damaged record stops the Iter with its
// error, which LoadValue returns too.
func (it *Iter) LoadValue(ref *ValueRef) ([]byte, error) {
	if it.err != nil {
		return nil, it.err
	}
	var v []byte
	var err error
	if ref.n > len(ref.enc) {
		err = it.r.corrupt(it.r.index[ref.block].h.offset, "bad value handle")
	} else {
		v, err = it.r.value(ref.block, ref.enc[:ref.n], it.mode, false)
	}
	if err != nil {
		it.err, it.blk.valid = err, false
		return nil, err
	}
	if v == nil {
		v = []byte{} // an empty value stored apart (not by this writer)
	}
	return v, nil
}

// LoadDeferred reads the value record of the current entry, which a step
// left unread (ValueDeferred), checking it as the step would have; Value
// returns it from then on. At any other entry it returns Value. A
// damaged record stops the Iter with its error.
func (it *Iter) LoadDeferred() ([]byte, error) {
	if !it.ValueDeferred() {
		return it.Value(), nil
	}
	v, ok := it.valueMapped() // a scan's usual case, as settleApart's
	if !ok {
		ref, _ := it.DeferredValue()
		var err error
		if v, err = it.LoadValue(&ref); err != nil {
			return nil, err
		}
	}
	it.apart, it.deferred = v, false
	return v, nil
}

// KeepValueRecords makes the Iter, at an entry whose value is a value
// record that decodes to at least minLen bytes (minLen > 0), verify the
// record's checksum and keep it as stored rather than decode it: RawValue
// returns it, for a compaction whose output stores that value apart too
// (minLen is its writer's SeparateValues) and copies the record as it is
// (Writer.AddValueRecord). Value is nil at such an entry: the value is
// never decoded. Smaller values, which the output keeps in its blocks,
// are read as without it.
//
// Value does not decode a kept record on demand because it is on every
// scan's path: the check would take settle and Value past the inlining
// budget.
func (it *Iter) KeepValueRecords(minLen int) { it.rawMin = max(minLen, 0) }

// RawValue returns, at an entry whose value record the Iter keeps as
// stored (KeepValueRecords), the record (its stored bytes, compression
// type byte and CRC, the checksum verified) and the length of the value
// it decodes to; ok is false at any other entry. rec aliases the file's
// mapping or a buffer of the Iter that the next positioning call
// rewrites, so it is valid until then; it must not be modified.
func (it *Iter) RawValue() (rec []byte, n int, ok bool) {
	if !it.inApart || !it.rawKept {
		return nil, 0, false
	}
	return it.raw, it.rawLen, true
}

// NewIterWithCounters is NewIter counting the Iter's data block reads,
// cache hits and bytes into c instead of the Reader's Counters: a store
// uses it to keep compaction reads out of the statistics of Gets and
// scans. c must not be nil.
func (r *Reader) NewIterWithCounters(fillCache bool, c *Counters) *Iter {
	it := r.NewIter(fillCache)
	it.ra.counters = c
	return it
}

// load points the block iterator at data block i (unpositioned). It
// returns false at either end of the index or on error.
func (it *Iter) load(i int) bool {
	it.blk.valid = false
	if i != it.idx {
		// The last value record read (up to MaxValueSize) is an entry's
		// of the block left: not kept once the Iter leaves that block
		// (settle, which every step calls, leaves apart as it is).
		it.apart = nil
	}
	if it.err != nil || i < 0 || i >= len(it.r.index) {
		// Out of blocks: the block left is not kept either (data, and
		// the key and value that alias it), for it may be a large one
		// decoded on the heap, and a merge may leave this Iter here
		// while its other sources go on; a seek loads it again.
		it.blk.reset(nil, it.blk.internal, it.blk.file, 0)
		it.ra.release()
		return false
	}
	data := it.blk.data
	if i != it.idx || data == nil {
		var err error
		data, err = it.r.dataBlock(i, it.mode, &it.ra)
		it.ra.release()
		if err != nil {
			it.err = err
			return false
		}
	}
	it.idx = i
	if _, err := it.r.initBlock(&it.blk, i, data); err != nil {
		it.err = err
		return false
	}
	if it.distinct {
		b, p := &it.blk, &it.r.props
		b.distinct = it.r.index[i].scanChecked.Load()
		b.checking, b.noTombstones, b.maxSeq = !b.distinct, p.Tombstones == 0, p.MaxSeq
	}
	it.gapLo, it.gapHi = 0, it.r.index[i].h.offset
	if i > 0 {
		it.gapLo = it.r.index[i-1].h.end()
	}
	return true
}

// forward moves on to the first entry of the following blocks while the
// current block is exhausted (ok false). A block that a walk found to
// agree with the properties (blockIter.walked) is marked so, for the
// steps into it after.
func (it *Iter) forward(ok bool) bool {
	for !ok {
		if it.blk.err != nil {
			it.err = it.blk.err
			return false
		}
		if it.blk.walked {
			it.r.index[it.idx].scanChecked.Store(true)
		}
		if !it.load(it.idx + 1) {
			return false
		}
		it.touchNext()
		ok = it.blk.first()
	}
	return true
}

// touchNext reads, in a mapped segment, the first and last bytes of the
// data block after the current one: where its first entry and its restart
// count lie. Blocks are pages apart, past where the hardware prefetcher
// follows a stream, and with large values a block holds one entry, so a
// scan would otherwise meet two cache misses per block one after the
// other; loaded now, they overlap with the work on this block. Only after
// a block of one restart interval (16 entries or fewer: entries of 256
// bytes and more in 4 KiB blocks): with small entries the work on a block
// is long enough for the prefetchers, and the early loads cost more than
// they save (a full scan with 100-byte values: 18.6 -> 24 cpu-ns/key).
func (it *Iter) touchNext() {
	m, i := it.r.opts.Mapped, it.idx+1
	if m == nil || i >= len(it.r.index) || it.blk.numRestarts > 1 {
		return
	}
	h := it.r.index[i].h
	if end := h.offset + h.length; h.length > 0 && end <= uint64(len(m)) {
		it.blk.touched ^= m[h.offset] ^ m[end-1]
	}
}

// backward is forward's mirror image.
func (it *Iter) backward(ok bool) bool {
	for !ok {
		if it.blk.err != nil {
			it.err = it.blk.err
			return false
		}
		if it.blk.walked {
			it.r.index[it.idx].scanChecked.Store(true)
		}
		if !it.load(it.idx - 1) {
			return false
		}
		ok = it.blk.last()
	}
	return true
}

// First moves to the first entry.
func (it *Iter) First() bool {
	return it.settle(it.load(0) && it.forward(it.blk.first()))
}

// Last moves to the last entry.
func (it *Iter) Last() bool {
	return it.settle(it.load(len(it.r.index)-1) && it.backward(it.blk.last()))
}

// Next moves to the following entry.
func (it *Iter) Next() bool {
	if !it.Valid() {
		return false
	}
	return it.settle(it.blk.next() || it.cross(it.forward))
}

// Prev moves to the preceding entry.
func (it *Iter) Prev() bool {
	if !it.Valid() {
		return false
	}
	return it.settle(it.blk.prev() || it.cross(it.backward))
}

// cross moves into the next block in a direction (forward or backward)
// once the current one has no entry left that way, and sets sameUser by
// comparing with the user key it left, which the new block's decoding
// overwrites: blocks may split a key's versions.
func (it *Iter) cross(move func(bool) bool) bool {
	if it.blk.err == nil {
		k, _ := splitInternalKey(it.blk.key)
		it.left = append(it.left[:0], k...)
	}
	if !move(false) {
		return false
	}
	k, _ := splitInternalKey(it.blk.key)
	it.blk.sameUser = bytes.Equal(k, it.left)
	if it.blk.sameUser && it.distinct {
		// The properties say the segment holds one entry per user key
		// (blockIter.distinct), and the blocks disagree.
		it.blk.corrupt(it.blk.offset, "user key repeated across blocks, in a segment whose properties say it holds one entry per user key")
		it.err = it.blk.err
		return false
	}
	return true
}

// NextUserKey moves to the following entry whose user key differs from
// the current one's (its newest version): past the current key's older
// versions, without comparing keys inside a block.
func (it *Iter) NextUserKey() bool {
	for it.Valid() {
		if !it.blk.next() && !it.cross(it.forward) {
			return false
		}
		if !it.blk.sameUser {
			return it.settle(true)
		}
	}
	return false
}

// NextVisible moves to the next user key's newest version at or below
// seq that is a put, past the rest of the current key's versions, the
// versions newer than seq, and keys whose newest version at or below seq
// is a tombstone. It reports false at the end, on an error, or at the
// first user key >= upper (if upper is not nil), where it leaves the Iter.
// It is the forward step of a store's iterator over one segment (no other
// source, no range tombstone), done here in one loop over the block
// iterator rather than through Next and NextUserKey, which a full scan of
// 100-byte values called once per key at a cost of about a third of the
// step.
func (it *Iter) NextVisible(seq uint64, upper []byte) bool { return it.visible(seq, upper, true) }

// SkipToVisible is NextVisible from the current entry instead of the next
// user key: it stays there if that is a visible put. For a store's
// iterator after a seek.
func (it *Iter) SkipToVisible(seq uint64, upper []byte) bool {
	return it.visible(seq, upper, false)
}

func (it *Iter) visible(seq uint64, upper []byte, step bool) bool {
	skipKey := step // pass over the versions of the user key last seen
	for it.Valid() {
		if step && !it.blk.next() && !it.cross(it.forward) {
			return false
		}
		step = true
		if skipKey && it.blk.sameUser {
			continue
		}
		ukey, t := splitInternalKey(it.blk.key)
		switch {
		case upper != nil && bytes.Compare(ukey, upper) >= 0:
			return false
		case t>>8 > seq: // too new: an older version may be visible
			skipKey = false
		case base.Kind(t) == base.KindDelete:
			skipKey = true
		default:
			return it.settle(true)
		}
	}
	return false
}

// AllVisible reports whether every entry of the segment is a put, the
// only version of its user key, with a sequence number at or below seq
// (as in a compacted store, read at a later seq): a step to the next
// visible entry is then Next, without NextVisible's checks. It says so
// from the properties, which Open does not check against the entries:
// until a walk of a block found it agrees (blockIter.checking), a step
// into it reports an entry that contradicts them (a user key that
// repeats, a tombstone, a sequence number above max-seq) as corruption.
func (it *Iter) AllVisible(seq uint64) bool {
	p := &it.r.props
	return it.distinct && p.Tombstones == 0 && p.MaxSeq <= seq
}

// SameUserKey reports whether the last Next or Prev moved to an entry
// with the user key of the entry it left (another version of it). After
// any other positioning call it is false.
func (it *Iter) SameUserKey() bool { return it.blk.sameUser }

// LeavesBlock reports whether Prev from the current entry moves to another
// data block. Value (when ValueInBlock) and Key (when KeyInBlock) alias
// the current block, which an Iter that does not fill the cache may decode
// the next block into: a caller that keeps one across Prev copies it first
// when this is true.
func (it *Iter) LeavesBlock() bool { return it.blk.offset == 0 }

// ValueInBlock reports whether Value aliases the current block: not when
// the value is a value record, which lives in the file's mapping or a
// buffer of its own. Only a value in the block can be overwritten by a
// step that leaves the block (LeavesBlock).
func (it *Iter) ValueInBlock() bool { return !it.inApart }

// KeyInBlock reports whether Key aliases the current block, as Value does,
// rather than a buffer that the next step rewrites: it then stays valid
// until a step leaves the block (LeavesBlock), as Value does. Every step
// (Next, Prev, a seek) leaves it so at an entry whose key the block stores
// whole (a restart point's; every entry's, with values of about 40 bytes
// and more).
func (it *Iter) KeyInBlock() bool { return it.blk.keyInData }

// SeekGE moves to the first entry whose user key is >= key (its newest
// version).
func (it *Iter) SeekGE(key []byte) bool {
	i := it.r.searchIndex(key, maxTrailer)
	ok := it.load(i) && it.forward(it.blk.seekUser(key))
	it.blk.sameUser = false // seekGE's scan compared with entries before the target
	return it.settle(ok)
}

// SeekLT moves to the last entry whose user key is < key (its oldest
// version).
func (it *Iter) SeekLT(key []byte) bool {
	if it.SeekGE(key) {
		return it.Prev()
	}
	return it.err == nil && it.Last()
}

// Valid reports whether the Iter is at an entry.
func (it *Iter) Valid() bool { return it.err == nil && it.blk.valid }

// Key returns the user key of the current entry, or nil if the Iter is
// not at an entry.
func (it *Iter) Key() []byte {
	if !it.blk.valid {
		return nil
	}
	k, _ := splitInternalKey(it.blk.key)
	return k
}

// InternalKey returns the user key and trailer (base.MakeTrailer) of the
// current entry in one call, for merging iterators that compare entries.
func (it *Iter) InternalKey() ([]byte, uint64) {
	if !it.blk.valid {
		return nil, 0
	}
	k, t := splitInternalKey(it.blk.key)
	return k, publicTrailer(t)
}

// Seq returns the sequence number of the current entry.
func (it *Iter) Seq() uint64 {
	seq, _ := base.SplitTrailer(it.trailer())
	return seq
}

// Kind returns the kind of the current entry.
func (it *Iter) Kind() base.Kind {
	_, kind := base.SplitTrailer(it.trailer())
	return kind
}

func (it *Iter) trailer() uint64 {
	if !it.blk.valid {
		return 0
	}
	_, t := splitInternalKey(it.blk.key)
	return publicTrailer(t)
}

// Value returns the value of the current entry; it aliases block memory
// (possibly shared through the cache) or the file's mapping, so it must
// not be modified.
func (it *Iter) Value() []byte {
	if it.inApart {
		if invariants.Enabled && it.deferred {
			panic("segment: Value at an entry whose value record was deferred (DeferValueRecords)")
		}
		return it.apart
	}
	return it.blk.val
}

// settle finishes a positioning call that reports ok: at an entry whose
// value is a value record, it reads the record (checking it), so that
// Value cannot fail. A damaged record stops the Iter with its error, and
// so does an entry of a kind Lookup rejects. Written to inline (the kind
// byte read in place, as isValueHandle does): every step of a scan ends
// here.
func (it *Iter) settle(ok bool) bool {
	it.inApart = false
	return ok && (base.Kind(it.blk.key[len(it.blk.key)-base.TrailerLen]) <= base.KindPut || it.settleKind())
}

// settleKind is settle at an entry that is neither a put nor a tombstone:
// a put whose value is a value record, in a file that has them, or
// corruption, as Lookup finds it. Apart from settle, which every step
// calls, so that settle inlines.
func (it *Iter) settleKind() bool {
	kind := base.Kind(it.blk.key[len(it.blk.key)-base.TrailerLen])
	if kind == kindValueHandle && it.r.props.Values > 0 {
		return it.settleApart()
	}
	it.blk.corrupt(it.blk.offset, fmt.Sprintf("entry of unknown kind %d", kind))
	it.err = it.blk.err
	return false
}

// settleApart is settle at an entry whose value is a value record; apart
// from settle, which every step calls, so that settle inlines.
func (it *Iter) settleApart() bool {
	it.inApart, it.rawKept, it.deferred = true, false, false
	if it.keysOnly {
		it.apart = []byte{}
		return true
	}
	if it.deferRecords {
		it.apart, it.deferred = nil, true
		return true
	}
	if it.rawMin > 0 {
		if kept, ok := it.settleRaw(); kept || !ok {
			return ok
		}
	}
	if v, ok := it.valueMapped(); ok {
		it.apart = v
		return true
	}
	v, err := it.r.value(it.idx, it.blk.val, it.mode, false)
	if err != nil {
		it.err, it.blk.valid, it.inApart = err, false, false
		return false
	}
	it.apart = v
	if v == nil {
		it.apart = []byte{} // an empty value stored apart (not by this writer)
	}
	return true
}

// settleRaw is settleApart for an Iter that keeps value records as
// stored (KeepValueRecords): kept reports that it did, ok false that the
// record failed its checks (the Iter stops with the error). A record
// whose value is shorter than rawMin is left to settleApart (kept false,
// ok true), which reads it again and decodes it: only where the output's
// threshold is above the input's, after a change of options.
func (it *Iter) settleRaw() (kept, ok bool) {
	rec, n, err := it.r.valueRecord(it.idx, it.blk.val, &it.rawBuf, it.r.counters(&it.ra))
	if err != nil {
		it.err, it.blk.valid, it.inApart = err, false, false
		return false, false
	}
	if n < it.rawMin {
		return false, true
	}
	it.raw, it.rawLen, it.rawKept, it.apart = rec, n, true, nil
	return true, true
}

// valueMapped is Reader.value for a scan's usual case: a record of a
// mapped segment that was read, and its checksum verified, before. It
// makes the same checks of the handle, against the bounds of the gap
// that load kept, without the call and the index loads (with 4 KiB
// values, a fifth of a scan's step). Any other case, and a handle that
// fails a check, is left to Reader.value, which reads or reports it.
func (it *Iter) valueMapped() ([]byte, bool) {
	m := it.r.opts.Mapped
	b := &it.blk
	h, ok := decodeValueHandleAt(b.data, b.nextOffset-len(b.val), b.val)
	if !ok || m == nil || h.ordinal >= it.r.props.Values || h.offset < it.gapLo || h.offset > it.gapHi ||
		it.gapHi-h.offset < blockTrailerLen || h.length > it.gapHi-h.offset-blockTrailerLen ||
		!it.r.valuesVerified.has(h.ordinal, h.blockHandle) {
		return nil, false
	}
	return m[h.offset : h.offset+h.length : h.offset+h.length], true
}

// Error returns the error that stopped the iteration, if any.
func (it *Iter) Error() error {
	if it.err == errIterClosed {
		return nil
	}
	return it.err
}

// Close releases the current block and returns the iteration's error.
// The Iter cannot be used afterwards.
func (it *Iter) Close() error {
	err := it.Error()
	*it = Iter{r: it.r, idx: -1, err: errIterClosed} // drops the readahead window too
	return err
}

var _ base.InternalIterator = (*Iter)(nil)
