// Package rangedel holds range tombstones: records that every key in
// [Start, End) was deleted at sequence number Seq. A range tombstone hides
// the versions of the keys in its range that are older than it, and no
// others: a newer write of a key in the range is visible again, and a
// reader at a snapshot older than the tombstone does not see it.
//
// A List keeps tombstones fragmented, as Pebble's keyspan package does:
// overlapping tombstones are cut at each other's boundaries into
// non-overlapping fragments, each carrying the sequence numbers of every
// tombstone that covers it. Fragments are sorted, so "which tombstone
// covers this key, as seen at this sequence number" is one binary search
// in memory — a Get never reads a block to learn that a key was deleted by
// a range.
package rangedel

import (
	"bytes"
	"github.com/bloomkv/bloomkv/internal/base"
	"slices"
)

// Tombstone deletes the keys in [Start, End) with sequence numbers below
// Seq.
type Tombstone struct {
	Start, End []byte
	Seq        uint64
}

// Fragment is a span [Start, End) of keys and the sequence numbers of the
// tombstones that cover all of it, newest first.
type Fragment struct {
	Start, End []byte
	Seqs       []uint64 // descending, no duplicates
}

// List is an immutable, sorted set of non-overlapping fragments. The zero
// value and nil are empty lists. A List is safe for concurrent use.
type List struct {
	frags []Fragment
	count int // tombstone pieces: the sum of len(Seqs)
	// ends[i] is the first 8 bytes of frags[i].End as a big-endian
	// integer (base.KeyPrefix): Find compares these, contiguous in memory, and
	// whole keys only where they tie. A Get asks every list it meets, and
	// with 1,000 fragments the search over the keys themselves was ~30% of
	// an absent-key Get's time.
	ends  []uint64
	bytes int // see Bytes
}

// indexed fills l.ends and l.bytes once l.frags is final, and returns l.
func (l *List) indexed() *List {
	l.ends = make([]uint64, len(l.frags))
	l.bytes = 0
	for i := range l.frags {
		f := &l.frags[i]
		l.ends[i] = base.KeyPrefix(f.End)
		l.bytes += fragmentOverhead + 8*len(f.Seqs)
	}
	return l
}

// Build fragments ts into a List. It keeps the slices of ts (the caller
// must not change them afterwards); tombstones with Start >= End delete
// nothing and are dropped.
func Build(ts []Tombstone) *List {
	edges := make([][]byte, 0, 2*len(ts))
	byStart := make([]Tombstone, 0, len(ts))
	for _, t := range ts {
		if bytes.Compare(t.Start, t.End) >= 0 {
			continue
		}
		byStart = append(byStart, t)
		edges = append(edges, t.Start, t.End)
	}
	if len(byStart) == 0 {
		return &List{}
	}
	slices.SortFunc(byStart, func(a, b Tombstone) int { return bytes.Compare(a.Start, b.Start) })
	slices.SortFunc(edges, bytes.Compare)
	edges = slices.CompactFunc(edges, bytes.Equal)

	l := &List{}
	var active []Tombstone // tombstones covering the current span
	next := 0              // first of byStart not yet active
	for i := 0; i+1 < len(edges); i++ {
		lo, hi := edges[i], edges[i+1]
		active = slices.DeleteFunc(active, func(t Tombstone) bool { return bytes.Compare(t.End, lo) <= 0 })
		for next < len(byStart) && bytes.Compare(byStart[next].Start, lo) <= 0 {
			active = append(active, byStart[next])
			next++
		}
		if len(active) == 0 {
			continue
		}
		seqs := make([]uint64, len(active))
		for j, t := range active {
			seqs[j] = t.Seq
		}
		slices.Sort(seqs)
		slices.Reverse(seqs)
		seqs = slices.Compact(seqs)
		l.appendFragment(lo, hi, seqs)
	}
	return l.indexed()
}

// appendFragment adds [start, end) after the last fragment, merging it into
// that one when they touch and carry the same sequence numbers.
func (l *List) appendFragment(start, end []byte, seqs []uint64) {
	if n := len(l.frags); n > 0 {
		last := &l.frags[n-1]
		if bytes.Equal(last.End, start) && slices.Equal(last.Seqs, seqs) {
			last.End = end
			return
		}
	}
	l.frags = append(l.frags, Fragment{Start: start, End: end, Seqs: seqs})
	l.count += len(seqs)
}

// FromFragments returns the List of frags, which must already be sorted,
// non-overlapping and each with descending, distinct sequence numbers (as
// a segment's range-deletion block stores them; the segment reader checks
// that before calling). It keeps frags.
func FromFragments(frags []Fragment) *List {
	l := &List{frags: frags}
	for _, f := range frags {
		l.count += len(f.Seqs)
	}
	return l.indexed()
}

// Empty reports whether the list holds no tombstone.
func (l *List) Empty() bool { return l == nil || len(l.frags) == 0 }

// Len returns the number of tombstone pieces: one per fragment and
// sequence number.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return l.count
}

// Fragments returns the fragments in key order. The caller must not
// modify them.
func (l *List) Fragments() []Fragment {
	if l == nil {
		return nil
	}
	return l.frags
}

// Bounds returns the smallest start and the largest end of the list's
// fragments; both nil for an empty list.
func (l *List) Bounds() (start, end []byte) {
	if l.Empty() {
		return nil, nil
	}
	return l.frags[0].Start, l.frags[len(l.frags)-1].End
}

// Find returns the index of the fragment that contains key, or -1.
func (l *List) Find(key []byte) int {
	if l == nil {
		return -1
	}
	i := l.firstEndAbove(key)
	if i < len(l.frags) && bytes.Compare(l.frags[i].Start, key) <= 0 {
		return i
	}
	return -1
}

// firstEndAbove returns the index of the first fragment whose end is
// beyond key (len(frags) if none): the only one that can contain key.
// Ends strictly increase, so their prefixes do not decrease; a fragment
// whose end's prefix is below key's ends before key, one whose prefix is
// above ends beyond it, and only equal prefixes need the whole keys.
func (l *List) firstEndAbove(key []byte) int {
	p := base.KeyPrefix(key)
	lo, hi := 0, len(l.ends)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		e := l.ends[mid]
		if e > p || e == p && bytes.Compare(l.frags[mid].End, key) > 0 {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Covering returns the sequence number of the newest tombstone that covers
// key and is visible at readSeq (its Seq <= readSeq), or 0 if there is
// none. A version of key with a sequence number below the result is
// deleted for that reader.
func (l *List) Covering(key []byte, readSeq uint64) uint64 {
	if l.Empty() {
		return 0
	}
	if i := l.Find(key); i >= 0 {
		return l.frags[i].Visible(readSeq)
	}
	return 0
}

// Visible returns the newest of the fragment's sequence numbers that is
// <= readSeq, or 0.
func (f *Fragment) Visible(readSeq uint64) uint64 {
	s := f.Seqs // descending: the first one visible is the newest
	if len(s) > 0 && s[0] <= readSeq {
		return s[0] // a reader of the latest state
	}
	// A binary search, not a scan: a memtable's fragment holds every
	// tombstone that covers it (a range deleted n times over is n), and a
	// snapshot older than them asks at every key it reads there.
	lo, hi := 0, len(s)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s[mid] > readSeq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(s) {
		return s[lo]
	}
	return 0
}

// Tombstones returns the list as tombstones, one per fragment and
// sequence number, in fragment order.
func (l *List) Tombstones() []Tombstone {
	out := make([]Tombstone, 0, l.Len())
	for _, f := range l.Fragments() {
		for _, s := range f.Seqs {
			out = append(out, Tombstone{Start: f.Start, End: f.End, Seq: s})
		}
	}
	return out
}

// Merge returns the union of lists, fragmented anew: Union, pairwise in a
// balanced tree, so O(n log k) for n fragments in k lists.
func Merge(lists ...*List) *List {
	switch len(lists) {
	case 0:
		return &List{}
	case 1:
		if lists[0] == nil {
			return &List{}
		}
		return lists[0]
	}
	h := len(lists) / 2
	if l := Union(Merge(lists[:h]...), Merge(lists[h:]...)); l != nil {
		return l
	}
	return &List{}
}

// Filter returns the list with each fragment's sequence numbers passed
// through keep (which returns those to keep, in the same order); fragments
// left with none are dropped. Compaction uses it to keep one tombstone per
// snapshot stripe and to drop those nothing older can need.
func (l *List) Filter(keep func(seqs []uint64) []uint64) *List {
	out := &List{}
	for _, f := range l.Fragments() {
		if seqs := keep(slices.Clone(f.Seqs)); len(seqs) > 0 {
			out.appendFragment(f.Start, f.End, seqs)
		}
	}
	return out.indexed()
}

// CoversSpan reports whether the fragments whose visible sequence number
// (as Covering computes it at readSeq) is above minSeq together cover every
// key in [start, last] — the inclusive range of a segment's keys. A
// segment all of whose versions are older than minSeq is then entirely
// deleted for readers at readSeq.
func (l *List) CoversSpan(start, last []byte, minSeq, readSeq uint64) bool {
	return CoverSpan([]*List{l}, start, last, minSeq, readSeq)
}

// CoverSpan is CoversSpan for the union of lists, without building it
// (Merge): from start, it moves to the farthest key the fragments of any
// list that contain the current key reach without a gap, until it passes
// last or finds a key none covers. A list's fragments are walked at most
// once, and each move costs a binary search per list, so the work is
// bounded by the fragments that lie in [start, last], not by all of
// them: a compaction pick asks it, holding the DB's mutex, for every
// segment below range tombstones, which may number in the hundreds of
// thousands.
func CoverSpan(lists []*List, start, last []byte, minSeq, readSeq uint64) bool {
	key := start
	for {
		var next []byte // the farthest end reached from key
		for _, l := range lists {
			if end := l.reach(key, last, minSeq, readSeq); end != nil && (next == nil || bytes.Compare(end, next) > 0) {
				next = end
			}
		}
		if next == nil {
			return false // no list covers key
		}
		if bytes.Compare(last, next) < 0 {
			return true
		}
		key = next
	}
}

// reach returns the end of the run of contiguous fragments, from the one
// that contains key, whose visible sequence number at readSeq is above
// minSeq (CoversSpan), or nil if the fragment that contains key, if any,
// is not one of them. It stops at the first end past last: CoverSpan
// needs no more.
func (l *List) reach(key, last []byte, minSeq, readSeq uint64) []byte {
	i := l.Find(key)
	if i < 0 {
		return nil
	}
	var end []byte
	for ; i < len(l.frags); i++ {
		f := &l.frags[i]
		if f.Visible(readSeq) <= minSeq || end != nil && !bytes.Equal(f.Start, end) {
			break // not visible, or a gap before f
		}
		if end = f.End; bytes.Compare(last, end) < 0 {
			break
		}
	}
	return end
}

// Cursor answers "which fragment contains key" for a run of nearby keys,
// as a scan asks it: the answer for one key holds for every key in the same
// span (a fragment, or the gap between two), so only a key outside the last
// span costs a binary search. The zero Cursor over a nil List answers nil.
type Cursor struct {
	l      *List
	known  bool
	lo, hi []byte // the last span, [lo, hi); nil lo: no lower end, nil hi: no upper end
	frag   *Fragment
	idx    int // of frag in the list, when frag is set
}

// NewCursor returns a cursor over l.
func NewCursor(l *List) Cursor { return Cursor{l: l} }

// At returns the fragment that contains key, or nil.
func (c *Cursor) At(key []byte) *Fragment {
	if c.known && (c.lo == nil || bytes.Compare(c.lo, key) <= 0) && (c.hi == nil || bytes.Compare(key, c.hi) < 0) {
		return c.frag
	}
	frags := c.l.Fragments()
	j := 0
	if c.l != nil {
		j = c.l.firstEndAbove(key)
	}
	c.known, c.frag, c.lo, c.hi = true, nil, nil, nil
	switch {
	case j < len(frags) && bytes.Compare(frags[j].Start, key) <= 0:
		c.frag, c.lo, c.hi, c.idx = &frags[j], frags[j].Start, frags[j].End, j
	default: // the gap before fragment j
		if j > 0 {
			c.lo = frags[j-1].End
		}
		if j < len(frags) {
			c.hi = frags[j].Start
		}
	}
	return c.frag
}

// Add returns the list with t added, fragmented; l itself is unchanged, so
// readers holding it are undisturbed. It is Union with a one-tombstone
// list: O(len(l)).
func (l *List) Add(t Tombstone) *List {
	if bytes.Compare(t.Start, t.End) >= 0 {
		return l
	}
	one := &List{}
	one.appendFragment(t.Start, t.End, []uint64{t.Seq})
	return Union(l, one.indexed())
}

// Union returns the fragmented union of a and b, in one pass over both:
// O(len(a)+len(b)) fragments. Neither list changes; the result shares
// their keys and, where a fragment is not split or merged, their sequence
// number slices.
func Union(a, b *List) *List {
	switch {
	case b.Empty():
		return a
	case a.Empty():
		return b
	}
	fa, fb := a.frags, b.frags
	out := &List{frags: make([]Fragment, 0, len(fa)+len(fb))}
	i, j := 0, 0
	as, bs := fa[0].Start, fb[0].Start // where the unconsumed part of fa[i], fb[j] begins
	for i < len(fa) && j < len(fb) {
		x, y := &fa[i], &fb[j]
		switch {
		case bytes.Compare(x.End, bs) <= 0: // x ends before y begins
			out.appendFragment(as, x.End, x.Seqs)
			if i++; i < len(fa) {
				as = fa[i].Start
			}
			continue
		case bytes.Compare(y.End, as) <= 0:
			out.appendFragment(bs, y.End, y.Seqs)
			if j++; j < len(fb) {
				bs = fb[j].Start
			}
			continue
		}
		// x and y overlap: first the part of the one that begins earlier.
		switch c := bytes.Compare(as, bs); {
		case c < 0:
			out.appendFragment(as, bs, x.Seqs)
			as = bs
		case c > 0:
			out.appendFragment(bs, as, y.Seqs)
			bs = as
		}
		end := x.End
		if bytes.Compare(y.End, end) < 0 {
			end = y.End
		}
		out.appendFragment(as, end, unionSeqs(x.Seqs, y.Seqs))
		if bytes.Equal(x.End, end) {
			if i++; i < len(fa) {
				as = fa[i].Start
			}
		} else {
			as = end
		}
		if bytes.Equal(y.End, end) {
			if j++; j < len(fb) {
				bs = fb[j].Start
			}
		} else {
			bs = end
		}
	}
	for ; i < len(fa); i++ {
		out.appendFragment(as, fa[i].End, fa[i].Seqs)
		if i+1 < len(fa) {
			as = fa[i+1].Start
		}
	}
	for ; j < len(fb); j++ {
		out.appendFragment(bs, fb[j].End, fb[j].Seqs)
		if j+1 < len(fb) {
			bs = fb[j+1].Start
		}
	}
	return out.indexed()
}

// unionSeqs merges two descending, duplicate-free lists into a new one.
func unionSeqs(a, b []uint64) []uint64 {
	out := make([]uint64, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0] > b[0]:
			out, a = append(out, a[0]), a[1:]
		case a[0] < b[0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

// BuildNewest fragments the tombstones of one batch, keeping for each
// fragment only the newest sequence number that covers it. That loses
// nothing, because no reader ever sees part of a batch: a read's
// sequence number is never between two of one batch's (commits publish
// whole groups of batches, and recovery replays whole batches), so for
// every reader the newest tombstone covering a key is either the newest of
// the batch's or none of them. It keeps the slices of ts and takes
// O(n log n), however the tombstones overlap — where keeping every
// sequence number can make n nested ones n² pieces.
func BuildNewest(ts []Tombstone) *List {
	live := make([]Tombstone, 0, len(ts))
	edges := make([][]byte, 0, 2*len(ts))
	for _, t := range ts {
		if bytes.Compare(t.Start, t.End) < 0 {
			live = append(live, t)
			edges = append(edges, t.Start, t.End)
		}
	}
	l := &List{}
	if len(live) == 0 {
		return l.indexed()
	}
	slices.SortFunc(live, func(a, b Tombstone) int { return bytes.Compare(a.Start, b.Start) })
	slices.SortFunc(edges, bytes.Compare)
	edges = slices.CompactFunc(edges, bytes.Equal)
	var active newestHeap // tombstones begun; those that ended are popped lazily
	next := 0
	for i := 0; i+1 < len(edges); i++ {
		lo, hi := edges[i], edges[i+1]
		for next < len(live) && bytes.Compare(live[next].Start, lo) <= 0 {
			active.push(live[next])
			next++
		}
		for len(active) > 0 && bytes.Compare(active[0].End, lo) <= 0 {
			active.pop()
		}
		if len(active) > 0 {
			l.appendFragment(lo, hi, []uint64{active[0].Seq})
		}
	}
	return l.indexed()
}

// newestHeap is a max-heap of tombstones by sequence number.
type newestHeap []Tombstone

func (h *newestHeap) push(t Tombstone) {
	*h = append(*h, t)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].Seq >= s[i].Seq {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *newestHeap) pop() {
	s := *h
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s[c+1].Seq > s[c].Seq {
			c++
		}
		if s[i].Seq >= s[c].Seq {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
}

// fragmentOverhead approximates the memory of a Fragment besides its keys
// and sequence numbers: the struct, its slice headers and its ends entry.
const fragmentOverhead = 80

// Bytes approximates the memory the list itself holds: its fragments and
// their sequence numbers, not their keys, which it shares with the
// tombstones it was built from (and touching fragments with each other).
// The holder of those keys counts them where it copies them: a memtable
// charges its size for each tombstone's bounds when it copies them, and
// for its lists' Bytes. It is counted once, when the list is built, so a
// memtable that sums its lists at every batch does not walk their
// fragments again.
func (l *List) Bytes() int {
	if l == nil {
		return 0
	}
	return l.bytes
}

// Reach walks from the fragment At last returned through the fragments
// that touch it, forward (each starting where the last ended) or backward,
// for as long as each holds a tombstone visible at readSeq, and at most
// limit of them. For each fragment it calls fn with the far bound reached
// (its End forward, its Start backward) and the oldest of the visible
// tombstones so far: every key between the first fragment and the bound
// is deleted for versions older than that.
func (c *Cursor) Reach(readSeq uint64, forward bool, limit int, fn func(bound []byte, oldest uint64)) {
	if c.frag == nil {
		return
	}
	frags := c.l.Fragments()
	oldest := uint64(1<<64 - 1)
	for i, prev := c.idx, (*Fragment)(nil); i >= 0 && i < len(frags) && limit > 0; limit-- {
		f := &frags[i]
		if prev != nil && (forward && !bytes.Equal(prev.End, f.Start) || !forward && !bytes.Equal(f.End, prev.Start)) {
			return // a gap
		}
		v := f.Visible(readSeq)
		if v == 0 {
			return
		}
		oldest = min(oldest, v)
		if forward {
			fn(f.End, oldest)
			i++
		} else {
			fn(f.Start, oldest)
			i--
		}
		prev = f
	}
}
