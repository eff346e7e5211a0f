package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/bloomkv/bloomkv/internal/base"
)

// FormatVersion is the newest version of the segment format (FORMAT.md).
// Readers accept it and every version from MinFormatVersion on: a
// version-1 file is a version-2 file without optional blocks, a version-2
// file a version-3 file without zstd blocks, and a version-3 file a
// version-4 file without hash indexes in its data blocks, a version-4
// file a version-5 file without value records, and a version-5 file a
// version-6 file without padding. The writer writes the oldest version
// that describes its file: 6 when it padded before a data block
// (WriterOptions.PageAlign), else 5 when a value is stored apart
// from its key (WriterOptions.SeparateValues), else 4 when a data block
// has a hash index (every segment with an entry, today), else 3 when a
// block is stored with zstd, else 2.
const FormatVersion = 6

// formatVersionPadding is the first version whose data blocks may follow
// padding, formatVersionValues the first whose values may be stored
// apart from their keys, formatVersionHashIndex the first whose data
// blocks may carry a hash index, formatVersionZstd the first whose blocks
// may be zstd; the writer writes formatVersionBase for a segment with
// none of these.
const (
	formatVersionPadding   = 6
	formatVersionValues    = 5
	formatVersionHashIndex = 4
	formatVersionZstd      = 3
	formatVersionBase      = 2
)

// MinFormatVersion is the oldest segment format version readers accept.
const MinFormatVersion = 1

const (
	// MaxBlockSize bounds the decompressed size of a block. A snappy header
	// claiming more is corruption, so a damaged length can never make the
	// reader allocate more than this. The writer stays below it: a block
	// closes once it reaches BlockSize (at most 8 MiB), and a single entry
	// is at most MaxEntrySize.
	MaxBlockSize = 64 << 20

	// MaxEntrySize bounds len(key)+len(value) of one entry: the store's
	// largest key with its largest value (base.MaxEntrySize).
	MaxEntrySize = base.MaxEntrySize

	// MaxKeySize bounds the length of a user key: the store's limit
	// (base.MaxKeySize). Readers reject longer keys in data and index
	// blocks before building them: prefix compression lets an entry of a
	// few bytes claim "the previous key plus one byte", so without a bound
	// a small file can make a reader copy and compare keys of any length,
	// once per entry.
	MaxKeySize = base.MaxKeySize

	// maxInternalKeyLen is MaxKeySize plus the 8-byte trailer.
	maxInternalKeyLen = MaxKeySize + base.TrailerLen

	// maxPropertyNameLen bounds a property name. The known names have at
	// most 18 bytes ("prefix-filter-size"); 64 leaves room for names a
	// later writer may add.
	maxPropertyNameLen = 64

	// maxTargetBlockSize caps WriterOptions.BlockSize so that, together
	// with MaxEntrySize and the restart array, a block stays below
	// MaxBlockSize.
	maxTargetBlockSize = 8 << 20

	// blockTrailerLen is the compression type byte plus the CRC-32C that
	// follow every block.
	blockTrailerLen = 5

	// footerLen is the size of the fixed footer at the end of the file.
	footerLen = 64

	// magic is the last 8 bytes of every segment file.
	magic = "bloomseg"
)

// Block compression types (the first byte of a block trailer).
const (
	compressionNone   = 0
	compressionSnappy = 1
	compressionZstd   = 2 // version 3
)

// maxTrailer is the largest trailer. Internal keys order trailers
// descending, so (k, maxTrailer) sorts before every version of user key k:
// it is the search key for "the first entry of user key k".
const maxTrailer = ^uint64(0)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blockHandle locates a block: length excludes the 5-byte trailer.
type blockHandle struct {
	offset, length uint64
}

// maxSnappyLen is the most bytes a compressed block of stored bytes can
// decode to, whatever its codec. For snappy it is a property of the
// format; zstd can expand further (an RLE block emits 128 KiB from 4
// bytes), so the writer stores a block with zstd only when it meets the
// same bound (maybeCompress), and the reader holds zstd blocks to it: one
// limit then bounds every block, and the index, by the file's size.
//
// For snappy: Snappy's densest element is a 3-byte copy tag that emits 64
// bytes (tagCopy2 in golang/snappy's decoder; a 2-byte copy emits at most
// 11, literals never expand), and at least one byte is the length header,
// so stored*64/3 is an upper bound. A header claiming more is a lie that
// must be caught before the claimed size is allocated.
func maxSnappyLen(stored uint64) uint64 {
	if stored >= MaxBlockSize {
		return MaxBlockSize // avoids overflow; MaxBlockSize caps it anyway
	}
	return min(stored*64/3, MaxBlockSize)
}

// maxContentLen is the most bytes a block stored in stored bytes can hold
// once decompressed, whether it is stored raw or with snappy.
func maxContentLen(stored uint64) uint64 { return max(stored, maxSnappyLen(stored)) }

// end is the file offset just past the block's trailer.
func (h blockHandle) end() uint64 { return h.offset + h.length + blockTrailerLen }

// appendHandle appends h as two uvarints (the index block's values).
func appendHandle(dst []byte, h blockHandle) []byte {
	dst = binary.AppendUvarint(dst, h.offset)
	return binary.AppendUvarint(dst, h.length)
}

// decodeHandle decodes a value written by appendHandle; it must consume
// all of b.
func decodeHandle(b []byte) (blockHandle, bool) {
	off, n := binary.Uvarint(b)
	if n <= 0 {
		return blockHandle{}, false
	}
	length, m := binary.Uvarint(b[n:])
	if m <= 0 || n+m != len(b) {
		return blockHandle{}, false
	}
	return blockHandle{off, length}, true
}

// footer is the fixed-size record at the end of a segment. A filter handle
// of {0, 0} means the segment has no filter.
type footer struct {
	filter, properties, index blockHandle
	version                   uint32
}

// encode returns the 64-byte footer (FORMAT.md, "Footer").
func (f *footer) encode() []byte {
	b := make([]byte, 0, footerLen)
	for _, h := range [...]blockHandle{f.filter, f.properties, f.index} {
		b = binary.LittleEndian.AppendUint64(b, h.offset)
		b = binary.LittleEndian.AppendUint64(b, h.length)
	}
	b = binary.LittleEndian.AppendUint32(b, f.version)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return append(b, magic...)
}

// decodeFooter parses a 64-byte footer. It returns a reason string rather
// than an error so the caller can attach the file name and offset.
func decodeFooter(b []byte) (footer, string) {
	if len(b) != footerLen {
		return footer{}, "short footer"
	}
	if string(b[56:]) != magic {
		return footer{}, "bad magic number (not a segment file, or truncated)"
	}
	if got, want := crc32.Checksum(b[:52], castagnoli), binary.LittleEndian.Uint32(b[52:]); got != want {
		return footer{}, "footer checksum mismatch"
	}
	var f footer
	hs := [...]*blockHandle{&f.filter, &f.properties, &f.index}
	for i, h := range hs {
		h.offset = binary.LittleEndian.Uint64(b[16*i:])
		h.length = binary.LittleEndian.Uint64(b[16*i+8:])
	}
	f.version = binary.LittleEndian.Uint32(b[48:])
	if f.version < MinFormatVersion || f.version > FormatVersion {
		return footer{}, fmt.Sprintf("unsupported format version %d (this build reads %d to %d)", f.version, MinFormatVersion, FormatVersion)
	}
	return f, ""
}

// blockChecksum is the CRC-32C stored in a block trailer: over the stored
// block bytes followed by the compression type byte, which is exactly
// stored[:len(stored)-4] when stored is block+trailer.
func blockChecksum(blockAndType []byte) uint32 {
	return crc32.Checksum(blockAndType, castagnoli)
}

// splitInternalKey splits an encoded internal key (user key + 8-byte
// little-endian trailer). The caller guarantees len(ikey) >= 8.
func splitInternalKey(ikey []byte) ([]byte, uint64) {
	n := len(ikey) - 8
	return ikey[:n:n], binary.LittleEndian.Uint64(ikey[n:])
}

// appendInternalKey appends the encoding of (userKey, trailer).
func appendInternalKey(dst, userKey []byte, trailer uint64) []byte {
	dst = append(dst, userKey...)
	return binary.LittleEndian.AppendUint64(dst, trailer)
}
