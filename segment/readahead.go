package segment

// readahead turns an iterator's one-block-at-a-time reads of a file that is
// not mapped into a few large ones, once the iterator is seen to move
// forward through consecutive blocks: after raMinRun such reads it reads a
// window of whole blocks at once, the window doubling from raInitial to
// raMax, as Pebble's and RocksDB's iterator readahead do. A short range
// scan never reaches raMinRun, so it reads no more than it uses. A mapped
// file is advised for random access (a point read faults in only the pages
// of its block), so for it the same run detection asks the kernel to read
// the window ahead (MADV_WILLNEED) instead of reading it into a buffer.
//
// It also holds the iterator's decompression buffer: an iterator that does
// not fill the cache decodes every compressed block into the same memory
// instead of allocating a block's worth per block.
type readahead struct {
	buf    []byte
	off    uint64 // file offset of buf[0]
	next   uint64 // offset just past the last block asked for
	run    int    // consecutive reads that were sequential
	window int

	reuseDecoded bool   // decode into decoded (the blocks are not cached)
	decoded      []byte // the last block decoded, overwritten by the next
	// bufUsed and decodedUsed say buf and decoded served a read since
	// the last release.
	bufUsed, decodedUsed bool

	counters *Counters // where the Iter's reads are counted; nil: the Reader's
}

const (
	raMinRun  = 2
	raInitial = 64 << 10
	raMax     = 256 << 10
)

// get returns the stored bytes (block and trailer) at [off, off+size) from
// the window, refilling it if the read is part of a sequential run, or
// nil when the caller should read the block on its own. The slice is
// overwritten by a later refill.
func (ra *readahead) get(r *Reader, off, size uint64) ([]byte, error) {
	end := off + size
	if off >= ra.off && end <= ra.off+uint64(len(ra.buf)) {
		ra.next, ra.bufUsed = end, true
		return ra.buf[off-ra.off : end-ra.off : end-ra.off], nil
	}
	if off >= ra.next && off-ra.next < PageSize { // the next block, after padding (PageAlign) if any
		ra.run++
	} else {
		ra.run, ra.window = 0, 0
	}
	ra.next = end
	if ra.run < raMinRun {
		return nil, nil
	}
	ra.window = min(max(2*ra.window, raInitial), raMax)
	n := min(max(uint64(ra.window), size), max(r.dataEnd(), end)-off)
	if m := r.opts.Mapped; m != nil {
		// The window's pages, read ahead by the kernel; the blocks in it
		// are then served from the mapping without a fault on the device.
		ra.off, ra.buf = off, m[off:off+n:off+n]
		adviseWillNeed(m, off, n)
		return ra.buf[:size:size], nil
	}
	if uint64(cap(ra.buf)) < n || oversized(cap(ra.buf), int(n)) {
		ra.buf = make([]byte, n)
	}
	ra.buf, ra.off, ra.bufUsed = ra.buf[:n], off, true
	if err := r.readAt(ra.buf, off, r.counters(ra)); err != nil {
		ra.buf = ra.buf[:0]
		return nil, err
	}
	return ra.buf[:size:size], nil
}

// maxKeptBuf is the largest readahead window or decode buffer an Iter
// keeps while it reads blocks that do not use it (release), or reuses
// for a block of under a quarter of its size (oversized).
const maxKeptBuf = 1 << 20

// oversized reports whether a reused buffer of capacity c is too large to
// hold n bytes next: larger than maxKeptBuf and than 4n. It is then
// replaced by one of the size needed.
func oversized(c, n int) bool { return c > maxKeptBuf && c > 4*n }

// decodeBuf returns the decode buffer, of at least n bytes, for a block
// that will not be cached.
func (ra *readahead) decodeBuf(n int) []byte {
	if cap(ra.decoded) < n || oversized(cap(ra.decoded), n) {
		ra.decoded = make([]byte, n)
	}
	ra.decodedUsed = true
	return ra.decoded
}

// release lets go of the window and the decode buffer if either is
// larger than maxKeptBuf and served no read since the last release: an
// Iter calls it when it loads another block, or runs out of blocks, once
// that block is read. A block far larger than the others (a value kept
// in its block, up to MaxValueSize; a BlockSize of up to 8 MiB) grows
// them, and an Iter that went on to blocks of the mapping or the cache,
// or was left where it ran out of keys (a merge's source that the others
// outlast), kept that much for as long as it was open.
func (ra *readahead) release() {
	if !ra.bufUsed && cap(ra.buf) > maxKeptBuf {
		ra.buf, ra.off = nil, 0
	}
	if !ra.decodedUsed && cap(ra.decoded) > maxKeptBuf {
		ra.decoded = nil
	}
	ra.bufUsed, ra.decodedUsed = false, false
}

// dataEnd returns the offset just past the last data block's trailer.
func (r *Reader) dataEnd() uint64 {
	if len(r.index) == 0 {
		return 0
	}
	h := r.index[len(r.index)-1].h
	return h.offset + h.length + blockTrailerLen
}
