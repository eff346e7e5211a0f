package segment

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"

	"github.com/bloomkv/bloomkv/internal/base"
)

// blockWriter builds one block: prefix-compressed entries with a restart
// point every restartInterval entries, then the restart array and its
// length (FORMAT.md, "Blocks"). A restart point stores its key whole, so a
// reader can binary-search the restart points and decode from any of them.
type blockWriter struct {
	restartInterval int
	buf             []byte
	restarts        []uint32
	counter         int // entries since the last restart point
	entries         int
	lastKey         []byte
}

func (w *blockWriter) add(key, value []byte) {
	shared := 0
	if w.entries == 0 || w.counter == w.restartInterval {
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

// estimatedSize is the size finish would return now.
func (w *blockWriter) estimatedSize() int {
	return len(w.buf) + 4*max(len(w.restarts), 1) + 4
}

// finish appends the restart array and returns the block. The result is
// valid until the next reset.
func (w *blockWriter) finish() []byte {
	if len(w.restarts) == 0 {
		w.restarts = append(w.restarts, 0) // an empty block still has one restart point
	}
	for _, r := range w.restarts {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, r)
	}
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(w.restarts)))
	return w.buf
}

func (w *blockWriter) reset() {
	w.buf = w.buf[:0]
	w.restarts = w.restarts[:0]
	w.counter = 0
	w.entries = 0
	w.lastKey = w.lastKey[:0]
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

// parseRestarts locates the restart array in O(1). It returns a reason
// string ("" if fine) so callers can attach the file and offset.
func parseRestarts(data []byte) (restartsOff, numRestarts int, reason string) {
	if len(data) < 4 {
		return 0, 0, "block shorter than its restart count"
	}
	n := uint64(binary.LittleEndian.Uint32(data[len(data)-4:]))
	if n == 0 {
		return 0, 0, "block has no restart points"
	}
	if n > uint64(len(data)-4)/4 {
		return 0, 0, fmt.Sprintf("restart count %d does not fit in a %d-byte block", n, len(data))
	}
	return len(data) - 4 - 4*int(n), int(n), ""
}

// checkBlock validates the block's restart array in full: the first
// restart point is 0 and they strictly increase inside the entry area.
// Binary search relies on this, so every block is checked once when it is
// read from the file; blocks in the cache have passed.
func checkBlock(data []byte) string {
	restartsOff, n, reason := parseRestarts(data)
	if reason != "" {
		return reason
	}
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
	offset      int // offset of the current entry
	nextOffset  int // offset of the entry after it
	key         []byte
	val         []byte
	shared      int // leading bytes of key equal to the previous entry's key
	valid       bool
	internal    bool // keys are internal keys: at least 8 bytes
	maxKey      int  // longer keys are corruption (FORMAT.md, "Limits a reader enforces")
	err         error

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
	*it = blockIter{key: it.key[:0], data: data, internal: internal, file: file, fileOff: fileOff}
	it.maxKey = maxPropertyNameLen
	if internal {
		it.maxKey = maxInternalKeyLen
	}
	restartsOff, n, reason := parseRestarts(data)
	if reason != "" {
		it.err = base.Corruptf(file, fileOff, "%s", reason)
		return it.err
	}
	it.restartsOff, it.numRestarts = restartsOff, n
	return nil
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
		return false
	}
	p := it.data[it.offset:it.restartsOff]
	shared, unshared, vlen, h, ok := decodeHeader(p)
	if !ok {
		return it.corrupt(it.offset, "entry overruns block")
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
	it.key = append(it.key[:shared], p[h:keyEnd]...)
	it.shared = int(shared)
	if it.internal && len(it.key) < base.TrailerLen {
		return it.corrupt(it.offset, "internal key shorter than its trailer")
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

func (it *blockIter) seekToRestart(i int) {
	it.key = it.key[:0]
	it.nextOffset = it.restart(i)
	it.valid = false
}

func (it *blockIter) first() bool {
	it.seekToRestart(0)
	return it.next()
}

func (it *blockIter) last() bool {
	it.seekToRestart(it.numRestarts - 1)
	for it.next() && it.nextOffset < it.restartsOff {
	}
	return it.valid
}

// seekGE moves to the first entry whose internal key is >= (ukey,
// trailer): a binary search over the restart points for the last one
// below the target, then a linear scan of at most one restart interval.
func (it *blockIter) seekGE(ukey []byte, trailer uint64) bool {
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
	for it.next() {
		if compareInternal(it.key, ukey, trailer) >= 0 {
			return true
		}
	}
	return false
}

// prev moves to the entry before the current one. Entries only link
// forward, so it restarts from the last restart point before the current
// entry and walks forward to it.
func (it *blockIter) prev() bool {
	target := it.offset
	if target == 0 {
		it.valid = false
		return false
	}
	lo, hi := 0, it.numRestarts-1 // find the last restart point < target
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if it.restart(mid) < target {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	it.seekToRestart(lo)
	for it.next() {
		if it.nextOffset == target {
			return true
		}
		if it.nextOffset > target {
			return it.corrupt(it.offset, "entry overlaps the next one")
		}
	}
	return it.corrupt(target, "entry not reachable from its restart point")
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
