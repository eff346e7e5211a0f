package segment

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/bloomkv/bloomkv/internal/base"
)

// Values stored apart from their keys (FORMAT.md, "Value records").
//
// A large value inline in its data block spreads the block's keys over
// pages: with 4 KiB values a block holds one entry, and a scan that reads
// keys and value lengths (or a Get's index and restart search) pays a
// cache and TLB miss per key on pages it does not otherwise need. A
// writer told to (WriterOptions.SeparateValues) stores each value of at
// least that size as a *value record* just before the data block that
// holds its key, and the entry holds a handle to it instead: the data
// blocks stay dense in keys, and a value's bytes are read only when a
// caller asks for that value.
//
// A value record is stored as a block is (its bytes, compressed if that
// pays, and the 5-byte trailer with the CRC), so the reader decodes it
// with the same code. Its handle is (offset, stored length, ordinal): the
// ordinal numbers the segment's value records from 0 in file order, and
// names the mark that a record of a mapped segment was verified once, as
// data blocks are (verifiedRecords: the mark holds the record's offset and
// length too, so that it covers that one record).

// kindValueHandle is the kind, in a data block of version 5, of a put
// whose value is a value record: the entry's value is its handle. It never
// leaves this package: Iter and Lookup report base.KindPut and the value.
const kindValueHandle base.Kind = 3

// valueHandle locates a value record.
type valueHandle struct {
	blockHandle
	ordinal uint64
}

// maxValueHandleLen is the longest value handle: three uvarints.
const maxValueHandleLen = 3 * binary.MaxVarintLen64

// appendValueHandle appends h as three uvarints: offset, length, ordinal.
func appendValueHandle(dst []byte, h valueHandle) []byte {
	dst = binary.AppendUvarint(dst, h.offset)
	dst = binary.AppendUvarint(dst, h.length)
	return binary.AppendUvarint(dst, h.ordinal)
}

// decodeValueHandle decodes an entry's value written by
// appendValueHandle; it must consume all of b.
//
// A scan of separated values decodes one per key, so the three uvarints
// are read in one pass rather than by three calls of binary.Uvarint
// (which took a scan's step from about 30 to 40 ns).
func decodeValueHandle(b []byte) (valueHandle, bool) {
	var x [3]uint64
	j := 0
	for i := range x {
		var v uint64
		for shift := uint(0); ; shift += 7 {
			if j == len(b) || shift > 63 {
				return valueHandle{}, false
			}
			c := b[j]
			j++
			if c < 0x80 { // the last byte: only it can pass 64 bits
				if shift == 63 && c > 1 {
					return valueHandle{}, false
				}
				v |= uint64(c) << shift
				break
			}
			v |= uint64(c&0x7f) << shift
		}
		x[i] = v
	}
	return valueHandle{blockHandle{x[0], x[1]}, x[2]}, j == len(b)
}

// decodeValueHandleAt is decodeValueHandle(enc) for a scan's step, where
// enc is data[start:start+len(enc)], an entry's value in its block: where
// 18 bytes of data follow start, as they do for all but the last entries
// of a block (the restart array follows them), it reads each varint of up
// to 5 bytes (offsets and lengths below 32 GiB) from one 8-byte load, by a
// test of its length that the CPU predicts, rather than byte by byte (a
// third of a scan's step with 4 KiB values stored apart went to
// decodeValueHandle's loop). The bytes past enc are read but play no part
// in the result.
func decodeValueHandleAt(data []byte, start int, enc []byte) (valueHandle, bool) {
	n := len(enc)
	if start < 0 || len(data)-start < 18 || n > 15 {
		return decodeValueHandle(enc)
	}
	p := data[start : start+18]
	a, i := varint5(binary.LittleEndian.Uint64(p))
	b, j := varint5(binary.LittleEndian.Uint64(p[i&7:]))
	c, k := varint5(binary.LittleEndian.Uint64(p[(i+j)&15:]))
	if i == 0 || j == 0 || k == 0 {
		return decodeValueHandle(enc)
	}
	return valueHandle{blockHandle{a, b}, c}, i+j+k == n
}

// varint5 decodes the uvarint that starts w's bytes (little-endian), if
// it is at most 5 bytes long; else it returns length 0.
func varint5(w uint64) (v uint64, n int) {
	switch {
	case w&0x80 == 0:
		return w & 0x7f, 1
	case w&0x8000 == 0:
		return w&0x7f | w>>1&0x3f80, 2
	case w&0x800000 == 0:
		return w&0x7f | w>>1&0x3f80 | w>>2&0x1fc000, 3
	case w&0x80000000 == 0:
		return w&0x7f | w>>1&0x3f80 | w>>2&0x1fc000 | w>>3&0xfe00000, 4
	case w&0x8000000000 == 0:
		return w&0x7f | w>>1&0x3f80 | w>>2&0x1fc000 | w>>3&0xfe00000 | w>>4&0x7f0000000, 5
	}
	return 0, 0
}

// isValueHandle reports whether internal key ikey (at least a trailer
// long) is a put whose value is a handle. The trailer is stored
// little-endian, so its first byte is the kind.
func isValueHandle(ikey []byte) bool {
	return base.Kind(ikey[len(ikey)-base.TrailerLen]) == kindValueHandle
}

// publicTrailer is t as callers see it: a value handle's kind is a put.
func publicTrailer(t uint64) uint64 {
	if base.Kind(t) == kindValueHandle {
		return t&^0xff | uint64(base.KindPut)
	}
	return t
}

// verifiedRecords marks the value records of a mapped segment whose
// checksum was checked once, by ordinal: entry o holds recordMark of the
// one record checked under ordinal o, or 0. Safe for concurrent use.
//
// The mark names the record's offset and stored length, not only its
// ordinal: nothing outside Verify ties an ordinal to one record, and a
// file whose handles give one ordinal to two records (one sound, one
// with a bad checksum) would otherwise have the second sliced from the
// mapping unchecked once the first was read. A mark is set once, from 0,
// by the reader that checked that record (mark), and never changes: a
// second record checked under the same ordinal stays unmarked and is
// checked at every read, so no interleaving of readers lets a handle
// pass that was not checked.
//
// It costs 8 bytes per record, allocated at Open from the values
// property (a bit per record would do without the offset and length): in
// a store's files, 8 bytes per value of at least LargeValueSize (default
// 1 KiB); for a hostile file, at most 1.6 bytes per byte of its data
// region, since values is at most data-size / 5 (FORMAT.md, "Limits a
// reader enforces").
type verifiedRecords []atomic.Uint64

func newVerifiedRecords(n uint64) verifiedRecords {
	return make(verifiedRecords, n)
}

// recordMark packs the record at h into the word a verified mark holds:
// offset << 26 | length, plus 1 so that 0 means unverified. Where the
// packing would not be exact (an offset of 2^38 - 1 or more, 256 GiB, or
// a stored length of 2^26 or more, 64 MiB) it returns noMark, which mark
// never stores: such a record is checked at every read. A store's values
// are at most 32 MiB (base.MaxValueSize), so only a hostile record is. The
// largest packed word is below 2^64 - 1, so the + 1 does not wrap.
func recordMark(h blockHandle) uint64 {
	if h.offset >= 1<<38-1 || h.length >= 1<<26 {
		return noMark
	}
	return (h.offset<<26 | h.length) + 1
}

// noMark is recordMark of a record that is never marked; no mark equals
// it.
const noMark = ^uint64(0)

// has reports whether the record at h was checked under ordinal o (below
// the values property, as checkValueHandle ensures).
func (v verifiedRecords) has(o uint64, h blockHandle) bool {
	return v[o].Load() == recordMark(h)
}

// mark notes that the record at h, of ordinal o, was checked, unless a
// record was noted under o before (or h cannot be packed).
func (v verifiedRecords) mark(o uint64, h blockHandle) {
	if k := recordMark(h); k != noMark {
		v[o].CompareAndSwap(0, k)
	}
}

// value returns the value of an entry of data block i whose stored value
// is the handle enc. A value record must lie wholly in the gap between
// data block i-1 (or the file's start) and block i, where the writer puts
// the records of block i's entries; its checksum is verified at the first
// read of a mapped segment and at every read from the file otherwise.
//
// The result is a slice of the mapping (an uncompressed record of a
// mapped segment), a block of the cache, or a buffer of its own: any of
// them stays valid while the Reader is open, as Lookup's values always
// have. A record that is not a slice of the mapping goes through the
// block cache as a data block would (mode), so that repeated reads of a
// large value without a mapping do not read and hash it again each time.
// A point read of a mapped segment that is cold (point, and the segment
// is cold; see coldSample) reads an unverified record with pread, as it
// reads data blocks, rather than fault its pages in one by one.
func (r *Reader) value(i int, enc []byte, mode cacheMode, point bool) ([]byte, error) {
	h, err := r.checkValueHandle(i, enc)
	if err != nil {
		return nil, err
	}
	m := r.opts.Mapped
	cold := point && r.coldAnswers.Load() > 0
	if m != nil && !cold && r.valuesVerified.has(h.ordinal, h.blockHandle) {
		return m[h.offset : h.offset+h.length : h.offset+h.length], nil
	}
	if mode != cacheBypass {
		if v, ok := r.opts.Cache.get(r.opts.FileNum, h.blockHandle); ok {
			return v, nil
		}
	}
	var v []byte
	// A point read's first look at a record asks the page cache, as a
	// data block's does (dataBlock, firstResident).
	if m != nil && !cold && (!point || r.firstResident(h.blockHandle)) {
		if c := r.opts.Counters; c != nil {
			c.BytesRead.Add(h.length + blockTrailerLen)
		}
		if v, _, err = r.decodeStored(h.blockHandle, m[h.offset:h.end():h.end()], srcMapped, nil); err != nil {
			return nil, err
		}
		if m[h.offset+h.length] == compressionNone {
			r.valuesVerified.mark(h.ordinal, h.blockHandle)
			return v, nil
		}
	} else {
		buf := make([]byte, h.length+blockTrailerLen)
		if err := r.readAt(buf, h.offset, r.opts.Counters); err != nil {
			return nil, err
		}
		if v, _, err = r.decodeStored(h.blockHandle, buf, srcFresh, nil); err != nil {
			return nil, err
		}
		if m != nil && buf[h.length] == compressionNone {
			r.valuesVerified.mark(h.ordinal, h.blockHandle) // the mapping holds the same bytes
		}
	}
	if mode == cacheFill {
		r.opts.Cache.insert(r.opts.FileNum, h.blockHandle, v)
	}
	return v, nil
}

// checkValueHandle decodes enc, the handle of an entry of data block i,
// and checks that its record lies wholly in the gap before block i and
// that its ordinal is below the count of records.
func (r *Reader) checkValueHandle(i int, enc []byte) (valueHandle, error) {
	h, ok := decodeValueHandle(enc)
	if !ok {
		return h, r.corrupt(r.index[i].h.offset, "bad value handle")
	}
	lo, hi := uint64(0), r.index[i].h.offset
	if i > 0 {
		lo = r.index[i-1].h.end()
	}
	if h.ordinal >= r.props.Values || h.offset < lo || h.offset > hi || hi-h.offset < blockTrailerLen ||
		h.length > hi-h.offset-blockTrailerLen {
		return h, r.corrupt(r.index[i].h.offset, "value handle (%d, %d, #%d) outside the gap [%d, %d) before its block, or past the %d value records",
			h.offset, h.length, h.ordinal, lo, hi, r.props.Values)
	}
	return h, nil
}

// valueRecord returns the value record of an entry of data block i whose
// stored value is the handle enc, as stored: its bytes as written
// (compressed or not), the type byte and the CRC, for a compaction that
// copies it into its output without decoding it (Iter.KeepValueRecords).
// The record's checksum is verified here, unless the record is one of a
// mapped segment verified before, and n is the length of the value it
// decodes to, read from the codec's header and held to the bounds a
// decoder checks; the payload itself is not decoded.
//
// The record is a slice of the mapping, or, without one, read into *buf
// (grown as needed), which the next call overwrites.
func (r *Reader) valueRecord(i int, enc []byte, buf *[]byte, c *Counters) (rec []byte, n int, err error) {
	h, err := r.checkValueHandle(i, enc)
	if err != nil {
		return nil, 0, err
	}
	end := h.end()
	if m := r.opts.Mapped; m != nil {
		rec = m[h.offset:end:end]
		if r.valuesVerified.has(h.ordinal, h.blockHandle) { // verified, and only raw records are marked
			return rec, int(h.length), nil
		}
		if c != nil {
			c.BytesRead.Add(h.length + blockTrailerLen)
		}
	} else {
		size := int(h.length + blockTrailerLen)
		if cap(*buf) < size {
			*buf = make([]byte, size)
		}
		rec = (*buf)[:size:size]
		if err := r.readAt(rec, h.offset, c); err != nil {
			return nil, 0, err
		}
	}
	typ, dlen, err := r.checkStored(h.blockHandle, rec, true)
	if err != nil {
		return nil, 0, err
	}
	if typ == compressionNone && r.opts.Mapped != nil {
		r.valuesVerified.mark(h.ordinal, h.blockHandle) // as value does: the mapping holds the value
	}
	return rec, dlen, nil
}
