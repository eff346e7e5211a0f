package bloomkv

import (
	"bytes"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// historyIndex indexes the conflict history across commit groups, so that
// a transaction open while g groups committed checks its reads against
// a few merged levels instead of each group in turn. Checked one by one,
// a commit after g single-write groups cost O(g), and t transactions that
// were open together and then committed one after another O(t²) between
// them, each checking the groups of those before it: 16,000 took 4.3 s of
// CPU. With the index a check costs O(r log² w) for r read spans and w
// keys written since the oldest open transaction began, and each group is
// indexed once, O(log g) a key amortized, by the first check that needs
// it (prevalidate), outside the commit leader and txnState.mu.
//
// The levels hold, for each key a group wrote (a put, a delete, or the
// start of a range deletion), the newest group that wrote it, and the
// range deletions fragmented with the newest group deleting each piece.
// A read span [s, e) was written after a read sequence q exactly when a
// key in [s, e) was written after q, or a range deletion after q covers
// s: a deletion meets the span iff it starts in it or covers its start.
type historyIndex struct {
	mu sync.Mutex
	// levels is oldest (and largest) first, each under half the size of
	// the one before it, as the runs of a writeSet. The slice is replaced,
	// never changed, and a level never changes: a check reads the levels
	// of its moment outside mu.
	levels []*historyLevel
	next   atomic.Uint64 // the sequence number of the last group indexed; written under mu
	// checked counts the groups checked one by one (writeSet.conflicts)
	// since the index was last extended. A check asks the index for the
	// groups it holds and checks those after it one by one; the groups
	// not yet indexed are indexed once the checks spent at least that
	// many group checks on them (levelsFor), so that indexing costs no
	// more than the checks it saves, amortized: one commit after g
	// groups checks them one by one, as cheaply as without an index,
	// and many commits index them once.
	checked atomic.Int64
	// bytes is what the levels hold (levelBytes), under mu: capped at
	// indexLimit, past which the index is not extended.
	bytes int
}

// indexLimit caps the bytes the index holds, beside the history's own
// txnHistoryLimit: a quarter of it. Past it the groups not yet indexed
// are checked one by one, as without an index, until the levels shrink
// (dropped once no open transaction needs them) or no transaction is
// open. Levels copy the keys they index, so without a cap the index
// would add about as much memory again as the history holds.
func indexLimit() int { return txnHistoryLimit / 4 }

// levelBytes is what a level holds: its keys, their ends, the tree, and
// the pieces (whose keys are the history's).
func levelBytes(l *historyLevel) int {
	return cap(l.keys) + 4*cap(l.ends) + 8*cap(l.tree) + 56*cap(l.frags)
}

// historyIndexMin is how many recorded groups a check must span before it
// asks the index: fewer, it checks each.
const historyIndexMin = 64

// historyLevel is a merge of consecutive recorded groups.
type historyLevel struct {
	minSeq, maxSeq uint64   // of the groups merged
	keys           []byte   // the keys written, sorted, distinct, concatenated
	ends           []uint32 // the end of each key in keys
	// tree is a max segment tree over the keys' sequence numbers:
	// tree[n+i] is that of key i (n keys), tree[i] the larger of
	// tree[2i] and tree[2i+1]; so the newest write in a run of keys costs
	// O(log n).
	tree  []uint64
	frags []seqSpan // the range deletions: sorted, disjoint pieces
}

// seqSpan is a piece of key space and the newest group that deleted it.
type seqSpan struct {
	keySpan
	seq uint64
}

func (l *historyLevel) size() int { return len(l.ends) + len(l.frags) }

func (l *historyLevel) key(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = l.ends[i-1]
	}
	return l.keys[start:l.ends[i]]
}

func (l *historyLevel) seq(i int) uint64 { return l.tree[len(l.ends)+i] }

// add appends a key, which must sort after the last one, and its
// sequence number (into tree's leaves, which seal builds on).
func (l *historyLevel) add(key []byte, seq uint64) {
	l.keys = append(l.keys, key...)
	l.ends = append(l.ends, uint32(len(l.keys)))
	l.tree = append(l.tree, seq)
}

// seal builds the segment tree over the sequence numbers add appended.
func (l *historyLevel) seal() *historyLevel {
	n := len(l.ends)
	tree := make([]uint64, 2*n)
	copy(tree[n:], l.tree)
	for i := n - 1; i > 0; i-- {
		tree[i] = max(tree[2*i], tree[2*i+1])
	}
	l.tree = tree
	return l
}

// newestIn returns the newest sequence number of keys [lo, hi).
func (l *historyLevel) newestIn(lo, hi int) uint64 {
	var m uint64
	n := len(l.ends)
	for lo, hi = lo+n, hi+n; lo < hi; lo, hi = lo>>1, hi>>1 {
		if lo&1 == 1 {
			m = max(m, l.tree[lo])
			lo++
		}
		if hi&1 == 1 {
			hi--
			m = max(m, l.tree[hi])
		}
	}
	return m
}

// search returns the index of the first key at or after k.
func (l *historyLevel) search(k []byte) int {
	return sort.Search(len(l.ends), func(i int) bool { return bytes.Compare(l.key(i), k) >= 0 })
}

// meets reports whether a group of the level after readSeq wrote a key
// in reads (sorted, disjoint spans: mergeSpans). Where the reads
// outnumber the level's keys and pieces, each of those is looked up in
// the reads; else each read in the level.
func (l *historyLevel) meets(reads []keySpan, readSeq uint64) bool {
	if l.maxSeq <= readSeq {
		return false
	}
	if l.size() < len(reads) {
		for i := range l.ends {
			if l.seq(i) > readSeq && spansContain(reads, l.key(i)) {
				return true
			}
		}
		for _, f := range l.frags {
			if f.seq > readSeq && spansOverlap(reads, f.keySpan) {
				return true
			}
		}
		return false
	}
	for _, r := range reads {
		lo, hi := l.search(r.start), len(l.ends)
		if r.end != nil {
			hi = l.search(r.end)
		}
		if lo < hi && l.newestIn(lo, hi) > readSeq {
			return true
		}
		// The piece that holds the read's start, if any: the first that
		// ends after it.
		j := sort.Search(len(l.frags), func(j int) bool { return bytes.Compare(l.frags[j].end, r.start) > 0 })
		if j < len(l.frags) && bytes.Compare(l.frags[j].start, r.start) <= 0 && l.frags[j].seq > readSeq {
			return true
		}
	}
	return false
}

// levelOf returns the level of recorded groups (consecutive, oldest
// first), leaving out those at or below floor. It only reads them, as
// other checks may at the same time.
func levelOf(groups []*writeSet, floor uint64) *historyLevel {
	type write struct {
		key []byte
		seq uint64
	}
	var writes []write
	pieces := make([][]seqSpan, 0, len(groups))
	l := &historyLevel{}
	for _, ws := range groups {
		if ws.seq <= floor {
			continue
		}
		if l.minSeq == 0 {
			l.minSeq = ws.seq
		}
		l.maxSeq = ws.seq
		start := uint32(0)
		for _, end := range ws.ends {
			writes = append(writes, write{ws.keys[start:end], ws.seq})
			start = end
		}
		if len(ws.ranges) == 0 {
			continue
		}
		// One group's deletions share its sequence number: their union
		// is its pieces. The spans keep the deletions' keys, which
		// writeSet.add copied.
		var ps []seqSpan
		for _, r := range mergeSpans(slices.Clone(ws.ranges)) {
			ps = append(ps, seqSpan{r, ws.seq})
		}
		for _, r := range ws.ranges {
			writes = append(writes, write{r.start, ws.seq})
		}
		pieces = append(pieces, ps)
	}
	// By key, the newest write of each first.
	slices.SortFunc(writes, func(a, b write) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		return compareSeq(b.seq, a.seq)
	})
	for i, w := range writes {
		if i == 0 || !bytes.Equal(w.key, writes[i-1].key) {
			l.add(w.key, w.seq)
		}
	}
	l.frags = unionAll(pieces, floor)
	return l.seal()
}

// unionAll is unionPieces of any number of lists, pairwise in a balanced
// tree.
func unionAll(lists [][]seqSpan, floor uint64) []seqSpan {
	switch len(lists) {
	case 0:
		return nil
	case 1:
		return lists[0]
	}
	h := len(lists) / 2
	return unionPieces(unionAll(lists[:h], floor), unionAll(lists[h:], floor), floor)
}

// mergeLevels merges two levels, a the older, into a new one, leaving out
// what no open transaction can conflict with: writes at or below floor.
func mergeLevels(a, b *historyLevel, floor uint64) *historyLevel {
	l := &historyLevel{minSeq: min(a.minSeq, b.minSeq), maxSeq: max(a.maxSeq, b.maxSeq)}
	l.keys = make([]byte, 0, len(a.keys)+len(b.keys))
	l.ends = make([]uint32, 0, len(a.ends)+len(b.ends))
	l.tree = make([]uint64, 0, len(a.ends)+len(b.ends))
	add := func(k []byte, seq uint64) {
		if seq > floor {
			l.add(k, seq)
		}
	}
	i, j := 0, 0
	for i < len(a.ends) && j < len(b.ends) {
		switch c := bytes.Compare(a.key(i), b.key(j)); {
		case c < 0:
			add(a.key(i), a.seq(i))
			i++
		case c > 0:
			add(b.key(j), b.seq(j))
			j++
		default:
			add(a.key(i), max(a.seq(i), b.seq(j)))
			i, j = i+1, j+1
		}
	}
	for ; i < len(a.ends); i++ {
		add(a.key(i), a.seq(i))
	}
	for ; j < len(b.ends); j++ {
		add(b.key(j), b.seq(j))
	}
	l.frags = unionPieces(a.frags, b.frags, floor)
	return l.seal()
}

// unionPieces returns the union of two lists of sorted, disjoint pieces,
// each piece of key space with the newer of the sequence numbers the two
// give it, leaving out pieces at or below floor.
func unionPieces(a, b []seqSpan, floor uint64) []seqSpan {
	if len(a)+len(b) == 0 {
		return nil
	}
	// Every boundary of either list, in order: a list's own boundaries
	// never decrease along it.
	bounds := make([][]byte, 0, 2*(len(a)+len(b)))
	ai, bi := 0, 0
	bound := func(ps []seqSpan, i int) []byte {
		if i%2 == 0 {
			return ps[i/2].start
		}
		return ps[i/2].end
	}
	for ai < 2*len(a) || bi < 2*len(b) {
		if bi == 2*len(b) || ai < 2*len(a) && bytes.Compare(bound(a, ai), bound(b, bi)) <= 0 {
			bounds = append(bounds, bound(a, ai))
			ai++
		} else {
			bounds = append(bounds, bound(b, bi))
			bi++
		}
	}
	bounds = slices.CompactFunc(bounds, bytes.Equal)
	var out []seqSpan
	ai, bi = 0, 0
	for k := 0; k+1 < len(bounds); k++ {
		lo, hi := bounds[k], bounds[k+1]
		for ai < len(a) && bytes.Compare(a[ai].end, lo) <= 0 {
			ai++
		}
		for bi < len(b) && bytes.Compare(b[bi].end, lo) <= 0 {
			bi++
		}
		var seq uint64
		if ai < len(a) && bytes.Compare(a[ai].start, lo) <= 0 {
			seq = a[ai].seq
		}
		if bi < len(b) && bytes.Compare(b[bi].start, lo) <= 0 {
			seq = max(seq, b[bi].seq)
		}
		if seq <= floor { // a gap, or deleted by nothing any open transaction may conflict with
			continue
		}
		if n := len(out); n > 0 && out[n-1].seq == seq && bytes.Equal(out[n-1].end, lo) {
			out[n-1].end = hi
			continue
		}
		out = append(out, seqSpan{keySpan{lo, hi}, seq})
	}
	return out
}

// levelsFor returns the levels and the sequence number of the last group
// they index, first indexing the groups of hist (the history, oldest
// first) not yet indexed if the checks since the last update spent at
// least what that costs (checked), and dropping the levels of groups at
// or below floor. floor is a read sequence at or below that of every
// open transaction that may still commit: none conflicts with a write at
// or below it.
func (x *historyIndex) levelsFor(hist []*writeSet, floor uint64) ([]*historyLevel, uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	add := hist[newerThan(hist, x.next.Load()):]
	if len(add) == 0 || x.checked.Load() < int64(len(add)) {
		return x.levels, x.next.Load()
	}
	drop, kept := 0, x.bytes
	for drop < len(x.levels) && x.levels[drop].maxSeq <= floor {
		kept -= levelBytes(x.levels[drop])
		drop++
	}
	// What the new groups' level takes at most (levelOf keeps each key
	// once): the keys with an end and a tree entry each, and a range
	// deletion's start as a key and a piece.
	need := kept
	for _, ws := range add {
		need += len(ws.keys) + 12*len(ws.ends)
		for _, r := range ws.ranges {
			need += len(r.start) + 12 + 56
		}
	}
	if need > indexLimit() {
		x.checked.Store(0) // checked one by one until the next try
		return x.levels, x.next.Load()
	}
	levels := slices.Clone(x.levels[drop:]) // checks may be reading x.levels
	// The new groups as one level, sorted at once: a level per group cost
	// several times what checking each group did.
	levels = append(levels, levelOf(add, floor))
	for n := len(levels); n >= 2 && 2*levels[n-1].size() >= levels[n-2].size(); n-- {
		levels = append(levels[:n-2], mergeLevels(levels[n-2], levels[n-1], floor))
	}
	x.levels = levels
	x.bytes = 0
	for _, l := range levels {
		x.bytes += levelBytes(l)
	}
	x.next.Store(add[len(add)-1].seq)
	x.checked.Store(0)
	return levels, x.next.Load()
}

// reset drops the levels: no transaction is open.
func (x *historyIndex) reset() {
	x.mu.Lock()
	x.levels, x.bytes = nil, 0
	x.mu.Unlock()
}
