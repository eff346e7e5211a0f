// Package wal implements bloomkv's write-ahead log.
//
// Every committed batch is appended to the log as one checksummed record
// before it is applied to the memtable, so that after a crash the memtable
// can be rebuilt by replaying the log (see Recover). One record is the unit
// of atomicity: on replay a record is either applied whole or not at all.
//
// The byte layout is specified in FORMAT.md. In short: a 16-byte file
// header (magic, version, checksum) followed by records of the form
// crc32c | length | type | payload.
//
// A crash can leave the last write half done (a "torn tail"). After a
// crash of the process such a tail was never acknowledged to a caller:
// the DB acknowledges a commit only once its records are in the kernel,
// which keeps them. After a power cut that holds only with Options.Sync
// (the records are on the device before the acknowledgment); without it,
// acknowledged bytes written after the last fsync can be lost, in any
// order, and mark records (see Mark) let Recover tell that loss (the end
// of the durable history) from damage to durable data, which is reported
// as a *base.CorruptError. Recover ignores a torn tail either way.
package wal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/bloomkv/bloomkv/internal/base"
)

// MaxRecordSize is the largest payload one record may carry: 256 MiB.
//
// The writer refuses larger payloads, and the reader treats a larger length
// field as corruption, so a damaged or hostile length can never make the
// reader allocate more than this (it is additionally bounded by the bytes
// actually present in the file).
const MaxRecordSize = base.MaxRecordSize

// ErrRecordTooLarge is returned by Writer.WriteRecords for a payload longer
// than MaxRecordSize.
var ErrRecordTooLarge = errors.New("wal: record too large")

// ErrUnsyncedTail is matched (errors.Is) by the error Reader.Next returns,
// after AllowUnsyncedLoss, for damage followed by more data where the
// damaged bytes were never proven durable: what a power cut leaves of
// writes made after the last fsync. The log's durable history ends at
// Reader.Offset; what follows was acknowledged only to a process, never
// synced (Options.Sync off).
var ErrUnsyncedTail = errors.New("wal: damage after the last sync (power cut)")

// ErrTornTail is matched (errors.Is) by the error Reader.Next returns when
// the log ends in an incomplete or damaged final record that was never
// acknowledged. Reader.Offset then tells where the good data ends.
var ErrTornTail = errors.New("wal: torn tail")

// formatVersion is the on-disk format version written in the file header.
// Version 2 adds mark records, version 3 the seal flag of a mark, version
// 4 the prev-sealed flag; logs of versions 1 (no marks) to 3 are still
// read.
const (
	formatVersion           = 4
	prevSealedFormatVersion = 4
	sealFormatVersion       = 3
	markFormatVersion       = 2
	legacyFormatVersion     = 1
)

// FormatVersion is the version of the log format this package writes
// (FORMAT.md); it also reads MinFormatVersion.
const FormatVersion = formatVersion

// MinFormatVersion is the oldest log format version this package reads.
const MinFormatVersion = legacyFormatVersion

// File header: magic (8) | version u32 LE (4) | crc32c of bytes 0..12 (4).
const (
	fileHeaderSize = 16
	magic          = "bkvwal\x00\x00"
)

// Record header: crc32c u32 LE (4) | length u32 LE (4) | type u8 (1).
// The checksum covers bytes 4..9 of the header (length and type) and the
// payload, so a damaged length or type is caught as well as a damaged payload.
const recordHeaderSize = 9

// Record types. This version writes recordFull (a batch) and recordMark
// (what the writer knew about durability, see Mark); 0 is reserved so that
// zero-filled space never looks like a valid record, and the others are
// reserved for future use (e.g. fragments of records split across blocks).
const (
	recordFull byte = 1
	recordMark byte = 2 // a Mark (format version 2)
)

// crcTable selects CRC-32C (Castagnoli), which has hardware support on
// amd64 and arm64.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// appendFileHeader appends the 16-byte file header to dst.
func appendFileHeader(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, magic...)
	dst = binary.LittleEndian.AppendUint32(dst, formatVersion)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], crcTable))
}

// appendRecord appends one full record carrying payload to dst.
func appendRecord(dst, payload []byte) []byte { return appendTyped(dst, recordFull, payload) }

// appendTyped appends one record of the given type to dst.
func appendTyped(dst []byte, typ byte, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // checksum, filled in below
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, typ)
	dst = append(dst, payload...)
	binary.LittleEndian.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], crcTable))
	return dst
}
