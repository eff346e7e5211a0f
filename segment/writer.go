package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
	"github.com/golang/snappy"
)

// WriterOptions configure a Writer. The zero value gives 4 KiB blocks, a
// restart point every 16 keys, no compression and no filter.
type WriterOptions struct {
	// BlockSize is the target uncompressed size of a data block: a block is
	// closed once it reaches it. Default 4096; capped at 8 MiB.
	BlockSize int
	// RestartInterval is the most keys between restart points; a lookup
	// scans at most this many keys after its binary search. Default 16.
	// A data block with a hash index also starts a restart point once an
	// interval holds 64 bytes of entries.
	RestartInterval int
	// NoHashIndex leaves out the hash index a data block otherwise carries
	// (FORMAT.md, "The hash index of a data block"), which takes a point
	// lookup straight to its key's restart interval. The file is then of
	// a format version builds older than the hash index read (2, or 3
	// with zstd blocks).
	NoHashIndex bool
	// Compression is the codec of data and index blocks (NoCompression,
	// the zero value, SnappyCompression or ZstdCompression). A block is
	// stored raw when the codec does not save at least 1/8 of it.
	Compression Compression
	// BitsPerKey sizes the Bloom filter built from the distinct user keys;
	// 0 writes no filter (unless SetFilter supplies one).
	BitsPerKey float64
	// Prefix, if set with BitsPerKey > 0, makes the writer also build a
	// prefix filter: a Bloom filter of the distinct prefixes of the user
	// keys, at BitsPerKey per prefix (FORMAT.md, "Prefix filter block").
	// Prefix returns the length of key's prefix; 0 (or a value outside
	// [1, len(key)]) means the key has no prefix and is left out.
	Prefix func(key []byte) int
	// PrefixName names the extractor Prefix implements; it is stored in
	// the segment's properties and must be non-empty when Prefix is set.
	PrefixName string
	// SeparateValues, if positive, stores every value of at least that
	// many bytes as a value record apart from its key (FORMAT.md, "Value
	// records"): data blocks then hold keys densely, which scans and the
	// index search of a Get of large values read faster, at the cost of a
	// second read for such a value (a second device read when its segment
	// is cold). The file is then of format version 5. 0 keeps every value
	// in its data block.
	SeparateValues int
	// FilterGeometry, if set (and BitsPerKey > 0, so that keys are
	// hashed), chooses the filter's geometry at Finish from the number of
	// distinct user keys, in place of BitsPerKey's uniform sizing: the DB's
	// filter allocation gives each segment its own bits per key and k
	// (compaction.AllocateBits). ok false writes no filter.
	FilterGeometry func(keys int) (g bloom.Geometry, ok bool)
	// ChunkSize is how much encoded output the Writer gathers before a
	// Write to the underlying writer, which then ends at a multiple of it
	// in the file (flushAligned). 0 means DefaultChunkSize; HugeChunkSize
	// is the other choice that pays (see them).
	ChunkSize int
	// PageAlign keeps data blocks stored raw (incompressible data, or no
	// codec) from crossing a page boundary (PageSize), so that a lookup
	// that reads such a block from the device reads one page rather than
	// two. A block closes before an entry would take it, with its
	// trailer, past BlockSize (not once it reaches BlockSize) or past the
	// rest of the page it starts in (blockLimit); a raw block that does
	// not fit in what is left of the current page starts the next one if
	// that leaves at most maxPadding bytes unused, written as zeros
	// (padToPage; FORMAT.md, version 6). Ignored when BlockSize is larger
	// than a page.
	PageAlign bool
	// KeysHint, if positive, is about how many distinct user keys the
	// segment will hold (a flush's memtable entries, a merge's input
	// entries): the list of key hashes the filter is built from is then
	// allocated once, at most maxKeysHint entries, instead of grown by
	// append, whose copies were a fifth of the bytes a fill allocated.
	KeysHint int
}

// PageSize is the page WriterOptions.PageAlign aligns data blocks to:
// the unit in which a page cache reads a file.
const PageSize = 4096

// maxPadding is the most zeros PageAlign writes to start a block at the
// next page: an eighth of a page. A block that needs more crosses the
// page boundary instead; raw blocks, closed before they pass a page,
// leave less than an entry's bytes and move.
const maxPadding = PageSize / 8

// zeros is padding (PageAlign).
var zeros [maxPadding]byte

// maxKeysHint bounds the hash list WriterOptions.KeysHint allocates ahead
// (8 bytes a key): beyond it the list grows as needed.
const maxKeysHint = 1 << 22

// DefaultChunkSize and HugeChunkSize are the sizes of a Writer's writes
// (WriterOptions.ChunkSize). Page caches that hold files in large folios
// (Linux: ext4 and XFS) size a folio by the write that creates it: 2 MiB
// written at a 2 MiB boundary can be one folio, which a mapping aligned
// as the file is (the kernel aligns it) maps with one huge page. A point
// read touches a block's page or two, each a TLB miss and, in a file
// mapped with 4 KiB pages, a page table entry missing from the CPU cache
// too; with huge pages the 60 entries that map 120 MiB stay cached. In a
// shared 2-core VM (segment, 10^6 lookups of 100-byte values in random
// order, paired rounds) a lookup took about 6% less with 2 MiB writes
// than with 256 KiB ones (/proc/self/smaps: FilePmdMapped the whole
// file, against none).
//
// The writes that make 2 MiB folios cost more, though: on the same VM
// (Linux 6.18, ext4), writing and fsyncing 2.6 MB files took 4 to 7 ms
// of CPU time each in 2 MiB writes, against 1.0 to 1.5 ms in writes of
// 1 MiB, 512 KiB or 256 KiB: a fifth of the CPU time of a fill, and a
// quarter of a flush's. Huge chunks are for large segments that will be
// read for long; the DB writes the others, flushes' among them, in
// chunks of 1 MiB.
const (
	DefaultChunkSize = 1 << 20
	HugeChunkSize    = 2 << 20
)

// initialOut is the capacity the Writer's output buffer starts with.
const initialOut = 256 << 10

// outBufs holds the output buffers of finished Writers for the next ones.
// A buffer grows by append from initialOut to a chunk and a block;
// grown anew for each segment, the copies and allocations took an eighth
// of the CPU time of a 4 MiB memtable's flush, which is the time a
// stalled writer waits.
var outBufs sync.Pool

// Writer writes one segment. Entries are added in internal-key order; the
// file is complete once Finish returns. The Writer gathers its output and
// writes it in chunks (WriterOptions.ChunkSize), so the destination needs
// no buffering of its own. After any error the Writer is unusable and every
// later call returns that error.
type Writer struct {
	w    io.Writer
	opts WriterOptions

	out    []byte // encoded bytes not yet written to w
	offset uint64 // file offset of the next byte appended to out
	data   blockWriter
	index  blockWriter
	snappy []byte // compression output buffer, reused
	// incompressible counts the blocks in a row the codec did not shrink
	// enough (or was not tried on): see maybeCompress.
	incompressible int
	usedZstd       bool                  // a block was stored with zstd: the file is version 3 or later
	usedHashIndex  bool                  // a data block has a hash index: the file is version 4
	padded         bool                  // padding precedes a data block: the file is version 6
	align          bool                  // PageAlign applies: BlockSize is at most a page
	blockStart     uint64                // where the current data block's value records start: the end of the last block
	handle         []byte                // the value handle being added, reused
	trailer        [blockTrailerLen]byte // the trailer emit writes, kept here so as not to escape
	lastHash       uint64                // bloom.Hash of the last user key added
	scratch        []byte                // index entry values, reused

	lastKey  []byte // internal key of the last Add
	ikey     []byte // internal key being added; swapped with lastKey
	pending  bool   // a data block is written and awaits its index entry
	pendingH blockHandle

	hashes    []uint64       // bloom.Hash of each distinct user key
	prefixes  prefixHashes   // bloom.Hash of each distinct key prefix
	filter    *bloom.Filter  // supplied by SetFilter
	rangeDels *rangedel.List // supplied by SetRangeDels
	props     Properties
	err       error
	finished  bool
}

// NewWriter returns a Writer that writes a segment to w.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	if opts.BlockSize <= 0 {
		opts.BlockSize = 4096
	}
	opts.BlockSize = min(opts.BlockSize, maxTargetBlockSize)
	if opts.RestartInterval <= 0 {
		opts.RestartInterval = 16
	}
	if !opts.Compression.Valid() {
		opts.Compression = NoCompression
	}
	opts.BitsPerKey = max(opts.BitsPerKey, 0)
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	// out grows by append up to about a chunk and a block: a small
	// segment (most of a test suite's) never needs 2 MiB. Finish leaves it
	// to the next Writer (outBufs).
	out, _ := outBufs.Get().(*[]byte)
	if out == nil {
		b := make([]byte, 0, initialOut+opts.BlockSize+blockTrailerLen)
		out = &b
	}
	sw := &Writer{
		w:     w,
		opts:  opts,
		out:   (*out)[:0],
		data:  blockWriter{restartInterval: opts.RestartInterval, hashIndex: !opts.NoHashIndex},
		index: blockWriter{restartInterval: opts.RestartInterval},
	}
	sw.data.restartApart = !opts.NoHashIndex && opts.BlockSize <= maxRestartApartBlock
	sw.align = opts.PageAlign && opts.BlockSize <= PageSize
	if opts.KeysHint > 0 && opts.BitsPerKey > 0 {
		sw.hashes = make([]uint64, 0, min(opts.KeysHint, maxKeysHint))
	}
	return sw
}

// Add appends an entry. key is the user key; entries must arrive in
// strictly increasing internal-key order (base.Compare: user key
// ascending, then seq descending). The Writer copies what it keeps.
func (w *Writer) Add(key []byte, seq uint64, kind base.Kind, value []byte) error {
	if err := w.checkAdd(key, seq, kind, len(value)); err != nil {
		w.err = err
		return err
	}
	return w.add(key, seq, kind, value, nil)
}

// storesApart reports whether the Writer stores a put's value of n bytes
// apart from its key, as a value record (WriterOptions.SeparateValues).
func (w *Writer) storesApart(n int) bool {
	return w.opts.SeparateValues > 0 && n >= w.opts.SeparateValues
}

// AddValueRecord appends a put whose value is the value record rec of
// another segment, as stored there (Iter.RawValue: the stored bytes, the
// compression type byte and the CRC), which the Writer copies verbatim as
// a value record of its own, with a handle of its own, instead of
// compressing and checksumming the value again. n is the length of the
// value rec decodes to, which the Writer must store apart (storesApart).
// The caller has verified rec's checksum: the CRC covers only the record's
// bytes and type, not its place in the file, so it holds in the new file.
// The record keeps its codec, whatever WriterOptions.Compression says: a
// reader decodes each record by its type byte. Otherwise as Add.
func (w *Writer) AddValueRecord(key []byte, seq uint64, rec []byte, n int) error {
	err := w.checkAdd(key, seq, base.KindPut, n)
	if err == nil {
		err = w.checkRecord(rec, n)
	}
	if err != nil {
		w.err = err
		return err
	}
	return w.add(key, seq, base.KindPut, nil, rec)
}

// checkRecord checks what AddValueRecord can of a record without
// decoding it: a known type byte, a stored length within a block's, and
// a raw record's length equal to n.
func (w *Writer) checkRecord(rec []byte, n int) error {
	if !w.storesApart(n) {
		return fmt.Errorf("segment: a value record of %d bytes, below the writer's SeparateValues %d", n, w.opts.SeparateValues)
	}
	if len(rec) < blockTrailerLen || len(rec)-blockTrailerLen > MaxBlockSize {
		return fmt.Errorf("segment: a value record of %d bytes stored", len(rec))
	}
	switch typ := rec[len(rec)-blockTrailerLen]; {
	case typ == compressionNone && len(rec)-blockTrailerLen != n:
		return fmt.Errorf("segment: a raw value record of %d bytes said to hold %d", len(rec)-blockTrailerLen, n)
	case typ > compressionZstd:
		return fmt.Errorf("segment: a value record of compression type %d", typ)
	}
	return nil
}

// add is Add after its checks; rec, if not nil, is the value record that
// stores value (AddValueRecord).
func (w *Writer) add(key []byte, seq uint64, kind base.Kind, value, rec []byte) error {
	if w.align && w.data.entries > 0 {
		// Closed before the entry would take the block past a page with
		// its trailer, and before the entry's value record is written:
		// the records of a block's entries precede it.
		inBlock, apart := len(value), rec != nil || kind == base.KindPut && w.storesApart(len(value))
		if apart {
			inBlock = maxValueHandleLen
		}
		if w.data.sizeWith(len(key)+base.TrailerLen, inBlock, apart) > w.blockLimit() {
			if err := w.flushBlock(); err != nil {
				return err
			}
		}
	}
	lastUser := w.lastUserKey()
	if w.pending {
		w.addIndexEntry(appendSeparator(w.ikey[:0], w.lastKey, key))
	}
	distinct := w.props.Entries == 0 || !bytes.Equal(lastUser, key)
	if distinct {
		w.props.DistinctKeys++
		filterHash := w.filter == nil && w.opts.BitsPerKey > 0
		if filterHash || w.data.hashIndex {
			w.lastHash = bloom.Hash(key)
		}
		if filterHash {
			w.hashes = append(w.hashes, w.lastHash)
		}
		w.addPrefix(key)
	}
	stored := kind
	if rec != nil || kind == base.KindPut && w.storesApart(len(value)) {
		var h blockHandle
		var err error
		if rec != nil {
			h, err = w.copyRecord(rec)
		} else {
			h, err = w.writeBlock(value, w.opts.Compression)
		}
		if err != nil {
			return err
		}
		w.handle = appendValueHandle(w.handle[:0], valueHandle{h, w.props.Values})
		w.props.Values++
		stored, value = kindValueHandle, w.handle
	}
	w.ikey = appendInternalKey(w.ikey[:0], key, base.MakeTrailer(seq, stored))
	w.data.addEntry(w.ikey, value, stored == kindValueHandle)
	if stored == kindValueHandle {
		w.data.noteApart()
	}
	if w.data.hashIndex && (distinct || w.data.entries == 1) { // a key's first entry in this block
		w.data.addHash(w.lastHash)
	}
	w.lastKey, w.ikey = w.ikey, w.lastKey
	w.count(key, seq, kind)
	if w.data.estimatedSize() >= w.opts.BlockSize {
		return w.flushBlock()
	}
	return nil
}

func (w *Writer) checkAdd(key []byte, seq uint64, kind base.Kind, valueLen int) error {
	switch {
	case w.err != nil:
		return w.err
	case w.finished:
		return errors.New("segment: Add after Finish")
	case seq > base.MaxSeq:
		return fmt.Errorf("segment: sequence number %d exceeds 56 bits", seq)
	case kind != base.KindPut && kind != base.KindDelete:
		return fmt.Errorf("segment: invalid kind %v", kind)
	case len(key) > MaxKeySize:
		return fmt.Errorf("segment: key of %d bytes exceeds the maximum of %d", len(key), MaxKeySize)
	case len(key)+valueLen > MaxEntrySize:
		return fmt.Errorf("segment: entry of %d bytes exceeds the maximum of %d", len(key)+valueLen, MaxEntrySize)
	}
	if w.props.Entries > 0 && compareInternal(w.lastKey, key, base.MakeTrailer(seq, kind)) >= 0 {
		lk, lt := splitInternalKey(w.lastKey)
		lseq, _ := base.SplitTrailer(lt)
		return fmt.Errorf("segment: key %q seq %d added out of order (after %q seq %d)", key, seq, lk, lseq)
	}
	return nil
}

func (w *Writer) lastUserKey() []byte {
	if len(w.lastKey) < base.TrailerLen {
		return nil
	}
	k, _ := splitInternalKey(w.lastKey)
	return k
}

// count updates the properties for an added entry.
func (w *Writer) count(key []byte, seq uint64, kind base.Kind) { w.props.count(key, seq, kind) }

// count adds one entry to the properties' tallies; the writer and Verify
// share it, so Verify recomputes exactly what the writer recorded.
func (p *Properties) count(ukey []byte, seq uint64, kind base.Kind) {
	if p.Entries == 0 {
		p.Smallest = bytes.Clone(ukey)
		p.MinSeq, p.MaxSeq = seq, seq
	}
	p.Entries++
	if kind == base.KindDelete {
		p.Tombstones++
	}
	p.MinSeq = min(p.MinSeq, seq)
	p.MaxSeq = max(p.MaxSeq, seq)
}

// appendSeparator appends an internal key s with last <= s < (next, any
// trailer), shortened when possible, as Pebble's Separator does: where the
// user keys first differ, at byte i (last[i] < next[i]), the user key u
// is
//
//   - last[:i+1] with byte i incremented, if that is below next: when
//     last[i]+1 < next[i], or when next goes on past byte i (u is then a
//     prefix of next);
//   - else (next is last[:i] and last[i]+1), last up to its first byte
//     after i that is not 0xff, that byte incremented;
//
// paired with the largest trailer: u lies strictly between the user keys.
// Otherwise (last's user key is a prefix of next, or equal to it) s is
// last itself. The index a reader keeps holds one separator a block, so
// keys longer than a block whose first difference is early (a counter
// in a long key) no longer cost a reader their whole length each: 300
// keys of 64 KiB, distinct in their first 9 bytes, held 20 MB of index
// for a 0.9 MB segment.
func appendSeparator(dst, last, next []byte) []byte {
	lu, _ := splitInternalKey(last)
	i := commonPrefix(lu, next)
	if i < len(lu) && i < len(next) && lu[i] < next[i] {
		j := i // the byte to increment
		if lu[i]+1 == next[i] && i+1 == len(next) {
			for j = i + 1; j < len(lu) && lu[j] == 0xff; j++ {
			}
		}
		if j < len(lu) {
			dst = append(dst, lu[:j+1]...)
			dst[len(dst)-1]++
			return binary.LittleEndian.AppendUint64(dst, maxTrailer)
		}
	}
	return append(dst, last...)
}

func (w *Writer) addIndexEntry(sep []byte) {
	w.scratch = appendHandle(w.scratch[:0], w.pendingH)
	w.index.add(sep, w.scratch)
	w.pending = false
}

// SetRangeCovered records n as the segment's RangeCovered property: the
// puts added that are the newest version of their key and that a newer
// range tombstone deletes for a reader of the latest state (the caller
// knows which; compaction.Dedup counts them). Finish fails if n exceeds
// the distinct keys or the puts added.
func (w *Writer) SetRangeCovered(n uint64) { w.props.RangeCovered = n }

// SetFilter makes Finish write f instead of building a filter from the
// added keys; compaction passes the union of its inputs' filters. f must
// contain every user key added, and use bloom's default seed because
// readers probe with bloom.Hash. Passing nil restores the default.
func (w *Writer) SetFilter(f *bloom.Filter) {
	w.filter = f
}

func (w *Writer) flushBlock() error {
	block := w.data.finish()
	w.usedHashIndex = w.usedHashIndex || hasHashIndex(block)
	c := w.opts.Compression
	if gap := w.offset - w.blockStart; gap/7 >= uint64(len(block)) {
		// The block's value records (the gap before it) take at least 7
		// times its bytes: compressed, it would save less than 1/8 of the
		// region it and its records span, the bar maybeCompress sets,
		// while every scan, which reads blocks without keeping them in
		// the cache, would verify and decompress it again (a fifth of a
		// full scan's time with 4 KiB values).
		c = NoCompression
	}
	payload, typ := w.maybeCompress(block, c)
	if w.align && typ == compressionNone {
		if err := w.padToPage(uint64(len(payload)) + blockTrailerLen); err != nil {
			return err
		}
	}
	h, err := w.emit(payload, typ)
	w.blockStart = w.offset
	w.data.reset()
	w.pending, w.pendingH = true, h
	w.props.DataBlocks++
	return err
}

// blockLimit is, under PageAlign, the most bytes the current data block
// may take (before its trailer): BlockSize less the trailer, or less if
// the block starts inside a page, with more than maxPadding bytes of it
// left. Such a block, if stored raw, fills the rest of that page: the
// blocks that follow then start at page boundaries, where otherwise each
// would cross one until a page happened to have maxPadding bytes or fewer
// left (values of 0 to 600 random bytes: 46% of the blocks crossed). A
// block is taken to be stored raw when the last one was (a run of
// incompressible data); a compressed block ends inside its page anyway,
// and held to what a raw one would fill, the blocks after it would
// shrink by half each. A block with value records before it has no
// known start until it is written, and is not held either.
func (w *Writer) blockLimit() int {
	limit := w.opts.BlockSize
	if w.offset == w.blockStart && (w.opts.Compression == NoCompression || w.incompressible > 0) {
		if room := PageSize - int(w.offset%PageSize); room > maxPadding {
			limit = min(limit, room)
		}
	}
	return limit - blockTrailerLen
}

// padToPage writes the zeros that start a data block of stored bytes
// (trailer included) at the next page, if it fits in a page but not in
// what is left of the current one, and that is at most maxPadding. Only
// blocks stored raw are moved: a compressed block takes part of a page,
// crosses a boundary about as often as it takes of a page, and padding
// in front of such blocks cost 8% of a file of compressible values.
func (w *Writer) padToPage(stored uint64) error {
	room := PageSize - w.offset%PageSize
	if stored <= room || stored > PageSize || room > maxPadding {
		return nil
	}
	w.padded = true
	return w.write(zeros[:room])
}

// writeBlock compresses raw if asked and worthwhile, then emits it.
func (w *Writer) writeBlock(raw []byte, c Compression) (blockHandle, error) {
	payload, typ := w.maybeCompress(raw, c)
	return w.emit(payload, typ)
}

// maybeCompress returns the encoding of raw with codec c if it saves at
// least 1/8 (otherwise decompressing would cost more than the bytes it
// saves), else raw. The result is valid until the next call.
//
// Data that does not compress (random or already compressed values) tends
// to come in runs, and a codec spends as long failing on a block as
// succeeding: after skipAfter incompressible blocks in a row, only every
// skipProbe-th block is tried, and the first that compresses ends the run.
func (w *Writer) maybeCompress(raw []byte, c Compression) ([]byte, byte) {
	if c == NoCompression || len(raw) > MaxBlockSize {
		return raw, compressionNone
	}
	if w.incompressible >= skipAfter && w.incompressible%skipProbe != 0 {
		w.incompressible++
		return raw, compressionNone
	}
	typ := byte(compressionSnappy)
	if c == ZstdCompression {
		if enc, err := zstdEncoder(); err == nil {
			typ = compressionZstd
			w.snappy = enc.EncodeAll(raw, w.snappy[:0])
			// Readers hold every compressed block to snappy's densest
			// ratio (maxSnappyLen), which keeps the index a reader
			// loads bounded by the file. A block zstd shrinks further
			// is stored with snappy, which cannot break the bound and
			// still saves nearly all of it.
			if uint64(len(raw)) > maxSnappyLen(uint64(len(w.snappy))) {
				typ = compressionSnappy
			}
		}
		// An encoder that cannot be made (it cannot: its options are
		// fixed) would leave the block to snappy.
	}
	if typ == compressionSnappy {
		w.snappy = snappy.Encode(w.snappy[:cap(w.snappy)], raw)
	}
	if len(w.snappy) < len(raw)-len(raw)/8 {
		w.incompressible = 0
		if typ == compressionZstd {
			w.usedZstd = true
		}
		return w.snappy, typ
	}
	w.incompressible++
	return raw, compressionNone
}

// The compression-skipping run lengths of maybeCompress.
const (
	skipAfter = 8
	skipProbe = 16
)

// copyRecord appends rec, a value record as another segment stored it
// (AddValueRecord), to the output as it is. It counts the record in the
// run of incompressible blocks as maybeCompress would have, had it met
// the value (a raw record is one the codec did not shrink, or did not
// try), so that a merge of segments written with the same options makes
// the same choices for its data blocks as a writer given the values.
func (w *Writer) copyRecord(rec []byte) (blockHandle, error) {
	n := len(rec) - blockTrailerLen
	typ := rec[n]
	if w.opts.Compression != NoCompression && n <= MaxBlockSize { // maybeCompress leaves larger ones uncounted
		if typ == compressionNone {
			w.incompressible++
		} else {
			w.incompressible = 0
		}
	}
	w.usedZstd = w.usedZstd || typ == compressionZstd
	h := blockHandle{offset: w.offset, length: uint64(n)}
	return h, w.write(rec)
}

// emit appends a stored block and its trailer to the output.
func (w *Writer) emit(payload []byte, typ byte) (blockHandle, error) {
	h := blockHandle{offset: w.offset, length: uint64(len(payload))}
	t := w.trailer[:]
	t[0] = typ
	binary.LittleEndian.PutUint32(t[1:], crc32.Update(crc32.Checksum(payload, castagnoli), castagnoli, t[:1]))
	if err := w.write(payload); err != nil {
		return h, err
	}
	return h, w.write(t)
}

// write appends b, bytes as stored, to the output: gathered in out, or,
// at a chunk or more (a large value record, typically the filter), after
// out's bytes straight to the underlying writer, which skips the copy.
func (w *Writer) write(b []byte) error {
	if len(b) >= w.opts.ChunkSize {
		if err := w.flush(); err != nil {
			return err
		}
		if _, err := w.w.Write(b); err != nil {
			w.err = fmt.Errorf("segment: write: %w", err)
			return w.err
		}
	} else {
		w.out = append(w.out, b...)
	}
	w.offset += uint64(len(b))
	if len(w.out) >= w.opts.ChunkSize {
		return w.flushAligned()
	}
	return nil
}

// flushAligned writes the gathered output up to the last multiple of
// the chunk size of the file offset, and keeps the rest for the next
// write: chunks that start and end at such multiples (see
// HugeChunkSize).
func (w *Writer) flushAligned() error {
	if w.err != nil {
		return w.err
	}
	start := w.offset - uint64(len(w.out)) // the file offset of out[0]
	end := w.offset / uint64(w.opts.ChunkSize) * uint64(w.opts.ChunkSize)
	if end <= start {
		return nil
	}
	n := end - start
	if _, err := w.w.Write(w.out[:n]); err != nil {
		w.err = fmt.Errorf("segment: write: %w", err)
		return w.err
	}
	w.out = w.out[:copy(w.out, w.out[n:])]
	return nil
}

func (w *Writer) flush() error {
	if w.err != nil || len(w.out) == 0 {
		return w.err
	}
	if _, err := w.w.Write(w.out); err != nil {
		w.err = fmt.Errorf("segment: write: %w", err)
	}
	w.out = w.out[:0]
	return w.err
}

// Finish writes the last data block, the filter, range-deletion,
// properties and index blocks and the footer, and returns the segment's properties. It does not
// sync or close the destination.
func (w *Writer) Finish() (Properties, error) {
	if w.err == nil && w.finished {
		w.err = errors.New("segment: Finish called twice")
	}
	if w.err != nil {
		return Properties{}, w.err
	}
	w.finished = true
	if w.data.entries > 0 {
		if err := w.flushBlock(); err != nil {
			return Properties{}, err
		}
	}
	if w.pending {
		w.addIndexEntry(w.lastKey)
	}
	if !w.props.rangeCoveredFits() { // a reader would reject the file
		w.err = fmt.Errorf("segment: %d range-covered versions among %d keys and %d puts", w.props.RangeCovered, w.props.DistinctKeys, w.props.Entries-w.props.Tombstones)
		return Properties{}, w.err
	}
	w.props.Largest = bytes.Clone(w.lastUserKey())
	w.props.DataSize = w.offset
	ft := footer{version: formatVersionBase}
	if err := w.writeFilter(&ft); err != nil {
		return Properties{}, err
	}
	if err := w.writePrefixFilter(); err != nil {
		return Properties{}, err
	}
	if !w.rangeDels.Empty() {
		w.props.countRangeDels(w.rangeDels)
		block := encodeRangeDels(&w.data, w.rangeDels)
		w.props.RangeDelSize = uint64(len(block))
		w.emit(block, compressionNone) // a failed write is sticky; the flush below returns it
	}
	// The index size goes into the properties block, which precedes the
	// index, so the index is encoded first and emitted after.
	index, typ := w.maybeCompress(w.index.finish(), w.opts.Compression)
	w.props.IndexSize = uint64(len(index))
	if w.usedZstd {
		ft.version = formatVersionZstd
	}
	if w.usedHashIndex {
		ft.version = formatVersionHashIndex
	}
	if w.props.Values > 0 {
		ft.version = formatVersionValues
	}
	if w.padded {
		ft.version = formatVersionPadding
	}
	w.props.FormatVersion = ft.version
	// A failed write makes w.err sticky, and the flush below returns it.
	ft.properties, _ = w.emit(encodeProperties(&w.data, &w.props), compressionNone)
	ft.index, _ = w.emit(index, typ)
	w.out = append(w.out, ft.encode()...)
	err := w.flush()
	if out := w.out[:0]; cap(out) >= initialOut {
		outBufs.Put(&out)
	}
	w.out = nil
	if err != nil {
		return Properties{}, err
	}
	return w.props, nil
}

// writeFilter writes the filter block, if any, and records its geometry.
func (w *Writer) writeFilter(ft *footer) error {
	f := w.filter
	if f == nil && w.opts.BitsPerKey > 0 {
		if w.opts.FilterGeometry == nil {
			f = bloom.NewBitsPerKey(len(w.hashes), w.opts.BitsPerKey)
		} else if g, ok := w.opts.FilterGeometry(len(w.hashes)); ok {
			var err error
			if f, err = bloom.NewGeometry(g); err != nil {
				w.err = fmt.Errorf("segment: filter geometry: %w", err)
				return w.err
			}
		}
	}
	if f != nil && w.filter == nil {
		for _, h := range w.hashes {
			f.AddHash(h)
		}
	}
	if f == nil {
		return nil
	}
	g := f.Geometry()
	if g.Seed != bloom.DefaultSeed {
		w.err = fmt.Errorf("segment: filter seed %d, but readers probe with bloom.Hash (seed %d)", g.Seed, bloom.DefaultSeed)
		return w.err
	}
	enc, err := f.MarshalBinary()
	if err != nil {
		w.err = fmt.Errorf("segment: encode filter: %w", err)
		return w.err
	}
	w.props.FilterLayout, w.props.FilterK, w.props.FilterBits = uint8(g.Layout), uint8(g.K), g.Bits
	w.props.FilterSize = uint64(len(enc))
	ft.filter, err = w.emit(enc, compressionNone)
	return err
}
