// Package memtable is bloomkv's sorted in-memory table: the place every
// write lands (after the WAL) until the table is full and flushed to a
// segment file.
//
// It is a skiplist ordered by internal key (user key ascending, then
// sequence number descending), so one user key can hold several versions
// and a reader at an older snapshot finds the version it should see.
//
// Concurrency: one writer, any number of readers, no locks. The writer
// fills in a new node completely, then publishes it with atomic pointer
// stores, lowest level first; a reader that loads a pointer to the node
// (an atomic load) is therefore guaranteed to see all of its fields. The
// level-0 list alone holds every entry; the higher levels are only express
// lanes, so a reader that misses a half-linked node on a higher level
// still finds it on level 0.
package memtable

import (
	"bytes"
	"math/rand/v2"
	"sync/atomic"
	"unsafe"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

const (
	// maxHeight bounds the tower height. With branching factor 4 the
	// skiplist stays efficient up to about 4^12 = 16M entries, far more
	// than a memtable of a few MiB holds.
	maxHeight = 12

	// inlineLevels is how many levels of a node's tower are stored in
	// the node itself (low); a taller node's upper levels are in a
	// separate array (high). Three nodes in four have height 1 and 15 in
	// 16 at most 2, and the lower levels are where a search meets nodes
	// it has not met recently: with the next pointer beside the key prefix
	// it compares, such a step costs one cache miss instead of two (node,
	// then its tower elsewhere).
	inlineLevels = 2

	// Nodes and the upper towers are allocated in slabs rather than one
	// by one, which keeps Add at (amortized) zero allocations.
	nodeSlabLen = 256
	highSlabLen = 64
)

// highTower is the upper part of a tower taller than inlineLevels.
type highTower [maxHeight - inlineLevels]atomic.Pointer[node]

// node is one entry of the skiplist. Everything but the tower (low and
// the array high points to) is written once, before the node is
// published, and never changes afterwards.
//
// What a search step reads (prefix, low, high) comes first, in 32 bytes,
// and the node is 96 bytes, so that in a slab (whose start the allocator
// aligns to at least 64 bytes) those 32 bytes never straddle two cache
// lines.
type node struct {
	prefix uint64 // base.KeyPrefix(key): most comparisons end here
	// low[i] is the next node on level i, for i < inlineLevels.
	low [inlineLevels]atomic.Pointer[node]
	// high[i] is the next node on level inlineLevels+i; nil for a node
	// of height inlineLevels or less. The node's height is not stored:
	// only the writer needs it, while linking the node in.
	high    *highTower
	trailer uint64 // base.MakeTrailer(seq, kind)
	key     []byte // user key, in the arena
	value   []byte // in the arena; empty for deletions
	_       [8]byte
}

// next returns the link to the next node on level.
func (n *node) next(level int) *atomic.Pointer[node] {
	if level < inlineLevels {
		return &n.low[level]
	}
	return &n.high[level-inlineLevels]
}

func (n *node) seq() uint64 {
	seq, _ := base.SplitTrailer(n.trailer)
	return seq
}

func (n *node) kind() base.Kind {
	_, kind := base.SplitTrailer(n.trailer)
	return kind
}

// EntryOverhead is what the memtable charges for an entry (ApproximateSize)
// besides its key and value bytes; an entry with a tower taller than the
// levels a node holds inline costs more. For a writer that estimates
// what a batch will take before it inserts it: a batch's encoded size
// counts a few bytes per operation, where the memtable charges a node.
const EntryOverhead = int(unsafe.Sizeof(node{}))

// nodeOverhead is what a node costs besides its key and value bytes.
func nodeOverhead(height int) int {
	if height > inlineLevels {
		return int(unsafe.Sizeof(node{}) + unsafe.Sizeof(highTower{}))
	}
	return int(unsafe.Sizeof(node{}))
}

// before reports whether n sorts before the internal key (key, trailer),
// whose key prefix is prefix. Comparing the cached 8-byte prefixes as
// integers settles almost every comparison a search makes without
// touching the key bytes in the arena (as Pebble's arenaskl does). It is
// small enough to be inlined into the search loops, which call it at
// every step; only a tie calls out (beforeTie).
func (n *node) before(prefix uint64, key []byte, trailer uint64) bool {
	if n.prefix != prefix {
		return n.prefix < prefix
	}
	return n.beforeTie(key, trailer)
}

// beforeTie is before for a node whose key prefix equals the key's. Not
// inlined into before, which it would make too large to inline.
//
//go:noinline
func (n *node) beforeTie(key []byte, trailer uint64) bool {
	return base.Compare(n.key, n.trailer, key, trailer) < 0
}

// Memtable is a sorted in-memory table of internal keys. Add must be called
// by one goroutine at a time; Get, Len, ApproximateSize and iterators may
// be used concurrently with Add and with each other.
type Memtable struct {
	head   *node         // sentinel with a full-height tower; holds no entry
	height atomic.Int32  // tallest tower in use; searches start there
	size   atomic.Int64  // see ApproximateSize
	count  atomic.Int64  // see Len
	maxSeq atomic.Uint64 // see MaxSeq

	// rangeDels holds the range tombstones added so far, replaced (never
	// changed) by each AddRangeDeletes; rangeDelBytes is what they are
	// charged in size: rangeDelKeys, the bounds copied into the arena, and
	// the lists' own memory. pointBytes is size less the tombstones.
	rangeDels     atomic.Pointer[rangeDelLevels]
	rangeDelBytes int // writer only
	rangeDelKeys  int // writer only
	pointBytes    atomic.Int64

	// Writer-only state.
	arena arena
	nodes []node      // unused nodes of the current slab
	highs []highTower // unused upper towers of the current slab
	rng   rand.PCG    // tower heights; per memtable, so no shared lock
}

// New returns an empty memtable. sizeHint is the expected capacity in bytes
// (for example 4 MiB); it sizes the arena chunks and is not a limit: the
// caller decides when the table is full by watching ApproximateSize.
func New(sizeHint int) *Memtable {
	m := &Memtable{
		head:  &node{high: new(highTower)},
		arena: newArena(sizeHint),
	}
	m.rng.Seed(rand.Uint64(), rand.Uint64())
	m.height.Store(1)
	return m
}

// Add inserts a version of key. It copies key and value, so the caller may
// reuse its buffers. Calls to Add must not overlap each other, but may run
// concurrently with any readers.
//
// Adding the same (key, seq) twice is a caller bug and panics, as does a
// seq above base.MaxSeq: either would silently break the ordering.
//
// A range tombstone (kind base.KindRangeDelete, value the end of the range)
// goes to the table's range tombstones instead (AddRangeDelete).
func (m *Memtable) Add(seq uint64, kind base.Kind, key, value []byte) {
	if seq > base.MaxSeq {
		panic("memtable: sequence number above base.MaxSeq")
	}
	if kind == base.KindRangeDelete {
		m.AddRangeDeletes([]rangedel.Tombstone{{Start: key, End: value, Seq: seq}})
		return
	}
	// Search for the spot before every version of key at seq, whatever its
	// kind. If next is such a version we have a duplicate; otherwise this
	// spot is exactly where (key, seq, kind) belongs.
	var prev [maxHeight]*node
	next := m.seekGE(key, seqMaxTrailer(seq), &prev)
	// The prefix first: it settles almost every case without reading the
	// key bytes in the arena, another cache miss.
	if next != nil && next.prefix == base.KeyPrefix(key) && next.seq() == seq && bytes.Equal(next.key, key) {
		panic("memtable: duplicate key and sequence number")
	}

	height := m.randomHeight()
	if listHeight := int(m.height.Load()); height > listHeight {
		for level := listHeight; level < height; level++ {
			prev[level] = m.head
		}
		// Readers that see the new height before the links below find
		// nil at the head on the new levels and simply move down.
		m.height.Store(int32(height))
	}

	n := m.newNode(key, value, base.MakeTrailer(seq, kind), height)
	for level := range height {
		n.next(level).Store(prev[level].next(level).Load())
	}
	// Publish bottom-up: once n is on level 0 it is visible to everyone.
	for level := range height {
		prev[level].next(level).Store(n)
	}
	charge := int64(len(key) + len(value) + nodeOverhead(height))
	m.size.Add(charge)
	m.pointBytes.Add(charge)
	m.count.Add(1)
	m.noteSeq(seq)
}

// noteSeq raises MaxSeq to seq. Only the writer calls it, so a load and a
// store suffice.
func (m *Memtable) noteSeq(seq uint64) {
	if seq > m.maxSeq.Load() {
		m.maxSeq.Store(seq)
	}
}

// rangeDelLevels are a memtable's range tombstones: fragmented lists,
// each at most half the pieces of the one before it, so that adding a
// batch's tombstones merges O(log n) lists of geometrically growing size —
// O(log n) amortized per piece — rather than copying every fragment the
// table holds (n adds, n² copies). Readers look through every list, at most
// about log₂ n of them, newest last.
type rangeDelLevels struct {
	lists []*rangedel.List
}

// AddRangeDeletes records the range tombstones of one batch: every key in
// [Start, End) deleted at Seq. The sequence numbers must all belong to one
// batch, so that no reader sees some of them and not others: only the
// newest that covers each key is kept (rangedel.BuildNewest), and n nested
// tombstones in one batch cost O(n log n), not n² pieces. It copies the
// keys. Like Add, it must not overlap another Add, but may run
// concurrently with readers, which see the tombstones once it returns.
func (m *Memtable) AddRangeDeletes(ts []rangedel.Tombstone) {
	if len(ts) == 0 {
		return
	}
	owned := make([]rangedel.Tombstone, 0, len(ts))
	for _, t := range ts {
		m.noteSeq(t.Seq)
		if bytes.Compare(t.Start, t.End) >= 0 {
			continue // deletes nothing: not copied, as BuildNewest drops it
		}
		buf := m.arena.alloc(len(t.Start) + len(t.End))
		copy(buf, t.Start)
		copy(buf[len(t.Start):], t.End)
		owned = append(owned, rangedel.Tombstone{Start: buf[:len(t.Start):len(t.Start)], End: buf[len(t.Start):], Seq: t.Seq})
		// Charged whether or not a fragment keeps these bytes: a copy no
		// fragment refers to (of a tombstone the batch's newer ones hide,
		// or of a range deleted again, whose fragment keeps the equal
		// bounds copied first) stays in its arena chunk beside live
		// entries until the table goes. Charged only for its fragments, a
		// table held 300 MB of heap for 0.7 MiB charged: 2,000 Puts, each
		// followed by a DeleteRange of the same two 64 KiB bounds.
		m.rangeDelKeys += len(buf)
	}
	added := rangedel.BuildNewest(owned)
	if added.Empty() {
		return
	}
	var lists []*rangedel.List
	if old := m.rangeDels.Load(); old != nil {
		lists = append(lists, old.lists...)
	}
	lists = append(lists, added)
	for n := len(lists); n >= 2 && 2*lists[n-1].Len() >= lists[n-2].Len(); n-- {
		lists = append(lists[:n-2], rangedel.Union(lists[n-2], lists[n-1]))
	}
	charge := m.rangeDelKeys
	for _, l := range lists {
		charge += l.Bytes()
	}
	m.rangeDels.Store(&rangeDelLevels{lists: lists})
	m.size.Add(int64(charge - m.rangeDelBytes))
	m.rangeDelBytes = charge
}

// RangeDelLists returns the table's range tombstones as a few fragmented
// lists (at most about log₂ of their number): a key is deleted by the
// newest tombstone any of them holds for it. Nil if it has none.
func (m *Memtable) RangeDelLists() []*rangedel.List {
	if l := m.rangeDels.Load(); l != nil {
		return l.lists
	}
	return nil
}

// RangeDels returns the table's range tombstones as one fragmented list
// (merging RangeDelLists, O(n log n)): for a flush. Nil if it has none.
func (m *Memtable) RangeDels() *rangedel.List {
	lists := m.RangeDelLists()
	switch len(lists) {
	case 0:
		return nil
	case 1:
		return lists[0]
	}
	return rangedel.Merge(lists...)
}

// PointBytes is ApproximateSize less the range tombstones: what the
// table's point entries (puts and deletes) take.
func (m *Memtable) PointBytes() int { return int(m.pointBytes.Load()) }

// Empty reports whether the table holds nothing: no entry and no range
// tombstone.
func (m *Memtable) Empty() bool { return m.Len() == 0 && m.rangeDels.Load() == nil }

// MaxSeq returns the largest sequence number added so far (0 if none).
func (m *Memtable) MaxSeq() uint64 { return m.maxSeq.Load() }

// Get returns the newest version of key whose sequence number is <= maxSeq.
// A deletion is reported as found with kind base.KindDelete. The returned
// value aliases the memtable's memory: it must not be modified, and stays
// valid as long as the memtable is referenced.
func (m *Memtable) Get(key []byte, maxSeq uint64) (value []byte, kind base.Kind, found bool) {
	value, _, kind, found = m.GetVersion(key, maxSeq)
	return value, kind, found
}

// GetVersion is Get that also returns the sequence number of the version
// found, which a reader compares with the range tombstones that cover key.
func (m *Memtable) GetVersion(key []byte, maxSeq uint64) (value []byte, seq uint64, kind base.Kind, found bool) {
	n := m.seekGE(key, seqMaxTrailer(min(maxSeq, base.MaxSeq)), nil)
	if n == nil || !bytes.Equal(n.key, key) {
		return nil, 0, 0, false
	}
	return n.value, n.seq(), n.kind(), true
}

// ApproximateSize returns the bytes taken by the entries: their keys and
// values plus the skiplist nodes. The caller compares it with its memtable
// budget to decide when to flush.
func (m *Memtable) ApproximateSize() int { return int(m.size.Load()) }

// Len returns the number of entries (versions, not distinct user keys).
func (m *Memtable) Len() int { return int(m.count.Load()) }

// seqMaxTrailer returns the largest trailer with sequence number seq. In
// internal order (trailers descending) it comes before every version of a
// key at seq or below, and after every version above seq.
func seqMaxTrailer(seq uint64) uint64 { return seq<<8 | 0xff }

// seekGE returns the first node at or after (key, trailer), or nil if there
// is none. If prev is not nil, it receives for every level below the
// current height the last node before that position: where a new node
// must be linked in.
func (m *Memtable) seekGE(key []byte, trailer uint64, prev *[maxHeight]*node) *node {
	x := m.head
	level := int(m.height.Load()) - 1
	p := base.KeyPrefix(key)
	for {
		next := x.next(level).Load()
		if next != nil && next.before(p, key, trailer) {
			x = next // still before the target: move right
			continue
		}
		if prev != nil {
			prev[level] = x
		}
		if level == 0 {
			return next
		}
		level-- // overshot on this level: move down
	}
}

// seekLT returns the last node before (key, trailer), or nil if there is
// none.
func (m *Memtable) seekLT(key []byte, trailer uint64) *node {
	x := m.head
	level := int(m.height.Load()) - 1
	p := base.KeyPrefix(key)
	for {
		next := x.next(level).Load()
		if next != nil && next.before(p, key, trailer) {
			x = next
			continue
		}
		if level == 0 {
			break
		}
		level--
	}
	if x == m.head {
		return nil
	}
	return x
}

// last returns the last node, or nil if the memtable is empty.
func (m *Memtable) last() *node {
	x := m.head
	for level := int(m.height.Load()) - 1; level >= 0; level-- {
		for next := x.next(level).Load(); next != nil; next = x.next(level).Load() {
			x = next
		}
	}
	if x == m.head {
		return nil
	}
	return x
}

// randomHeight draws a tower height: 1 with probability 3/4, 2 with
// probability 3/16, and so on (branching factor 4, as in LevelDB).
func (m *Memtable) randomHeight() int {
	r := m.rng.Uint64()
	h := 1
	for h < maxHeight && r&3 == 0 {
		h++
		r >>= 2
	}
	return h
}

// newNode returns an unpublished node holding copies of key and value.
func (m *Memtable) newNode(key, value []byte, trailer uint64, height int) *node {
	if len(m.nodes) == 0 {
		m.nodes = make([]node, nodeSlabLen)
	}
	n := &m.nodes[0]
	m.nodes = m.nodes[1:]

	if height > inlineLevels {
		if len(m.highs) == 0 {
			m.highs = make([]highTower, highSlabLen)
		}
		n.high = &m.highs[0]
		m.highs = m.highs[1:]
	}

	// One arena allocation for both; the three-index slices keep an
	// append to the key from overwriting the value.
	buf := m.arena.alloc(len(key) + len(value))
	copy(buf, key)
	copy(buf[len(key):], value)
	n.key = buf[:len(key):len(key)]
	n.value = buf[len(key):]
	n.trailer = trailer
	n.prefix = base.KeyPrefix(key)
	return n
}
