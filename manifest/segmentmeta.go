package manifest

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"

	"github.com/bloomkv/bloomkv/internal/base"
)

// segmentMetaVersion is the first byte of every encoded SegmentMeta.
const segmentMetaVersion = 1

// maxKeyLen bounds Smallest and Largest: they are user keys, so no longer
// than the store's largest key, and a damaged length prefix can never ask
// for more memory than that (the input size bounds it too).
const maxKeyLen = base.MaxKeySize

// crcLen is the size of the CRC-32C trailer of an encoded SegmentMeta.
const crcLen = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkSegment reports the first violated invariant of s, or nil. Apply
// rejects such segments, and the decoder treats them as corruption, so
// everything in a manifest satisfies these.
func checkSegment(s *base.SegmentMeta) error {
	switch {
	case s.FileNum == 0:
		return errors.New("file number 0 is reserved")
	case s.FileNum == math.MaxUint64:
		return errors.New("file number out of range") // NextFileNum must exceed it
	case s.Size < 0:
		return fmt.Errorf("negative size %d", s.Size)
	case s.Tombstones > s.Entries:
		return fmt.Errorf("%d tombstones exceed %d entries", s.Tombstones, s.Entries)
	case s.MinSeq > s.MaxSeq:
		return fmt.Errorf("min seq %d > max seq %d", s.MinSeq, s.MaxSeq)
	case s.MaxSeq > base.MaxSeq:
		return fmt.Errorf("max seq %d exceeds 56 bits", s.MaxSeq)
	case len(s.Smallest) > maxKeyLen || len(s.Largest) > maxKeyLen:
		return fmt.Errorf("key longer than %d bytes", maxKeyLen)
	case bytes.Compare(s.Smallest, s.Largest) > 0:
		return fmt.Errorf("smallest key %q > largest key %q", s.Smallest, s.Largest)
	}
	return nil
}

// cloneSegment returns s with its own copies of the key bytes, so the
// manifest never shares memory with a caller's buffers.
func cloneSegment(s base.SegmentMeta) base.SegmentMeta {
	s.Smallest = bytes.Clone(s.Smallest)
	s.Largest = bytes.Clone(s.Largest)
	return s
}

// newestFirst orders segments by MaxSeq descending, then FileNum descending:
// a reader probing segments in this order sees newer versions first.
func newestFirst(a, b base.SegmentMeta) int {
	if c := cmp.Compare(b.MaxSeq, a.MaxSeq); c != 0 {
		return c
	}
	return cmp.Compare(b.FileNum, a.FileNum)
}

// encodeSegmentMeta returns the version-1 encoding of s described in
// FORMAT.md. It does not validate s; Apply does before storing it.
func encodeSegmentMeta(s base.SegmentMeta) []byte {
	n := 1 + 9*binary.MaxVarintLen64 + 2 + len(s.Smallest) + len(s.Largest) + crcLen
	b := make([]byte, 0, n)
	b = append(b, segmentMetaVersion)
	b = binary.AppendUvarint(b, s.FileNum)
	b = binary.AppendUvarint(b, uint64(s.Size))
	b = binary.AppendUvarint(b, s.Entries)
	b = binary.AppendUvarint(b, s.Tombstones)
	b = binary.AppendUvarint(b, s.MinSeq)
	b = binary.AppendUvarint(b, s.MaxSeq)
	b = binary.AppendUvarint(b, uint64(len(s.Smallest)))
	b = append(b, s.Smallest...)
	b = binary.AppendUvarint(b, uint64(len(s.Largest)))
	b = append(b, s.Largest...)
	b = append(b, s.FilterLayout, s.FilterK)
	b = binary.AppendUvarint(b, s.FilterBits)
	b = binary.AppendUvarint(b, uint64(s.Tier))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeSegmentMeta parses an encoding made by encodeSegmentMeta. Damaged
// or hostile input yields a *base.CorruptError whose File is empty (a bare
// value has no file; Open reports the manifest's name instead) and whose
// Offset is the byte position within b. The returned keys never alias b,
// and the only allocation is for them, so it is never larger than b.
func decodeSegmentMeta(b []byte) (base.SegmentMeta, error) {
	s, off, err := decodeSegmentMetaAt(b)
	if err != nil {
		return base.SegmentMeta{}, base.Corruptf("", int64(off), "segment meta: %v", err)
	}
	return s, nil
}

// decodeSegmentMetaAt does the work of decodeSegmentMeta, returning a plain
// error and the offset where it was detected so each caller can report it
// against the right file.
func decodeSegmentMetaAt(b []byte) (base.SegmentMeta, int, error) {
	body, off, err := openRecord(b, segmentMetaVersion)
	if err != nil {
		return base.SegmentMeta{}, off, err
	}
	d := decoder{b: body, off: 1}
	s := d.fields()
	if d.err == nil && d.off != len(body) {
		d.fail(fmt.Errorf("%d trailing bytes", len(body)-d.off))
	}
	if d.err == nil {
		d.fail(checkSegment(&s))
	}
	if d.err != nil {
		return base.SegmentMeta{}, d.off, d.err
	}
	return s, 0, nil
}

// openRecord checks the frame every record of the manifest shares — a
// version byte, the fields, a CRC-32C of both — and returns the record
// without its CRC, or the offset of what is wrong.
func openRecord(b []byte, version byte) (body []byte, off int, err error) {
	if len(b) < 1+crcLen {
		return nil, 0, fmt.Errorf("%d bytes is too short", len(b))
	}
	// The version comes first so that a later version may change
	// everything after it, the trailer included.
	if b[0] != version {
		return nil, 0, fmt.Errorf("unknown version %d", b[0])
	}
	body = b[:len(b)-crcLen]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return nil, len(body), fmt.Errorf("checksum %#08x, want %#08x", got, want)
	}
	return body, 0, nil
}

// fields reads the fields after the version byte in encoding order. After
// the first error every read returns zero, so the caller checks d.err once.
func (d *decoder) fields() base.SegmentMeta {
	var s base.SegmentMeta
	s.FileNum = d.uvarint()
	s.Size = int64(d.bounded(math.MaxInt64))
	s.Entries = d.uvarint()
	s.Tombstones = d.uvarint()
	s.MinSeq = d.uvarint()
	s.MaxSeq = d.uvarint()
	smallest := d.key()
	largest := d.key()
	s.FilterLayout = d.u8()
	s.FilterK = d.u8()
	s.FilterBits = d.uvarint()
	s.Tier = uint32(d.bounded(math.MaxUint32))
	if d.err == nil {
		// One allocation for both keys, never larger than the input.
		keys := append(append(make([]byte, 0, len(smallest)+len(largest)), smallest...), largest...)
		s.Smallest = nilIfEmpty(keys[:len(smallest):len(smallest)])
		s.Largest = nilIfEmpty(keys[len(smallest):])
	}
	return s
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// decoder reads fields from b starting at off, remembering the first error.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// uvarint reads a uvarint and insists on its shortest encoding, so every
// value has exactly one valid encoding and decode/encode round-trips bytes.
func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.fail(errors.New("truncated uvarint"))
		return 0
	case n < 0:
		d.fail(errors.New("uvarint overflows 64 bits"))
		return 0
	case n != uvarintLen(v):
		d.fail(errors.New("non-minimal uvarint"))
		return 0
	}
	d.off += n
	return v
}

// bounded reads a uvarint that must not exceed limit.
func (d *decoder) bounded(limit uint64) uint64 {
	start := d.off
	v := d.uvarint()
	if v > limit {
		d.off = start
		d.fail(fmt.Errorf("value %d exceeds %d", v, limit))
		return 0
	}
	return v
}

// key reads a uvarint length and that many bytes, returning a sub-slice
// of the input (the caller copies it).
func (d *decoder) key() []byte {
	start := d.off
	n := d.bounded(maxKeyLen)
	if d.err != nil {
		return nil
	}
	if rest := len(d.b) - d.off; n > uint64(rest) {
		d.off = start
		d.fail(fmt.Errorf("key length %d exceeds the %d remaining bytes", n, rest))
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

// uvarintLen is the length of the shortest uvarint encoding of v.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func (d *decoder) u8() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail(errors.New("truncated"))
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}
