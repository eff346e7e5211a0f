package bloomkv

import (
	"bytes"
	"container/list"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
)

// Conflict detection for read-write transactions (txn.go), after Badger's
// oracle: a transaction records what it read (keys, and the key ranges its
// iterators traversed); the DB keeps, for as long as an open transaction
// may need it, what every commit group since then wrote; and the commit
// leader, before it gives a transaction's batch a sequence number, checks
// the transaction's reads against the writes committed after its read
// sequence. The check and the sequence assignment happen under commit
// leadership, so no write can slip in between them. Most of the check
// happens before, outside it (prevalidate): the committing goroutine checks
// the groups recorded so far, and the leader only those recorded since.
//
// The history holds the written keys themselves, not fingerprints: a
// fingerprint answers "was this key written?" but not "was any key in this
// range written?", which a scan's read set asks.

// txnHistoryLimit caps the bytes the conflict history may hold (keys and
// their bookkeeping). Past it, the oldest groups are dropped, and a
// transaction that began before a dropped group fails its commit with
// ErrConflict: it cannot be checked, and a wrong "no conflict" is not an
// answer the store gives. A variable so that tests can lower it.
var txnHistoryLimit = 64 << 20

// txnState is the DB's record of open read-write transactions and of the
// writes they may conflict with.
type txnState struct {
	// active counts the open read-write transactions. The commit leader
	// loads it after it has published a group (publishLocked) and records
	// the group's keys only if it is non-zero, so plain writes pay one
	// atomic load while no transaction is open. A transaction adds itself
	// before it loads its read sequence. Either the leader's load sees the
	// transaction, or the transaction's load of visibleSeq sees the group
	// (both are sequentially consistent atomics): a group the transaction
	// cannot see is always recorded.
	active atomic.Int32

	// mu guards the fields below. It is taken by the commit leader (with
	// no other lock held) and by NewTransaction, which takes db.mu inside
	// it (NewSnapshot): never take mu while holding db.mu.
	mu sync.Mutex
	// open holds the read sequences (uint64) of the open read-write
	// transactions, oldest first: they are registered under mu, in the
	// order they load visibleSeq, which only grows.
	open list.List
	// history is the writes of the commit groups newer than the oldest
	// open transaction's read sequence, oldest first.
	history []*writeSet
	dropped int // groups dropped from the front of history's array (dropLocked)
	bytes   int // memory held by history, as writeSet.size counts it
	// lost is the newest group dropped for txnHistoryLimit: a transaction
	// whose read sequence is below it cannot be checked.
	lost uint64
	// leaderChecks counts the recorded groups the commit leader checked
	// transactions against (validateLocked): its work, which tests bound.
	leaderChecks int

	// idx indexes history across groups for prevalidate. Its own lock is
	// taken without mu, or inside it (trimLocked), never the other way.
	idx historyIndex
}

// keySpan is a key range [start, end); a nil end is unbounded above, and
// an empty start is the smallest key. A point read of k is [k, k+"\x00").
type keySpan struct{ start, end []byte }

// writeSet is what one commit group wrote: point keys (puts and deletes)
// and range deletions.
type writeSet struct {
	seq  uint64   // the group's last sequence number
	keys []byte   // the point keys, concatenated
	ends []uint32 // the end of each key in keys
	// runs index the first indexed point keys (by their place in ends)
	// in a few runs, each sorted by key, each under half the length of
	// the one before it: a transaction that read fewer keys than were
	// written asks each run by binary search (conflicts) instead of
	// checking every key written, which made a commit group of g
	// transactions O(g²) for its leader, as each was checked against the
	// writes of those before it (2 s at g=10^4). Built by the first check
	// that needs them, and extended by later ones: a write set no
	// transaction checks costs nothing more. The commit leader indexes
	// the group it builds (admit) as it checks each transaction against
	// it; once the set is in the history (sealed), transactions check it
	// concurrently, outside txnState.mu (prevalidate), and the first to
	// need the index builds the rest of it, once (indexOnce).
	runs    [][]uint32
	indexed int
	ranges  []keySpan
	// rangeRuns index the first rangesIndexed range deletions as runs
	// index the point keys, for the same reason: a transaction that read
	// fewer spans than were deleted asks each run by binary search
	// instead of checking every range, which made a commit group of g
	// transactions that each deleted a range O(g²) for its leader (4 s
	// at g=2·10^4), and a commit after a batch of r range deletions O(r).
	rangeRuns     []rangeRun
	rangesIndexed int
	// probes counts the binary searches the checks against this set have
	// made (of a key in the reads, a read in a run, a range in the reads):
	// their work, which tests bound.
	probes atomic.Int64

	sealed    bool // in the history: complete, and read concurrently
	indexOnce sync.Once
}

// rangeRun is a run of range deletions sorted by start, with maxEnd[i]
// the largest end among spans[:i+1]: the spans that start before a read
// ends are a prefix of the run, and one of them reaches into the read
// exactly when the largest of their ends does. (A range deletion always
// has an end: checkRange refuses an empty one.)
type rangeRun struct {
	spans  []keySpan
	maxEnd [][]byte
}

// writeSetOverhead is what a writeSet costs besides its keys and ranges:
// the struct, and its slot in the history (twice, for the array's
// growth).
const writeSetOverhead = int(unsafe.Sizeof(writeSet{})) + 16

// size is the memory ws holds, counted the same before and after the
// first check indexes it (the history adds and takes back the same
// number): the struct, the keys as allocated, a point key's end and its
// place in a run, a range's span, its copy in a run and its maxEnd.
// Counting the keys' lengths and 64 bytes a set, a history of one-Put
// groups held 2.5 times what it was charged, and so about 160 MiB
// under its 64 MiB cap.
func (ws *writeSet) size() int {
	n := writeSetOverhead + cap(ws.keys) + 4*cap(ws.ends) + 4*len(ws.ends)
	for _, r := range ws.ranges {
		n += 120 + len(r.start) + len(r.end)
	}
	return n
}

func (ws *writeSet) empty() bool { return len(ws.ends) == 0 && len(ws.ranges) == 0 }

// add appends the keys a batch record writes.
func (ws *writeSet) add(rec []byte) {
	// The record was built by Batch, which checked every operation: it
	// decodes without error.
	batch.Decode(rec, "", 0, func(_ uint64, op batch.Op) {
		if op.Kind == base.KindRangeDelete {
			ws.ranges = append(ws.ranges, keySpan{bytes.Clone(op.Key), bytes.Clone(op.Value)})
			return
		}
		ws.keys = append(ws.keys, op.Key...)
		ws.ends = append(ws.ends, uint32(len(ws.keys)))
	})
}

// index adds the keys added since the last call to runs, as a new run
// merged with the runs before it while it holds at least half as many
// keys as the one before: O(log n) a key, amortized.
func (ws *writeSet) index() {
	if ws.indexed == len(ws.ends) {
		return
	}
	run := make([]uint32, 0, len(ws.ends)-ws.indexed)
	for i := ws.indexed; i < len(ws.ends); i++ {
		run = append(run, uint32(i))
	}
	ws.indexed = len(ws.ends)
	slices.SortFunc(run, ws.compare)
	ws.runs = append(ws.runs, run)
	for n := len(ws.runs); n >= 2 && 2*len(ws.runs[n-1]) >= len(ws.runs[n-2]); n-- {
		ws.runs = append(ws.runs[:n-2], mergeRuns(ws.runs[n-2], ws.runs[n-1], ws.compare))
	}
}

// indexRanges adds the range deletions added since the last call to
// rangeRuns, as index does the point keys: O(log n) a range, amortized.
func (ws *writeSet) indexRanges() {
	if ws.rangesIndexed == len(ws.ranges) {
		return
	}
	byStart := func(a, b keySpan) int { return bytes.Compare(a.start, b.start) }
	spans := slices.Clone(ws.ranges[ws.rangesIndexed:])
	ws.rangesIndexed = len(ws.ranges)
	slices.SortFunc(spans, byStart)
	ws.rangeRuns = append(ws.rangeRuns, newRangeRun(spans))
	for n := len(ws.rangeRuns); n >= 2 && 2*len(ws.rangeRuns[n-1].spans) >= len(ws.rangeRuns[n-2].spans); n-- {
		merged := mergeRuns(ws.rangeRuns[n-2].spans, ws.rangeRuns[n-1].spans, byStart)
		ws.rangeRuns = append(ws.rangeRuns[:n-2], newRangeRun(merged))
	}
}

// newRangeRun returns the run of spans, sorted by start.
func newRangeRun(spans []keySpan) rangeRun {
	r := rangeRun{spans: spans, maxEnd: make([][]byte, len(spans))}
	for i, s := range spans {
		r.maxEnd[i] = s.end
		if i > 0 && bytes.Compare(r.maxEnd[i-1], s.end) > 0 {
			r.maxEnd[i] = r.maxEnd[i-1]
		}
	}
	return r
}

// overlaps reports whether a span of the run meets read: one starts
// before read ends and ends after it starts.
func (r *rangeRun) overlaps(read keySpan) bool {
	n := len(r.spans) // the spans starting before read ends
	if read.end != nil {
		n, _ = slices.BinarySearchFunc(r.spans, read.end, func(s keySpan, end []byte) int {
			if bytes.Compare(s.start, end) < 0 {
				return -1
			}
			return 1
		})
	}
	return n > 0 && bytes.Compare(r.maxEnd[n-1], read.start) > 0
}

// key returns point key i.
func (ws *writeSet) key(i uint32) []byte {
	start := uint32(0)
	if i > 0 {
		start = ws.ends[i-1]
	}
	return ws.keys[start:ws.ends[i]]
}

func (ws *writeSet) compare(i, j uint32) int { return bytes.Compare(ws.key(i), ws.key(j)) }

// mergeRuns returns the runs a and b, each sorted by cmp, merged into
// one (a's element first among equals).
func mergeRuns[T any](a, b []T, cmp func(T, T) int) []T {
	out := make([]T, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if cmp(a[0], b[0]) <= 0 {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

// conflicts reports whether ws wrote anything in reads (sorted, disjoint
// spans: mergeSpans): each key and range looked up in reads, or, where
// reads are fewer, each read looked up in the runs of keys and of ranges.
// A set being built is checked by the commit leader alone; a sealed one
// by any number of transactions at once, each after the one index build.
func (ws *writeSet) conflicts(reads []keySpan) bool {
	if ws.sealed {
		ws.indexOnce.Do(func() {
			ws.index()
			ws.indexRanges()
		})
	}
	// Probes are counted here and added once: concurrent checks of a
	// sealed set would otherwise write its counter's line at every probe.
	var probes int64
	defer func() { ws.probes.Add(probes) }()
	scan := len(ws.ends) <= len(reads)
	if !scan {
		ws.index()
		scan = len(ws.ends) <= len(reads)*len(ws.runs)
	}
	if scan {
		start := uint32(0)
		for _, end := range ws.ends {
			probes++
			if spansContain(reads, ws.keys[start:end]) {
				return true
			}
			start = end
		}
	} else {
		for _, run := range ws.runs {
			for _, r := range reads {
				probes++
				// The first key at or after the read's start is the only
				// candidate.
				i, _ := slices.BinarySearchFunc(run, r.start, func(k uint32, start []byte) int {
					return bytes.Compare(ws.key(k), start)
				})
				if i < len(run) && (r.end == nil || bytes.Compare(ws.key(run[i]), r.end) < 0) {
					return true
				}
			}
		}
	}
	return ws.rangesMeet(reads, &probes)
}

// rangesMeet reports whether a range deletion of ws meets reads, as
// conflicts looks up its keys, adding its probes to *probes.
func (ws *writeSet) rangesMeet(reads []keySpan, probes *int64) bool {
	scan := len(ws.ranges) <= len(reads)
	if !scan {
		ws.indexRanges()
		scan = len(ws.ranges) <= len(reads)*len(ws.rangeRuns)
	}
	if scan {
		for _, r := range ws.ranges {
			*probes++
			if spansOverlap(reads, r) {
				return true
			}
		}
		return false
	}
	for i := range ws.rangeRuns {
		for _, r := range reads {
			*probes++
			if ws.rangeRuns[i].overlaps(r) {
				return true
			}
		}
	}
	return false
}

// txnCheck is what the commit leader needs to validate a transaction.
type txnCheck struct {
	readSeq uint64
	reads   []keySpan // sorted and disjoint
}

// admit validates the transactions of a commit group, in order, against
// the history and against the requests of the group before them (which
// are newer than any open transaction's read sequence). A request that
// fails gets ErrConflict in r.err and is not written. It returns the
// writes of the admitted requests, for record, or nil if the group holds
// no transaction (the common case, which costs nothing here).
//
// seq is the sequence number the group's first batch will get: admit
// stamps the admitted batches as writeGroup will, so that they decode.
// Only the commit leader calls it.
func (ts *txnState) admit(group []*commitReq, seq uint64) *writeSet {
	has := false
	for _, r := range group {
		has = has || r.check != nil
	}
	if !has {
		return nil
	}
	ws := &writeSet{}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, r := range group {
		if r.check != nil {
			if err := ts.validateLocked(r.check, ws); err != nil {
				r.err = err
				continue
			}
		}
		ws.add(r.b.setSeq(seq))
		seq += uint64(r.b.count)
	}
	return ws
}

// validateLocked checks one transaction's reads against every write
// committed after its read sequence: the history, then the group so far.
// After prevalidate the history part is the groups recorded since it.
func (ts *txnState) validateLocked(c *txnCheck, group *writeSet) error {
	if len(c.reads) == 0 {
		return nil // blind writes: nothing read can have changed
	}
	if c.readSeq < ts.lost {
		return errHistoryLost()
	}
	for _, ws := range ts.history[ts.after(c.readSeq):] {
		ts.leaderChecks++
		if ws.conflicts(c.reads) {
			return errReadWritten
		}
	}
	if group.conflicts(c.reads) {
		return errReadWritten
	}
	return nil
}

// prevalidate checks a transaction about to commit against the groups
// the history holds now, outside commit leadership and outside ts.mu, and
// moves c.readSeq up to the last of them: the leader then checks only the
// groups recorded since (validateLocked), usually none or a few. Checked
// by the leader alone, a transaction open while 10^5 single-write groups
// committed held every writer 4-15 ms at its commit, and the check grows
// with the groups, up to txnHistoryLimit.
//
// Sound because every group after an open transaction's read sequence is
// recorded (txnState.active), in sequence order, and a recorded set never
// changes; the groups it checked stay checked whatever is dropped after.
//
// Past historyIndexMin groups it asks the index (historyIndex) for the
// groups it holds instead of checking each, so that commits that each
// span many groups cost about what their reads do, not the groups.
func (ts *txnState) prevalidate(c *txnCheck) error {
	if len(c.reads) == 0 {
		return nil
	}
	ts.mu.Lock()
	if c.readSeq < ts.lost {
		ts.mu.Unlock()
		return errHistoryLost()
	}
	hist := ts.history // dropLocked leaves the array's entries alone
	h := hist[ts.after(c.readSeq):]
	floor := c.readSeq
	if e := ts.open.Front(); e != nil {
		floor = min(floor, e.Value.(uint64)) // the oldest open transaction
	}
	floor = max(floor, ts.lost) // those older cannot commit
	ts.mu.Unlock()
	rest := h
	if len(h) >= historyIndexMin {
		levels, next := ts.idx.levelsFor(hist, floor)
		for _, l := range levels {
			if l.meets(c.reads, c.readSeq) {
				return errReadWritten
			}
		}
		rest = h[newerThan(h, next):]
		ts.idx.checked.Add(int64(len(rest)))
	}
	for _, ws := range rest {
		if ws.conflicts(c.reads) {
			return errReadWritten
		}
	}
	if len(rest) < len(h) {
		// The index leaves out writes at or below the floor of its last
		// extension, which a drop for txnHistoryLimit may have raised
		// past this transaction's read sequence since the check above;
		// then the transaction fails as if it had been dropped before.
		ts.mu.Lock()
		lost := ts.lost
		ts.mu.Unlock()
		if c.readSeq < lost {
			return errHistoryLost()
		}
	}
	if len(h) > 0 {
		c.readSeq = h[len(h)-1].seq
	}
	return nil
}

// after returns the index of the first group of the history newer than
// seq.
func (ts *txnState) after(seq uint64) int { return newerThan(ts.history, seq) }

// newerThan returns the index of the first group of hist (recorded
// groups, oldest first) newer than seq.
func newerThan(hist []*writeSet, seq uint64) int {
	i, _ := slices.BinarySearchFunc(hist, seq+1, func(ws *writeSet, seq uint64) int { return compareSeq(ws.seq, seq) })
	return i
}

// errReadWritten is the conflict of a transaction whose read was written.
var errReadWritten = fmt.Errorf("%w: a key it read was written by a commit after it began", ErrConflict)

// errHistoryLost is the conflict of a transaction the history no longer
// covers.
func errHistoryLost() error {
	return fmt.Errorf("%w: the transaction is older than the conflict history kept (%d bytes of keys written since it began)",
		ErrConflict, txnHistoryLimit)
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// record adds a published group's writes (ws, or else those of payloads)
// to the history if a read-write transaction is open. lastSeq is the
// group's last sequence number. Only the commit leader calls it, after
// visibleSeq holds lastSeq: see active.
func (ts *txnState) record(ws *writeSet, payloads [][]byte, lastSeq uint64) {
	if ws == nil && ts.active.Load() == 0 {
		return
	}
	if ws == nil {
		ws = &writeSet{}
		for _, p := range payloads {
			ws.add(p)
		}
	}
	if ws.empty() {
		return
	}
	ws.seq, ws.sealed = lastSeq, true
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.open.Len() == 0 {
		return // the transactions ended meanwhile; none needs it
	}
	ts.history = append(ts.history, ws)
	ts.bytes += ws.size()
	drop := 0
	for ts.bytes > txnHistoryLimit && drop < len(ts.history) {
		ts.lost = ts.history[drop].seq
		ts.bytes -= ts.history[drop].size()
		drop++
	}
	ts.dropLocked(drop)
}

// dropLocked removes the first n groups of the history. It does not
// clear their entries in the array: a transaction may be reading them
// outside ts.mu (prevalidate). The array is copied instead once more
// groups were dropped from it than it holds, so that dropped groups are
// not kept alive long: amortized O(1) a group.
func (ts *txnState) dropLocked(n int) {
	if n == 0 {
		return
	}
	ts.history = ts.history[n:]
	ts.dropped += n
	switch {
	case len(ts.history) == 0:
		ts.history, ts.dropped = nil, 0 // let append start a fresh array
	case ts.dropped > len(ts.history):
		ts.history, ts.dropped = slices.Clone(ts.history), 0
	}
}

// trimLocked drops the groups no open transaction needs: those at or
// below the oldest read sequence (all of them when none is open).
func (ts *txnState) trimLocked() {
	if ts.open.Len() == 0 {
		ts.dropLocked(len(ts.history))
		ts.bytes, ts.lost = 0, 0
		ts.idx.reset()
		return
	}
	oldest := ts.open.Front().Value.(uint64)
	n := 0
	for n < len(ts.history) && ts.history[n].seq <= oldest {
		ts.bytes -= ts.history[n].size()
		n++
	}
	ts.dropLocked(n)
}

// txnDels is the union of a transaction's range deletions, as a few
// lists of sorted, disjoint spans, each under twice the length of the one
// after it (a memtable keeps its range tombstones so too). A DeleteRange
// then merges O(log n) spans, amortized, instead of copying and sorting
// all n before it, which made n of them in one transaction O(n²): 10^4
// took 8 s. Neither the lists nor a txnDels change once made (add returns
// a new one), so an iterator keeps the deletions of its moment.
//
// newest holds the same deletions with the order each was made in (the
// transaction's count of writes, pendingWrite.order), in lists of the
// same sizes that keep the newest order over each piece of key space: a
// pending write is deleted if a deletion made after it covers its key. So
// a DeleteRange need not look at the pending writes at all, which cost it
// O(pending): 50 ms a call beside 10^5 of them.
type txnDels struct {
	levels [][]keySpan
	newest [][]orderSpan
}

// orderSpan is a piece of key space, [start, end), and the order of the
// newest range deletion covering it.
type orderSpan struct {
	start, end []byte
	order      uint64
}

func (d txnDels) empty() bool { return len(d.levels) == 0 }

// add returns d with r, the transaction's write number order, added.
func (d txnDels) add(r keySpan, order uint64) txnDels {
	levels := make([][]keySpan, len(d.levels), len(d.levels)+1)
	copy(levels, d.levels)
	levels = append(levels, []keySpan{r})
	newest := make([][]orderSpan, len(d.newest), len(d.newest)+1)
	copy(newest, d.newest)
	newest = append(newest, []orderSpan{{r.start, r.end, order}})
	for n := len(levels); n >= 2 && 2*len(levels[n-1]) >= len(levels[n-2]); n-- {
		levels = append(levels[:n-2], mergeSpans(slices.Concat(levels[n-2], levels[n-1])))
		newest = append(newest[:n-2], mergeNewest(newest[n-2], newest[n-1]))
	}
	return txnDels{levels: levels, newest: newest}
}

// mergeNewest returns the pieces of a and b (each sorted and disjoint)
// with, over each, the newest order either gives it: one pass over their
// bounds, which each list holds in order (start, end, next start, ...).
func mergeNewest(a, b []orderSpan) []orderSpan {
	bounds := make([][]byte, 0, 2*(len(a)+len(b)))
	i, j := 0, 0
	next := func(l []orderSpan, k int) []byte { // the k-th bound of l
		if k%2 == 0 {
			return l[k/2].start
		}
		return l[k/2].end
	}
	for i < 2*len(a) || j < 2*len(b) {
		var k []byte
		switch {
		case j == 2*len(b) || i < 2*len(a) && bytes.Compare(next(a, i), next(b, j)) <= 0:
			k, i = next(a, i), i+1
		default:
			k, j = next(b, j), j+1
		}
		if len(bounds) == 0 || !bytes.Equal(bounds[len(bounds)-1], k) {
			bounds = append(bounds, k)
		}
	}
	out := make([]orderSpan, 0, len(a)+len(b))
	i, j = 0, 0
	for k := 0; k+1 < len(bounds); k++ {
		lo, hi := bounds[k], bounds[k+1]
		for i < len(a) && bytes.Compare(a[i].end, lo) <= 0 {
			i++
		}
		for j < len(b) && bytes.Compare(b[j].end, lo) <= 0 {
			j++
		}
		var order uint64
		if i < len(a) && bytes.Compare(a[i].start, lo) <= 0 {
			order = a[i].order
		}
		if j < len(b) && bytes.Compare(b[j].start, lo) <= 0 {
			order = max(order, b[j].order)
		}
		switch {
		case order == 0:
		case len(out) > 0 && out[len(out)-1].order == order && bytes.Equal(out[len(out)-1].end, lo):
			out[len(out)-1].end = hi
		default:
			out = append(out, orderSpan{lo, hi, order})
		}
	}
	return out
}

// deletes reports whether a deletion of d made after the write numbered
// order covers key.
func (d txnDels) deletes(key []byte, order uint64) bool {
	for _, l := range d.newest {
		// The last piece starting at or before key is the only candidate.
		i, found := slices.BinarySearchFunc(l, key, func(s orderSpan, k []byte) int { return bytes.Compare(s.start, k) })
		if !found {
			i--
		}
		if i >= 0 && bytes.Compare(key, l[i].end) < 0 && l[i].order > order {
			return true
		}
	}
	return false
}

// covering returns a span of d that holds key, or nil. Spans of different
// lists may overlap or touch: a caller that skips past the span returned
// must ask again where it lands.
func (d txnDels) covering(key []byte) *keySpan {
	for _, l := range d.levels {
		if r := spanCovering(l, key); r != nil {
			return r
		}
	}
	return nil
}

// merged returns the union as one list of sorted, disjoint spans.
func (d txnDels) merged() []keySpan { return mergeSpans(slices.Concat(d.levels...)) }

// mergeSpans sorts spans and merges those that overlap or touch, in
// place.
func mergeSpans(spans []keySpan) []keySpan {
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, b keySpan) int { return bytes.Compare(a.start, b.start) })
	out := spans[:1]
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		if last.end == nil || bytes.Compare(s.start, last.end) <= 0 {
			if last.end != nil && (s.end == nil || bytes.Compare(s.end, last.end) > 0) {
				last.end = s.end
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// spansContain reports whether key lies in one of spans (sorted,
// disjoint).
func spansContain(spans []keySpan, key []byte) bool { return spanCovering(spans, key) != nil }

// spansOverlap reports whether r meets one of spans (sorted, disjoint).
func spansOverlap(spans []keySpan, r keySpan) bool {
	// The first span that ends after r starts (ends grow along disjoint
	// sorted spans) is the only candidate.
	i, _ := slices.BinarySearchFunc(spans, r.start, func(s keySpan, k []byte) int {
		if s.end == nil || bytes.Compare(s.end, k) > 0 {
			return 1
		}
		return -1
	})
	return i < len(spans) && (r.end == nil || bytes.Compare(spans[i].start, r.end) < 0)
}

// spanCovering returns the span of spans (sorted, disjoint) that holds
// key, or nil.
func spanCovering(spans []keySpan, key []byte) *keySpan {
	// The first span starting after key: the one before it is the only
	// candidate.
	i, found := slices.BinarySearchFunc(spans, key, func(s keySpan, k []byte) int { return bytes.Compare(s.start, k) })
	if found {
		return &spans[i]
	}
	if i > 0 && (spans[i-1].end == nil || bytes.Compare(key, spans[i-1].end) < 0) {
		return &spans[i-1]
	}
	return nil
}
