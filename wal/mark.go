package wal

import (
	"bytes"
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
// anywhere in b, or -1.
func maxSyncedClaim(b []byte) int64 {
	var c claimScan
	c.write(b)
	return c.best()
}

// claimScan finds the largest Synced of the valid mark records in bytes
// given to write a piece at a time, as maxSyncedClaim does for one slice:
// a mark split between two pieces is found, and it holds only the last
// few bytes, so that the whole rest of a log can be searched without
// reading it into memory. A random window passes for a record with
// probability about 2^-40; the work is capped as in findRecord, and past
// the cap the answer is "everything was synced", which reports
// corruption: the safe side.
type claimScan struct {
	tail    [markRecordSize - 1]byte // the last bytes written: too few for a whole mark
	n       int                      // how many of tail hold bytes
	max     int64                    // the largest Synced found, if found
	found   bool
	written int // bytes written so far
	spent   int // checksummed candidates' bytes; capped by written
	over    bool
}

// markRecordSize is the size of a mark record with its header.
const markRecordSize = recordHeaderSize + markLen

func (c *claimScan) write(p []byte) {
	c.written += len(p)
	if c.n > 0 {
		// The positions in the tail were not searched: a mark starting
		// there did not fit. With the start of p it may.
		var join [2 * (markRecordSize - 1)]byte
		k := copy(join[copy(join[:], c.tail[:c.n]):], p)
		c.scan(join[:c.n+k])
		if len(p) < markRecordSize-1 {
			c.n = copy(c.tail[:], join[max(0, c.n+k-(markRecordSize-1)):c.n+k])
			return
		}
	}
	c.scan(p)
	c.n = copy(c.tail[:], p[max(0, len(p)-(markRecordSize-1)):])
}

// scan searches every position of b at which a whole mark fits.
func (c *claimScan) scan(b []byte) {
	for i := 0; i+markRecordSize <= len(b) && !c.over; i++ {
		// Jump to the next byte that could be a mark's type: most of a
		// long search is zeros or a record's payload.
		j := bytes.IndexByte(b[i+8:len(b)-markLen], recordMark)
		if j < 0 {
			return
		}
		if i += j; binary.LittleEndian.Uint32(b[i+4:]) != markLen {
			continue
		}
		end := i + markRecordSize
		if c.spent += markLen; c.spent > 8*c.written+1<<20 {
			c.over = true
			return
		}
		if crc32.Checksum(b[i+4:end], crcTable) != binary.LittleEndian.Uint32(b[i:]) {
			continue
		}
		if m, ok := parseMark(b[i+recordHeaderSize : end]); ok && (!c.found || m.Synced > c.max) {
			c.max, c.found = m.Synced, true
		}
	}
}

// best returns the largest Synced found, -1 if none, or 1<<62 if the work
// ran past its cap.
func (c *claimScan) best() int64 {
	switch {
	case c.over:
		return 1 << 62
	case !c.found:
		return -1
	}
	return c.max
}
