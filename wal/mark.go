package wal

import (
	"encoding/binary"
	"hash/crc32"
)

// A Mark is the content of a mark record (type 2): what the writer knew
// about durability when it wrote the record. Marks let recovery tell damage
// a power cut may leave (bytes written after the last fsync, which the
// kernel may have persisted in any order, or not at all) from damage to
// data that was already durable (corruption):
//
//   - BootID names the boot of the machine that wrote the log. If the log
//     is read under the same boot, no power cut happened since it was
//     written: the page cache held every byte, so any damage is corruption.
//   - Synced is how many bytes of the file were fsynced before the mark was
//     written. A valid mark after damaged bytes that claims them synced
//     proves the damage is not a power cut's.
//   - PrevSynced says the previous log was fsynced to its end before this
//     one was created, so damage anywhere in it is corruption.
//   - Seal says the mark ends the log (Writer.Seal, format version 3):
//     every byte before it was fsynced before it was written, nothing is
//     written after it, and it was fsynced too before anything that
//     depends on the log being whole happened. A log that ends in a seal
//     cannot have lost its last records to a power cut.
//   - PrevSealed says every older log that recovery reads had its seal
//     made durable before the mark was written (Writer.MarkPrevSealed,
//     format version 4). It is written before the log's first fsync past
//     its creation, so the writes that fsync acknowledges come with a
//     proof that the older logs ended in a durable seal.
//
// The first record of every log the store writes is a mark; a writer adds
// another before a write whenever an fsync has happened since the last.
type Mark struct {
	BootID     [16]byte
	Synced     int64
	PrevSynced bool
	Seal       bool
	PrevSealed bool
}

// markLen is the payload size of a mark record.
const markLen = 16 + 8 + 1

// Bits of a mark's flags byte (its last).
const (
	markPrevSynced = 1 << 0
	markSeal       = 1 << 1 // format version 3
	markPrevSealed = 1 << 2 // format version 4
)

// appendMark appends a mark record to dst.
func appendMark(dst []byte, m Mark) []byte {
	var p [markLen]byte
	copy(p[:16], m.BootID[:])
	binary.LittleEndian.PutUint64(p[16:], uint64(m.Synced))
	if m.PrevSynced {
		p[24] |= markPrevSynced
	}
	if m.Seal {
		p[24] |= markSeal
	}
	if m.PrevSealed {
		p[24] |= markPrevSealed
	}
	return appendTyped(dst, recordMark, p[:])
}

// parseMark decodes a mark payload; ok is false if it is malformed.
func parseMark(p []byte) (m Mark, ok bool) {
	if len(p) != markLen || p[24]&^(markPrevSynced|markSeal|markPrevSealed) != 0 {
		return Mark{}, false
	}
	copy(m.BootID[:], p[:16])
	synced := binary.LittleEndian.Uint64(p[16:])
	if synced >= 1<<62 {
		return Mark{}, false
	}
	m.Synced, m.PrevSynced, m.Seal = int64(synced), p[24]&markPrevSynced != 0, p[24]&markSeal != 0
	m.PrevSealed = p[24]&markPrevSealed != 0
	return m, true
}

// knownBoot reports whether a boot ID was recorded (all zero: unknown, as
// on systems that do not expose one).
func knownBoot(id [16]byte) bool { return id != [16]byte{} }

// maxSyncedClaim returns the largest Synced of the valid mark records found
// anywhere in b (which starts at file offset base), or -1. A random window
// passes for a record with probability about 2^-40; the work is capped as
// in findRecord, and past the cap the answer is "everything was synced",
// which reports corruption: the safe side.
func maxSyncedClaim(b []byte) int64 {
	best := int64(-1)
	budget := 8*len(b) + 1<<20
	for i := 0; i+recordHeaderSize+markLen <= len(b); i++ {
		if b[i+8] != recordMark || binary.LittleEndian.Uint32(b[i+4:]) != markLen {
			continue
		}
		end := i + recordHeaderSize + markLen
		if budget -= markLen; budget < 0 {
			return 1 << 62
		}
		if crc32.Checksum(b[i+4:end], crcTable) != binary.LittleEndian.Uint32(b[i:]) {
			continue
		}
		if m, ok := parseMark(b[i+recordHeaderSize : end]); ok {
			best = max(best, m.Synced)
		}
	}
	return best
}
