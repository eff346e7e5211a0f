package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/heapstat"
)

// sameShardOffsets returns n block offsets of file 1 that fall into the
// same shard, so a test can reason about one LRU list.
func sameShardOffsets(c *Cache, n int) []uint64 {
	want := c.shard(cacheKey{fileNum: 1})
	var offs []uint64
	for off := uint64(0); len(offs) < n; off++ {
		if c.shard(cacheKey{fileNum: 1, offset: off}) == want {
			offs = append(offs, off)
		}
	}
	return offs
}

func TestCacheLRU(t *testing.T) {
	const blockLen = 100
	charge := blockCharge(make([]byte, blockLen))
	c := NewCache(3 * charge * cacheShards) // three blocks per shard
	offs := sameShardOffsets(c, 4)
	block := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, blockLen) }
	for i := range 3 {
		c.insert(1, blockHandle{offs[i], blockLen}, block(i))
	}
	if got := c.Size(); got != 3*charge {
		t.Fatalf("Size = %d, want %d", got, 3*charge)
	}
	if b, ok := c.get(1, blockHandle{offs[0], blockLen}); !ok || !bytes.Equal(b, block(0)) { // now most recent
		t.Fatalf("get(block 0) = %v, %v", b, ok)
	}
	c.insert(1, blockHandle{offs[3], blockLen}, block(3)) // evicts block 1, the least recently used
	for i, want := range []bool{true, false, true, true} {
		if _, ok := c.get(1, blockHandle{offs[i], blockLen}); ok != want {
			t.Errorf("block %d cached = %v, want %v", i, ok, want)
		}
	}
	if got := c.Size(); got != 3*charge {
		t.Fatalf("Size after eviction = %d, want %d", got, 3*charge)
	}
	c.insert(1, blockHandle{offs[3], blockLen}, block(9)) // already present: kept as is
	if b, _ := c.get(1, blockHandle{offs[3], blockLen}); !bytes.Equal(b, block(3)) {
		t.Fatal("re-insert replaced the cached block")
	}
	if _, ok := c.get(2, blockHandle{offs[0], blockLen}); ok {
		t.Fatal("another file's block with the same offset hit")
	}
}

func TestCacheRejectsOversizedAndDisabled(t *testing.T) {
	c := NewCache(cacheShards * 1000)
	c.insert(1, blockHandle{0, 2000}, make([]byte, 2000))
	if _, ok := c.get(1, blockHandle{0, 2000}); ok || c.Size() != 0 {
		t.Fatal("a block larger than a shard was cached")
	}
	for _, c := range []*Cache{NewCache(0), NewCache(-5), nil} {
		c.insert(1, blockHandle{0, 1}, []byte("x"))
		if _, ok := c.get(1, blockHandle{0, 1}); ok || c.Size() != 0 {
			t.Fatalf("disabled cache %v stored a block", c)
		}
	}
}

func TestCacheStaysWithinCapacity(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const capacity = 64 << 10
	c := NewCache(capacity)
	for range 10000 {
		n := rng.IntN(1000)
		c.insert(rng.Uint64N(4), blockHandle{rng.Uint64N(1000) * 4096, uint64(n)}, make([]byte, n))
		if s := c.Size(); s > capacity {
			t.Fatalf("Size %d exceeds capacity %d", s, capacity)
		}
	}
	if c.Size() < capacity/2 {
		t.Fatalf("cache holds only %d of %d bytes after many inserts", c.Size(), capacity)
	}
}

func TestCacheConcurrent(t *testing.T) {
	c := NewCache(32 << 10)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 2000 {
				off := rng.Uint64N(200)
				if b, ok := c.get(1, blockHandle{off, 64}); ok {
					if len(b) != 64 || b[0] != byte(off) {
						t.Errorf("block %d holds %v", off, b[:1])
						return
					}
					continue
				}
				c.insert(1, blockHandle{off, 64}, bytes.Repeat([]byte{byte(off)}, 64))
			}
		})
	}
	wg.Wait()
	if c.Size() > 32<<10 {
		t.Fatalf("Size %d over capacity", c.Size())
	}
}

func TestCacheGetDoesNotAllocate(t *testing.T) {
	c := NewCache(1 << 20)
	c.insert(3, blockHandle{4096, 100}, make([]byte, 100))
	if n := testing.AllocsPerRun(100, func() { c.get(3, blockHandle{4096, 100}) }); n != 0 {
		t.Fatalf("cache hit allocates %v times", n)
	}
}

// TestReaderCounters checks the statistics and that the cache is used:
// the second Get of a block is a hit and reads nothing from the file.
func TestReaderCounters(t *testing.T) {
	var es []entry
	for i := range 200 {
		es = append(es, entry{key: []byte(fmt.Sprintf("k%04d", i)), seq: 1, kind: base.KindPut, value: []byte("v")})
	}
	data, props := writeSegment(t, es, WriterOptions{BlockSize: 256})
	if props.DataBlocks < 4 {
		t.Fatalf("want several blocks, got %d", props.DataBlocks)
	}
	var ctr Counters
	cache := NewCache(1 << 20)
	r := openSegment(t, data, ReaderOptions{Cache: cache, Counters: &ctr, FileNum: 7, Name: "c.seg"})
	openBytes := ctr.BytesRead.Load()
	if openBytes == 0 || ctr.BlockReads.Load() != 0 {
		t.Fatalf("after Open: %d bytes, %d block reads", openBytes, ctr.BlockReads.Load())
	}
	get := func(k string) {
		t.Helper()
		if _, _, found, err := r.Get([]byte(k), 1); !found || err != nil {
			t.Fatalf("Get(%s): %v, %v", k, found, err)
		}
	}
	expect := func(reads, hits uint64) {
		t.Helper()
		if r, h := ctr.BlockReads.Load(), ctr.BlockCacheHits.Load(); r != reads || h != hits {
			t.Fatalf("block reads %d, cache hits %d; want %d, %d", r, h, reads, hits)
		}
	}
	get("k0000")
	expect(1, 0)
	if ctr.BytesRead.Load() <= openBytes {
		t.Fatal("a block read did not count its bytes")
	}
	get("k0001") // same block
	expect(1, 1)
	get("k0199") // last block
	expect(2, 1)

	size := cache.Size()
	it := r.NewIter(false)
	for ok := it.First(); ok; ok = it.Next() {
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	expect(uint64(props.DataBlocks), 3) // two blocks came from the cache
	if cache.Size() != size {
		t.Fatal("an iterator without fillCache filled the cache")
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	if got := ctr.BlockCacheHits.Load(); got != 3 {
		t.Fatalf("Verify used the cache: %d hits", got)
	}
}

func TestGetCacheHitDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	es := []entry{{key: []byte("key"), seq: 3, kind: base.KindPut, value: []byte("value")}}
	data, _ := writeSegment(t, es, WriterOptions{Compression: SnappyCompression})
	r := openSegment(t, data, ReaderOptions{Cache: NewCache(1 << 20)})
	dst := make([]byte, 0, 64)
	r.GetAppend(dst, []byte("key"), 10) // warm the cache
	n := testing.AllocsPerRun(100, func() {
		if _, _, found, err := r.GetAppend(dst[:0], []byte("key"), 10); !found || err != nil {
			t.Fatal(found, err)
		}
	})
	if n != 0 {
		t.Fatalf("cache-hit GetAppend allocates %v times", n)
	}
}

// An Iter made by NewIterWithCounters counts its reads, cache hits and
// bytes into its own Counters and not into the Reader's, mapped or not,
// with read-ahead windows too.
func TestIterWithCounters(t *testing.T) {
	es := randomEntries(rand.New(rand.NewPCG(3, 4)), 3000, 800)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 256, Compression: SnappyCompression, BitsPerKey: 10})
	for _, mapped := range []bool{false, true} {
		var readerCtr, iterCtr Counters
		opts := ReaderOptions{Cache: NewCache(1 << 20), Counters: &readerCtr, FileNum: 1, Name: "w.seg"}
		if mapped {
			opts.Mapped = data
		}
		r := openSegment(t, data, opts)
		atOpen := readerCtr.BytesRead.Load() // the metadata Open read
		for _, fill := range []bool{true, false} {
			it := r.NewIterWithCounters(fill, &iterCtr)
			n := 0
			for ok := it.First(); ok; ok = it.Next() {
				n++
			}
			if err := it.Close(); err != nil || n != len(es) {
				t.Fatalf("mapped=%v: %d of %d entries, %v", mapped, n, len(es), err)
			}
		}
		if got := readerCtr.BlockReads.Load() + readerCtr.BlockCacheHits.Load(); got != 0 || readerCtr.BytesRead.Load() != atOpen {
			t.Fatalf("mapped=%v: the Reader's counters moved: %d blocks, %d bytes after %d at Open",
				mapped, got, readerCtr.BytesRead.Load(), atOpen)
		}
		blocks := uint64(r.Blocks())
		if got := iterCtr.BlockReads.Load() + iterCtr.BlockCacheHits.Load(); got != 2*blocks || iterCtr.BytesRead.Load() == 0 {
			t.Fatalf("mapped=%v: the Iters counted %d blocks (want %d) and %d bytes", mapped, got, 2*blocks, iterCtr.BytesRead.Load())
		}
		if _, _, _, err := r.Get(es[0].key, es[0].seq); err != nil {
			t.Fatal(err)
		}
		if readerCtr.BlockReads.Load()+readerCtr.BlockCacheHits.Load() != 1 {
			t.Fatalf("mapped=%v: a Get did not count into the Reader's counters", mapped)
		}
	}
}

// TestCacheKeyedByHandle checks that the cache tells apart two blocks of
// one file at one offset with different stored lengths: a value record's
// handle comes from an entry, and a hostile file may give two handles one
// offset (TestValueRecordCacheKeyedByLength).
func TestCacheKeyedByHandle(t *testing.T) {
	c := NewCache(1 << 20)
	c.insert(1, blockHandle{64, 4}, []byte("four"))
	if b, ok := c.get(1, blockHandle{64, 13}); ok {
		t.Fatalf("get(64, 13) = %q, the block cached at (64, 4)", b)
	}
	c.insert(1, blockHandle{64, 13}, []byte("thirteen"))
	for h, want := range map[blockHandle]string{{64, 4}: "four", {64, 13}: "thirteen"} {
		if b, ok := c.get(1, h); !ok || string(b) != want {
			t.Errorf("get(%d, %d) = %q, %v; want %q", h.offset, h.length, b, ok, want)
		}
	}
}

// TestCacheHeldWithinCapacity: the heap a full cache holds stays near its
// capacity, whatever the size of its blocks. Charged their length and 96
// bytes each, a cache of 50-byte blocks held 1.5 times its capacity, and
// one of blocks just over 4 KiB, as most data blocks are at the default
// BlockSize, 1.2 times: the allocator gives such a block 4,864 bytes.
func TestCacheHeldWithinCapacity(t *testing.T) {
	const capacity = 4 << 20
	for _, size := range []int{50, 4150} {
		before := heapstat.Live()
		c := NewCache(capacity)
		for i := range 3 * capacity / size {
			c.insert(uint64(i%5), blockHandle{uint64(i) * 8192, uint64(size)}, make([]byte, size))
		}
		held := heapstat.Live() - before
		if limit := int64(capacity) / 10 * 11; held > limit {
			t.Errorf("a cache of %d-byte blocks, capacity %d, holds %d bytes of heap (limit %d)", size, capacity, held, limit)
		}
		runtime.KeepAlive(c)
	}
}
