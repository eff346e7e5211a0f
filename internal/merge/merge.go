// Package merge combines sorted sources of internal keys (memtables,
// segments: base.InternalIterators) into one ordered stream, forward or
// backward; the merge is an InternalIterator itself. It keeps every
// version of every key; hiding shadowed versions and tombstones is the
// caller's business (compaction.Dedup for merges, the DB iterator for
// reads), because which versions are visible depends on the reader.
package merge

import (
	"bytes"
	"errors"
	"slices"

	"github.com/bloomkv/bloomkv/internal/base"
)

// ErrDirection is returned (by Error) after Next on an Iter positioned by
// Last, SeekLT or Prev, or Prev on one positioned by First, SeekGE or Next.
// Changing direction needs a seek; the DB iterator does that.
var ErrDirection = errors.New("merge: iteration direction changed without a seek")

// item is one source in the heap, with its current internal key cached so
// that comparisons cost no interface calls. A source that runs out leaves
// the heap and its key is dropped (drop): the key may alias the block the
// source read last, which may be a large one decoded on the heap, and the
// other sources may go on for long.
type item struct {
	src     base.InternalIterator
	index   int // of src in New's arguments
	key     []byte
	trailer uint64
}

func (it *item) load() { it.key, it.trailer = it.src.InternalKey() }

// drop forgets the key of a source that ran out.
func (it *item) drop() { it.key = nil }

// Iter is the merge of several sources. Moving forward (First, SeekGE,
// Next) it yields entries in internal-key order; moving backward (Last,
// SeekLT, Prev) in the reverse order: keys descending and, for one key,
// the oldest version first. An Iter is not safe for concurrent use.
type Iter struct {
	items   []item
	heap    []*item // min-heap forward, max-heap backward
	reverse bool
	err     error
}

// New returns an unpositioned merge of srcs.
func New(srcs ...base.InternalIterator) *Iter {
	m := &Iter{items: make([]item, len(srcs)), heap: make([]*item, 0, len(srcs))}
	for i, s := range srcs {
		m.items[i].src, m.items[i].index = s, i
	}
	return m
}

// Reset makes m an unpositioned merge of srcs, as New would, reusing m's
// memory: an iterator whose bounds change rebuilds its merge without
// allocating.
func (m *Iter) Reset(srcs ...base.InternalIterator) {
	m.items = slices.Grow(m.items[:0], len(srcs))[:len(srcs)]
	for i, s := range srcs {
		m.items[i] = item{src: s, index: i}
	}
	m.heap = slices.Grow(m.heap[:0], len(srcs))
	m.reverse, m.err = false, nil
}

// First positions at the smallest entry of all sources.
func (m *Iter) First() bool { return m.position(false, base.InternalIterator.First) }

// Last positions at the largest entry of all sources.
func (m *Iter) Last() bool { return m.position(true, base.InternalIterator.Last) }

// SeekGE positions at the newest version of the first user key >= key.
func (m *Iter) SeekGE(key []byte) bool {
	return m.position(false, func(s base.InternalIterator) bool { return s.SeekGE(key) })
}

// SeekLT positions at the oldest version of the last user key < key.
func (m *Iter) SeekLT(key []byte) bool {
	return m.position(true, func(s base.InternalIterator) bool { return s.SeekLT(key) })
}

// position moves every source with move and rebuilds the heap for the
// given direction.
func (m *Iter) position(reverse bool, move func(base.InternalIterator) bool) bool {
	m.reverse, m.err = reverse, nil
	m.heap = m.heap[:0]
	for i := range m.items {
		it := &m.items[i]
		if move(it.src) {
			it.load()
			m.heap = append(m.heap, it)
			continue
		}
		it.drop()
		if err := it.src.Error(); err != nil {
			m.err = err
			m.heap = m.heap[:0]
			return false
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return len(m.heap) > 0
}

// Next moves to the following entry in internal-key order.
func (m *Iter) Next() bool {
	if m.reverse {
		return m.fail(ErrDirection)
	}
	if len(m.heap) == 0 || m.err != nil {
		return false
	}
	return m.settle(m.heap[0].src.Next())
}

// Prev moves to the preceding entry in internal-key order.
func (m *Iter) Prev() bool {
	if !m.reverse {
		return m.fail(ErrDirection)
	}
	if len(m.heap) == 0 || m.err != nil {
		return false
	}
	return m.settle(m.heap[0].src.Prev())
}

// settle restores the heap after the source at its top moved (ok: to an
// entry). Next and Prev call the source directly rather than through a
// shared step(func) because this is the per-entry path of every scan.
func (m *Iter) settle(ok bool) bool {
	top := m.heap[0]
	if ok {
		top.load()
	} else {
		if err := top.src.Error(); err != nil {
			return m.fail(err)
		}
		top.drop()
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap = m.heap[:last]
	}
	if len(m.heap) > 1 {
		m.down(0)
	}
	return len(m.heap) > 0
}

func (m *Iter) fail(err error) bool {
	if m.err == nil { // the first error stays: a source's, once met, is the one to report
		m.err = err
	}
	m.heap = m.heap[:0]
	return false
}

// SkipTo moves forward, past every user key below key, the sources that
// skip(i) selects (i their index in New's arguments), and leaves the others
// where they are. A reader that knows the selected sources hold nothing
// visible in [current key, key) — a range tombstone newer than all their
// entries covers it — jumps over the range in one seek per source instead
// of one step per entry. Backward (after Last, SeekLT or Prev) it is
// SkipBackTo's mirror: it does nothing.
func (m *Iter) SkipTo(key []byte, skip func(i int) bool) {
	if m.reverse {
		return
	}
	m.reposition(skip, func(it *item) bool { return it.src.SeekGE(key) },
		func(it *item) bool { return bytes.Compare(it.key, key) < 0 })
}

// SkipToVersion moves forward the sources at versions of key newer than
// seq to key's newest version at or below seq, or past key where a source
// has none, and leaves the others where they are: a reader as of seq
// passes the versions written after it in one search per source
// (base.VersionSeeker) instead of one step per version. A source that
// cannot seek to a version steps. Backward it does nothing, as SkipTo.
func (m *Iter) SkipToVersion(key []byte, seq uint64) {
	if m.reverse {
		return
	}
	t := base.VersionTrailer(seq)
	m.reposition(EverySource, func(it *item) bool {
		if s, ok := it.src.(base.VersionSeeker); ok {
			return s.SeekGEVersion(key, seq)
		}
		for it.src.Next() {
			if k, tr := it.src.InternalKey(); base.Compare(k, tr, key, t) >= 0 {
				return true
			}
		}
		return false
	}, func(it *item) bool { return base.Compare(it.key, it.trailer, key, t) < 0 })
}

// EverySource selects every source of a merge (SkipTo, SkipBackTo).
func EverySource(int) bool { return true }

// SkipBackTo is SkipTo moving backward: the selected sources leave every
// user key at or above key, to their last entry below it.
func (m *Iter) SkipBackTo(key []byte, skip func(i int) bool) {
	if !m.reverse {
		return
	}
	m.reposition(skip, func(it *item) bool { return it.src.SeekLT(key) },
		func(it *item) bool { return bytes.Compare(it.key, key) >= 0 })
}

// reposition moves, with move, the heap's selected sources for which due
// is true, drops those that run out, and rebuilds the heap.
func (m *Iter) reposition(skip func(int) bool, move func(*item) bool, due func(*item) bool) {
	if m.err != nil {
		return
	}
	kept := m.heap[:0]
	for _, it := range m.heap {
		if skip(it.index) && due(it) {
			if !move(it) {
				if err := it.src.Error(); err != nil {
					m.fail(err)
					return
				}
				it.drop()
				continue // nothing left in this direction
			}
			it.load()
		}
		kept = append(kept, it)
	}
	m.heap = kept
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
}

// before reports whether a comes out of the heap before b.
func (m *Iter) before(a, b *item) bool {
	c := base.Compare(a.key, a.trailer, b.key, b.trailer)
	if m.reverse {
		return c > 0
	}
	return c < 0
}

// down restores the heap below i. A hand-written sift, not container/heap:
// this runs once per entry of a scan, and the interface calls showed.
func (m *Iter) down(i int) {
	h := m.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && m.before(h[r], h[l]) {
			j = r
		}
		if !m.before(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// Valid reports whether the Iter is at an entry.
func (m *Iter) Valid() bool { return len(m.heap) > 0 && m.err == nil }

// InternalKey returns the user key and trailer of the current entry.
func (m *Iter) InternalKey() ([]byte, uint64) { return m.heap[0].key, m.heap[0].trailer }

// Key returns the user key of the current entry (InternalKey's first half).
func (m *Iter) Key() []byte { return m.heap[0].key }

// Seq returns the sequence number of the current entry.
func (m *Iter) Seq() uint64 {
	seq, _ := base.SplitTrailer(m.heap[0].trailer)
	return seq
}

// Kind returns the kind of the current entry.
func (m *Iter) Kind() base.Kind {
	_, kind := base.SplitTrailer(m.heap[0].trailer)
	return kind
}

// Value returns the value of the current entry.
func (m *Iter) Value() []byte { return m.heap[0].src.Value() }

// Source returns the source of the current entry, for a caller that asks
// it more than the merge passes on (a segment's unread value record).
func (m *Iter) Source() base.InternalIterator { return m.heap[0].src }

// RawValue passes on the current source's RawValue (base.RawValuer); ok
// is false for a source that has none.
func (m *Iter) RawValue() (rec []byte, n int, ok bool) {
	if rv, is := m.heap[0].src.(base.RawValuer); is {
		return rv.RawValue()
	}
	return nil, 0, false
}

// Error returns the first error met by a source, or ErrDirection.
func (m *Iter) Error() error { return m.err }

var _ base.InternalIterator = (*Iter)(nil)
