package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
	"github.com/bloomkv/bloomkv/internal/stripe"
	"github.com/golang/snappy"
)

// Counters accumulate read statistics. One Counters is shared by all the
// readers of a store, so its fields are atomic. A Reader counts into
// ReaderOptions.Counters; an Iter made by NewIterWithCounters counts its
// data block reads into its own, so that a store can keep the reads of
// its compactions apart from those of Gets and scans.
//
// They are striped (internal/stripe): every Get that reads a block adds to
// them, and one shared word would be a cache line bouncing between cores.
type Counters struct {
	BlockReads     stripe.Uint64 // data blocks read from files or the mapping (cache misses)
	BlockCacheHits stripe.Uint64 // data blocks found in the cache
	BytesRead      stripe.Uint64 // bytes read from files: data blocks, read-ahead windows, and the metadata Open reads
	// ColdReads is the data blocks of mapped segments that point reads
	// found missing from the page cache and read with pread (included
	// in BlockReads).
	ColdReads stripe.Uint64
}

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	Cache    *Cache    // shared block cache; nil disables caching
	Counters *Counters // shared statistics; may be nil
	FileNum  uint64    // identifies the file in Cache: unique per store
	Name     string    // file name used in errors
	// Mapped, if set, is the whole file mapped into memory (read-only, as
	// long as the Reader is used). Blocks are then sliced out of it
	// instead of read with ReadAt: an uncompressed block costs no system
	// call, no allocation and no cache space (its checksum is verified on
	// every read); a compressed one is decompressed and cached as usual.
	// A point read (Lookup) of a block whose pages the page cache does
	// not hold reads it with ReadAt instead (see coldSample; Linux): one
	// request to the device instead of a fault per page, and an error
	// instead of a SIGBUS if the device fails.
	Mapped []byte
	// Prefix and PrefixName, if set, are a prefix extractor: when the
	// segment's prefix filter was built by the extractor of that name,
	// Verify checks that it holds the prefix of every key. Lookups do not
	// need them.
	Prefix     func(key []byte) int
	PrefixName string
}

// Reader reads one segment file. It keeps the footer, properties, index and
// filter in memory and reads data blocks on demand, through the cache. It
// is safe for concurrent use.
type Reader struct {
	f             io.ReaderAt
	opts          ReaderOptions
	footer        footer
	props         Properties
	filter        *bloom.Filter                // as stored in the file: a view into the mapping, or a heap copy (pread)
	rawMap        []byte                       // the filter block in the mapping (nil with pread)
	resident      atomic.Pointer[bloom.Filter] // what MayContain asks, on the heap: filter, or a fold of it
	prefix        prefixFilter                 // the prefix filter block, if any (prefix.go)
	rangeDels     *rangedel.List               // the range-deletion block, fragmented (rangedel.go)
	rangeDelBlock blockHandle                  // where it is; zero if the segment has none
	index         []indexEntry
	heads         []uint64 // keyHead of each index entry's user key, for searchIndex
	// valuesVerified marks the value records of a mapped segment whose
	// checksum was checked once, as indexEntry.verified marks data blocks
	// (values.go).
	valuesVerified verifiedRecords
	// coldAnswers > 0: the segment is cold, and point reads go to the
	// block cache and pread (see coldSample) until that many more
	// answers of inCache (mincore; tests replace it) say resident.
	coldAnswers atomic.Int32
	// warmAnswers counts the answers of inCache since the last "not
	// resident", up to warmTrust: a segment that has said "resident" that
	// often in a row is trusted to be warm, and the first reads of its
	// blocks and value records ask only now and then (firstResident).
	warmAnswers atomic.Int32
	inCache     func(m []byte, off, n uint64) bool

	iters sync.Pool // *blockIter for Get, so that a cache hit allocates nothing
}

// indexEntry is one decoded index block entry: the separator key of a data
// block and where the block is.
type indexEntry struct {
	userKey []byte
	trailer uint64
	h       blockHandle
	// verified marks a mapped, uncompressed data block whose checksum
	// and structure were checked once: the file is immutable, so later
	// reads slice the mapping without hashing 4 KiB again (that CRC was
	// 16% of a cached Get's CPU time). It lies beside h, which a read
	// loads anyway: in an array of its own it cost a Get a cache miss.
	verified atomic.Bool
	// decodedChecked marks a mapped, compressed data block whose
	// checksum and structure were checked once, for the same reason: an
	// iterator's later reads only decode it (dataBlock).
	decodedChecked atomic.Bool
	// scanChecked marks a data block of a segment whose properties say it
	// holds one entry per user key, once a walk of the block found that
	// they agree with its entries (blockIter.checking): later steps
	// trust them, as a scan's steps had before they were checked, and do
	// not compare keys.
	scanChecked atomic.Bool
	// layout is the block's restart and hash index geometry (packLayout),
	// set once the block was read and checked if it is stored
	// uncompressed, 0 until then. A point lookup then finds its hash
	// bucket without first reading the block's last bytes: that read, a
	// miss in the TLB and the CPU cache with the block's page cold in
	// both, was a fifth of a warm Get of a 100-byte value, and the bucket
	// and restart point it led to were each another miss after it.
	layout atomic.Uint64
}

// cacheMode says how a data block read uses the cache.
type cacheMode uint8

const (
	cacheFill   cacheMode = iota // look up; insert on a miss
	cacheLookup                  // look up only: a scan must not evict hot blocks
	cacheBypass                  // read the file: Verify checks what is on disk
)

// Open prepares a segment of size bytes for reading, using only f.ReadAt.
// It reads and checks the footer, properties, index and filter (the filter
// is decoded in place from its block, which the Reader keeps). Damage is
// reported as a *base.CorruptError naming opts.Name and the offset; I/O
// errors are wrapped.
func Open(f io.ReaderAt, size int64, opts ReaderOptions) (*Reader, error) {
	r := &Reader{f: f, opts: opts, inCache: pagesResident}
	r.iters.New = func() any { return new(blockIter) }
	if err := r.readFooter(size); err != nil {
		return nil, err
	}
	if err := r.readProperties(); err != nil {
		return nil, err
	}
	if err := r.readIndex(); err != nil {
		return nil, err
	}
	if opts.Mapped != nil {
		r.valuesVerified = newVerifiedRecords(r.props.Values)
	}
	if err := r.readFilter(); err != nil {
		return nil, err
	}
	if err := r.readPrefixFilter(); err != nil {
		return nil, err
	}
	var err error
	if r.rangeDels, err = r.loadRangeDels(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reader) corrupt(off uint64, format string, args ...any) error {
	return base.Corruptf(r.opts.Name, int64(off), format, args...)
}

// readAt fills buf from offset off, counting the bytes into c (if not
// nil). A short read is corruption: every length was checked against the
// file size the caller gave.
func (r *Reader) readAt(buf []byte, off uint64, c *Counters) error {
	n, err := r.f.ReadAt(buf, int64(off))
	if c != nil {
		c.BytesRead.Add(uint64(n))
	}
	if n == len(buf) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return r.corrupt(off, "file ends inside a %d-byte read", len(buf))
	}
	return fmt.Errorf("segment %s: read %d bytes at %d: %w", r.opts.Name, len(buf), off, err)
}

// readFooter reads the footer and checks that the metadata blocks are
// contiguous in the order filter, properties, index, ending at the footer
// (the optional blocks between the filter and the properties are located
// and checked once the properties are read: checkLayout). That bounds
// every metadata length by the file size.
func (r *Reader) readFooter(size int64) error {
	if size < footerLen {
		return r.corrupt(0, "file of %d bytes is shorter than the footer", size)
	}
	footerOff := uint64(size - footerLen)
	buf := make([]byte, footerLen)
	if err := r.readAt(buf, footerOff, r.opts.Counters); err != nil {
		return err
	}
	ft, reason := decodeFooter(buf)
	if reason != "" {
		return r.corrupt(footerOff, "footer: %s", reason)
	}
	if ft.properties.length > footerOff || ft.properties.end() != ft.index.offset ||
		ft.index.length > footerOff || ft.index.end() != footerOff || ft.properties.offset > footerOff {
		return r.corrupt(footerOff, "footer: metadata blocks are not contiguous up to the footer")
	}
	if ft.filter != (blockHandle{}) && (ft.filter.offset > footerOff || ft.filter.length > footerOff || ft.filter.end() > ft.properties.offset) {
		return r.corrupt(footerOff, "footer: filter block does not end before the properties block")
	}
	r.footer = ft
	return nil
}

// readStored reads the block at h, verifies its checksum and returns its
// contents, decompressed if need be. Handles were checked against the file
// size, which bounds len(buf); a snappy length is checked against
// MaxBlockSize and against what the stored bytes can decode to
// (maxSnappyLen) before anything is allocated for it.
func (r *Reader) readStored(h blockHandle) ([]byte, error) {
	b, _, err := r.readBlock(h, nil)
	return b, err
}

// readBlock is readStored that also reports whether the block is a slice
// of the file mapping (Mapped and stored uncompressed): such a block needs
// no cache space, the page cache already holds it.
//
// The block is a fresh buffer, a slice of the mapping, or (borrowed) a
// slice of ra's window or decode buffer, which must be copied to outlive
// the next read through ra.
func (r *Reader) readBlock(h blockHandle, ra *readahead) (block []byte, src blockSource, err error) {
	return r.read(h, ra, true)
}

// read is readBlock, without the checksum unless sum is set (decode).
func (r *Reader) read(h blockHandle, ra *readahead, sum bool) (block []byte, src blockSource, err error) {
	buf, src, err := r.storedBytes(h, ra)
	if err != nil {
		return nil, src, err
	}
	return r.decode(h, buf, src, ra, sum)
}

// decodeStored verifies the checksum of buf, the stored bytes of the block
// at h and its trailer (from src), and returns the block's contents,
// decompressed if need be, and where they live.
func (r *Reader) decodeStored(h blockHandle, buf []byte, src blockSource, ra *readahead) (block []byte, _ blockSource, err error) {
	return r.decode(h, buf, src, ra, true)
}

// decode is decodeStored, without the checksum unless sum is set: for
// the bytes of a mapped block whose checksum was verified before
// (indexEntry.decodedChecked).
func (r *Reader) decode(h blockHandle, buf []byte, src blockSource, ra *readahead, sum bool) (block []byte, _ blockSource, err error) {
	typ, dlen, err := r.checkStored(h, buf, sum)
	if err != nil {
		return nil, src, err
	}
	stored := buf[:h.length:h.length]
	switch typ {
	case compressionNone:
		return stored, src, nil
	case compressionSnappy:
		var dst []byte
		if ra != nil && ra.reuseDecoded {
			dst, src = ra.decodeBuf(dlen)[:dlen], srcBorrowed
		} else {
			dst, src = make([]byte, dlen), srcFresh
		}
		out, err := snappy.Decode(dst, stored)
		if err != nil || len(out) != dlen {
			return nil, src, r.corrupt(h.offset, "snappy: %v", err)
		}
		return out, src, nil
	}
	return r.decodeZstd(h, stored, dlen, ra)
}

// checkStored verifies the checksum of buf, the stored bytes of the block
// at h and its trailer, and returns the block's compression type and the
// length its contents decode to, without decoding them. A compressed
// block's length comes from its codec's header (a zstd frame declares its
// content size) and must lie within what any compressed block of its size
// may decode to (maxSnappyLen), before a buffer of that size is allocated.
//
// With sum false the checksum is taken as verified (decode's case).
func (r *Reader) checkStored(h blockHandle, buf []byte, sum bool) (typ byte, dlen int, err error) {
	n := int(h.length)
	stored, typ := buf[:n:n], buf[n]
	if sum {
		if got, want := blockChecksum(buf[:n+1]), binary.LittleEndian.Uint32(buf[n+1:]); got != want {
			return typ, 0, r.corrupt(h.offset, "block checksum mismatch: computed %#08x, stored %#08x", got, want)
		}
	}
	var declared uint64
	switch typ {
	case compressionNone:
		return typ, n, nil
	case compressionSnappy:
		d, err := snappy.DecodedLen(stored)
		if err != nil {
			return typ, 0, r.corrupt(h.offset, "snappy block length: %v", err)
		}
		declared = uint64(d)
	case compressionZstd:
		if r.footer.version < formatVersionZstd {
			return typ, 0, r.corrupt(h.offset, "zstd block in a version-%d segment", r.footer.version)
		}
		if declared, err = zstdDecodedLen(stored); err != nil {
			return typ, 0, r.corrupt(h.offset, "zstd frame: %v", err)
		}
	default:
		return typ, 0, r.corrupt(h.offset, "unknown compression type %d", typ)
	}
	if limit := maxSnappyLen(h.length); declared > limit {
		return typ, 0, r.corrupt(h.offset, "compressed block of %d bytes claims to decode to %d, more than the %d it can",
			h.length, declared, limit)
	}
	return typ, int(declared), nil
}

// decodeZstd decodes the zstd block stored at h, whose frame declares
// dlen bytes of content (checkStored); the decoder writes at most that
// many (WithDecodeAllCapLimit), and fewer or more is corruption.
func (r *Reader) decodeZstd(h blockHandle, stored []byte, dlen int, ra *readahead) ([]byte, blockSource, error) {
	src := srcFresh
	dec, err := zstdDecoder()
	if err != nil {
		return nil, src, fmt.Errorf("segment %s: zstd decoder: %w", r.opts.Name, err)
	}
	var dst []byte
	if ra != nil && ra.reuseDecoded {
		dst, src = ra.decodeBuf(dlen)[:0:dlen], srcBorrowed
	} else {
		dst = make([]byte, 0, dlen)
	}
	out, err := dec.DecodeAll(stored, dst)
	if err != nil {
		return nil, src, r.corrupt(h.offset, "zstd: %v", err)
	}
	if len(out) != dlen {
		return nil, src, r.corrupt(h.offset, "zstd block decodes to %d bytes, its frame declares %d", len(out), dlen)
	}
	return out, src, nil
}

// blockSource says where the bytes of a block returned by readBlock live.
type blockSource uint8

const (
	srcFresh    blockSource = iota // a buffer of its own
	srcMapped                      // the file's mapping
	srcBorrowed                    // ra's window or decode buffer, reused by the next read
)

// storedBytes returns the bytes of the block at h and its trailer: a
// slice of the mapping when the file is mapped, of ra's window when ra has
// it, else a fresh buffer.
func (r *Reader) storedBytes(h blockHandle, ra *readahead) ([]byte, blockSource, error) {
	size := h.length + blockTrailerLen
	if m := r.opts.Mapped; m != nil {
		if h.offset > uint64(len(m)) || size > uint64(len(m))-h.offset {
			return nil, srcMapped, r.corrupt(h.offset, "file ends inside a %d-byte block", size)
		}
		if c := r.counters(ra); c != nil {
			c.BytesRead.Add(size)
		}
		if ra != nil {
			ra.get(r, h.offset, size) // read-ahead advice only
		}
		end := h.offset + size
		return m[h.offset:end:end], srcMapped, nil
	}
	if ra != nil {
		if b, err := ra.get(r, h.offset, size); b != nil || err != nil {
			return b, srcBorrowed, err
		}
	}
	buf := make([]byte, size)
	return buf, srcFresh, r.readAt(buf, h.offset, r.counters(ra))
}

func (r *Reader) readProperties() error {
	h := r.footer.properties
	b, err := r.readStored(h)
	if err != nil {
		return err
	}
	r.props, err = decodeProperties(b, r.opts.Name, int64(h.offset))
	if err != nil {
		return err
	}
	r.props.FormatVersion = r.footer.version
	if r.props.Values > 0 && r.footer.version < formatVersionValues {
		return r.corrupt(h.offset, "properties: value records in a version-%d segment", r.footer.version)
	}
	if err := r.checkLayout(); err != nil {
		return err
	}
	switch {
	case r.props.IndexSize != r.footer.index.length:
		return r.corrupt(h.offset, "properties: index size %d, but the index block has %d bytes", r.props.IndexSize, r.footer.index.length)
	case r.props.FilterSize != r.footer.filter.length:
		return r.corrupt(h.offset, "properties: filter size %d, but the filter block has %d bytes", r.props.FilterSize, r.footer.filter.length)
	}
	return nil
}

// readIndex decodes the index block into memory, in two passes over the
// block: checkIndex validates it and measures it, then loadIndex copies
// the separators into allocations of exactly the right size.
func (r *Reader) readIndex() error {
	h := r.footer.index
	b, err := r.readStored(h)
	if err != nil {
		return err
	}
	if reason := checkBlock(b); reason != "" {
		return r.corrupt(h.offset, "index block: %s", reason)
	}
	if hasHashIndex(b) {
		return r.corrupt(h.offset, "index block with a hash index")
	}
	n, keyBytes, err := r.checkIndex(b)
	if err != nil {
		return err
	}
	return r.loadIndex(b, n, keyBytes)
}

// checkIndex validates the index block b and returns its number of
// entries and the total length of their separators' user keys.
// Separators must strictly increase and the data blocks must tile [0,
// DataSize) in order (in version 5, leaving gaps for value records),
// which bounds every data block's length by the file size.
//
// The index is kept whole, so its size must be bounded by the file's too.
// A separator is at most its block's last key, which that block stores in
// full (its keys are built from its own bytes alone), so it cannot be
// longer than the block's contents: maxContentLen of the block's stored
// length. Summed over the blocks, the separators take at most about 21
// times the data size (snappy's best ratio), however long the index's
// prefix compression claims they are.
func (r *Reader) checkIndex(b []byte) (n int, keyBytes uint64, err error) {
	h := r.footer.index
	var it blockIter
	if err := it.init(b, true, r.opts.Name, int64(h.offset)); err != nil {
		return 0, 0, err
	}
	var prev []byte   // the previous separator
	next := uint64(0) // where the next data block must start
	for ok := it.first(); ok; ok = it.next() {
		dh, ok := decodeHandle(it.val)
		if !ok || r.badGap(next, dh.offset) || dh.offset > r.props.DataSize || dh.length > r.props.DataSize || dh.end() > r.props.DataSize {
			return 0, 0, r.corrupt(h.offset, "index entry %d: bad block handle", n)
		}
		if limit := maxContentLen(dh.length); uint64(len(it.key)) > limit {
			return 0, 0, r.corrupt(h.offset, "index entry %d: separator of %d bytes, but its %d-byte data block holds at most %d",
				n, len(it.key), dh.length, limit)
		}
		if n > 0 {
			if c, _ := compareAfterShared(prev, it.key, it.shared); c >= 0 {
				return 0, 0, r.corrupt(h.offset, "index separators out of order at entry %d", n)
			}
		}
		prev = append(prev[:it.shared], it.key[it.shared:]...) // they agree on it.shared bytes
		next = dh.end()
		keyBytes += uint64(len(it.key) - base.TrailerLen)
		n++
	}
	if it.err != nil {
		return 0, 0, it.err
	}
	if next != r.props.DataSize || n != r.props.DataBlocks {
		return 0, 0, r.corrupt(h.offset, "index describes %d blocks ending at %d; properties say %d ending at %d",
			n, next, r.props.DataBlocks, r.props.DataSize)
	}
	return n, keyBytes, nil
}

// badGap reports whether a data block at offset off may not follow the
// end of the previous one (or the file's start) at next. From version 5
// value records may fill a gap before a block, and from version 6 it may
// end in padding of less than a page (Verify checks both exactly).
func (r *Reader) badGap(next, off uint64) bool {
	switch {
	case off == next:
		return false
	case off < next:
		return true
	case r.props.Values > 0:
		return false
	}
	return r.footer.version < formatVersionPadding || off-next >= PageSize
}

// loadIndex copies the n entries of the index block b, which checkIndex
// accepted, into r.index; their user keys, keyBytes in all, share one
// allocation.
func (r *Reader) loadIndex(b []byte, n int, keyBytes uint64) error {
	h := r.footer.index
	var it blockIter
	if err := it.init(b, true, r.opts.Name, int64(h.offset)); err != nil {
		return err
	}
	arena := make([]byte, 0, keyBytes)
	r.index = make([]indexEntry, 0, n)
	r.heads = make([]uint64, 0, n)
	for ok := it.first(); ok; ok = it.next() {
		ukey, trailer := splitInternalKey(it.key)
		dh, _ := decodeHandle(it.val)
		start := len(arena)
		arena = append(arena, ukey...)
		r.index = r.index[:len(r.index)+1]
		e := &r.index[len(r.index)-1]
		e.userKey, e.trailer, e.h = arena[start:len(arena):len(arena)], trailer, dh
		r.heads = append(r.heads, keyHead(ukey))
	}
	return it.err
}

// readFilter loads the filter block and cross-checks its geometry with the
// properties.
func (r *Reader) readFilter() error {
	h := r.footer.filter
	p := &r.props
	if h == (blockHandle{}) {
		if p.FilterBits != 0 || p.FilterK != 0 || p.FilterLayout != 0 {
			return r.corrupt(r.footer.properties.offset, "properties describe a filter, but there is none")
		}
		return nil
	}
	b, src, err := r.readBlock(h, nil)
	if err != nil {
		return err
	}
	f, err := bloom.Decode(b)
	if err != nil {
		return r.corrupt(h.offset, "filter: %v", err)
	}
	g := f.Geometry()
	if g.Seed != bloom.DefaultSeed {
		return r.corrupt(h.offset, "filter seed %d, want bloom's default %d", g.Seed, bloom.DefaultSeed)
	}
	if uint8(g.Layout) != p.FilterLayout || g.K != int(p.FilterK) || g.Bits != p.FilterBits {
		return r.corrupt(h.offset, "filter geometry %+v disagrees with the properties", g)
	}
	r.filter = f
	if src != srcMapped {
		r.resident.Store(f)
		return nil
	}
	// The filter is consulted on every Get, hit or miss: kept in the
	// mapping, it would be evicted with the file's pages and a cold
	// absent-key Get would fault it back in from the device, the very read
	// the filter exists to avoid. So the resident filter is a heap copy,
	// while the stored one stays a view into the mapping: a fold under a
	// filter budget (UseFilter) then really frees the heap it saves, and
	// unfolding reads the stored filter again through the mapping.
	r.rawMap = b
	resident, err := r.heapCopy()
	if err != nil {
		return err
	}
	r.resident.Store(resident)
	return nil
}

// heapCopy returns the stored filter copied out of the mapping. The bytes
// decoded when the Reader opened; if they no longer do, the file was
// changed under the mapping, and that is reported, not trusted.
func (r *Reader) heapCopy() (*bloom.Filter, error) {
	f, err := bloom.Decode(bytes.Clone(r.rawMap))
	if err != nil {
		return nil, r.corrupt(r.footer.filter.offset, "filter changed in the mapped file: %v", err)
	}
	return f, nil
}

// dataBlock returns the contents of data block i, from the cache or the
// file. A block read from the file is checked (checkBlock) before it is
// used or cached, so cached blocks need no further validation.
//
// A point read (ra nil) of a mapped segment does not touch pages of the
// mapping that the page cache has lost: it reads such a block with pread
// instead (coldRead), one system call where the mapping would take a
// fault per page. See coldSample for how it tells.
func (r *Reader) dataBlock(i int, mode cacheMode, ra *readahead) ([]byte, error) {
	h := r.index[i].h
	c := r.counters(ra)
	point := ra == nil && r.opts.Mapped != nil
	cold := point && r.coldAnswers.Load() > 0
	verified := r.opts.Mapped != nil && r.index[i].verified.Load()
	if verified && !cold {
		// Count the read; its tick samples the reads that ask the page
		// cache.
		tick := uint64(1)
		if c != nil {
			tick = c.BlockReads.AddTick(1)
		} else if point {
			tick = uint64(rand.Uint32())
		}
		if !point || tick%coldSample != 0 || r.blockResident(h) {
			end := h.offset + h.length
			return r.opts.Mapped[h.offset:end:end], nil
		}
		// Lost from the page cache: the segment has gone cold
		// (blockResident noted it).
		return r.coldRead(i, mode, c, false)
	}
	if mode != cacheBypass {
		if b, ok := r.opts.Cache.get(r.opts.FileNum, h); ok {
			if c != nil {
				c.BlockCacheHits.Add(1)
			}
			return b, nil
		}
	}
	switch {
	case cold && (rand.Uint32()%coldAsk != 0 || !r.blockResident(h)):
		return r.coldRead(i, mode, c, true)
	case cold && verified: // resident after all
		if c != nil {
			c.BlockReads.Add(1)
		}
		end := h.offset + h.length
		return r.opts.Mapped[h.offset:end:end], nil
	case point && !cold && !r.firstResident(h): // a block's first read
		return r.coldRead(i, mode, c, true)
	}
	// A compressed block of the mapping that an earlier read checked, its
	// checksum and its structure (checkDataBlock), is only decoded again:
	// the file is immutable, so its bytes are those checked and decode to
	// the same block. An iterator that does not fill the cache reads a
	// compressed block so at each visit: prefix lookups of a store of
	// compressible values spent a quarter of their time in that checksum
	// and checkBlock, against 37% decoding.
	checked := ra != nil && r.index[i].decodedChecked.Load()
	b, src, err := r.read(h, ra, !checked)
	if err != nil {
		return nil, err
	}
	if c != nil {
		c.BlockReads.Add(1)
	}
	if !checked {
		if err := r.checkDataBlock(h, b); err != nil {
			return nil, err
		}
		switch {
		case src == srcMapped:
			r.index[i].noteLayout(b)
			r.index[i].verified.Store(true)
			return b, nil
		case r.opts.Mapped != nil:
			// Decoded from the mapping (storedBytes reads nothing else
			// when there is one).
			r.index[i].decodedChecked.Store(true)
		}
	}
	switch {
	case mode == cacheFill && src == srcBorrowed:
		r.opts.Cache.insert(r.opts.FileNum, h, bytes.Clone(b))
	case mode == cacheFill:
		r.opts.Cache.insert(r.opts.FileNum, h, b)
	}
	return b, nil
}

// Point reads of a mapped segment and the page cache.
//
// Through the mapping (advised MADV_RANDOM) a block whose pages the page
// cache has lost costs a major fault per page, each a synchronous device
// read: a 4 KiB block and its trailer almost always span two pages, so
// two round trips to the device, where pread reads both pages in one.
// So a point read of a mapped segment reads such a block as an unmapped
// segment does (coldRead): pread into a buffer of its own, checksum, into
// the block cache. The same pages come into the page cache, in one
// request, and a failing device is an error and not a SIGBUS.
//
// To tell, a read asks the page cache (mincore, blockResident). That is a
// system call (about 1 µs in a virtual machine), which neither a warm Get
// (slicing the mapping) nor a cold one (a pread) should pay each time. So
// a segment is warm or cold:
//
//   - Warm: the first read of a block asks (it reads the block anyway, to
//     verify it); reads of blocks already verified ask one time in
//     coldSample. The sample is taken by the read counter's tick
//     (stripe.Uint64.AddTick), which the read pays for anyway: a random
//     draw per read cost 10-25 ns on a loaded machine. A "not resident"
//     answer makes the segment cold.
//   - Cold: reads go to the block cache, then to pread, without asking,
//     except one time in coldAsk; coldWindow "resident" answers in a row
//     (the segment's pages are back in the page cache, as a working set
//     that fits in memory will be) make it warm again, and its reads use
//     the mapping as before.
//
// A first read asks every time only until the segment has earned trust:
// after warmTrust "resident" answers in a row, first reads ask one time in
// firstSample (firstResident). Where every read is a first read (a Get of
// each key once, with values stored apart: each Get reads a value record
// of its own) asking every time was about 30% of a warm Get's CPU time. The
// price of trust is paid when a trusted segment loses its pages: until a
// sampled question notices (about firstSample first reads), a first read
// faults the pages of its block in through the mapping, one device read
// per page instead of one pread. A segment that has not earned trust (just
// opened, or just warm again) asks on every first read, so a store read
// from cold reads with pread from its first Get.
const (
	coldSample  = 256
	coldAsk     = 16
	coldWindow  = 16
	warmTrust   = 64
	firstSample = 16
)

// firstResident is blockResident for the first read of a block or value
// record of a warm segment through the mapping (which checks its
// checksum, and so touches every page of it): a segment trusted to be
// warm (warmTrust) asks one time in firstSample and takes the other reads
// as resident.
func (r *Reader) firstResident(h blockHandle) bool {
	if r.warmAnswers.Load() >= warmTrust && rand.Uint32()%firstSample != 0 {
		return true
	}
	return r.blockResident(h)
}

// blockResident reports whether the page cache holds every page of the
// block at h (and its trailer) and updates the segment's state: "no"
// makes it cold, for coldWindow more "yes" answers, and untrusted, for
// warmTrust more.
func (r *Reader) blockResident(h blockHandle) bool {
	if r.inCache(r.opts.Mapped, h.offset, h.length+blockTrailerLen) {
		if r.coldAnswers.Load() > 0 {
			r.coldAnswers.Add(-1)
		}
		if r.warmAnswers.Load() < warmTrust {
			r.warmAnswers.Add(1)
		}
		return true
	}
	r.coldAnswers.Store(coldWindow)
	r.warmAnswers.Store(0)
	return false
}

// coldRead reads data block i of a mapped segment with pread into a
// buffer of its own, checks it and caches it (mode cacheFill), as a read
// of an unmapped segment does, counting its bytes, itself as a cold read
// and, if count, as a block read into c. A block stored uncompressed is
// marked verified: the mapping holds the same bytes, for when the segment
// is warm again.
func (r *Reader) coldRead(i int, mode cacheMode, c *Counters, count bool) ([]byte, error) {
	h := r.index[i].h
	buf := make([]byte, h.length+blockTrailerLen)
	if err := r.readAt(buf, h.offset, c); err != nil {
		return nil, err
	}
	b, _, err := r.decodeStored(h, buf, srcFresh, nil)
	if err != nil {
		return nil, err
	}
	if err := r.checkDataBlock(h, b); err != nil {
		return nil, err
	}
	if c != nil {
		c.ColdReads.Add(1)
		if count {
			c.BlockReads.Add(1)
		}
	}
	if buf[h.length] == compressionNone {
		r.index[i].noteLayout(b)
		r.index[i].verified.Store(true)
	}
	if mode == cacheFill {
		r.opts.Cache.insert(r.opts.FileNum, h, b)
	}
	return b, nil
}

// noteLayout keeps the geometry of b, the entry's data block as stored
// (uncompressed), which checkDataBlock accepted: any copy of it, in the
// mapping or the cache, has the same bytes.
func (e *indexEntry) noteLayout(b []byte) {
	if t, reason := parseTrailer(b); reason == "" {
		e.layout.Store(packLayout(t))
	}
}

// checkDataBlock checks data block b, read from h, once, before it is
// used or cached: its restart array and hash index (checkBlock), and that
// a hash index appears only in a file of a version that has them.
func (r *Reader) checkDataBlock(h blockHandle, b []byte) error {
	if reason := checkBlock(b); reason != "" {
		return r.corrupt(h.offset, "data block: %s", reason)
	}
	if r.footer.version < formatVersionHashIndex && hasHashIndex(b) {
		return r.corrupt(h.offset, "data block with a hash index in a version-%d segment", r.footer.version)
	}
	return nil
}

// counters returns the Counters a read through ra counts into: the
// Iter's own if it has them (NewIterWithCounters), else the Reader's.
func (r *Reader) counters(ra *readahead) *Counters {
	if ra != nil && ra.counters != nil {
		return ra.counters
	}
	return r.opts.Counters
}

// searchIndex returns the first data block whose separator is >= (ukey,
// trailer): the only block that can hold the first entry >= that key.
//
// The search runs over heads, 8 bytes per block in one array, and reads a
// separator's key only where its head equals ukey's. In a large segment
// the index entries and their keys are cold in the CPU cache, and a search
// that dereferenced a key at every step paid two cache misses per step;
// the heads of 10^6 keys' blocks (about 30,000) fit in 240 KiB.
func (r *Reader) searchIndex(ukey []byte, trailer uint64) int {
	h := keyHead(ukey)
	lo, hi := 0, len(r.heads)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		var less bool
		if m := r.heads[mid]; m != h {
			less = m < h
		} else {
			e := &r.index[mid]
			less = base.Compare(e.userKey, e.trailer, ukey, trailer) < 0
		}
		if less {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// keyHead returns the first 8 bytes of a user key as a big-endian number,
// zero-padded. keyHead(a) < keyHead(b) implies a < b: at the first byte
// where the padded heads differ, either both keys have a byte there, or
// the shorter key has ended where the other has a byte above zero. Equal
// heads decide nothing ("a" and "a\x00" share one).
func keyHead(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// MayContain reports whether the segment may hold the user key whose
// bloom.Hash is h. It is true when the segment has no filter.
func (r *Reader) MayContain(h uint64) bool {
	f := r.resident.Load()
	return f == nil || f.ContainsHash(h)
}

// Lookup returns the newest version of key with a sequence number <=
// maxSeq: found is false if the segment holds none; for a tombstone found
// is true and kind is base.KindDelete. value aliases the block it was
// found in, or its value record (in the cache, the mapping or a buffer of
// its own), which stays valid while the Reader is open. It must not be modified. hash is
// bloom.Hash(key), which the caller has for the filter already: a data
// block's hash index is keyed by it.
func (r *Reader) Lookup(key []byte, hash, maxSeq uint64) (value []byte, seq uint64, kind base.Kind, found bool, err error) {
	return r.lookup(key, hash, maxSeq, true)
}

// LookupKey is Lookup for a caller that needs to know only whether key
// has a value (the store's Has): a value stored apart from its key (a
// value record) is not read, so value is nil for it.
func (r *Reader) LookupKey(key []byte, hash, maxSeq uint64) (value []byte, seq uint64, kind base.Kind, found bool, err error) {
	return r.lookup(key, hash, maxSeq, false)
}

func (r *Reader) lookup(key []byte, hash, maxSeq uint64, withValue bool) (value []byte, seq uint64, kind base.Kind, found bool, err error) {
	// Versions are ordered newest first, so the first entry at or after
	// (key, maxSeq, largest kind) is the newest version <= maxSeq, if its
	// user key is key.
	trailer := base.MakeTrailer(min(maxSeq, base.MaxSeq), 0xff)
	i := r.searchIndex(key, trailer)
	if i == len(r.index) {
		return nil, 0, 0, false, nil
	}
	block, err := r.dataBlock(i, cacheFill, nil)
	if err != nil {
		return nil, 0, 0, false, err
	}
	it := r.iters.Get().(*blockIter)
	defer r.putIter(it)
	if known, err := r.initBlock(it, i, block); err != nil {
		return nil, 0, 0, false, err
	} else if known && it.numBuckets > 0 {
		// The restart array, which the bucket indexes, is loaded beside
		// the bucket rather than after it.
		it.touched = touchLines(block[it.restartsOff:it.bucketsOff])
	}
	// If the block runs out, key is absent: the separator is either the
	// block's last key or lies strictly between the user keys of this
	// block and the next, so the next block starts with a larger user key.
	ok, used := it.seekHash(key, hash, trailer)
	if !used {
		it.touchRestartKeys()
		ok = it.seekGE(key, trailer)
	}
	if !ok {
		return nil, 0, 0, false, it.err
	}
	ukey, t := splitInternalKey(it.key)
	if !bytes.Equal(ukey, key) {
		return nil, 0, 0, false, nil
	}
	seq, kind = base.SplitTrailer(t)
	switch {
	case kind == kindValueHandle && r.props.Values > 0 && !withValue:
		return nil, seq, base.KindPut, true, nil
	case kind == kindValueHandle && r.props.Values > 0:
		v, err := r.value(i, it.val, cacheFill, true)
		return v, seq, base.KindPut, err == nil, err
	case kind != base.KindPut && kind != base.KindDelete:
		return nil, 0, 0, false, r.corrupt(r.index[i].h.offset, "entry of unknown kind %d", kind)
	}
	return it.val, seq, kind, true, nil
}

// initBlock points it at block, data block i as stored (uncompressed)
// or decoded. Where the block's restart and hash index geometry is known
// (indexEntry.layout: a block stored raw, read and checked before), it is
// taken from there, and known is true: the block's last bytes, where its
// trailer lies, are not read before the entries the caller wants (a
// point lookup's bucket, a scan's first entry), which would be a cache
// miss of its own. Else the trailer is parsed and checked (init).
func (r *Reader) initBlock(it *blockIter, i int, block []byte) (known bool, err error) {
	e := &r.index[i]
	if lay := e.layout.Load(); lay != 0 && uint64(len(block)) == e.h.length {
		it.reset(block, true, r.opts.Name, int64(e.h.offset))
		it.setTrailer(unpackLayout(len(block), lay))
		return true, nil
	}
	return false, it.init(block, true, r.opts.Name, int64(e.h.offset))
}

// putIter returns a Get iterator to the pool without letting it keep the
// block alive.
func (r *Reader) putIter(it *blockIter) {
	it.data, it.val = nil, nil
	r.iters.Put(it)
}

// Properties returns the segment's properties. The key slices are shared:
// do not modify them.
func (r *Reader) Properties() Properties { return r.props }

// Blocks returns the number of data blocks.
func (r *Reader) Blocks() int { return len(r.index) }

// EntriesCovered estimates how many entries have a user key inside a
// fragment of l whose newest tombstone is above minSeq: the data blocks
// whose upper bound (the index's separator) lies in such a fragment, at
// the segment's mean entries per block. No block is read. It walks
// whichever is shorter, the fragments that meet the segment's keys (two
// index searches each) or the blocks (a fragment search each), and
// charges each search to *work, returning what it counted so far once
// *work runs out: the estimate feeds a heuristic (the store's garbage
// merge), and a store of many segments each under 10^4 range deletions
// must not spend seconds on it at each Open and flush.
func (r *Reader) EntriesCovered(l *rangedel.List, minSeq uint64, work *int) uint64 {
	if len(r.index) == 0 || l.Empty() {
		return 0
	}
	frags := l.Fragments()
	// The fragments that end above the smallest key and start at or below
	// the largest.
	lo := sort.Search(len(frags), func(i int) bool { return bytes.Compare(frags[i].End, r.props.Smallest) > 0 })
	hi := sort.Search(len(frags), func(i int) bool { return bytes.Compare(frags[i].Start, r.props.Largest) > 0 })
	newer := func(f *rangedel.Fragment) bool { return len(f.Seqs) > 0 && f.Seqs[0] > minSeq }
	var blocks int
	if hi-lo <= len(r.index) {
		for i := lo; i < hi && *work > 0; i++ {
			*work -= 2
			if f := &frags[i]; newer(f) {
				blocks += max(r.searchIndex(f.End, maxTrailer)-r.searchIndex(f.Start, maxTrailer), 0)
			}
		}
	} else {
		for i := range r.index {
			if *work <= 0 {
				break
			}
			*work--
			if j := l.Find(r.index[i].userKey); j >= 0 && newer(&frags[j]) {
				blocks++
			}
		}
	}
	// In 128 bits: a hostile file's entry count times the blocks could
	// overflow 64. The quotient is at most the entry count.
	h, lw := bits.Mul64(uint64(min(blocks, len(r.index))), r.props.Entries)
	q, _ := bits.Div64(h, lw, uint64(len(r.index)))
	return q
}

// Filter returns the segment's Bloom filter as stored in the file, or nil
// if it has none. It aliases the Reader's memory or the file's mapping: do
// not modify it.
func (r *Reader) Filter() *bloom.Filter { return r.filter }

// ResidentFilter returns the filter MayContain consults: the stored one,
// or the fold of it set by UseFilter.
func (r *Reader) ResidentFilter() *bloom.Filter { return r.resident.Load() }

// UseFilter makes MayContain consult f instead of the stored filter, to
// save memory under a filter budget. f must be the stored filter or a fold
// of it (bloom.Filter.Fold keeps every key), so no false negative can
// arise; UseFilter checks that it has the stored filter's layout, k and
// seed and a size that divides it. Safe to call while readers run.
func (r *Reader) UseFilter(f *bloom.Filter) error {
	if r.filter == nil || f == nil {
		return fmt.Errorf("segment %s: UseFilter on a segment without a filter, or with nil", r.opts.Name)
	}
	s, g := r.filter.Geometry(), f.Geometry()
	if s.Layout != g.Layout || s.K != g.K || s.Seed != g.Seed || g.Bits == 0 || s.Bits%g.Bits != 0 {
		return fmt.Errorf("segment %s: filter %+v is not a fold of the stored %+v", r.opts.Name, g, s)
	}
	if f == r.filter && r.rawMap != nil {
		var err error
		if f, err = r.heapCopy(); err != nil { // not the view into the mapping (see readFilter)
			return err
		}
	}
	r.resident.Store(f)
	return nil
}

// ReplaceFilter makes MayContain consult f, a filter rebuilt in memory
// from every user key of the segment (the DB's RebuildFilters, for a
// filter allocation that has changed since the file was written), or no
// filter at all if f is nil. Unlike UseFilter it cannot check that f holds
// every key: the caller built f from the segment's own keys. Safe to call
// while readers run.
func (r *Reader) ReplaceFilter(f *bloom.Filter) { r.resident.Store(f) }

// Close releases the Reader. It does not close the file, which belongs to
// the caller, and leaves the file's blocks in the cache to age out.
func (r *Reader) Close() error { return nil }
