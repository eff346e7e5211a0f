package segment

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

// blockWriter builds one block: prefix-compressed entries with a restart
// point every restartInterval entries, then the restart array and its
// length (FORMAT.md, "Blocks"). A restart point stores its key whole, so a
// reader can binary-search the restart points and decode from any of them.
//
// A data block's writer also sets hashIndex: it starts a restart point
// once the current interval holds restartBytes, and finish appends a hash
// index from each user key to the restart interval holding its first
// entry (FORMAT.md, "The hash index of a data block"), so a point lookup
// jumps to its entry instead of searching and scanning for it.
//
// With restartApart (data blocks of at most maxRestartApartBlock bytes)
// every entry whose value is stored apart starts a restart point too.
// Such an entry takes 32 to 64 bytes beside its key's value handle, so
// restartBytes alone gives intervals of two or three, and a step back
// into one decodes it forward from its restart point and caches the
// entries before its target, where an interval of one is decoded in
// place (blockIter.prevWhole): a backward scan of 4 KiB values stored
// apart took 1.5 times as long as a forward one that way, 1.2 times with
// an interval per entry. It costs the bytes prefix compression saved on
// the entries after the first of an interval (a few per key) and 4 per
// restart point, and spares a lookup the scan of its interval's other
// entries.
type blockWriter struct {
	restartInterval int
	hashIndex       bool
	restartApart    bool
	buf             []byte
	restarts        []uint32
	counter         int // entries since the last restart point
	entries         int
	apart           int // entries whose value is stored apart (noteApart)
	lastKey         []byte
	hashes          []keyRestart // hashIndex: one per user key, in order
	trial           []int16      // chooseBuckets' scratch (searched)
	trialKeys       []int16
}

// keyRestart is a user key's hash and the restart interval that holds its
// first entry in the block.
type keyRestart struct {
	hash    uint64
	restart int
}

const (
	// restartBytes is the most entry bytes a data block's restart interval
	// holds before the next entry starts a new one: a point lookup scans
	// at most one interval, and past about a cache line that scan, not the
	// search, is what a Get waits on. Entries of 64 bytes or more each get
	// a restart point; small ones still share one per restartInterval.
	restartBytes = 64
	// maxHashedRestarts is the most restart points a block with a hash
	// index may have: a bucket holds a restart index in one byte, and
	// bucketCollision and bucketEmpty take the top two values.
	maxHashedRestarts = 253
	bucketCollision   = 0xfe // user keys in intervals far apart: search the block
	bucketEmpty       = 0xff // no user key of the block: it holds none
	hashIndexFlag     = 1 << 31
	// bucketsPerKey sizes the table: 2 buckets per user key (numBuckets
	// doubles it for large entries). A bucket names the first of the
	// intervals its keys start in, and a lookup scans forward from there,
	// so keys that share a bucket need a collision mark only when their
	// intervals lie more than maxBucketSpan apart. With 100-byte values
	// (about 32 keys per 4 KiB block, each entry its own restart
	// interval) 2 buckets per key sent 1 lookup in 3 to the binary search
	// (measured over 10^5 keys: 0.33), 4 per key 1 in 6 (0.18);
	// RocksDB's 0.75 keys per bucket leaves 1 in 2.
	bucketsPerKeyNum, bucketsPerKeyDen = 2, 1
	maxBucketSpan                      = 3
	// bucketTrials is how many bucket counts, from numBuckets up, finish
	// tries: it keeps the one that sends the fewest keys to the binary
	// search. Keys that share a bucket under one count mostly do not
	// under the next, and a reader takes any count from the block.
	// Measured on blocks of random 16-byte keys (TestHashIndexSearchedShare):
	// with 100-byte values (about 33 keys per block, each its own restart
	// interval, 4 buckets per key) the share of keys searched fell from
	// 0.18 to 0.11 with 8 tries (0.09 with 16); with values stored apart
	// (about 90 keys per block, 2 per interval, 8 buckets per key), from
	// 0.10 to 0.06 (0.077 since each such key starts its own interval:
	// restartApart). Each try is a pass over the block's key hashes: 8
	// cost BenchmarkWrite (100-byte values) a few percent, 16 about 10%.
	bucketTrials = 8
	maxBuckets   = 1<<16 - 1 // the bucket count is stored in 2 bytes
)

// maxRestartApartBlock is the largest target block size for which the
// writer sets restartApart (the default size): an entry whose value is
// stored apart takes at least 19 bytes of a block (3 header bytes, a
// 1-byte user key and its trailer, a 3-byte value handle, its restart
// point), so a block of 4 KiB and its last entry hold at most about
// 220 restart points, and keep their hash index (maxHashedRestarts).
// A larger block could pass that where two entries to an interval
// would not.
const maxRestartApartBlock = 4 << 10

func (w *blockWriter) add(key, value []byte) { w.addEntry(key, value, false) }

// addEntry adds an entry; apart says its value is a value handle.
func (w *blockWriter) addEntry(key, value []byte, apart bool) {
	shared := 0
	newRestart := w.entries == 0 || w.counter == w.restartInterval || (apart && w.restartApart)
	if w.hashIndex && !newRestart {
		newRestart = len(w.buf)-int(w.restarts[len(w.restarts)-1]) >= restartBytes
	}
	if newRestart {
		w.restarts = append(w.restarts, uint32(len(w.buf)))
		w.counter = 0
	} else {
		shared = commonPrefix(w.lastKey, key)
	}
	w.buf = binary.AppendUvarint(w.buf, uint64(shared))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(key)-shared))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(value)))
	w.buf = append(w.buf, key[shared:]...)
	w.buf = append(w.buf, value...)
	w.lastKey = append(w.lastKey[:0], key...)
	w.counter++
	w.entries++
}

// addHash records that the entry just added is the first in this block of
// a user key whose bloom.Hash is h.
func (w *blockWriter) addHash(h uint64) {
	w.hashes = append(w.hashes, keyRestart{hash: h, restart: len(w.restarts) - 1})
}

// sizeWith is at least estimatedSize once an entry of an ikeyLen-byte
// internal key and a valueLen-byte value (a value handle if apart) is
// added: its three length uvarints (a shared length of 0 at most), key
// and value, a restart point, and the buckets of a hash index for the
// entry's user key, new or not (a key fewer may double the buckets per
// key: numBuckets).
func (w *blockWriter) sizeWith(ikeyLen, valueLen int, apart bool) int {
	n := len(w.buf) + 1 + uvarintLen(ikeyLen) + uvarintLen(valueLen) + ikeyLen + valueLen + 4*(len(w.restarts)+1) + 4
	if w.hashIndex {
		restarts, a, entries := len(w.restarts)+1, w.apart+btoi(apart), w.entries+1
		buckets := max(bucketsFor(len(w.hashes)+1, restarts, a, entries), bucketsFor(len(w.hashes), restarts, a, entries))
		n += min(buckets+bucketTrials-1, maxBuckets) + 2
	}
	return n
}

// uvarintLen is the length of x as a uvarint.
func uvarintLen(x int) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// estimatedSize is at least the size finish would return now (which
// may choose fewer buckets: chooseBuckets).
func (w *blockWriter) estimatedSize() int {
	n := len(w.buf) + 4*max(len(w.restarts), 1) + 4
	if w.hashIndex {
		n += min(w.numBuckets()+bucketTrials-1, maxBuckets) + 2
	}
	return n
}

// numBuckets is the size of the hash index for the keys added so far:
// bucketsPerKey per user key, or twice that where the keys average at
// most two per restart interval (entries of 32 bytes and more). There a
// bucket shared by two keys almost always joins intervals more than
// maxBucketSpan apart and sends the lookup to the binary search, which
// cost a warm Get of a 100-byte value (every entry its own interval) a
// fifth of its time at 1 fallback in 3; at 4 buckets per key, 1 in 6.
//
// Where most entries' values are stored apart (value records), twice
// that again: the block's bytes are then a small part of the data they
// describe (each such value is at least a kilobyte), so 8 bytes per key
// cost under 1% of it, and a lookup sent to the binary search pays a
// cache miss per step in a block of over 100 keys.
func (w *blockWriter) numBuckets() int {
	return bucketsFor(len(w.hashes), len(w.restarts), w.apart, w.entries)
}

// bucketsFor is numBuckets for a block of keys user keys, restarts
// restart points and entries entries, apart of them with values stored
// apart.
func bucketsFor(keys, restarts, apart, entries int) int {
	num := bucketsPerKeyNum
	if 2*restarts >= keys {
		num *= 2
	}
	if 2*apart >= entries {
		num *= 2
	}
	return min(max(1, (keys*num+bucketsPerKeyDen-1)/bucketsPerKeyDen), maxBuckets)
}

// noteApart records that the entry just added holds a value handle.
func (w *blockWriter) noteApart() { w.apart++ }

// searched returns how many of the block's user keys a hash index of m
// buckets would send to the binary search, or a number >= limit once it
// knows that it is at least limit: keys whose bucket also holds a key
// whose interval lies more than maxBucketSpan after the first of the
// bucket's keys (finish marks such a bucket bucketCollision).
func (w *blockWriter) searched(m, limit int) int {
	if cap(w.trial) < m {
		w.trial, w.trialKeys = make([]int16, m), make([]int16, m)
	}
	// first holds a bucket's first interval plus one, 0 while empty, -1
	// once collided; keys counts the bucket's keys until it collides.
	first, keys := w.trial[:m], w.trialKeys[:m]
	clear(first)
	n := 0
	for _, kr := range w.hashes {
		b := bucketOf(kr.hash, m)
		switch f := int(first[b]); {
		case f == 0:
			first[b], keys[b] = int16(kr.restart+1), 1
		case f < 0:
			n++
		case kr.restart+1-f > maxBucketSpan:
			first[b] = -1
			n += int(keys[b]) + 1
		default:
			keys[b]++
		}
		if n >= limit {
			break
		}
	}
	return n
}

// chooseBuckets returns the bucket count, among bucketTrials from
// numBuckets up, that sends the fewest keys to the binary search (the
// smallest such count).
func (w *blockWriter) chooseBuckets() int {
	m0 := w.numBuckets()
	best, fewest := m0, len(w.hashes)+1
	for m := m0; m < m0+bucketTrials && m <= maxBuckets; m++ {
		if n := w.searched(m, fewest); n < fewest {
			best, fewest = m, n
			if n == 0 {
				break
			}
		}
	}
	return best
}

// finish appends the restart array (and, for a data block, the hash index)
// and returns the block. The result is valid until the next reset.
func (w *blockWriter) finish() []byte {
	if len(w.restarts) == 0 {
		w.restarts = append(w.restarts, 0) // an empty block still has one restart point
	}
	for _, r := range w.restarts {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, r)
	}
	count := uint32(len(w.restarts))
	if w.hashIndex && len(w.hashes) > 0 && len(w.restarts) <= maxHashedRestarts {
		m := w.chooseBuckets()
		start := len(w.buf)
		for range m {
			w.buf = append(w.buf, bucketEmpty)
		}
		buckets := w.buf[start:]
		for _, kr := range w.hashes { // in key order: a bucket's first key has its first interval
			b := &buckets[bucketOf(kr.hash, m)]
			switch {
			case *b == bucketEmpty:
				*b = byte(kr.restart)
			case *b != bucketCollision && kr.restart-int(*b) > maxBucketSpan:
				*b = bucketCollision
			}
		}
		w.buf = binary.LittleEndian.AppendUint16(w.buf, uint16(m))
		count |= hashIndexFlag
	}
	w.buf = binary.LittleEndian.AppendUint32(w.buf, count)
	return w.buf
}

// bucketOf maps a user key's bloom.Hash to one of m buckets: the high 32
// bits scaled to [0, m) (Lemire's multiply-shift), no division.
func bucketOf(h uint64, m int) int {
	return int((h >> 32) * uint64(m) >> 32)
}

func (w *blockWriter) reset() {
	w.buf = w.buf[:0]
	w.restarts = w.restarts[:0]
	w.counter = 0
	w.entries = 0
	w.apart = 0
	w.lastKey = w.lastKey[:0]
	w.hashes = w.hashes[:0]
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// blockTrailer locates a block's restart array and hash index.
type blockTrailer struct {
	restartsOff int // entries occupy data[:restartsOff]
	numRestarts int
	bucketsOff  int // the hash index's buckets, if numBuckets > 0
	numBuckets  int
}

// parseTrailer locates the restart array and hash index in O(1). It
// returns a reason string ("" if fine) so callers can attach the file and
// offset.
func parseTrailer(data []byte) (t blockTrailer, reason string) {
	if len(data) < 4 {
		return t, "block shorter than its restart count"
	}
	word := binary.LittleEndian.Uint32(data[len(data)-4:])
	end := len(data) - 4 // the restart array, or the hash index, ends here
	if word&hashIndexFlag != 0 {
		if end < 2 {
			return t, "block shorter than its hash index"
		}
		t.numBuckets = int(binary.LittleEndian.Uint16(data[end-2:]))
		if t.numBuckets == 0 || t.numBuckets > end-2 {
			return t, fmt.Sprintf("hash index of %d buckets does not fit in a %d-byte block", t.numBuckets, len(data))
		}
		end -= 2 + t.numBuckets
		t.bucketsOff = end
	}
	n := uint64(word &^ hashIndexFlag)
	if n == 0 {
		return t, "block has no restart points"
	}
	if n > uint64(end)/4 {
		return t, fmt.Sprintf("restart count %d does not fit in a %d-byte block", n, len(data))
	}
	if t.numBuckets > 0 && n > maxHashedRestarts {
		return t, fmt.Sprintf("hash index over %d restart points (at most %d)", n, maxHashedRestarts)
	}
	t.restartsOff, t.numRestarts = end-4*int(n), int(n)
	return t, ""
}

// packLayout packs a data block's trailer into a nonzero word, for
// indexEntry.layout: its restart count in the low 32 bits (a block is
// smaller than 2 GiB), its bucket count above.
func packLayout(t blockTrailer) uint64 {
	return 1<<63 | uint64(t.numBuckets)<<32 | uint64(t.numRestarts)
}

// unpackLayout returns the trailer of a block of n bytes that packLayout
// packed into w: what parseTrailer returned for it.
func unpackLayout(n int, w uint64) (t blockTrailer) {
	t.numRestarts, t.numBuckets = int(uint32(w)), int(uint16(w>>32))
	end := n - 4
	if t.numBuckets > 0 {
		end -= 2 + t.numBuckets
		t.bucketsOff = end
	}
	t.restartsOff = end - 4*t.numRestarts
	return t
}

// hasHashIndex reports whether a block says it carries a hash index, which
// only data blocks of format version formatVersionHashIndex and later may.
func hasHashIndex(data []byte) bool {
	return len(data) >= 4 && binary.LittleEndian.Uint32(data[len(data)-4:])&hashIndexFlag != 0
}

// checkBlock validates the block's restart array in full: the first
// restart point is 0 and they strictly increase inside the entry area.
// Binary search relies on this, so every block is checked once when it is
// read from the file; blocks in the cache have passed. Each hash bucket
// must name a restart point or be one of the two marks; that it names the
// right one, a lookup cannot check cheaply, and Verify does.
func checkBlock(data []byte) string {
	t, reason := parseTrailer(data)
	if reason != "" {
		return reason
	}
	for i, b := range data[t.bucketsOff : t.bucketsOff+t.numBuckets] {
		if int(b) >= t.numRestarts && b != bucketCollision && b != bucketEmpty {
			return fmt.Sprintf("hash bucket %d names restart point %d of %d", i, b, t.numRestarts)
		}
	}
	restartsOff, n := t.restartsOff, t.numRestarts
	if restartsOff == 0 {
		if n != 1 || binary.LittleEndian.Uint32(data) != 0 {
			return "empty block with bad restart array"
		}
		return ""
	}
	prev := -1
	for i := range n {
		r := int(binary.LittleEndian.Uint32(data[restartsOff+4*i:]))
		switch {
		case i == 0 && r != 0:
			return "first restart point is not 0"
		case r <= prev || r >= restartsOff:
			return fmt.Sprintf("restart point %d at %d out of order or range", i, r)
		}
		prev = r
	}
	return ""
}

// blockIter walks the entries of one block. Its key is rebuilt from the
// prefix compression into a reused buffer; its value is a sub-slice of the
// block. Only a blockIter positioned by first, last or a seek may move.
type blockIter struct {
	data        []byte
	restartsOff int // entries occupy data[:restartsOff]
	numRestarts int
	bucketsOff  int // the hash index (data blocks), if numBuckets > 0
	numBuckets  int
	offset      int // offset of the current entry
	nextOffset  int // offset of the entry after it
	key         []byte
	val         []byte
	shared      int // leading bytes of key equal to the previous entry's key
	valid       bool
	internal    bool // keys are internal keys: at least 8 bytes
	// sameUser (internal blocks) reports whether the entry the last step
	// (next or prev) moved to has the user key of the entry it left: a
	// scan steps over a key's older versions without comparing keys. It
	// is false after a seek or a reset to a restart point, where there is
	// no entry left.
	sameUser bool
	// distinct says the block's segment holds one entry per user key
	// (Properties: Entries == DistinctKeys), as a compacted store's
	// segments do, and the block was found to agree (checking): the
	// steps do not compare keys to learn sameUser, which is always false
	// (a sixth of a scan's step with small entries). Set after init, by
	// the caller that knows the segment.
	distinct bool
	// checking says the segment's properties claim one entry per user
	// key, which Open does not check against the entries, and this block
	// was not yet found to agree: a step that lands on the user key of
	// the entry it left reports corruption (trusted, the claim would have
	// a scan show a key's older version as a key of its own), and so does
	// an entry that contradicts the other properties a store may trust
	// then (Iter.AllVisible): a sequence number above maxSeq, a tombstone
	// where they count none (noTombstones). A walk of the block that
	// finds no such entry, and decodes every entry that any step into the
	// block can, sets walked, and the Iter marks the block checked
	// (indexEntry.scanChecked). Every way into a block starts at a
	// restart point: a walk by next from first to the block's end does
	// if it passes every restart point (walk, the next one's index while
	// it does; 0 or -1 once not), and so does one by prev from last to
	// the block's start, which decodes each restart interval from its
	// restart point to the next one, without a seek between (backWalk).
	checking, noTombstones, walked, backWalk bool
	walk                                     int
	maxSeq                                   uint64

	maxKey int // longer keys are corruption (FORMAT.md, "Limits a reader enforces")
	err    error

	// prevCache holds the entries of one restart interval, decoded forward
	// once by fillPrev, so that prev pops one instead of decoding the
	// interval again from its restart point at every step (as Pebble's
	// blockIter caches entries for Prev): a backward scan decodes each
	// entry once. A key stored whole in the block (a restart point's, and
	// every key of a block whose entries each start an interval, as
	// entries of 64 bytes and more do) is left there; the others are not
	// copied at all: prev rebuilds each from the key after it, which
	// shares its first bytes, and the key deltas in the block
	// (rebuildKey). Values are offsets into data.
	prevCache []prevEntry
	// checkpoints are entries of one interval (prevCheckpointAt, the
	// offset of its restart point), one every maxPrevEntries entries,
	// their keys copied whole into prevKeys: a fill starts at the last
	// one before its target rather than at the restart point, so that an
	// interval longer than the cache holds is still decoded about twice
	// in all, not once per cacheful.
	checkpoints      []prevEntry
	prevKeys         []byte
	prevCheckpointAt int
	// prevRestart is the restart point prev last decoded from: the
	// next fill, at that point's offset, is of the interval before it,
	// and the next step within that interval stays in it, which saves the
	// binary search. loOff and hiOff are where that interval starts and
	// ends (its restart point's offset, and the next one's or the entry
	// area's end), 0 before the first.
	prevRestart  int
	loOff, hiOff int
	// multi says the last interval prev decoded held more than one
	// entry: the next is not tried as one (prevWhole), which would read
	// its first header twice to learn the same in a block of small
	// entries.
	multi bool
	// own is the key buffer of the blockIter's own: next and prev build
	// keys there, or point key into data instead of copying, and init
	// goes back to it. keyInData says key aliases data, which is
	// read-only: next goes back to own before it writes a key.
	own       []byte
	keyInData bool
	curBuf    []byte // fillPrev's copy of the current user key, if it may rewrite it
	touched   byte   // touch's result, kept so that its loads are not dropped

	// For error messages: which file and which block.
	file    string
	fileOff int64
}

// init points it at data (which must have passed checkBlock unless the
// caller only wants corruption reported, as the fuzz test does). Blocks of
// internal keys (data and index blocks) allow keys of up to
// maxInternalKeyLen bytes; the one other kind, the properties block, names
// of up to maxPropertyNameLen.
func (it *blockIter) init(data []byte, internal bool, file string, fileOff int64) error {
	it.reset(data, internal, file, fileOff)
	t, reason := parseTrailer(data)
	if reason != "" {
		it.err = base.Corruptf(file, fileOff, "%s", reason)
		return it.err
	}
	it.setTrailer(t)
	return nil
}

// setTrailer sets where the restart array and hash index of the block
// lie: parseTrailer's result for it.
func (it *blockIter) setTrailer(t blockTrailer) {
	it.restartsOff, it.numRestarts = t.restartsOff, t.numRestarts
	it.bucketsOff, it.numBuckets = t.bucketsOff, t.numBuckets
}

// reset is init without the trailer: the caller sets it (setTrailer).
func (it *blockIter) reset(data []byte, internal bool, file string, fileOff int64) {
	key := it.own[:0]
	if cap(key) < 64 {
		key = make([]byte, 0, 64) // room for next's word copies
	}
	*it = blockIter{key: key, own: key, data: data, internal: internal, file: file, fileOff: fileOff,
		prevCache: it.prevCache[:0], checkpoints: it.checkpoints[:0], prevKeys: it.prevKeys[:0], curBuf: it.curBuf[:0]}
	if cap(it.prevKeys) > maxKeptPrevKeys {
		it.prevKeys = nil // a long interval's checkpoints: not kept for the next block
	}
	it.maxKey = maxPropertyNameLen
	if internal {
		it.maxKey = maxInternalKeyLen
	}
}

func (it *blockIter) restart(i int) int {
	return int(binary.LittleEndian.Uint32(it.data[it.restartsOff+4*i:]))
}

func (it *blockIter) corrupt(at int, reason string) bool {
	it.valid = false
	if it.err == nil {
		it.err = base.Corruptf(it.file, it.fileOff, "%s (entry at block offset %d)", reason, at)
	}
	return false
}

// decodeHeader reads the three uvarints that start an entry and checks
// that the key delta and value fit in p. h is the header length.
func decodeHeader(p []byte) (shared, unshared, vlen uint64, h int, ok bool) {
	if len(p) >= 3 && p[0]|p[1]|p[2] < 0x80 {
		// Fast path: all three fit in one byte each, as for short keys
		// and values.
		shared, unshared, vlen, h = uint64(p[0]), uint64(p[1]), uint64(p[2]), 3
	} else if shared, unshared, vlen, h, ok = decodeHeaderSlow(p); !ok {
		return 0, 0, 0, 0, false
	}
	rest := uint64(len(p) - h)
	if unshared > rest || vlen > rest-unshared {
		return 0, 0, 0, 0, false
	}
	return shared, unshared, vlen, h, true
}

func decodeHeaderSlow(p []byte) (shared, unshared, vlen uint64, h int, ok bool) {
	shared, a := binary.Uvarint(p)
	if a <= 0 {
		return 0, 0, 0, 0, false
	}
	unshared, b := binary.Uvarint(p[a:])
	if b <= 0 {
		return 0, 0, 0, 0, false
	}
	vlen, c := binary.Uvarint(p[a+b:])
	if c <= 0 {
		return 0, 0, 0, 0, false
	}
	return shared, unshared, vlen, a + b + c, true
}

// next decodes the entry at nextOffset.
func (it *blockIter) next() bool {
	it.offset = it.nextOffset
	if it.offset >= it.restartsOff || it.err != nil {
		it.valid = false
		it.walked = it.checking && it.walk == it.numRestarts && it.offset == it.restartsOff && it.err == nil
		return false
	}
	p := it.data[it.offset:it.restartsOff]
	var shared, unshared, vlen uint64
	var h int
	if len(p) >= 3 && p[0]|p[1]|p[2] < 0x80 && uint64(p[1])+uint64(p[2]) <= uint64(len(p)-3) {
		// decodeHeader's fast path, inlined: this is the per-entry step
		// of every scan.
		shared, unshared, vlen, h = uint64(p[0]), uint64(p[1]), uint64(p[2]), 3
	} else {
		var ok bool
		if shared, unshared, vlen, h, ok = decodeHeader(p); !ok {
			return it.corrupt(it.offset, "entry overruns block")
		}
	}
	if shared > uint64(len(it.key)) {
		return it.corrupt(it.offset, "shared prefix longer than previous key")
	}
	// Checked before the key is built: shared may repeat a long key at
	// the cost of one uvarint, and callers do work per key byte.
	if shared+unshared > uint64(it.maxKey) {
		return it.corrupt(it.offset, fmt.Sprintf("key of %d bytes, more than the %d allowed", shared+unshared, it.maxKey))
	}
	keyEnd := h + int(unshared)
	if it.distinct {
		it.sameUser = false
	} else if it.internal {
		// The user key stays the same if the new key is as long as the
		// old one and agrees with it up to its trailer; decided before
		// the key is rebuilt over the old one. A writer shares the
		// longest common prefix, so distinct keys differ in the word
		// past the shared bytes, but where a block shares less than it
		// could: at a restart point, keys that agree on 8 bytes more.
		it.sameUser = false
		if n := len(it.key); n >= base.TrailerLen && shared+unshared == uint64(n) {
			if ulen, d := n-base.TrailerLen, int(shared); d >= ulen {
				it.sameUser = true
			} else {
				// Both keys hold a trailer past the user key: the words
				// loaded lie within them.
				x := binary.LittleEndian.Uint64(p[h:]) ^ binary.LittleEndian.Uint64(it.key[d:])
				if ulen-d < 8 {
					x &= 1<<(8*(ulen-d)) - 1
				}
				it.sameUser = x == 0 && bytes.Equal(p[h:h+ulen-d], it.key[d:ulen])
			}
		}
		if it.sameUser && it.checking {
			return it.corrupt(it.offset, repeatedKey)
		}
	}
	if shared == 0 {
		// A key stored whole (a restart point's; every key of a block of
		// entries of 64 bytes and more, which each start an interval) is
		// left where it lies, as prev leaves it: no copy. The block is
		// read-only (keyInData), so the next key that shares a prefix
		// with it is rebuilt in own.
		it.key, it.keyInData = p[h:keyEnd:keyEnd], true
	} else {
		if it.keyInData {
			it.ownPrefix(int(shared))
		}
		if src := p[h:]; unshared <= 32 && len(src) >= 32 && cap(it.key)-int(shared) >= 32 {
			// A short key delta (a random 16-byte key's is about 22 bytes
			// with its trailer) is copied as four words, over the key
			// buffer's spare capacity and from the block bytes that follow
			// it (its value, the next entries, the restart array), without
			// a memmove call.
			dst := it.key[shared : int(shared)+32 : int(shared)+32]
			binary.LittleEndian.PutUint64(dst, binary.LittleEndian.Uint64(src))
			binary.LittleEndian.PutUint64(dst[8:], binary.LittleEndian.Uint64(src[8:]))
			binary.LittleEndian.PutUint64(dst[16:], binary.LittleEndian.Uint64(src[16:]))
			binary.LittleEndian.PutUint64(dst[24:], binary.LittleEndian.Uint64(src[24:]))
			it.key = it.key[:shared+unshared]
		} else {
			it.key = append(it.key[:shared], p[h:keyEnd]...)
		}
	}
	it.shared = int(shared)
	if it.internal && len(it.key) < base.TrailerLen {
		return it.corrupt(it.offset, "internal key shorter than its trailer")
	}
	if it.checking && !it.check(p, keyEnd, unshared) {
		return false
	}
	it.val = p[keyEnd : keyEnd+int(vlen) : keyEnd+int(vlen)]
	it.nextOffset = it.offset + keyEnd + int(vlen)
	it.valid = true
	return true
}

// keyAtRestart returns the key stored whole at restart point i, without
// copying, for the binary search.
func (it *blockIter) keyAtRestart(i int) ([]byte, bool) {
	off := it.restart(i)
	if off >= it.restartsOff {
		return nil, false
	}
	p := it.data[off:it.restartsOff]
	shared, unshared, _, h, ok := decodeHeader(p)
	if !ok || shared != 0 || (it.internal && unshared < base.TrailerLen) || unshared > uint64(it.maxKey) {
		return nil, false
	}
	return p[h : h+int(unshared)], true
}

// ownPrefix puts the first shared bytes of key, which aliases the block,
// in own, and points key there, for next to rebuild the following key
// after them. The prefix of a random key is a few bytes: one word copies
// it (internal keys are at least a trailer, 8 bytes, long).
func (it *blockIter) ownPrefix(shared int) {
	if shared <= 8 && len(it.key) >= 8 && cap(it.own) >= 8 {
		binary.LittleEndian.PutUint64(it.own[:8], binary.LittleEndian.Uint64(it.key))
		it.key = it.own[:shared]
	} else {
		it.own = append(it.own[:0], it.key[:shared]...)
		it.key = it.own
	}
	it.keyInData = false
}

// keepOwn makes own the buffer next decoded the current key into, if next
// grew it, for the next fill; a key that aliases the block (keyInData) is
// never own, which is written.
func (it *blockIter) keepOwn() {
	if !it.keyInData {
		it.own = it.key[:0]
	}
}

// seekToRestart makes the blockIter decode from restart point i next.
// It empties the prev cache, whose next key prev would otherwise rebuild
// from a key the decoding overwrites (rebuildKey).
func (it *blockIter) seekToRestart(i int) {
	it.key = it.key[:0]
	it.nextOffset = it.restart(i)
	it.valid = false
	it.prevCache = it.prevCache[:0]
	it.walk = -1
}

func (it *blockIter) first() bool {
	it.seekToRestart(0)
	it.walk, it.backWalk = 1, false // restart point 0 is the first entry's
	return it.next()
}

// last moves to the last entry, leaving the entries of its restart
// interval before it in the prev cache.
func (it *blockIter) last() bool {
	if it.restartsOff == 0 { // an empty block
		it.valid = false
		return false
	}
	it.offset, it.backWalk = it.restartsOff, true
	return it.prev()
}

// seekGE moves to the first entry whose internal key is >= (ukey,
// trailer): a binary search over the restart points for the last one
// below the target, then a linear scan of at most one restart interval.
func (it *blockIter) seekGE(ukey []byte, trailer uint64) bool {
	it.backWalk = false
	lo, hi := 0, it.numRestarts-1
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		k, ok := it.keyAtRestart(mid)
		if !ok {
			return it.corrupt(it.restart(mid), "bad entry at restart point")
		}
		if compareInternal(k, ukey, trailer) < 0 {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	it.seekToRestart(lo)
	return it.scanGE(ukey, trailer)
}

// scanGE decodes forward from a restart point (seekToRestart) to the
// first entry >= (ukey, trailer). It compares a key with ukey only past
// the bytes it shares with the key before, when that one agreed with ukey
// on at least as many: so it compares no more bytes in all than the
// entries store past their shared prefixes, where comparing each key
// whole cost, in an interval of tiny entries that repeat a 64 KiB prefix
// (a writer restarts as rarely as it is told), 64 KiB an entry.
func (it *blockIter) scanGE(ukey []byte, trailer uint64) bool {
	// m is how many bytes the last key's user key, of length last, shares
	// with ukey; the last key is below the target.
	m, last := 0, 0
	for it.next() {
		k := it.key
		n := len(k) - base.TrailerLen
		s := min(it.shared, n, last) // bytes of k's user key that are the last one's
		last = n
		if s > m {
			// The last user key is below ukey at byte m (were ukey
			// shorter, the last key would be above it), and k's is the
			// same there.
			continue
		}
		d := s + mismatch(k[s:n], ukey[s:])
		switch {
		case d < n && d < len(ukey):
			if k[d] > ukey[d] {
				return true
			}
		case n > len(ukey): // ukey is a prefix of k's user key
			return true
		case n == len(ukey) && binary.LittleEndian.Uint64(k[n:]) <= trailer: // trailers order descending
			return true
		}
		m = d
	}
	return false
}

// mismatch returns the length of the longest common prefix of a and b.
func mismatch(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
	}
	for ; i < n && a[i] == b[i]; i++ {
	}
	return i
}

// seekUser is seekGE(ukey, maxTrailer), for a seek to a user key: to its
// newest version if the block holds it, else to the first entry after.
// A seek is often to a key the block holds (a scan that resumes at a key
// read before, a lookup through an iterator), and a block's hash index
// sends it straight to that key's restart interval, where the binary
// search of the restart points waits for one restart key after another.
// The bucket of a key the block lacks is usually empty; then, or when the
// interval it names holds another key, the search runs as before, after
// a hash and one load more.
func (it *blockIter) seekUser(ukey []byte) bool {
	if it.numBuckets > 0 {
		ok, used := it.seekHash(ukey, bloom.Hash(ukey), maxTrailer)
		if it.err != nil {
			return false
		}
		// The interval the bucket names is at or before ukey's first
		// entry when the block holds ukey (FORMAT.md): the entry found
		// is then its newest version, and the first >= the target.
		if ok && used && bytes.Equal(it.key[:len(it.key)-base.TrailerLen], ukey) {
			return true
		}
	}
	return it.seekGE(ukey, maxTrailer)
}

// seekHash is seekGE for a point lookup of user key ukey, whose bloom.Hash
// is h, through the block's hash index: it moves to the first entry >=
// (ukey, trailer), scanning from the restart interval its bucket names (at
// or before the one that holds ukey's first entry), and returns true; or it returns false if the block holds no
// version of ukey (the entry it stopped at, if any, has another user key).
// used is false when the block has no hash index or ukey's bucket is
// shared by keys in different intervals: the caller must seekGE.
func (it *blockIter) seekHash(ukey []byte, h, trailer uint64) (ok, used bool) {
	if it.numBuckets == 0 {
		return false, false
	}
	it.backWalk = false
	b := it.data[it.bucketsOff+bucketOf(h, it.numBuckets)]
	switch {
	case b == bucketEmpty:
		return false, true
	case b == bucketCollision:
		return false, false
	case int(b) >= it.numRestarts: // checkBlock refuses this; never trust it
		return it.corrupt(it.bucketsOff, "hash bucket names no restart point"), true
	}
	it.seekToRestart(int(b))
	return it.scanGE(ukey, trailer), true
}

// touchRestartKeys loads the first cache line of every restart point's
// entry, for a binary search of a block's restart points (seekGE), when
// the block has at most maxTouchedRestarts: loads independent of each
// other, which the CPU overlaps, where the search's own loads depend on
// each other and would each wait for the memory in turn.
func (it *blockIter) touchRestartKeys() {
	if it.numRestarts > maxTouchedRestarts {
		return
	}
	x := it.touched
	for i := range it.numRestarts {
		if off := it.restart(i); off < len(it.data) {
			x ^= it.data[off]
		}
	}
	it.touched = x
}

// maxTouchedRestarts bounds what touchRestartKeys loads: a data block of
// 100-byte values has about 33 restart points; one of keys whose values
// are stored apart has one per key (restartApart), about 85, where
// touching every restart point's entry would be touching the block.
const maxTouchedRestarts = 64

// touch reads one byte of every cache line of p, from its end down. A
// backward scan decodes each restart interval forward, starting lower in
// memory each time: the hardware prefetcher, which follows a stream
// either way, sees no stream in that and leaves each interval to cost a
// cache miss per line, one after another (each entry's offset depends on
// the one before). Touched from the end down first, the intervals form
// one descending stream, which it does follow, and the loads, independent
// of each other, overlap.
func touch(p []byte) byte {
	var x byte
	for i := len(p) - 1; i >= 0; i -= 64 {
		x ^= p[i]
	}
	return x
}

// touchLines reads one byte of every cache line of p, from its start
// up: loads independent of each other, which the CPU overlaps, so that
// reads of p that depend on each other afterwards find it in the cache.
func touchLines(p []byte) byte {
	var x byte
	for i := 0; i < len(p); i += 64 {
		x ^= p[i]
	}
	if len(p) > 0 {
		x ^= p[len(p)-1]
	}
	return x
}

// maxPrevEntries bounds the entries the prev cache holds: 1 MiB of
// prevEntry. Writers restart every 16 entries, or every 64 bytes of
// entries, but a damaged block may not, and an entry takes only 3 bytes.
// A longer interval is decoded from checkpoints, one every maxPrevEntries
// entries, each of which keeps a key of at most maxKey bytes: at most a
// key of 64 KiB for every 96 KiB of the block.
const maxPrevEntries = 1 << 15

// maxKeptPrevKeys is the most checkpoint key bytes a blockIter keeps
// allocated from one block to the next.
const maxKeptPrevKeys = 1 << 20

// prevEntry is one entry of the prev cache: where it lies in the block,
// where its key is (keyIn), and whether the entry after it has the same
// user key. Its value ends at nextOffset.
//
// Its key is keyLen bytes long. The first shared of them are the key
// before it's (0: the key is stored whole, in data or prevKeys, from
// keyStart); the rest, its delta, lie in data at keyStart. parent is the
// nearest entry before it in the cache whose shared is smaller: the bytes
// of its key from parent's shared up to its own are parent's delta's,
// since every entry between them kept them (rebuildKey).
type prevEntry struct {
	offset, nextOffset int32 // a block is smaller than 2 GiB (maxBlockLen)
	keyStart, keyLen   int32
	valStart           int32
	shared             int32
	parent             int32
	sameAsNext         bool
	keyIn              uint8
}

// Where a prevEntry's key or key delta is: from keyStart in prevKeys (a
// checkpoint's key, whole) or in data.
const (
	inPrevKeys = iota
	inData
)

// prev moves to the entry before the current one (it.offset; the block's
// end after last). Entries only link forward, so the first prev into a
// restart interval decodes it forward from its restart point (fillPrev):
// it stops at the entry that ends at the target, and leaves the entries
// before it in the prev cache, which the following steps pop. A backward
// scan so decodes each entry once, as a forward one does, however few
// entries an interval holds (two or three beside the handles of values
// stored apart, in segments written without restartApart). An interval
// of one entry, as every entry of 64 bytes or more has, and every entry
// holding a value handle where the writer set restartApart, is decoded in
// place (prevWhole), and so is an interval's first entry when it ends at
// the target.
func (it *blockIter) prev() bool {
	target := it.offset
	if target == 0 || it.err != nil {
		it.valid = false
		it.walked = target == 0 && it.checking && it.backWalk && it.err == nil
		return false
	}
	n := len(it.prevCache)
	if n == 0 || int(it.prevCache[n-1].nextOffset) != target {
		var lo int
		var whole bool
		if r := it.prevRestart; it.loOff == target && r > 0 && r < it.numRestarts && it.hiOff != 0 {
			// The interval before the one entered last, as a backward
			// scan asks for at every step (intervalBefore's case, without
			// the call).
			lo, whole = r-1, true
			it.prevRestart, it.loOff, it.hiOff = lo, it.restart(lo), target
		} else {
			lo, whole = it.intervalBefore(target)
		}
		cur, known := it.curUserKey(target)
		// The entry at restart point lo (it.loOff) may end at target: the
		// whole interval's one entry, or, within an interval, the first
		// of few.
		if known && (!whole || !it.multi) && it.prevWhole(it.loOff, target, cur) {
			return it.valid // false where it found corruption (checking)
		}
		if at, ok := it.fillPrev(lo, target, cur, known); at || !ok {
			return ok
		}
		n = len(it.prevCache)
	}
	e := &it.prevCache[n-1]
	switch sh := int(e.shared); {
	case sh == 0 && e.keyIn == inData:
		// A key stored whole is not copied: key aliases the block, which
		// it never writes (keyInData).
		it.key, it.keyInData = it.data[e.keyStart:e.keyStart+e.keyLen:e.keyStart+e.keyLen], true
	case sh <= it.shared && !it.keyInData && e.keyIn == inData:
		// The usual case, as next's: the key before shares all that this
		// one's entry says it shares, and its own delta is the rest.
		unshared := int(e.keyLen) - sh
		if src := it.data[e.keyStart:]; unshared <= 32 && len(src) >= 32 && cap(it.key)-sh >= 32 {
			dst := it.key[sh : sh+32 : sh+32]
			binary.LittleEndian.PutUint64(dst, binary.LittleEndian.Uint64(src))
			binary.LittleEndian.PutUint64(dst[8:], binary.LittleEndian.Uint64(src[8:]))
			binary.LittleEndian.PutUint64(dst[16:], binary.LittleEndian.Uint64(src[16:]))
			binary.LittleEndian.PutUint64(dst[24:], binary.LittleEndian.Uint64(src[24:]))
			it.key = it.key[:e.keyLen]
		} else {
			it.key = append(it.key[:sh], src[:unshared]...)
		}
	case !it.rebuildKey(n - 1):
		return false
	}
	it.val = it.data[e.valStart:e.nextOffset:e.nextOffset]
	it.offset, it.nextOffset, it.shared = int(e.offset), int(e.nextOffset), int(e.shared)
	it.sameUser = e.sameAsNext
	it.valid = true
	it.prevCache = it.prevCache[:n-1]
	return true
}

// rebuildKey builds the key of cached entry j in own, from the current
// key (the key of the entry after it), which shares its first it.shared
// bytes, and the deltas of j and of its parents. Each step back so writes
// only the bytes of the key it moves to past those it shares with the key
// it leaves: over a scan of an interval, no more than the entries store
// (the sums telescope), however long the keys they describe. Copying each
// key whole, a block of tiny entries that repeat a 64 KiB prefix cost 64
// KiB a step, and a bounded cache of such keys decoded the interval again
// at every cacheful: the square of its length.
func (it *blockIter) rebuildKey(j int) bool {
	cache := it.prevCache
	e := &cache[j]
	n := int(e.keyLen)
	s := min(it.shared, len(it.key), n)
	key := it.own
	if s > 0 && !sameStart(it.key, key) {
		// A key that shares bytes with the one before is built in own
		// (by next, or here), so this is for safety's sake: the shared
		// bytes are copied there.
		key = append(key[:0], it.key[:s]...)
	}
	if cap(key) < n {
		key = append(key[:s], make([]byte, n-s)...)
	}
	if !sameStart(key, it.own) {
		it.own = key[:0] // grown
	}
	key = key[:n]
	for k, hi := j, n; hi > s; {
		c := &cache[k]
		sh, lo := int(c.shared), max(int(c.shared), s)
		src := it.data
		if c.keyIn == inPrevKeys {
			src = it.prevKeys
		}
		// hi is at most c's key length: next checked that each shared
		// length is at most the key before's.
		if hi > int(c.keyLen) {
			return it.corrupt(int(c.offset), "shared prefix longer than previous key")
		}
		copy(key[lo:hi], src[int(c.keyStart)+lo-sh:int(c.keyStart)+hi-sh])
		if sh <= s {
			break
		}
		if k, hi = int(c.parent), sh; k < 0 {
			return it.corrupt(int(c.offset), "shared prefix longer than previous key")
		}
	}
	it.key, it.keyInData = key, false
	return true
}

// intervalBefore returns the last restart point before target, and
// whether its interval ends at target (the next restart point or the
// block's end is there). A backward scan asks for the interval before
// the one it asked for last, which prev finds without the call, or
// within it, which needs no search either.
func (it *blockIter) intervalBefore(target int) (lo int, whole bool) {
	switch {
	case it.loOff < target && target < it.hiOff:
		return it.prevRestart, false // within the interval decoded last
	case target == it.restartsOff:
		lo, whole = it.numRestarts-1, true
	default:
		hi := it.numRestarts - 1
		for lo < hi {
			mid := int(uint(lo+hi+1) >> 1)
			if it.restart(mid) < target {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		whole = lo+1 < it.numRestarts && it.restart(lo+1) == target
	}
	it.prevRestart, it.loOff, it.hiOff = lo, it.restart(lo), target
	if !whole {
		it.hiOff = it.restartsOff
		if lo+1 < it.numRestarts {
			it.hiOff = it.restart(lo + 1)
		}
	}
	return lo, whole
}

// curUserKey returns the user key of the entry at target, which prev
// moves back from, if it is known without decoding that entry again:
// the current key when the blockIter is at it. A key in data stays put;
// one in own, which fillPrev rewrites, is copied (after a seek or a
// next; not in a backward scan, whose key at an interval's start is in
// data). known is also true when no entry follows (target is the
// block's end), the block's keys have no user key to compare, or the
// segment has one entry per user key (distinct: sameUser is false). A
// block that is checking that claim compares.
func (it *blockIter) curUserKey(target int) (cur []byte, known bool) {
	if target >= it.restartsOff || !it.internal || it.distinct {
		return nil, true // nothing to compare with, or no need to
	}
	if !it.valid || len(it.key) < base.TrailerLen {
		return nil, false
	}
	cur = it.key[:len(it.key)-base.TrailerLen]
	if !it.keyInData {
		it.curBuf = append(it.curBuf[:0], cur...)
		cur = it.curBuf
	}
	return cur, true
}

// prevWhole moves to the entry at off, a restart point, if it is the only
// one of its interval, ending at target: its key is stored whole, and is
// aliased where it lies. It returns false, having changed nothing, if the
// entry is not that (more entries, or damage, which fillPrev reports). In
// a block that is checking, it reports a user key equal to cur, or an
// entry the properties rule out, as corruption, and returns true with the
// blockIter not valid.
func (it *blockIter) prevWhole(off, target int, cur []byte) bool {
	if off >= target || target > it.restartsOff {
		return false
	}
	p := it.data[off:target]
	var shared, unshared, vlen uint64
	var h int
	if len(p) >= 3 && p[0]|p[1]|p[2] < 0x80 { // decodeHeader's fast path, inlined as in next
		shared, unshared, vlen, h = uint64(p[0]), uint64(p[1]), uint64(p[2]), 3
	} else {
		var ok bool
		if shared, unshared, vlen, h, ok = decodeHeader(p); !ok {
			return false
		}
	}
	rest := uint64(len(p) - h)
	if shared != 0 || unshared > rest || unshared > uint64(it.maxKey) || (it.internal && unshared < base.TrailerLen) {
		return false // damage, for fillPrev to report
	}
	// The entry must fill p exactly.
	if vlen != rest-unshared {
		it.multi = vlen < rest-unshared // more entries follow it in its interval
		return false
	}
	keyStart, keyEnd := off+h, off+h+int(unshared)
	// cur is nil where there is nothing to compare (curUserKey).
	it.sameUser = cur != nil && equalKeys(it.data[keyStart:keyEnd-base.TrailerLen], cur)
	it.key, it.keyInData = it.data[keyStart:keyEnd:keyEnd], true
	it.val = it.data[keyEnd:target:target]
	it.offset, it.nextOffset, it.shared = off, target, 0
	it.valid = true
	it.prevCache = it.prevCache[:0]
	it.walk = -1
	if it.checking {
		if it.sameUser {
			it.corrupt(off, repeatedKey)
		} else {
			it.check(it.data[off:], h+int(unshared), unshared)
		}
	}
	return true
}

// repeatedKey is the reason a step reports in a block that is checking:
// it found the user key of the entry it left.
const repeatedKey = "user key repeated, in a segment whose properties say it holds one entry per user key"

// check is what next does at an entry of a block that is checking, just
// decoded from p, whose key ends at keyEnd in p after an unshared-byte
// delta: it reports the entry as corruption if its properties rule it
// out, and follows the walk over the restart points.
func (it *blockIter) check(p []byte, keyEnd int, unshared uint64) bool {
	// The trailer is read from the block where the delta holds it, not
	// from own, just written in words at other offsets, whose load waits
	// for the stores.
	var t uint64
	if unshared >= base.TrailerLen {
		t = binary.LittleEndian.Uint64(p[keyEnd-base.TrailerLen:])
	} else {
		t = binary.LittleEndian.Uint64(it.key[len(it.key)-base.TrailerLen:])
	}
	switch {
	case t>>8 > it.maxSeq:
		return it.corrupt(it.offset, fmt.Sprintf("sequence number %d above the segment's max-seq %d", t>>8, it.maxSeq))
	case base.Kind(t) == base.KindDelete && it.noTombstones:
		return it.corrupt(it.offset, "tombstone in a segment whose properties count none")
	}
	if it.walk > 0 && it.walk < it.numRestarts {
		if r := it.restart(it.walk); r == it.offset {
			it.walk++
		} else if r < it.offset {
			it.walk = -1 // a restart point inside an entry: not a walk of every way in
		}
	}
	return true
}

// equalKeys is bytes.Equal for user keys: keys that differ mostly do in
// their first 8 bytes, compared as one word without a call.
func equalKeys(a, b []byte) bool {
	return len(a) == len(b) && (len(a) < 8 || binary.LittleEndian.Uint64(a) == binary.LittleEndian.Uint64(b)) && bytes.Equal(a, b)
}

// sameStart reports whether a and b start at the same byte of memory.
func sameStart(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:1][0] == &b[:1][0]
}

// fillPrev decodes, from restart point lo (or the last checkpoint of its
// interval before target), the entries up to the one that ends at target.
// Whether that one shares its user key with the entry at target is cur's
// to say when known: fillPrev then stops there, the blockIter at it (at),
// with the entries before it in the prev cache. Only otherwise is the
// entry at target decoded again to learn it, and all of them are left in
// the cache, for prev to pop the last. ok is false on damage, which it
// reports.
func (it *blockIter) fillPrev(lo, target int, cur []byte, known bool) (at, ok bool) {
	// Built in locals and stored once: a store of a slice into the heap
	// costs a write barrier while the GC runs.
	cache := it.prevCache[:0]
	it.seekToRestart(lo)
	it.key, it.keyInData = it.own[:0], false
	// i numbers the entries from the restart point's, 0; checkpoint m-1
	// is entry m*maxPrevEntries, and the cache holds the entries from the
	// last one of those before it.
	i := 0
	if len(it.checkpoints) > 0 {
		if it.prevCheckpointAt != it.nextOffset { // another interval's
			it.checkpoints, it.prevKeys = it.checkpoints[:0], it.prevKeys[:0]
		} else if m := it.checkpointBefore(target); m > 0 {
			c := it.checkpoints[m-1]
			cache = append(cache, c)
			it.key = append(it.key, it.prevKeys[c.keyStart:c.keyStart+c.keyLen]...)
			it.nextOffset, i = int(c.nextOffset), m*maxPrevEntries+1
		}
	}
	if from := it.nextOffset; from < target && target <= len(it.data) {
		it.touched = touch(it.data[from:target])
	}
	for ; it.next(); i++ {
		if n := len(cache); n > 0 {
			cache[n-1].sameAsNext = it.sameUser
		}
		if it.offset == target { // only when cur is unknown
			if len(cache) == 0 { // a restart point at target itself
				break
			}
			it.prevCache = cache
			it.keepOwn()
			return false, true
		}
		if it.nextOffset > target {
			it.prevCache = cache[:0]
			return false, it.corrupt(it.offset, "entry overlaps the next one")
		}
		if it.nextOffset == target && known {
			// The entry prev moves to: it stays where next decoded it,
			// neither cached nor popped.
			it.prevCache = cache
			it.keepOwn()
			it.sameUser = cur != nil && equalKeys(it.key[:len(it.key)-base.TrailerLen], cur)
			it.multi = len(cache) > 0
			if it.sameUser && it.checking {
				return false, it.corrupt(it.offset, repeatedKey)
			}
			return true, true
		}
		if i > 0 && i%maxPrevEntries == 0 {
			// Keep only the interval's tail, from a checkpoint: the
			// entries before it are decoded again from the checkpoint
			// before, if prev comes to them.
			if m := i / maxPrevEntries; m > len(it.checkpoints) {
				// Checkpoints are made in order: a fill starts at the
				// last before its target, or at the restart point.
				it.addCheckpoint(lo)
			}
			cache = append(cache[:0], it.checkpoints[i/maxPrevEntries-1])
			continue
		}
		// The entry is written field by field where it goes: built on the
		// stack and copied, it was stored in small pieces and loaded back
		// whole, which the CPU cannot forward from its store buffer (a
		// stall that took a third of a backward scan of small entries).
		if len(cache) < cap(cache) {
			cache = cache[:len(cache)+1]
		} else {
			cache = append(cache, prevEntry{})
		}
		e := &cache[len(cache)-1]
		valStart := it.nextOffset - len(it.val)
		e.offset, e.nextOffset = int32(it.offset), int32(it.nextOffset)
		e.valStart, e.shared, e.sameAsNext = int32(valStart), int32(it.shared), false
		e.keyStart, e.keyLen, e.keyIn = int32(valStart-len(it.key)+it.shared), int32(len(it.key)), inData
		// parent: the nearest entry before with a smaller shared length,
		// found along the parents of the entries before (each link
		// passed over is passed over once: linear in all).
		p := int32(-1)
		if it.shared > 0 {
			for p = int32(len(cache) - 2); p >= 0 && cache[p].shared >= e.shared; p = cache[p].parent {
			}
		}
		e.parent = p
	}
	it.prevCache = cache[:0]
	if it.err != nil {
		it.valid = false
		return false, false
	}
	return false, it.corrupt(target, "entry not reachable from its restart point")
}

// checkpointBefore returns m > 0 if checkpoint m-1 is the last one that
// ends before target, else 0.
func (it *blockIter) checkpointBefore(target int) int {
	lo, hi := 0, len(it.checkpoints)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if int(it.checkpoints[mid].nextOffset) < target {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// addCheckpoint records the current entry, decoded by fillPrev from
// restart point lo, as the next checkpoint of its interval, its key
// copied whole into prevKeys.
func (it *blockIter) addCheckpoint(lo int) {
	if len(it.checkpoints) == 0 {
		it.prevCheckpointAt = it.restart(lo)
	}
	valStart := it.nextOffset - len(it.val)
	it.checkpoints = append(it.checkpoints, prevEntry{
		offset: int32(it.offset), nextOffset: int32(it.nextOffset), valStart: int32(valStart),
		keyStart: int32(len(it.prevKeys)), keyLen: int32(len(it.key)), parent: -1, keyIn: inPrevKeys,
	})
	it.prevKeys = append(it.prevKeys, it.key...)
}

// compareAfterShared compares encoded internal keys a and b in
// internal-key order, given that they agree on their first s bytes, as
// consecutive keys of a block do (s is b's shared prefix). Skipping those
// bytes makes the cost O(len(b)-s), the bytes b's entry actually stores,
// rather than O(len(b)): a block can repeat a 64 KiB prefix at the cost
// of one uvarint per entry. sameUser reports whether the user keys are
// equal.
func compareAfterShared(a, b []byte, s int) (c int, sameUser bool) {
	ua, ta := splitInternalKey(a)
	ub, tb := splitInternalKey(b)
	s = min(s, len(ua), len(ub)) // s may reach into a trailer
	if c := bytes.Compare(ua[s:], ub[s:]); c != 0 {
		return c, false
	}
	return cmp.Compare(tb, ta), true // trailers order descending
}

// compareInternal compares an encoded internal key with (ukey, trailer)
// in internal-key order.
func compareInternal(ikey, ukey []byte, trailer uint64) int {
	k, t := splitInternalKey(ikey)
	return base.Compare(k, t, ukey, trailer)
}
