package bloomkv

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/bloomkv/bloomkv/internal/base"
)

// A Batch is a list of puts, deletes and range deletions applied
// atomically by DB.Write, in order: after a crash either all of them are
// present or none. A Batch is not safe for concurrent use; it may be reused
// after Reset.
//
// An operation the store would refuse (an empty or oversized key, an
// oversized value, a batch past MaxBatchSize) is reported by the call that
// adds it, and is sticky: the batch keeps that first error, ignores every
// later operation, and DB.Write returns the error without writing anything.
// Reset clears it.
//
// Its encoding is the WAL record payload (wal/FORMAT.md describes the
// framing, this the contents), little-endian:
//
//	seq   uint64   sequence number of the first operation (set by the commit)
//	count uint32   number of operations
//	then count times:
//	  kind  uint8          base.KindPut, base.KindDelete or base.KindRangeDelete
//	  klen  uvarint, key   (a range deletion's start: may be empty)
//	  vlen  uvarint, value (puts; a range deletion's end)
type Batch struct {
	data      []byte
	count     uint32
	rangeDels uint32 // how many of the operations are range deletions
	err       error  // first invalid operation; reported by DB.Write
}

const batchHeaderLen = 12

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{} }

// Put adds a put of key → value. The batch copies both.
func (b *Batch) Put(key, value []byte) error {
	return b.add(base.KindPut, key, value, checkEntry(key, value))
}

// Delete adds a deletion of key.
func (b *Batch) Delete(key []byte) error {
	return b.add(base.KindDelete, key, nil, checkEntry(key, nil))
}

// DeleteRange adds the deletion of every key in [start, end): the keys
// written before it (in earlier batches, or earlier in this one), not those
// written after. It costs one operation however many keys the range holds.
// An empty start means "from the first key"; a range with start >= end
// deletes nothing and is not added.
func (b *Batch) DeleteRange(start, end []byte) error {
	invalid := checkRange(start, end)
	if invalid == nil && b.err == nil && bytes.Compare(start, end) >= 0 {
		return nil
	}
	return b.add(base.KindRangeDelete, start, end, invalid)
}

// Err returns the batch's sticky error: the first operation it refused.
func (b *Batch) Err() error { return b.err }

// Len returns the number of operations in the batch.
func (b *Batch) Len() int { return int(b.count) }

// Size returns the encoded size of the batch in bytes.
func (b *Batch) Size() int { return max(len(b.data), batchHeaderLen) }

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	b.data, b.count, b.rangeDels, b.err = b.data[:0], 0, 0, nil
}

func (b *Batch) add(kind base.Kind, key, value []byte, invalid error) error {
	if b.err != nil {
		return b.err
	}
	if invalid != nil {
		b.err = invalid
		return invalid
	}
	if len(b.data) == 0 {
		b.data = append(b.data, make([]byte, batchHeaderLen)...)
	}
	if len(b.data)+1+2*binary.MaxVarintLen32+len(key)+len(value) > MaxBatchSize {
		b.err = fmt.Errorf("%w: batch would exceed %d bytes", ErrBatchTooLarge, MaxBatchSize)
		return b.err
	}
	b.data = append(b.data, byte(kind))
	b.data = binary.AppendUvarint(b.data, uint64(len(key)))
	b.data = append(b.data, key...)
	if kind != base.KindDelete {
		b.data = binary.AppendUvarint(b.data, uint64(len(value)))
		b.data = append(b.data, value...)
	}
	b.count++
	if kind == base.KindRangeDelete {
		b.rangeDels++
	}
	return nil
}

// checkRange enforces the key size limit on a range's bounds.
func checkRange(start, end []byte) error {
	if n := max(len(start), len(end)); n > MaxKeySize {
		return fmt.Errorf("%w: range bound of %d bytes (limit %d)", ErrKeyTooLarge, n, MaxKeySize)
	}
	return nil
}

// checkEntry enforces the documented size limits.
func checkEntry(key, value []byte) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > MaxKeySize:
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrKeyTooLarge, len(key), MaxKeySize)
	case len(value) > MaxValueSize:
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrValueTooLarge, len(value), MaxValueSize)
	}
	return nil
}

// setSeq stamps the batch with the sequence number of its first operation
// and returns the encoded record.
func (b *Batch) setSeq(seq uint64) []byte {
	binary.LittleEndian.PutUint64(b.data[0:], seq)
	binary.LittleEndian.PutUint32(b.data[8:], b.count)
	return b.data
}

// batchOp is one decoded operation.
type batchOp struct {
	kind       base.Kind
	key, value []byte
}

// decodeBatch parses a batch record (from the WAL), calling fn for each
// operation with its sequence number. Slices passed to fn alias rec.
// A malformed record is reported as corruption of file at offset.
func decodeBatch(rec []byte, file string, offset int64, fn func(seq uint64, op batchOp)) error {
	bad := func(format string, args ...any) error {
		return base.Corruptf(file, offset, "batch record: "+format, args...)
	}
	if len(rec) < batchHeaderLen {
		return bad("%d bytes, shorter than its header", len(rec))
	}
	first := binary.LittleEndian.Uint64(rec)
	count := binary.LittleEndian.Uint32(rec[8:])
	if first == 0 || first > base.MaxSeq-uint64(count) {
		return bad("sequence number %d out of range", first)
	}
	p := rec[batchHeaderLen:]
	for i := uint32(0); i < count; i++ {
		var op batchOp
		if len(p) < 1 {
			return bad("operation %d of %d missing", i, count)
		}
		op.kind, p = base.Kind(p[0]), p[1:]
		var err error
		switch op.kind {
		case base.KindPut, base.KindDelete:
			if op.key, p, err = readBytes(p); err != nil || len(op.key) == 0 || len(op.key) > MaxKeySize {
				return bad("operation %d: bad key (%d bytes)", i, len(op.key))
			}
		case base.KindRangeDelete:
			if op.key, p, err = readBytes(p); err == nil {
				op.value, p, err = readBytes(p)
			}
			// What DeleteRange would refuse or not add; a range whose end
			// is not above its start could not be fragmented.
			if err != nil || checkRange(op.key, op.value) != nil || bytes.Compare(op.key, op.value) >= 0 {
				return bad("operation %d: bad range (%d and %d bytes)", i, len(op.key), len(op.value))
			}
			fn(first+uint64(i), op)
			continue
		default:
			return bad("operation %d has unknown kind %d", i, op.kind)
		}
		if op.kind == base.KindPut {
			// The same limit Put enforces: a record that passed its
			// checksum but holds what Put would refuse could not be
			// flushed, and would keep the store from ever opening.
			if op.value, p, err = readBytes(p); err != nil || len(op.value) > MaxValueSize {
				return bad("operation %d: bad value (%d bytes)", i, len(op.value))
			}
		}
		fn(first+uint64(i), op)
	}
	if len(p) != 0 {
		return bad("%d trailing bytes after %d operations", len(p), count)
	}
	return nil
}

// readBytes reads a uvarint length and that many bytes, bounded by p.
func readBytes(p []byte) (b, rest []byte, err error) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) {
		return nil, nil, fmt.Errorf("length %d beyond record", n)
	}
	end := w + int(n)
	return p[w:end:end], p[end:], nil
}
