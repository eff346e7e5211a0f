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
		ra.next = end
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
	if uint64(cap(ra.buf)) < n {
		ra.buf = make([]byte, n)
	}
	ra.buf, ra.off = ra.buf[:n], off
	if err := r.readAt(ra.buf, off, r.counters(ra)); err != nil {
		ra.buf = ra.buf[:0]
		return nil, err
	}
	return ra.buf[:size:size], nil
}

// dataEnd returns the offset just past the last data block's trailer.
func (r *Reader) dataEnd() uint64 {
	if len(r.index) == 0 {
		return 0
	}
	h := r.index[len(r.index)-1].h
	return h.offset + h.length + blockTrailerLen
}
