package manifest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// countersVersion is the first byte of the encoded counters record.
const countersVersion = 1

// counters is the part of State kept in the meta bucket's counters record
// (FORMAT.md): the three numbers that tie segments to the WALs. They are one record with one CRC,
// so a flipped bit in any of them is reported, never obeyed (a flushed
// sequence number that grew by a flip would skip acknowledged WAL writes).
type counters struct {
	NextFileNum, FlushedSeq, LogNum uint64
}

// encodeCounters returns the record described in FORMAT.md.
func encodeCounters(c counters) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+crcLen)
	b = append(b, countersVersion)
	b = binary.AppendUvarint(b, c.NextFileNum)
	b = binary.AppendUvarint(b, c.FlushedSeq)
	b = binary.AppendUvarint(b, c.LogNum)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeCounters parses encodeCounters' output, returning the offset of the
// first bad byte with any error.
func decodeCounters(b []byte) (counters, int, error) {
	body, off, err := openRecord(b, countersVersion)
	if err != nil {
		return counters{}, off, err
	}
	d := decoder{b: body, off: 1}
	c := counters{NextFileNum: d.uvarint(), FlushedSeq: d.uvarint(), LogNum: d.uvarint()}
	if d.err == nil && d.off != len(body) {
		d.fail(fmt.Errorf("%d trailing bytes", len(body)-d.off))
	}
	if d.err != nil {
		return counters{}, d.off, d.err
	}
	return c, 0, nil
}
