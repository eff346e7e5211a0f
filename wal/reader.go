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
//     record, a final record whose checksum fails, or zero bytes. Offset
//     tells where to truncate;
//   - a *base.CorruptError: damage followed by more data, a bad file
//     header, an oversized length or an unknown record type;
//   - an I/O error from the underlying reader.
//
// Errors are sticky: every later call to Next returns the same error.
type Reader struct {
	br   *bufio.Reader
	name string
	hdr  [recordHeaderSize]byte
	buf  []byte // payload of the last record, reused
	off  int64  // end of the last good record (or file header)
	init bool   // the file header has been read
	err  error
}

// NewReader returns a Reader decoding the log in r. name identifies the log
// in errors.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, readChunk), name: name}
}

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
			// (and maybe acknowledged) after it. Cutting here would lose it.
			return nil, r.corrupt("record length %d runs past end of file, but a valid record starts %d bytes into it", length, recordHeaderSize+at)
		}
		return nil, r.torn("record of %d bytes runs past end of file", length)
	}
	crc := crc32.Update(crc32.Checksum(r.hdr[4:], crcTable), crcTable, r.buf)
	if crc != binary.LittleEndian.Uint32(r.hdr[0:4]) {
		return nil, r.badRecord("record checksum mismatch")
	}
	if typ := r.hdr[8]; typ != recordFull {
		return nil, r.corrupt("unknown record type %d", typ)
	}
	r.off += recordHeaderSize + int64(length)
	return r.buf, nil
}

// findRecord returns the offset in b of the first complete record with a
// matching checksum and a known type, or -1. It runs only on the error path
// of a record that claims more bytes than the file holds, to tell a torn
// final write (nothing valid after it) from a damaged length field (valid
// records after it). A random 9-byte window passes for a record with
// probability about 2^-40, so a torn tail is not mistaken for corruption.
//
// Checksumming every candidate could cost O(len(b)²) on a hostile file, so
// the work is capped; past the cap the search gives up and answers as if
// it had found one: reporting corruption is the safe side.
func findRecord(b []byte) int {
	budget := 8*len(b) + 1<<20
	for i := 0; i+recordHeaderSize <= len(b); i++ {
		if b[i+8] != recordFull {
			continue
		}
		n := int(binary.LittleEndian.Uint32(b[i+4:]))
		end := i + recordHeaderSize + n
		if n > MaxRecordSize || end > len(b) || end < 0 {
			continue
		}
		if budget -= n; budget < 0 || crc32.Checksum(b[i+4:end], crcTable) == binary.LittleEndian.Uint32(b[i:]) {
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
	if v := binary.LittleEndian.Uint32(h[8:12]); v != formatVersion {
		return r.corrupt("unsupported format version %d", v)
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

// badRecord classifies a complete record that failed its checksum: if only
// zero bytes (or nothing) follow it, it is the torn end of the last write;
// otherwise acknowledged data after it would be lost, which is corruption.
func (r *Reader) badRecord(reason string) error {
	zero, err := r.restIsZero()
	if err != nil {
		return r.ioError(err)
	}
	if zero {
		return r.torn("%s", reason)
	}
	return r.corrupt("%s", reason)
}

// restIsZero consumes the rest of the input and reports whether it holds
// only zero bytes.
func (r *Reader) restIsZero() (bool, error) {
	for {
		if _, err := r.br.Peek(1); err != nil {
			if err == io.EOF {
				return true, nil
			}
			return false, err
		}
		b, _ := r.br.Peek(r.br.Buffered())
		if !allZero(b) {
			return false, nil
		}
		if _, err := r.br.Discard(len(b)); err != nil {
			return false, err
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
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
