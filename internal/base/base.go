// Package base holds the few definitions every layer of bloomkv shares:
// the internal key (user key + sequence number + kind), its ordering, the
// corruption error that names a file and an offset, and the metadata of a
// segment (SegmentMeta), which the manifest stores and the compaction
// policy reads: defined here, the policy needs no import of the manifest
// and its database.
//
// It sits at the bottom of the import graph: memtable, segment, wal and
// manifest import it; it imports nothing of bloomkv's.
package base

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind says what an internal key records: a value or a deletion.
type Kind uint8

const (
	// KindDelete is a tombstone: the user key was deleted at this sequence number.
	KindDelete Kind = 0
	// KindPut records a value for the user key.
	KindPut Kind = 1
	// KindRangeDelete is a range tombstone: every user key in [key, end)
	// was deleted at this sequence number. It appears in batches (the end
	// is the operation's value) and in a segment's range-deletion block,
	// never among a memtable's or a data block's point entries.
	KindRangeDelete Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindDelete:
		return "delete"
	case KindPut:
		return "put"
	case KindRangeDelete:
		return "range-delete"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MaxSeq is the largest sequence number: the trailer packs it into 56 bits.
const MaxSeq = 1<<56 - 1

// TrailerLen is the size of the trailer appended to a user key to form an
// encoded internal key.
const TrailerLen = 8

// MakeTrailer packs a sequence number and a kind into the 8-byte trailer
// value (seq<<8 | kind), the way LevelDB does, so that one integer
// comparison orders versions of a key newest first.
func MakeTrailer(seq uint64, kind Kind) uint64 { return seq<<8 | uint64(kind) }

// SplitTrailer is the inverse of MakeTrailer.
func SplitTrailer(t uint64) (seq uint64, kind Kind) { return t >> 8, Kind(t & 0xff) }

// Compare orders internal keys: user keys ascending, then sequence numbers
// descending (newest version first), then kind descending.
func Compare(aKey []byte, aTrailer uint64, bKey []byte, bTrailer uint64) int {
	if c := bytes.Compare(aKey, bKey); c != 0 {
		return c
	}
	switch {
	case aTrailer > bTrailer:
		return -1
	case aTrailer < bTrailer:
		return 1
	}
	return 0
}

// KeyPrefix returns the first 8 bytes of key as a big-endian integer,
// zero-padded. Zero padding keeps the order: if two keys' prefixes differ,
// they compare as the keys do; only equal prefixes need the keys. Sorted
// structures that keep it beside each key (the memtable's nodes, the range
// tombstones' fragment ends) settle most comparisons with one integer
// compare and no pointer to follow.
func KeyPrefix(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.BigEndian.Uint64(key)
	}
	var b [8]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:])
}

// ErrCorrupt is matched (errors.Is) by every error that reports damaged or
// hostile on-disk data. The concrete error is a *CorruptError naming the
// file and offset. Its own text carries the "bloomkv: " prefix because it
// is an exported sentinel (bloomkv.ErrCorrupt) and reads sensibly on its
// own; a *CorruptError's text does not (see CorruptError.Error).
var ErrCorrupt = errors.New("bloomkv: corrupt data")

// CorruptError reports where corruption was found.
type CorruptError struct {
	File   string // file name (base name within the store directory)
	Offset int64  // byte offset of the damaged structure, -1 if unknown
	Reason string
}

// Error returns "corrupt data: FILE at offset N: REASON" (or "corrupt
// data: FILE: REASON" when the offset is unknown), without the "bloomkv: "
// prefix: a CorruptError is made deep inside (segment, wal, manifest) and
// reaches a user through the root package, whose outermost wrap adds the
// prefix exactly once (the rule is in the root package's doc.go).
func (e *CorruptError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("corrupt data: %s at offset %d: %s", e.File, e.Offset, e.Reason)
	}
	return fmt.Sprintf("corrupt data: %s: %s", e.File, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true for every *CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Corruptf returns a *CorruptError for file at offset.
func Corruptf(file string, offset int64, format string, args ...any) error {
	return &CorruptError{File: file, Offset: offset, Reason: fmt.Sprintf(format, args...)}
}
