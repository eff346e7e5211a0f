package bloom

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// Encoding (FORMAT.md specifies it byte by byte):
//
//	offset  size  field
//	0       4     magic "bkvf"
//	4       1     format version (1)
//	5       1     layout (1 blocked, 2 classic)
//	6       1     k
//	7       1     reserved, 0
//	8       8     bits (uint64 LE)
//	16      8     seed (uint64 LE)
//	24      8     count (uint64 LE)
//	32      bits/8  bit array
//	end-4   4     CRC-32C (Castagnoli) of everything before it (uint32 LE)
const (
	magic         = "bkvf"
	formatVersion = 1
	headerLen     = 32
	trailerLen    = 4
)

// FormatVersion is the version of the encoding written by MarshalBinary.
const FormatVersion = formatVersion

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is matched by every error about an encoding that cannot be
// decoded: truncated, checksum mismatch, unknown version or bad geometry.
var ErrCorrupt = errors.New("bloom: corrupt filter encoding")

// EncodedLen is the length of the encoding of a filter with geometry g.
func EncodedLen(g Geometry) int { return headerLen + int(g.Bits/8) + trailerLen }

// MarshalBinary encodes f (encoding.BinaryMarshaler).
func (f *Filter) MarshalBinary() ([]byte, error) {
	return f.AppendBinary(make([]byte, 0, EncodedLen(f.g))), nil
}

// AppendBinary appends the encoding of f to b (encoding.BinaryAppender).
func (f *Filter) AppendBinary(b []byte) []byte {
	start := len(b)
	b = append(b, magic...)
	b = append(b, formatVersion, byte(f.g.Layout), byte(f.g.K), 0)
	b = le.AppendUint64(b, f.g.Bits)
	b = le.AppendUint64(b, f.g.Seed)
	b = le.AppendUint64(b, f.count)
	b = append(b, f.bits...)
	return le.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// UnmarshalBinary replaces f with the filter encoded in data, copying the
// bit array (encoding.BinaryUnmarshaler). On error f is unchanged.
func (f *Filter) UnmarshalBinary(data []byte) error {
	d, err := Decode(data)
	if err != nil {
		return err
	}
	d.bits = append([]byte(nil), d.bits...)
	*f = *d
	return nil
}

// Decode decodes the filter encoded in data without copying: the returned
// filter's bit array is a sub-slice of data, so data must stay unchanged
// while the filter is used, and Add or Union on the filter write into data.
// The checksum is verified. Every size is checked against len(data) before
// use, so hostile input costs no allocation.
func Decode(data []byte) (*Filter, error) {
	if len(data) < headerLen+trailerLen {
		return nil, corruptf("%d bytes, shorter than header and checksum", len(data))
	}
	if string(data[:4]) != magic {
		return nil, corruptf("bad magic %q", data[:4])
	}
	if data[7] != 0 {
		return nil, corruptf("reserved byte is %#x, want 0", data[7])
	}
	if v := data[4]; v != formatVersion {
		return nil, corruptf("unsupported format version %d (this build reads %d)", v, formatVersion)
	}
	g := Geometry{
		Layout: Layout(data[5]),
		K:      int(data[6]),
		Bits:   le.Uint64(data[8:]),
		Seed:   le.Uint64(data[16:]),
	}
	if err := g.Validate(); err != nil {
		return nil, corruptf("%v", err)
	}
	body := len(data) - headerLen - trailerLen
	if g.Bits/8 != uint64(body) {
		return nil, corruptf("header says %d bits, %d bytes of bit array present", g.Bits, body)
	}
	end := len(data) - trailerLen
	if got, want := crc32.Checksum(data[:end], castagnoli), le.Uint32(data[end:]); got != want {
		return nil, corruptf("checksum mismatch: computed %#08x, stored %#08x", got, want)
	}
	f := newFilter(g, data[headerLen:end:end])
	f.count = le.Uint64(data[24:])
	return f, nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
