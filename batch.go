package bloomkv

import (
	"bytes"
	"fmt"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
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
// Its encoding, the payload of one WAL record, is internal/batch's.
type Batch struct {
	data      []byte
	count     uint32
	rangeDels uint32 // how many of the operations are range deletions
	err       error  // first invalid operation; reported by DB.Write
}

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
// An empty start means "from the first key"; an empty end is refused with
// ErrInvalidRange (to delete to the end, pass a key above every key the
// application writes, as its key scheme defines one); a range with start
// >= end deletes nothing and is not added.
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
func (b *Batch) Size() int { return max(len(b.data), batch.HeaderLen) }

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
	if b.Size()+batch.OpSize(kind, len(key), len(value)) > MaxBatchSize {
		b.err = fmt.Errorf("%w: batch would exceed %d bytes", ErrBatchTooLarge, MaxBatchSize)
		return b.err
	}
	b.data = batch.AppendOp(b.data, kind, key, value)
	b.count++
	if kind == base.KindRangeDelete {
		b.rangeDels++
	}
	return nil
}

// checkRange enforces the key size limit on a range's bounds.
func checkRange(start, end []byte) error {
	if len(end) == 0 {
		return fmt.Errorf("%w: the end of a range deletion must be a key (an empty end deletes nothing, and there is no \"to the last key\")", ErrInvalidRange)
	}
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
	batch.SetHeader(b.data, seq, b.count)
	return b.data
}
