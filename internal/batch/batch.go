// Package batch is the encoding of a batch of writes, the payload of one
// WAL record (wal/FORMAT.md frames it), little-endian:
//
//	seq   uint64   sequence number of the first operation (set at commit)
//	count uint32   number of operations
//	then count times:
//	  kind  uint8          base.KindPut, base.KindDelete or base.KindRangeDelete
//	  klen  uvarint, key   (a range deletion's start: may be empty)
//	  vlen  uvarint, value (puts; a range deletion's end)
//
// The root package's Batch builds records with AppendOp and SetHeader; the
// commit path, WAL recovery and verification read them with Decode.
package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/bloomkv/bloomkv/internal/base"
)

// HeaderLen is the size of the record header: seq and count.
const HeaderLen = 12

// OpSize is the number of bytes AppendOp adds for an operation of kind
// with a key of keyLen bytes and a value (or range end) of valueLen
// bytes: exactly, so that a batch may fill a record to its last byte.
func OpSize(kind base.Kind, keyLen, valueLen int) int {
	n := 1 + uvarintLen(uint64(keyLen)) + keyLen
	if kind != base.KindDelete {
		n += uvarintLen(uint64(valueLen)) + valueLen
	}
	return n
}

// AppendOp appends one operation to rec, writing an empty header first if
// rec is empty. value is left out for a deletion.
func AppendOp(rec []byte, kind base.Kind, key, value []byte) []byte {
	if len(rec) == 0 {
		rec = append(rec, make([]byte, HeaderLen)...)
	}
	rec = append(rec, byte(kind))
	rec = binary.AppendUvarint(rec, uint64(len(key)))
	rec = append(rec, key...)
	if kind != base.KindDelete {
		rec = binary.AppendUvarint(rec, uint64(len(value)))
		rec = append(rec, value...)
	}
	return rec
}

// SetHeader stamps rec with the sequence number of its first operation and
// the number of operations.
func SetHeader(rec []byte, seq uint64, count uint32) {
	binary.LittleEndian.PutUint64(rec[0:], seq)
	binary.LittleEndian.PutUint32(rec[8:], count)
}

// Op is one decoded operation. A range deletion's end is its Value.
type Op struct {
	Kind       base.Kind
	Key, Value []byte
}

// Decode parses a batch record (from the WAL), calling fn for each
// operation with its sequence number. Slices passed to fn alias rec. A
// malformed record — or one holding what the store's API refuses, which
// could never be flushed — is reported as corruption of file at offset.
func Decode(rec []byte, file string, offset int64, fn func(seq uint64, op Op)) error {
	bad := func(format string, args ...any) error {
		return base.Corruptf(file, offset, "batch record: "+format, args...)
	}
	if len(rec) < HeaderLen {
		return bad("%d bytes, shorter than its header", len(rec))
	}
	first := binary.LittleEndian.Uint64(rec)
	count := binary.LittleEndian.Uint32(rec[8:])
	if first == 0 || first > base.MaxSeq-uint64(count) {
		return bad("sequence number %d out of range", first)
	}
	p := rec[HeaderLen:]
	for i := uint32(0); i < count; i++ {
		var op Op
		if len(p) < 1 {
			return bad("operation %d of %d missing", i, count)
		}
		op.Kind, p = base.Kind(p[0]), p[1:]
		var err error
		switch op.Kind {
		case base.KindPut, base.KindDelete:
			if op.Key, p, err = readBytes(p); err != nil || len(op.Key) == 0 || len(op.Key) > base.MaxKeySize {
				return bad("operation %d: bad key (%d bytes)", i, len(op.Key))
			}
		case base.KindRangeDelete:
			if op.Key, p, err = readBytes(p); err == nil {
				op.Value, p, err = readBytes(p)
			}
			// What DeleteRange would refuse or not add; a range whose end
			// is not above its start could not be fragmented.
			if err != nil || max(len(op.Key), len(op.Value)) > base.MaxKeySize || bytes.Compare(op.Key, op.Value) >= 0 {
				return bad("operation %d: bad range (%d and %d bytes)", i, len(op.Key), len(op.Value))
			}
			fn(first+uint64(i), op)
			continue
		default:
			return bad("operation %d has unknown kind %d", i, op.Kind)
		}
		if op.Kind == base.KindPut {
			// The same limit Put enforces: a record that passed its
			// checksum but holds what Put would refuse could not be
			// flushed, and would keep the store from ever opening.
			if op.Value, p, err = readBytes(p); err != nil || len(op.Value) > base.MaxValueSize {
				return bad("operation %d: bad value (%d bytes)", i, len(op.Value))
			}
		}
		fn(first+uint64(i), op)
	}
	if len(p) != 0 {
		return bad("%d trailing bytes after %d operations", len(p), count)
	}
	return nil
}

// readBytes reads a uvarint length and that many bytes, bounded by p. A
// length in other than its shortest form (0x80 0x00 for 0) is refused:
// AppendOp never writes one, and accepting it would give one batch two
// encodings, so a record's bytes would no longer identify its contents.
func readBytes(p []byte) (b, rest []byte, err error) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) {
		return nil, nil, fmt.Errorf("length %d beyond record", n)
	}
	if w != uvarintLen(n) {
		return nil, nil, fmt.Errorf("length %d in %d bytes, not its shortest form", n, w)
	}
	end := w + int(n)
	return p[w:end:end], p[end:], nil
}

// uvarintLen is the number of bytes binary.AppendUvarint writes for n.
func uvarintLen(n uint64) int {
	w := 1
	for ; n >= 0x80; n >>= 7 {
		w++
	}
	return w
}
