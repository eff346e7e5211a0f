package memtable

import "github.com/bloomkv/bloomkv/internal/base"

// Iter walks a memtable's entries in internal-key order: user key
// ascending, and for one user key the newest version first. An Iter starts
// unpositioned; use First, Last, SeekGE or SeekLT before Next or Prev.
//
// An Iter may run concurrently with Add. It may or may not see entries
// added after it was created, but never a partly inserted one. An Iter
// itself is not safe for concurrent use.
type Iter struct {
	m *Memtable
	n *node // current entry; nil when not positioned on one
}

// NewIter returns an unpositioned iterator over m.
func (m *Memtable) NewIter() *Iter { return &Iter{m: m} }

// First moves to the first entry and reports whether there is one.
func (it *Iter) First() bool {
	it.n = it.m.head.low[0].Load()
	return it.n != nil
}

// Last moves to the last entry and reports whether there is one.
func (it *Iter) Last() bool {
	it.n = it.m.last()
	return it.n != nil
}

// Next moves to the following entry and reports whether there is one. On an
// invalid iterator it does nothing and returns false.
func (it *Iter) Next() bool {
	if it.n == nil {
		return false
	}
	it.n = it.n.low[0].Load()
	return it.n != nil
}

// Prev moves to the preceding entry and reports whether there is one. On an
// invalid iterator it does nothing and returns false.
//
// Nodes have no back pointers (a singly linked list is what makes lock-free
// publication simple), so Prev searches for the predecessor from the top:
// O(log n) instead of O(1), as in LevelDB.
func (it *Iter) Prev() bool {
	if it.n == nil {
		return false
	}
	it.n = it.m.seekLT(it.n.key, it.n.trailer)
	return it.n != nil
}

// SeekGE moves to the first entry whose user key is >= key (the newest
// version of that key) and reports whether there is one.
func (it *Iter) SeekGE(key []byte) bool {
	it.n = it.m.seekGE(key, maxTrailer, nil)
	return it.n != nil
}

// SeekGEVersion moves to the newest version of key whose sequence
// number is at most seq or, if key has none, to the first entry of the
// next user key, and reports whether there is one: one search past the
// versions written after a reader's sequence number, however many
// (base.VersionSeeker).
func (it *Iter) SeekGEVersion(key []byte, seq uint64) bool {
	it.n = it.m.seekGE(key, base.VersionTrailer(seq), nil)
	return it.n != nil
}

// SeekLT moves to the last entry whose user key is < key and reports whether
// there is one. In internal order that entry is the oldest version of its
// user key.
func (it *Iter) SeekLT(key []byte) bool {
	it.n = it.m.seekLT(key, maxTrailer)
	return it.n != nil
}

// maxTrailer sorts before every version of a user key.
const maxTrailer = ^uint64(0)

// Valid reports whether the iterator is positioned on an entry.
func (it *Iter) Valid() bool { return it.n != nil }

// Key returns the current entry's user key. Like Value, it aliases the
// memtable's memory and must not be modified. Valid must be true.
func (it *Iter) Key() []byte { return it.n.key }

// InternalKey returns the current entry's user key and trailer
// (base.MakeTrailer) in one call. Valid must be true.
func (it *Iter) InternalKey() ([]byte, uint64) { return it.n.key, it.n.trailer }

// Seq returns the current entry's sequence number. Valid must be true.
func (it *Iter) Seq() uint64 { return it.n.seq() }

// Kind returns the current entry's kind. Valid must be true.
func (it *Iter) Kind() base.Kind { return it.n.kind() }

// Value returns the current entry's value (empty for a deletion). It aliases
// the memtable's memory: it must not be modified, and stays valid as long as
// the memtable is referenced. Valid must be true.
func (it *Iter) Value() []byte { return it.n.value }

// Error is nil: a memtable is memory, and its iterator cannot fail.
func (it *Iter) Error() error { return nil }

var _ base.InternalIterator = (*Iter)(nil)
