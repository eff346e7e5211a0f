package datastore

import (
	"context"
	"fmt"
	"sync"

	"github.com/bloomkv/bloomkv"
	ds "github.com/ipfs/go-datastore"
)

// maxChunk is the encoded size at which a batch starts a new bloomkv
// batch: bloomkv rejects one larger than MaxBatchSize (it is one WAL
// record). A variable so that tests can make chunks small.
var maxChunk = bloomkv.MaxBatchSize - 1<<20

// batch is a ds.Batch: puts and deletes kept in bloomkv batches until
// Commit writes them with DB.Write, in order.
//
// Up to bloomkv.MaxBatchSize of encoded writes (256 MiB) it is one bloomkv
// batch, so Commit is atomic, even across a crash. Past that it is split
// into several, written one after the other: a crash or an error in
// between leaves the first ones applied. go-datastore promises no
// atomicity for batches, and refusing large ones would break callers that
// batch a whole import.
//
// A batch is not safe for concurrent use (go-datastore's batches are
// not). It may be reused after Commit.
type batch struct {
	d    *Datastore
	full []*bloomkv.Batch // chunks that reached maxChunk, oldest first
	cur  *bloomkv.Batch   // nil until the first write, and after Commit
}

// batchPool recycles the buffers of committed batches: callers make a new
// ds.Batch for every group of writes, and growing a fresh buffer to the
// size of each group was most of a batch's allocations.
var batchPool = sync.Pool{New: func() any { return bloomkv.NewBatch() }}

// maxPooled is the largest buffer kept for reuse; bigger ones would pin
// their memory in the pool after a one-off import.
const maxPooled = 4 << 20

func getBatch() *bloomkv.Batch { return batchPool.Get().(*bloomkv.Batch) }

func putBatch(b *bloomkv.Batch) {
	if b.Size() <= maxPooled {
		b.Reset()
		batchPool.Put(b)
	}
}

// Put adds a put of key → value; value is copied. A key or value over
// bloomkv's limits fails here, not at Commit.
func (b *batch) Put(_ context.Context, key ds.Key, value []byte) error {
	k := key.Bytes()
	if err := checkSizes(k, value); err != nil {
		return fmt.Errorf("bloomkv datastore: batch put %s: %w", key, err)
	}
	b.room(len(k) + len(value))
	b.cur.Put(k, value)
	return nil
}

// Delete adds a deletion of key.
func (b *batch) Delete(_ context.Context, key ds.Key) error {
	k := key.Bytes()
	if err := checkSizes(k, nil); err != nil {
		return fmt.Errorf("bloomkv datastore: batch delete %s: %w", key, err)
	}
	b.room(len(k))
	b.cur.Delete(k)
	return nil
}

// room starts a new chunk if n more bytes (plus the few of an operation's
// header) would take the current one past maxChunk.
// It also takes the first chunk from the pool.
func (b *batch) room(n int) {
	const opOverhead = 1 + 2*10 // kind and two uvarint lengths
	switch {
	case b.cur == nil:
		b.cur = getBatch()
	case b.cur.Len() > 0 && b.cur.Size()+n+opOverhead > maxChunk:
		b.full = append(b.full, b.cur)
		b.cur = getBatch()
	}
}

// Commit writes the batch to the store and empties it.
func (b *batch) Commit(context.Context) error {
	defer b.reset()
	if b.cur == nil {
		return nil
	}
	for i, c := range append(b.full, b.cur) {
		if err := b.d.db.Write(c); err != nil {
			if i > 0 {
				return fmt.Errorf("bloomkv datastore: batch commit, after %d of %d chunks applied: %w", i, len(b.full)+1, err)
			}
			return fmt.Errorf("bloomkv datastore: batch commit: %w", err)
		}
	}
	return nil
}

// reset returns the chunks to the pool: DB.Write is done with them.
func (b *batch) reset() {
	for _, c := range b.full {
		putBatch(c)
	}
	if b.cur != nil {
		putBatch(b.cur)
	}
	b.full, b.cur = nil, nil
}

// checkSizes applies bloomkv's limits up front, so that the Put or Delete
// that breaks them reports it; bloomkv.Batch would only tell at Write.
func checkSizes(key, value []byte) error {
	switch {
	case len(key) == 0:
		return bloomkv.ErrEmptyKey
	case len(key) > bloomkv.MaxKeySize:
		return fmt.Errorf("%w: %d bytes (limit %d)", bloomkv.ErrKeyTooLarge, len(key), bloomkv.MaxKeySize)
	case len(value) > bloomkv.MaxValueSize:
		return fmt.Errorf("%w: %d bytes (limit %d)", bloomkv.ErrValueTooLarge, len(value), bloomkv.MaxValueSize)
	}
	return nil
}

var _ ds.Batch = (*batch)(nil)
