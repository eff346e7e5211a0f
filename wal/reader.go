package wal

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/bloomkv/bloomkv/internal/base"
)

// readChunk is how much the reader grows its payload buffer per read, so a
// length field is never trusted with an allocation larger than the bytes
// that actually arrived plus one chunk.
const readChunk = 64 << 10

// Reader decodes the records of a log from a stream.
//
// Next returns the payloads in order, then one of:
//   - io.EOF: the log ended cleanly after the last record (a file shorter
//     than the file header, or consisting only of zero bytes, is an empty
//     log and also ends with io.EOF);
//   - an error matching ErrTornTail: the log ends in an incomplete final
//     record, a final record whose checksum fails, or zero bytes, with no
//     valid record in the bytes the final record claims. Offset tells
//     where to truncate;
//   - an error matching ErrUnsyncedTail (only after AllowUnsyncedLoss):
//     damage followed by more data, where the log's marks show that a
//     power cut may have lost the damaged bytes (see Mark);
//   - a *base.CorruptError: damage followed by more data, a bad file
//     header, an oversized length or an unknown record type;
//   - an I/O error from the underlying reader.
//
// Mark records are not returned; FirstMark reports the first one.
//
// Errors are sticky: every later call to Next returns the same error.
type Reader struct {
	br      *bufio.Reader
	name    string
	hdr     [recordHeaderSize]byte
	buf     []byte // payload of the last record, reused
	off     int64  // end of the last good record (or file header)
	init    bool   // the file header has been read
	version uint32 // from the file header
	err     error
	first   *Mark // the log's first mark, once read
	sealed  bool  // the last record read is a seal (Mark.Seal)
	// firstEnd is where the first mark ends; proof says a later mark
	// claims bytes past it synced, or that the older logs were sealed
	// (ProvesPrevSealed).
	firstEnd int64
	proof    bool

	unsyncedMayBeLost bool     // AllowUnsyncedLoss was called
	boot              [16]byte // the current boot, for AllowUnsyncedLoss
}

// NewReader returns a Reader decoding the log in r. name identifies the log
// in errors.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, readChunk), name: name}
}

// AllowUnsyncedLoss tells the reader that the machine may have lost power
// since the log was written (boot is the current boot ID, zero if
// unknown): damage that no mark proves durable is then the end of the
// log's durable history (ErrUnsyncedTail), not corruption. Call it for
// every log not known to be whole: the newest, and one whose fsync a
// rotation left to run beside the writes to its successor.
func (r *Reader) AllowUnsyncedLoss(boot [16]byte) {
	r.unsyncedMayBeLost, r.boot = true, boot
}

// FirstMark returns the log's first mark record, if Next has read it.
func (r *Reader) FirstMark() (Mark, bool) {
	if r.first == nil {
		return Mark{}, false
	}
	return *r.first, true
}

// Whole reports, once Next has reported the log's end, what tells that
// the log was durable to its end: whether it has marks, whether it ends in
// a seal (Writer.Seal: the log was made durable to its end and nothing
// was written after it), and whether its first mark names boot, the current
// boot (if known), under which the page cache held every byte.
func (r *Reader) Whole(boot [16]byte) (marked, sealed, thisBoot bool) {
	marked = r.first != nil
	return marked, r.sealed, marked && knownBoot(boot) && r.first.BootID == boot
}

// ProvesPrevSealed reports whether a mark Next has read proves that
// every older log the store's recovery reads ended in a durable seal
// (FORMAT.md, "A later log's proof"): a mark with the prev-sealed flag, or
// a mark after the log's first that claims bytes synced that were written
// after that first mark (an fsync of the log covered a write made to it,
// not just the fsync that created it, which covers the file header and
// the first mark). The store fsyncs a log past its creation only once
// every older log is sealed, and writes the prev-sealed mark only then.
func (r *Reader) ProvesPrevSealed() bool { return r.proof }

// Offset returns the end of the last record Next returned, or of the file
// header. After a torn tail, this is the size the log should be truncated
// to. It is 0 for a log with no valid file header.
func (r *Reader) Offset() int64 { return r.off }

// Next returns the next record's payload. The slice is only valid until the
// next call. See Reader for the errors it returns at the end of the log.
func (r *Reader) Next() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	p, err := r.next()
	if err != nil {
		r.err = err
		return nil, err
	}
	return p, nil
}

func (r *Reader) next() ([]byte, error) {
	if !r.init {
		if err := r.readFileHeader(); err != nil {
			return nil, err
		}
		r.init = true
	}
	for {
		p, typ, err := r.record()
		if err != nil {
			return p, err
		}
		if typ == recordFull {
			r.sealed = false
			return p, nil
		}
		m, ok := parseMark(p)
		if !ok || m.Seal && r.version < sealFormatVersion || m.PrevSealed && r.version < prevSealedFormatVersion {
			return nil, r.corrupt("malformed mark record")
		}
		if r.first == nil {
			r.first = &m
			r.firstEnd = r.off + recordHeaderSize + markLen
		} else if m.Synced > r.firstEnd {
			r.proof = true
		}
		if m.PrevSealed {
			r.proof = true
		}
		r.sealed = m.Seal
		r.off += recordHeaderSize + markLen
	}
}

// record reads the next record of either type. It does not advance r.off
// past a mark (next does, once the mark is parsed).
func (r *Reader) record() ([]byte, byte, error) {
	p, err := r.readRecord()
	if err != nil {
		return nil, 0, err
	}
	return p, r.hdr[8], nil
}

func (r *Reader) readRecord() ([]byte, error) {
	n, err := io.ReadFull(r.br, r.hdr[:])
	switch {
	case err == io.EOF:
		return nil, io.EOF
	case err == io.ErrUnexpectedEOF:
		return nil, r.torn("incomplete record header (%d of %d bytes)", n, recordHeaderSize)
	case err != nil:
		return nil, r.ioError(err)
	}
	length := binary.LittleEndian.Uint32(r.hdr[4:8])
	if length > MaxRecordSize {
		return nil, r.corrupt("record length %d exceeds maximum %d", length, MaxRecordSize)
	}
	if err := r.readPayload(int(length)); err != nil {
		if err != io.ErrUnexpectedEOF {
			return nil, r.ioError(err)
		}
		if at := findRecord(r.buf); at >= 0 {
			// A whole, valid record lies in the bytes this one claims:
			// the length field is damaged, and what follows was written
			// (and maybe acknowledged) after it. Cutting here would lose
			// it, unless a power cut may have lost this record.
			return nil, r.damaged(maxSyncedClaim(r.buf), "record length %d runs past end of file, but a valid record starts %d bytes into it", length, recordHeaderSize+at)
		}
		return nil, r.torn("record of %d bytes runs past end of file", length)
	}
	crc := crc32.Update(crc32.Checksum(r.hdr[4:], crcTable), crcTable, r.buf)
	if crc != binary.LittleEndian.Uint32(r.hdr[0:4]) {
		return nil, r.badRecord(length)
	}
	switch typ := r.hdr[8]; {
	case typ == recordMark && r.version >= markFormatVersion:
		return r.buf, nil // next parses it and advances r.off
	case typ != recordFull:
		return nil, r.corrupt("unknown record type %d", typ)
	}
	r.off += recordHeaderSize + int64(length)
	return r.buf, nil
}

// findRecord returns the offset in b of the first complete record with a
// matching checksum and a known type, or -1. It runs only on the error path
// of a record that claims more bytes than the file holds or fails its
// checksum, over the bytes it claims, to tell a torn final write (nothing
// valid after it) from a damaged length field (valid records after it). A
// random 9-byte window passes for a record with probability about 2^-40,
// so a torn tail is not mistaken for corruption.
//
// Checksumming every candidate could cost O(len(b)²) on a hostile file, so
// the work is capped. A candidate's checksum costs at most spanCost however
// long it is (crcSpans), so random bytes, which pass the type and length
// checks at about len(b)/2^40 of their positions, stay well below the cap
// (256 MiB of them use about 40% of it). Bytes with a plausible record
// header at most positions reach it, and those are not only hostile: an
// array of byte-sized booleans or of small integers has a known type and
// a short length at one position in eight or so. So past the cap the
// search does not answer as if it had found a record, which made the torn
// last write of such a batch corruption and the store unopenable after a
// crash; it goes on looking for marks only (findMark), which costs little
// at any position, and answers with the first valid one. A log fsynced
// after the damaged record, or sealed, has a mark after it, and only a
// mark that claims the damaged bytes synced makes the damage corruption
// after a power cut. What is given up: a damaged length whose bytes hold
// so many plausible headers before the first valid record, and no mark,
// reads as a torn tail where the damage was under the same boot.
func findRecord(b []byte) int {
	spans := crcSpans{b: b}
	budget := 8*len(b) + 1<<20
	for i := 0; i+recordHeaderSize <= len(b); i++ {
		if t := b[i+8]; t != recordFull && t != recordMark {
			continue
		}
		n := int(binary.LittleEndian.Uint32(b[i+4:]))
		end := i + recordHeaderSize + n
		if n > MaxRecordSize || end > len(b) || end < 0 {
			continue
		}
		if budget -= min(n, spanCost); budget < 0 {
			if at := findMark(b[i:]); at >= 0 {
				return i + at
			}
			return -1
		}
		if spans.sum(i+4, end) == binary.LittleEndian.Uint32(b[i:]) {
			return i
		}
	}
	return -1
}

// findMark returns the offset in b of the first complete mark record with
// a matching checksum, or -1. It needs no cap on its work: a candidate has
// the one length markLen, so its checksum covers 30 bytes, and candidates
// are at least 5 bytes apart (a length field 19 00 00 00 followed by the
// type 02 cannot overlap another within 4 bytes).
func findMark(b []byte) int {
	for i := 0; i+recordHeaderSize+markLen <= len(b); i++ {
		if b[i+8] != recordMark || binary.LittleEndian.Uint32(b[i+4:]) != markLen {
			continue
		}
		if crc32.Checksum(b[i+4:i+recordHeaderSize+markLen], crcTable) == binary.LittleEndian.Uint32(b[i:]) {
			return i
		}
	}
	return -1
}

// readFileHeader checks the file header. A header cut short by a crash
// right after the file was created, or an all-zero file, is an empty log.
func (r *Reader) readFileHeader() error {
	var h [fileHeaderSize]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return io.EOF
		}
		return r.ioError(err)
	}
	if string(h[:len(magic)]) != magic {
		if allZero(h[:]) {
			zero, err := r.restIsZero()
			if err != nil {
				return r.ioError(err)
			}
			if zero {
				return io.EOF
			}
		}
		return r.corrupt("bad file magic %q", h[:len(magic)])
	}
	if crc32.Checksum(h[:12], crcTable) != binary.LittleEndian.Uint32(h[12:]) {
		return r.corrupt("file header checksum mismatch")
	}
	r.version = binary.LittleEndian.Uint32(h[8:12])
	if r.version < legacyFormatVersion || r.version > formatVersion {
		return r.corrupt("unsupported format version %d", r.version)
	}
	r.off = fileHeaderSize
	return nil
}

// readPayload reads n bytes into r.buf, growing it one chunk at a time so
// that a length running past the end of the input costs no more memory than
// the input holds.
func (r *Reader) readPayload(n int) error {
	r.buf = r.buf[:0]
	for len(r.buf) < n {
		have := len(r.buf)
		step := n - have
		if have+step > cap(r.buf) {
			step = min(step, max(have, readChunk))
		}
		r.buf = slices.Grow(r.buf, step)[:have+step]
		m, err := io.ReadFull(r.br, r.buf[have:])
		if err != nil {
			r.buf = r.buf[:have+m]
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// badRecord classifies a complete record that failed its checksum, whose
// bytes, as many as its length field claims, are in r.buf. If it holds no
// valid record and only zero bytes (or nothing) follow it, it is the torn
// end of the last write; otherwise data written after it would be lost,
// which is damage followed by data (damaged).
//
// The bytes it claims are searched for a valid record as those of a record
// that runs past the end of the file are, because a damaged length field
// need not run past the end: a log the store writes through a mapping lies
// in a preallocated file (walmap_linux.go), whose zero bytes after the last
// record a damaged length runs into instead, taking every later record
// with it, and the zeros after the claimed bytes would make it read as a
// torn tail. A crash does not leave a valid record there: copyRecords
// stores a record's checksum only after its length and payload, and the
// next record only after that, so the record a crash interrupts claims its
// own bytes or zeros (a half-stored length is smaller), with nothing but
// zeros after it; and after a power cut a length field is whole or, torn
// at a sector boundary, smaller, so the records written after it lie past
// the bytes it claims. (The exception is a payload that itself holds the
// bytes of a valid record, such as a value holding a copy of a log: torn,
// it reads as damage followed by data.)
func (r *Reader) badRecord(length uint32) error {
	reason := "record checksum mismatch"
	at := findRecord(r.buf)
	if at >= 0 {
		reason = fmt.Sprintf("record checksum mismatch, and a valid record starts %d bytes into the %d bytes it claims",
			recordHeaderSize+at, recordHeaderSize+int64(length))
	}
	if r.unsyncedMayBeLost {
		// The rest of the log is searched a piece at a time, never read
		// into memory whole: it may be long, or a hole of any length.
		var claims claimScan
		claims.write(r.buf)
		zero, err := r.consumeRest(&claims)
		switch {
		case err != nil:
			return r.ioError(err)
		case at < 0 && zero:
			return r.torn("%s", reason)
		}
		return r.damaged(claims.best(), "%s", reason)
	}
	if at >= 0 {
		return r.corrupt("%s", reason)
	}
	zero, err := r.restIsZero()
	if err != nil {
		return r.ioError(err)
	}
	if zero {
		return r.torn("%s", reason)
	}
	return r.corrupt("%s", reason)
}

// damaged classifies damage at r.off followed by more data. claimed is the
// largest offset a mark after the damaged record's header claims synced
// (maxSyncedClaim), or -1. It is corruption unless AllowUnsyncedLoss was
// called and nothing shows the damaged bytes were durable: the log was
// written under another boot (or an unknown one), and no mark after them
// claims them synced. Then it is what a power cut leaves (ErrUnsyncedTail).
func (r *Reader) damaged(claimed int64, format string, args ...any) error {
	switch {
	case !r.unsyncedMayBeLost || r.first == nil:
		// No marks (a version-1 log), or the first mark itself damaged:
		// it was synced when the log was created.
	case knownBoot(r.boot) && r.first.BootID == r.boot:
		// Written under this boot: no power cut since.
	case claimed > r.off:
		// A later mark says the damaged record had been fsynced.
	default:
		return fmt.Errorf("%w: %s at offset %d: %s", ErrUnsyncedTail, r.name, r.off, fmt.Sprintf(format, args...))
	}
	return r.corrupt(format, args...)
}

// restIsZero consumes the rest of the input and reports whether it holds
// only zero bytes. It stops at the first that is not.
func (r *Reader) restIsZero() (bool, error) {
	return r.consumeRest(nil)
}

// consumeRest reads the rest of the input a buffer at a time, giving each
// piece to claims if it is not nil, and reports whether it held only zero
// bytes. Without claims it stops at the first byte that is not zero.
func (r *Reader) consumeRest(claims *claimScan) (zero bool, err error) {
	zero = true
	for {
		if _, err := r.br.Peek(1); err != nil {
			if err == io.EOF {
				return zero, nil
			}
			return false, err
		}
		b, _ := r.br.Peek(r.br.Buffered())
		zero = zero && allZero(b)
		if claims != nil {
			claims.write(b)
		} else if !zero {
			return false, nil
		}
		if _, err := r.br.Discard(len(b)); err != nil {
			return false, err
		}
	}
}

// allZero reports whether b holds only zero bytes, a word at a time: a
// log's zero tail (a preallocated file, or a hole) may be long.
func allZero(b []byte) bool {
	var or uint64
	for len(b) >= 8 {
		or |= binary.LittleEndian.Uint64(b)
		b = b[8:]
	}
	for _, c := range b {
		or |= uint64(c)
	}
	return or == 0
}

// torn returns an ErrTornTail error for the record starting at r.off.
func (r *Reader) torn(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d: %s", ErrTornTail, r.name, r.off, fmt.Sprintf(format, args...))
}

// corrupt returns a *base.CorruptError for the record starting at r.off.
func (r *Reader) corrupt(format string, args ...any) error {
	return base.Corruptf(r.name, r.off, format, args...)
}

func (r *Reader) ioError(err error) error {
	return fmt.Errorf("wal: read %s: %w", r.name, err)
}
