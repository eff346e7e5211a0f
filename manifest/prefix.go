package manifest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/internal/base"
)

// keyPrefixExtractor is the meta key of the prefix extractor record
// (FORMAT.md): the name of the function that splits the store's keys
// into prefixes for the segments' prefix filters. Absent: no extractor.
const keyPrefixExtractor = "prefix-extractor"

// prefixRecordVersion is the first byte of the prefix extractor record.
const prefixRecordVersion = 1

// MaxPrefixExtractorLen bounds the length of a prefix extractor's name.
const MaxPrefixExtractorLen = 255

// encodePrefixExtractor returns the record of FORMAT.md: version, uvarint
// length, the name, CRC-32C.
func encodePrefixExtractor(name string) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(name)+crcLen)
	b = append(b, prefixRecordVersion)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodePrefixExtractor parses encodePrefixExtractor's output, returning
// the offset of the first bad byte with any error.
func decodePrefixExtractor(b []byte) (string, int, error) {
	body, off, err := openRecord(b, prefixRecordVersion)
	if err != nil {
		return "", off, err
	}
	d := decoder{b: body, off: 1}
	n := d.bounded(MaxPrefixExtractorLen)
	switch {
	case d.err != nil:
	case n == 0:
		d.fail(fmt.Errorf("empty name"))
	case n != uint64(len(body)-d.off):
		d.fail(fmt.Errorf("name of %d bytes, but %d bytes remain", n, len(body)-d.off))
	}
	if d.err != nil {
		return "", d.off, d.err
	}
	return string(body[d.off:]), 0, nil
}

// loadPrefixExtractor reads the optional prefix extractor record.
func loadPrefixExtractor(meta *bolt.Bucket, name string, st *State) error {
	v := meta.Get([]byte(keyPrefixExtractor))
	if v == nil {
		return nil
	}
	px, off, err := decodePrefixExtractor(v)
	if err != nil {
		return base.Corruptf(name, valueOffset(meta, v, off), "meta/%s: byte %d: %v", keyPrefixExtractor, off, err)
	}
	st.PrefixExtractor = px
	return nil
}

// setPrefixExtractor returns the extractor after an edit setting it to
// set ("" leaves it): it may be recorded once, and never changed.
func setPrefixExtractor(cur, set string) (string, error) {
	switch {
	case set == "" || set == cur:
		return cur, nil
	case len(set) > MaxPrefixExtractorLen:
		return "", invalidf("prefix extractor name of %d bytes exceeds %d", len(set), MaxPrefixExtractorLen)
	case cur != "":
		return "", invalidf("prefix extractor %q would replace %q", set, cur)
	}
	return set, nil
}

// writePrefixExtractor stores the record if the edit sets it.
func writePrefixExtractor(meta *bolt.Bucket, e Edit) error {
	if e.PrefixExtractor == "" {
		return nil
	}
	return meta.Put([]byte(keyPrefixExtractor), encodePrefixExtractor(e.PrefixExtractor))
}
