package bloomkv

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestWriteSetConflictsMatchesModel: a write set answers whether it wrote
// a key in a transaction's read spans exactly as a check of every key and
// range against every span would, whether it looks the keys up in the
// spans or the spans up in its sorted runs (more keys than spans times
// runs), over batches of many sizes, repeated keys, point and range reads
// (unbounded ones included) and range deletions, with checks between the
// batches, so that the runs are built and extended as the keys come.
func TestWriteSetConflictsMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	key := func(i int) []byte { return fmt.Appendf(nil, "k%04d", i) }
	for round := range 300 {
		ws := &writeSet{}
		var written [][]byte
		var ranges []keySpan
		space := 50 + rng.IntN(2000)
		check := func(checks int) {
			for range checks {
				reads := randomReads(rng, space, key)
				in := func(k []byte) bool {
					for _, r := range reads {
						if bytes.Compare(r.start, k) <= 0 && (r.end == nil || bytes.Compare(k, r.end) < 0) {
							return true
						}
					}
					return false
				}
				want := false
				for _, k := range written {
					want = want || in(k)
				}
				for _, d := range ranges {
					for _, r := range reads {
						want = want || (r.end == nil || bytes.Compare(d.start, r.end) < 0) && bytes.Compare(r.start, d.end) < 0
					}
				}
				if got := ws.conflicts(reads); got != want {
					t.Fatalf("round %d: %d keys in %d runs, %d reads: conflicts = %v, want %v", round, len(ws.ends), len(ws.runs), len(reads), got, want)
				}
			}
		}
		for range 1 + rng.IntN(12) {
			b := NewBatch()
			for range rng.IntN([]int{2, 20, 300}[rng.IntN(3)]) {
				k := key(rng.IntN(space))
				if rng.IntN(20) == 0 {
					e := key(rng.IntN(space))
					b.DeleteRange(k, e)
					if bytes.Compare(k, e) < 0 {
						ranges = append(ranges, keySpan{k, e})
					}
					continue
				}
				b.Put(k, nil)
				written = append(written, k)
			}
			if b.count > 0 {
				ws.add(b.setSeq(1))
			}
			check(3) // the keys so far indexed, the next ones added to them
		}
		check(20)
		ws.index()
		for n := 1; n < len(ws.runs); n++ {
			if len(ws.runs[n]) >= len(ws.runs[n-1]) {
				t.Fatalf("round %d: run %d holds %d keys, the one before %d", round, n, len(ws.runs[n]), len(ws.runs[n-1]))
			}
		}
	}
}

// TestRangeDeletionChecksStayLogarithmic: a transaction's commit check
// looks up its reads in a write set's range deletions by binary search
// (writeSet.rangeRuns) once the ranges outnumber its reads, as it does in
// the point keys. Checking every range made a commit group of g
// transactions that each deleted a range O(g²) for the commit leader (4 s
// at g=2·10^4, with every write of the store waiting), and each commit
// after a batch of r range deletions O(r). It counts the binary searches
// the checks make (writeSet.probes), and that a read inside a range
// deleted since still conflicts.
func TestRangeDeletionChecksStayLogarithmic(t *testing.T) {
	log2 := func(n int) int { return bits.Len(uint(n)) }
	rd := func(i int) ([]byte, []byte) { return fmt.Appendf(nil, "w%08d", i), fmt.Appendf(nil, "w%08dx", i) }

	// One commit group of g transactions, each reading a key of its own
	// and deleting a range; every 512th reads into the range of the one
	// before it.
	const g = 1 << 12
	group := make([]*commitReq, g)
	for i := range group {
		read := fmt.Appendf(nil, "r%08d", i)
		if i%512 == 1 {
			read = fmt.Appendf(nil, "w%08d5", i-1)
		}
		b := NewBatch()
		mustDo(t, b.DeleteRange(rd(i)))
		group[i] = &commitReq{b: b, check: &txnCheck{readSeq: 1, reads: []keySpan{pointSpan(read)}}}
	}
	var ts txnState
	ws := ts.admit(group, 10)
	for i, r := range group {
		if want := i%512 == 1; want != errors.Is(r.err, ErrConflict) {
			t.Fatalf("transaction %d: %v, want a conflict: %v", i, r.err, want)
		}
	}
	t.Logf("a group of %d transactions deleting ranges: %d probes", g, ws.probes.Load())
	if limit := 2 * g * (log2(g) + 1); ws.probes.Load() > int64(limit) {
		t.Errorf("a group of %d transactions deleting ranges: %d probes, want <= %d", g, ws.probes.Load(), limit)
	}

	// A batch of r range deletions, then n transactions that began before
	// it commit; a transaction held open keeps the batch in the history.
	const r, n = 1 << 13, 64
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	hold := db.NewTransaction(true)
	defer hold.Discard()
	txns := make([]*Txn, n)
	for i := range txns {
		txns[i] = db.NewTransaction(true)
		read := fmt.Appendf(nil, "r%08d", i)
		if i%16 == 5 {
			read = fmt.Appendf(nil, "w%08d5", 100*i)
		}
		txns[i].Get(read)
		mustDo(t, txns[i].Put(read, []byte("v")))
	}
	b := NewBatch()
	for i := range r {
		mustDo(t, b.DeleteRange(rd(i)))
	}
	mustDo(t, db.Write(b))
	for i, txn := range txns {
		if err, want := txn.Commit(), i%16 == 5; want != errors.Is(err, ErrConflict) {
			t.Fatalf("transaction %d: %v, want a conflict: %v", i, err, want)
		}
	}
	db.txns.mu.Lock()
	defer db.txns.mu.Unlock()
	var batch *writeSet
	for _, ws := range db.txns.history {
		if len(ws.ranges) == r {
			batch = ws
		}
	}
	if batch == nil {
		t.Fatal("the batch is not in the history")
	}
	t.Logf("%d commits after a batch of %d range deletions: %d probes of it", n, r, batch.probes.Load())
	if limit := 2 * n * (log2(r) + 1); batch.probes.Load() > int64(limit) {
		t.Fatalf("%d commits after a batch of %d range deletions: %d probes of it, want <= %d", n, r, batch.probes.Load(), limit)
	}
}

// TestCommitLeaderChecksOnlyRecentGroups: a transaction open while many
// commit groups went by is checked against them by its own goroutine
// (prevalidate), so the commit leader, whom every writer waits for,
// checks none of them. Checked by the leader, its work grew with the
// groups: 10^5 single-write groups held it 4-15 ms. A single group since
// the transaction began is the edge: the transaction's own check must
// still leave the leader nothing.
func TestCommitLeaderChecksOnlyRecentGroups(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	for _, groups := range []int{1, 2, 20_000} {
		txn := db.NewTransaction(true)
		if _, err := txn.Get([]byte("read")); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		mustDo(t, txn.Put([]byte("written"), []byte("v")))
		for i := range groups {
			mustDo(t, db.Put(fmt.Appendf(nil, "k%06d", i), nil)) // one group each
		}
		before := db.txns.leaderChecks
		mustDo(t, txn.Commit())
		if n := db.txns.leaderChecks - before; n > 0 {
			t.Errorf("the commit leader checked the transaction against %d of the %d groups since it began, want 0", n, groups)
		}
	}
}

// TestConflictAfterPrevalidate: a write to a key a transaction read that
// commits after the transaction's own check (prevalidate) and before its
// batch reaches the commit leader is caught by the leader.
func TestConflictAfterPrevalidate(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	mustDo(t, db.Put([]byte("read"), []byte("0")))
	for _, conflicting := range []bool{false, true} {
		txn := db.NewTransaction(true)
		if _, err := txn.Get([]byte("read")); err != nil {
			t.Fatal(err)
		}
		mustDo(t, db.Put([]byte("other"), []byte("x"))) // checked by prevalidate
		mustDo(t, txn.Put([]byte("written"), []byte("v")))
		key := []byte("unread")
		if conflicting {
			key = []byte("read")
		}
		testHookPrevalidated = func() { mustDo(t, db.Put(key, []byte("1"))) }
		err := txn.Commit()
		testHookPrevalidated = nil
		if conflicting != errors.Is(err, ErrConflict) {
			t.Fatalf("a write to %q between the transaction's check and the leader's: commit returned %v", key, err)
		}
	}
}

// randomReads returns a random read set over keys key(0) to about
// key(space), merged (mergeSpans): one, a few or a hundred spans, each a
// point, a range, or unbounded below or above.
func randomReads(rng *rand.Rand, space int, key func(int) []byte) []keySpan {
	var reads []keySpan
	for range 1 + rng.IntN([]int{1, 4, 100}[rng.IntN(3)]) {
		a := rng.IntN(space + 10)
		switch rng.IntN(4) {
		case 0:
			reads = append(reads, keySpan{key(a), key(a + 1 + rng.IntN(30))})
		case 1:
			if rng.IntN(10) == 0 {
				reads = append(reads, keySpan{[]byte{}, key(a)})
			} else {
				reads = append(reads, keySpan{key(a), nil})
			}
		default:
			reads = append(reads, pointSpan(key(a)))
		}
	}
	return mergeSpans(reads)
}

// TestWriteSetRunsKeepTheirShape: the runs a write set indexes its point
// keys and range deletions in are exactly those of its policy: each
// index call adds one run of the keys (or ranges) added since the last,
// merged with the run before it while it holds at least half as many,
// so that the runs stay few and each key is merged O(log n) times. The
// model check above only compares answers and that runs shrink, which a
// policy merging everything into one run at every call (O(n) a call, and
// a commit group O(g²) for its leader again) or leaving two runs unmerged
// also passes.
func TestWriteSetRunsKeepTheirShape(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 2))
	// model returns the run lengths after adding a run of n to lens.
	model := func(lens []int, n int) []int {
		lens = append(lens, n)
		for k := len(lens); k >= 2 && 2*lens[k-1] >= lens[k-2]; k-- {
			lens = append(lens[:k-2], lens[k-2]+lens[k-1])
		}
		return lens
	}
	for round := range 50 {
		ws := &writeSet{}
		var keyRuns, rangeRuns []int
		next := 0
		for step := range 40 {
			puts, dels := rng.IntN([]int{3, 20, 200}[rng.IntN(3)]), rng.IntN([]int{2, 10, 100}[rng.IntN(3)])
			b := NewBatch()
			for range puts {
				mustDo(t, b.Put(fmt.Appendf(nil, "k%06d", rng.IntN(1000)), nil))
			}
			for range dels {
				a := rng.IntN(1000)
				mustDo(t, b.DeleteRange(fmt.Appendf(nil, "k%06d", a), fmt.Appendf(nil, "k%06d", a+1+rng.IntN(5))))
			}
			if b.count == 0 {
				continue
			}
			ws.add(b.setSeq(uint64(next + 1)))
			next += int(b.count)
			ws.index()
			ws.indexRanges()
			if puts > 0 {
				keyRuns = model(keyRuns, puts)
			}
			if dels > 0 {
				rangeRuns = model(rangeRuns, dels)
			}
			var got []int
			for _, r := range ws.runs {
				got = append(got, len(r))
			}
			if !slices.Equal(got, keyRuns) {
				t.Fatalf("round %d, step %d: key runs of %v, want %v", round, step, got, keyRuns)
			}
			got = got[:0]
			for _, r := range ws.rangeRuns {
				got = append(got, len(r.spans))
				if len(r.maxEnd) != len(r.spans) {
					t.Fatalf("round %d, step %d: a range run of %d spans has %d maxEnds", round, step, len(r.spans), len(r.maxEnd))
				}
			}
			if !slices.Equal(got, rangeRuns) {
				t.Fatalf("round %d, step %d: range runs of %v, want %v", round, step, got, rangeRuns)
			}
		}
	}
}

// TestHistoryLimitDropsOnlyPastIt: the history drops its oldest groups
// only once it holds more than txnHistoryLimit, not at it, and marks as
// lost exactly the newest group it dropped: a transaction that began
// after that group still commits, one that began before it fails. One
// that began between the dropped group and the next failed when the mark
// was the next group's, which no test with its transactions beginning
// after every dropped group noticed.
func TestHistoryLimitDropsOnlyPastIt(t *testing.T) {
	defer func(n int) { txnHistoryLimit = n }(txnHistoryLimit)
	group := func(seq uint64) *writeSet {
		ws := &writeSet{}
		b := NewBatch()
		mustDo(t, b.Put(fmt.Appendf(nil, "k%03d", seq), nil))
		ws.add(b.setSeq(seq))
		return ws
	}
	size := group(1).size()
	txnHistoryLimit = 3 * size
	var ts txnState
	ts.active.Store(1)
	ts.open.PushBack(uint64(0)) // a transaction open since before them all
	reads := []keySpan{pointSpan([]byte("unwritten"))}
	for seq := uint64(1); seq <= 3; seq++ {
		ts.record(group(seq), nil, seq)
	}
	if ts.lost != 0 || len(ts.history) != 3 || ts.bytes != txnHistoryLimit {
		t.Fatalf("3 groups at the limit: lost %d, %d groups, %d bytes (limit %d), want none lost", ts.lost, len(ts.history), ts.bytes, txnHistoryLimit)
	}
	ts.record(group(4), nil, 4)
	if ts.lost != 1 || len(ts.history) != 3 || ts.bytes != txnHistoryLimit {
		t.Fatalf("a 4th group past the limit: lost %d, %d groups, %d bytes (limit %d), want group 1 lost", ts.lost, len(ts.history), ts.bytes, txnHistoryLimit)
	}
	for readSeq := uint64(0); readSeq <= 4; readSeq++ {
		c := &txnCheck{readSeq: readSeq, reads: reads}
		err := ts.prevalidate(c)
		if lost := readSeq < 1; lost != errors.Is(err, ErrConflict) {
			t.Fatalf("a transaction that began at %d, group 1 dropped: %v, want a conflict: %v", readSeq, err, lost)
		}
		if err == nil && c.readSeq != 4 {
			t.Fatalf("a transaction that began at %d checked up to %d, want 4", readSeq, c.readSeq)
		}
	}

	// Groups of different sizes: what a drop takes back is the dropped
	// group's own size, so that the count stays what the history holds.
	big := &writeSet{}
	b := NewBatch()
	for i := range 10 {
		mustDo(t, b.Put(fmt.Appendf(nil, "big%03d", i), nil))
	}
	big.add(b.setSeq(1))
	txnHistoryLimit = big.size() + size
	var uneven txnState
	uneven.active.Store(1)
	uneven.open.PushBack(uint64(0))
	uneven.record(big, nil, 10)
	for seq := uint64(11); seq <= 13; seq++ {
		uneven.record(group(seq), nil, seq)
		held := 0
		for _, ws := range uneven.history {
			held += ws.size()
		}
		if uneven.bytes != held || held > txnHistoryLimit {
			t.Fatalf("after group %d: %d bytes counted for %d groups of %d bytes (limit %d)", seq, uneven.bytes, len(uneven.history), held, txnHistoryLimit)
		}
	}
}

// TestSealedWriteSetCheckedConcurrently: a write set in the history is
// checked by many committing transactions at once, outside any lock, so
// the first check builds its whole index (its runs of keys and of
// ranges) once, and every check after only reads it. A check that built
// the runs only as it needed them (a scan needs none) left the index to
// be extended by concurrent checks at once: a data race that answers
// stayed right through, as long as the checks came one at a time.
func TestSealedWriteSetCheckedConcurrently(t *testing.T) {
	ws := &writeSet{}
	b := NewBatch()
	for i := range 500 {
		mustDo(t, b.Put(fmt.Appendf(nil, "k%04d", 2*i), nil)) // even keys
	}
	for i := range 100 {
		mustDo(t, b.DeleteRange(fmt.Appendf(nil, "r%04d", 10*i), fmt.Appendf(nil, "r%04d", 10*i+5)))
	}
	ws.add(b.setSeq(1))
	ws.seq, ws.sealed = uint64(b.count), true
	// The first check reads more spans than were written, so it scans
	// what was written and needs no index.
	var many []keySpan
	for i := range 1000 {
		many = append(many, pointSpan(fmt.Appendf(nil, "a%04d", i)))
	}
	if ws.conflicts(many) {
		t.Fatal("reads of unwritten keys conflict")
	}
	if ws.indexed != len(ws.ends) || ws.rangesIndexed != len(ws.ranges) {
		t.Fatalf("after the first check of a sealed set: %d of %d keys and %d of %d ranges indexed, want all",
			ws.indexed, len(ws.ends), ws.rangesIndexed, len(ws.ranges))
	}
	// Then checks of a read each, at once: each looks its read up in the
	// runs.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := g*200 + i
				k := fmt.Appendf(nil, "k%04d", n%1000)
				if got, want := ws.conflicts([]keySpan{pointSpan(k)}), n%2 == 0; got != want {
					errs <- fmt.Errorf("read of %s: conflict %v, want %v", k, got, want)
					return
				}
				r := fmt.Appendf(nil, "r%04d", n%1000)
				if got, want := ws.conflicts([]keySpan{pointSpan(r)}), n%10 < 5; got != want {
					errs <- fmt.Errorf("read of %s: conflict %v, want %v", r, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
