package bloomkv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"weak"

	"github.com/bloomkv/bloomkv/internal/heapstat"
	"github.com/bloomkv/bloomkv/memtable"
)

// collected runs the garbage collector and reports how many of ws still
// point at a live object.
func reachable[T any](ws []weak.Pointer[T]) int {
	runtime.GC()
	runtime.GC()
	n := 0
	for _, w := range ws {
		if w.Value() != nil {
			n++
		}
	}
	return n
}

// TestFlushedMemtablesReleased: once a memtable is flushed and no reader
// holds it, nothing in the DB keeps it. The frozen list dropped its head
// by reslicing, and the array's first slot kept the flushed memtable (4
// MiB by default, up to 1 GiB) alive until a later rotation outgrew the
// array: one memtable after each Flush, and after a burst of rotations
// as many as had waited for their flush at once.
func TestFlushedMemtablesReleased(t *testing.T) {
	db := mustOpen(t, t.TempDir(), &Options{MemtableSize: 32 << 10, DisableAutoCompaction: true})
	defer db.Close()
	var flushed []weak.Pointer[memtable.Memtable]
	current := func() *memtable.Memtable {
		db.mu.Lock()
		defer db.mu.Unlock()
		return db.mem
	}
	value := make([]byte, 1000)
	for round := range 4 {
		// A few rotations in a row, so that several memtables wait for
		// their flush together and the frozen list's array grows.
		for i := range 200 {
			m := current()
			mustDo(t, db.Put([]byte{byte(round), byte(i)}, value))
			if next := current(); next != m {
				flushed = append(flushed, weak.Make(m))
			}
		}
		m := current()
		mustDo(t, db.Flush())
		flushed = append(flushed, weak.Make(m))
		if n := reachable(flushed); n > 0 {
			t.Fatalf("round %d: %d of the %d memtables flushed so far are still reachable", round, n, len(flushed))
		}
	}
}

// TestTxnOverwritesHoldLatest: a transaction that writes one key again and
// again holds its latest write, not every one. The writes made since its
// last iterator waited in a list, in order, for the next iterator to sort
// them, so one that made no iterator kept every value it ever wrote: here
// 2,000 writes of 4 KiB held 8 MiB, for a write set of one.
func TestTxnOverwritesHoldLatest(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	txn := db.NewTransaction(true)
	defer txn.Discard()
	const n = 2000
	value := make([]byte, 4<<10)
	before := heapstat.Live()
	for i := range n {
		value[0] = byte(i)
		mustDo(t, txn.Put([]byte("k"), value))
		if i == 10 {
			// Through an iterator's runs and back into the list.
			it, err := txn.NewIterator(nil)
			mustDo(t, err)
			if !it.First() || it.Value()[0] != byte(i) {
				t.Fatalf("write %d: the iterator is at %q", i, it.Key())
			}
			mustDo(t, it.Close())
		}
	}
	mustDo(t, txn.Delete([]byte("j")))
	mustDo(t, txn.Put([]byte("j"), []byte("w")))
	if held := heapstat.Live() - before; held > 256<<10 {
		t.Errorf("%d writes of one key hold %d bytes of heap (one write: %d)", n, held, len(value))
	}
	mustDo(t, txn.Commit())
	for k, want := range map[string]byte{"k": byte((n - 1) % 256), "j": 'w'} {
		if v, err := db.Get([]byte(k)); err != nil || v[0] != want {
			t.Errorf("after commit, Get(%s) = %.1q, %v; want first byte %q", k, v, err, want)
		}
	}
}

// TestTxnRereadsHoldDistinct: a transaction's read set holds about one
// span per range of keys its reads cover, however often it reads them.
// Every Get and every iterator seek added a span of its own, kept to the
// commit: here 20,000 Gets of one key and 20,000 seeks to another held 3.0 MB, and a
// loop polling a key in a long transaction grew without end. Reads of
// keys apart and the conflicts they raise are unchanged.
func TestTxnRereadsHoldDistinct(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	for _, k := range []string{"a", "k", "m", "z"} {
		mustDo(t, db.Put([]byte(k), []byte("v")))
	}
	for _, tc := range []struct {
		write    string
		conflict bool
	}{{"k", true}, {"m", true}, {"a", false}, {"n", false}} {
		txn := db.NewTransaction(true)
		it, err := txn.NewIterator(nil)
		mustDo(t, err)
		const n = 20000
		before := heapstat.Live()
		for range n {
			if _, err := txn.Get([]byte("k")); err != nil {
				t.Fatal(err)
			}
			if !it.Seek([]byte("m")) {
				t.Fatal("Seek(m) found nothing")
			}
		}
		if held := heapstat.Live() - before; held > 64<<10 {
			t.Errorf("%d Gets and seeks of two keys hold %d bytes of heap", n, held)
		}
		mustDo(t, txn.Put([]byte("z"), []byte("w")))
		mustDo(t, db.Put([]byte(tc.write), []byte("x")))
		err = txn.Commit()
		if got := errors.Is(err, ErrConflict); got != tc.conflict {
			t.Errorf("a write of %s after the reads: Commit = %v, want a conflict: %v", tc.write, err, tc.conflict)
		}
		mustDo(t, it.Close())
	}
}

// TestTxnHistoryChargesItsMemory: the record of the keys written while a
// read-write transaction is open, capped at txnHistoryLimit, is charged
// what it holds: what the transaction's end lets go. It was charged a
// key's bytes and 64 bytes a commit group, where a group of one Put holds
// about 200, so the cap let it grow to about 2.5 times its limit.
func TestTxnHistoryChargesItsMemory(t *testing.T) {
	db := mustOpen(t, t.TempDir(), &Options{MemtableSize: 64 << 20})
	defer db.Close()
	for _, shape := range []struct {
		groups, puts, ranges int
	}{{10000, 1, 0}, {1000, 10, 0}, {2000, 0, 1}} {
		txn := db.NewTransaction(true)
		if _, err := txn.Get([]byte("x")); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		for i := range shape.groups {
			b := NewBatch()
			for j := range shape.puts {
				mustDo(t, b.Put(fmt.Appendf(nil, "k%07d-%d", i, j), nil))
			}
			for range shape.ranges {
				mustDo(t, b.DeleteRange(fmt.Appendf(nil, "r%07d", i), fmt.Appendf(nil, "r%07d~", i)))
			}
			mustDo(t, db.Write(b))
		}
		db.txns.mu.Lock()
		charged := db.txns.bytes
		db.txns.mu.Unlock()
		before := heapstat.Live()
		txn.Discard() // the last transaction: the history goes
		held := before - heapstat.Live()
		if limit := int64(charged)/4*5 + 64<<10; held > limit {
			t.Errorf("%d groups of %d Puts and %d range deletions: the history held %d bytes of heap, charged %d (limit %d)",
				shape.groups, shape.puts, shape.ranges, held, charged, limit)
		}
	}
}

// TestIteratorLetsGoOfLargeValues: an Iterator that stepped back over a
// large value keeps no copy of it once it shows smaller values, or moves
// forward, where values are not copied. It kept the buffer it copied the
// value into for as long as it lived: 8 MiB here, an open Iterator's
// cost for good, though the value it showed was a few bytes. The values
// are stored in their blocks, uncompressed and mapped, so the Iterator's
// copy is the only heap they take, and the memtable holds them all, so
// that no flush runs in the background while the heap is measured.
func TestIteratorLetsGoOfLargeValues(t *testing.T) {
	db := mustOpen(t, t.TempDir(), &Options{DisableAutoCompaction: true, DisableValueSeparation: true, Compression: NoCompression, MemtableSize: 64 << 20})
	defer db.Close()
	large := make([]byte, 8<<20)
	for i := range 20 {
		mustDo(t, db.Put(fmt.Appendf(nil, "a%02d", i), []byte("small")))
		mustDo(t, db.Put(fmt.Appendf(nil, "c%02d", i), []byte("small")))
	}
	mustDo(t, db.Put([]byte("b"), large))
	mustDo(t, db.Put([]byte("d"), large))
	mustDo(t, db.Put([]byte("d"), []byte("small"))) // the large version is older
	for _, flushed := range []bool{false, true} {
		if flushed {
			mustDo(t, db.Flush()) // one segment, read without a merge
		}
		heapstat.Live() // what the writes left for a second collection goes now
		for _, tc := range []struct {
			name string
			move func(it *Iterator) bool
		}{
			{"back past both, then on back", func(it *Iterator) bool {
				ok := it.SeekLT([]byte("e"))
				for ok && string(it.Key()) > "a10" {
					ok = it.Prev()
				}
				return ok
			}},
			{"back past b, then forward", func(it *Iterator) bool {
				ok := it.SeekLT([]byte("c00"))
				for ok && string(it.Key()) >= "a10" {
					ok = it.Prev()
				}
				for ok && string(it.Key()) < "c10" {
					ok = it.Next()
				}
				return ok
			}},
		} {
			it, err := db.NewIterator(nil)
			mustDo(t, err)
			before := heapstat.Live()
			if !tc.move(it) || string(it.Value()) != "small" {
				t.Fatalf("%s (flushed %v): at %q=%.8q", tc.name, flushed, it.Key(), it.Value())
			}
			if held := heapstat.Live() - before; held > 1<<20 || cap(it.valBuf) > maxKeptValBuf {
				t.Errorf("%s (flushed %v): the Iterator at %s holds %d bytes of heap, a value buffer of %d",
					tc.name, flushed, it.Key(), held, cap(it.valBuf))
			}
			mustDo(t, it.Close())
		}
	}
}

// TestIteratorLetsGoOfLargeBlocks: an Iterator that passed a large
// value keeps none of it once its sources have moved on, in whatever form
// the value was read: a value record decoded on the heap, or a block
// holding the value, decoded into the segment iterator's buffer. The
// segment iterator kept the last record it read, and its decode buffer,
// for as long as it lived, though it went on to blocks of the mapping;
// one that ran out of keys kept its last block, as did the merge's copy
// of its last key: 4 MiB (twice that, with the Iterator's own copy) for
// an Iterator that showed 100 bytes.
func TestIteratorLetsGoOfLargeBlocks(t *testing.T) {
	large := make([]byte, 4<<20)
	for i := range large {
		large[i] = byte(i % 7) // compressible: decoded on the heap
	}
	rng := rand.New(rand.NewPCG(1, 2))
	small := func() []byte { // incompressible: its blocks are read from the mapping
		v := make([]byte, 100)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	for _, tc := range []struct {
		separate, oneSegment bool
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		db := mustOpen(t, t.TempDir(), &Options{DisableAutoCompaction: true, DisableValueSeparation: !tc.separate})
		flush := func() {
			if !tc.oneSegment {
				mustDo(t, db.Flush()) // the large value gets a segment to itself
			}
		}
		for i := range 100 {
			mustDo(t, db.Put(fmt.Appendf(nil, "a%04d", i), small()))
		}
		flush()
		mustDo(t, db.Put([]byte("b"), large))
		flush()
		for i := range 2000 {
			mustDo(t, db.Put(fmt.Appendf(nil, "c%04d", i), small()))
		}
		mustDo(t, db.Flush())
		heapstat.Live()
		it, err := db.NewIterator(nil)
		mustDo(t, err)
		before := heapstat.Live()
		n := 0
		for ok := it.Last(); ok; ok = it.Prev() {
			n++
		}
		if n != 2101 || !it.Seek([]byte("c1500")) || !it.Next() {
			t.Fatalf("%+v: %d keys backward, then at %q", tc, n, it.Key())
		}
		if held := heapstat.Live() - before; held > 1<<20 {
			t.Errorf("%+v: the Iterator at %s holds %d bytes of heap", tc, it.Key(), held)
		}
		mustDo(t, it.Close())
		mustDo(t, db.Close())
	}
}
