// Package compaction merges segments. This file holds the executor's
// building blocks: a merging iterator over sorted sources and a filter that
// keeps only the newest version of each key.
package compaction

import (
	"bytes"
	"container/heap"

	"github.com/bloomkv/bloomkv/internal/base"
)

// Iterator is a source of internal keys in internal-key order (user key
// ascending, sequence number descending). memtable.Iter and segment.Iter
// satisfy it. Key and Value are valid until the next call to First or Next.
type Iterator interface {
	First() bool
	Next() bool
	Key() []byte
	Seq() uint64
	Kind() base.Kind
	Value() []byte
}

// errorer is implemented by sources that can fail (segment iterators).
type errorer interface{ Error() error }

// Err returns the error of a source that can fail (one with an Error
// method), nil for the others.
func Err(it Iterator) error {
	if e, ok := it.(errorer); ok {
		return e.Error()
	}
	return nil
}

// Merge is an Iterator over the union of several sources, in internal-key
// order. It keeps every version; wrap it in Dedup to drop shadowed ones.
type Merge struct {
	srcs []Iterator
	h    mergeHeap
	err  error
}

// NewMerge returns the merge of srcs.
func NewMerge(srcs ...Iterator) *Merge {
	return &Merge{srcs: srcs}
}

// First positions at the smallest entry of all sources.
func (m *Merge) First() bool {
	m.h = m.h[:0]
	for _, s := range m.srcs {
		if s.First() {
			m.h = append(m.h, s)
		} else if err := Err(s); err != nil {
			m.err = err
			return false
		}
	}
	heap.Init(&m.h)
	return len(m.h) > 0
}

// Next advances to the next entry in internal-key order.
func (m *Merge) Next() bool {
	if len(m.h) == 0 || m.err != nil {
		return false
	}
	top := m.h[0]
	if top.Next() {
		heap.Fix(&m.h, 0)
	} else {
		if err := Err(top); err != nil {
			m.err = err
			return false
		}
		heap.Pop(&m.h)
	}
	return len(m.h) > 0
}

// Key returns the user key of the current entry.
func (m *Merge) Key() []byte { return m.h[0].Key() }

// Seq returns the sequence number of the current entry.
func (m *Merge) Seq() uint64 { return m.h[0].Seq() }

// Kind returns the kind of the current entry.
func (m *Merge) Kind() base.Kind { return m.h[0].Kind() }

// Value returns the value of the current entry.
func (m *Merge) Value() []byte { return m.h[0].Value() }

// Error returns the first error met by a source.
func (m *Merge) Error() error { return m.err }

type mergeHeap []Iterator

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	return base.Compare(a.Key(), base.MakeTrailer(a.Seq(), a.Kind()), b.Key(), base.MakeTrailer(b.Seq(), b.Kind())) < 0
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(Iterator)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Dedup passes on only the newest version of each user key: the versions
// it hides can be seen by no reader once no snapshot is older than them.
// With dropTombstones it also hides keys whose newest version is a
// deletion — correct only when the output is the oldest data there is (a
// merge that includes the oldest segment), since otherwise the tombstone
// must keep shadowing older versions elsewhere.
type Dedup struct {
	src            Iterator
	dropTombstones bool
	prev           []byte
	started        bool
}

// NewDedup wraps src.
func NewDedup(src Iterator, dropTombstones bool) *Dedup {
	return &Dedup{src: src, dropTombstones: dropTombstones}
}

// First positions at the first visible entry.
func (d *Dedup) First() bool {
	d.started = false
	if !d.src.First() {
		return false
	}
	return d.settle()
}

// Next advances to the next user key's newest version.
func (d *Dedup) Next() bool {
	if !d.src.Next() {
		return false
	}
	return d.settle()
}

// settle skips older versions of the previous key and, if asked, keys
// whose newest version is a tombstone.
func (d *Dedup) settle() bool {
	for {
		k := d.src.Key()
		if d.started && bytes.Equal(k, d.prev) {
			if !d.src.Next() {
				return false
			}
			continue
		}
		d.prev = append(d.prev[:0], k...)
		d.started = true
		if d.dropTombstones && d.src.Kind() == base.KindDelete {
			if !d.src.Next() {
				return false
			}
			continue
		}
		return true
	}
}

// Key returns the current user key.
func (d *Dedup) Key() []byte { return d.src.Key() }

// Seq returns the current sequence number.
func (d *Dedup) Seq() uint64 { return d.src.Seq() }

// Kind returns the current kind.
func (d *Dedup) Kind() base.Kind { return d.src.Kind() }

// Value returns the current value.
func (d *Dedup) Value() []byte { return d.src.Value() }

// Error returns the source's error.
func (d *Dedup) Error() error { return Err(d.src) }
