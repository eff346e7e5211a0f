package segment

import "sync"

const (
	cacheShards = 16

	// cacheEntryOverhead approximates the bookkeeping memory of one cached
	// block, charged on top of its bytes so that many tiny blocks cannot
	// exceed the capacity by much: the entry (64 bytes) and its map slot
	// with the map's spare room (measured: 70 to 135 bytes, the more the
	// more blocks were evicted and replaced). At 96, a cache of 50-byte
	// blocks held 1.5 times its capacity.
	cacheEntryOverhead = 224
)

// blockCharge is what a cached block is charged: its capacity, an eighth
// more for the allocator's size classes (a block just over 4 KiB, as
// most are at the default BlockSize, takes 4,864 bytes), and the
// bookkeeping.
func blockCharge(block []byte) int64 {
	return int64(cap(block)+cap(block)/8) + cacheEntryOverhead
}

// Cache is a bounded LRU cache of decompressed blocks, shared by all the
// segment readers of a store and keyed by (ReaderOptions.FileNum, block
// handle): the block's offset and its stored length. It is split into 16
// independently locked shards so that concurrent readers rarely contend;
// each shard holds 1/16 of the capacity. A nil *Cache is valid and caches
// nothing.
//
// The length is part of the key for value records: their handles come
// from the entries of data blocks, and nothing short of Verify stops a
// file from holding two handles at one offset with different lengths,
// each a record with a valid checksum (the shorter one's bytes and
// trailer the start of the longer one's). Keyed by offset alone, a read
// of one would be answered with the other's cached value. Data blocks
// could do with the offset: their handles tile the data region (checked
// at Open), so one offset has one length, and a value record lies
// strictly inside the gap before a data block, so it never starts where
// a data block does.
//
// Cached blocks are immutable and never recycled: a reader that got a
// block keeps a valid slice even if the block is evicted meanwhile, and
// the garbage collector frees it once nobody uses it.
type Cache struct {
	shards [cacheShards]cacheShard
}

type cacheKey struct{ fileNum, offset, length uint64 }

type cacheEntry struct {
	key        cacheKey
	block      []byte
	prev, next *cacheEntry
}

type cacheShard struct {
	mu       sync.Mutex
	capacity int64
	size     int64
	entries  map[cacheKey]*cacheEntry
	lru      cacheEntry // list sentinel: lru.next is the most recently used
	_        [64]byte   // keeps neighbouring shards' locks off one cache line
}

// NewCache returns a cache holding up to capacityBytes of blocks (plus a
// small per-block overhead). A capacity <= 0 gives a cache that stores
// nothing.
func NewCache(capacityBytes int64) *Cache {
	c := &Cache{}
	per := max(capacityBytes, 0) / cacheShards
	for i := range c.shards {
		s := &c.shards[i]
		s.capacity = per
		s.entries = make(map[cacheKey]*cacheEntry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
	}
	return c
}

// Size returns the bytes currently charged to cached blocks.
func (c *Cache) Size() int64 {
	if c == nil {
		return 0
	}
	var n int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.size
		s.mu.Unlock()
	}
	return n
}

func (c *Cache) shard(k cacheKey) *cacheShard {
	// Multiplicative hashing of the file and offset spreads the blocks of
	// one file (and equal offsets of different files) over all shards.
	h := (k.fileNum*0x9e3779b97f4a7c15 ^ k.offset) * 0xbf58476d1ce4e5b9
	return &c.shards[h>>60]
}

// get returns the cached block of file fileNum at h and marks it most
// recently used. It does not allocate.
func (c *Cache) get(fileNum uint64, h blockHandle) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	k := cacheKey{fileNum, h.offset, h.length}
	s := c.shard(k)
	s.mu.Lock()
	e, ok := s.entries[k]
	if ok {
		s.unlink(e)
		s.pushFront(e)
	}
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	return e.block, true
}

// insert adds block unless the key is already present (two readers may
// load the same block concurrently) or the block alone exceeds the shard's
// capacity, then evicts least recently used blocks down to the capacity.
func (c *Cache) insert(fileNum uint64, h blockHandle, block []byte) {
	if c == nil {
		return
	}
	k := cacheKey{fileNum, h.offset, h.length}
	s := c.shard(k)
	charge := blockCharge(block)
	if charge > s.capacity {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[k]; ok {
		return
	}
	e := &cacheEntry{key: k, block: block}
	s.entries[k] = e
	s.pushFront(e)
	s.size += charge
	for s.size > s.capacity {
		old := s.lru.prev
		s.unlink(old)
		delete(s.entries, old.key)
		s.size -= blockCharge(old.block)
	}
}

func (s *cacheShard) unlink(e *cacheEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
}

func (s *cacheShard) pushFront(e *cacheEntry) {
	e.prev = &s.lru
	e.next = s.lru.next
	e.next.prev = e
	s.lru.next = e
}
