package bloomkv

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/heapstat"
)

// TestHistoryIndexMatchesGroups: the index answers whether a write after
// a read sequence meets a read set exactly as checking each recorded
// group after it does, with the groups indexed in pieces of many sizes
// (levels merged as they come), writes at or below the floor left out,
// point writes, range deletions (overlapping, within and across groups,
// from the empty key), and point, range and unbounded reads.
func TestHistoryIndexMatchesGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	key := func(i int) []byte { return fmt.Appendf(nil, "k%04d", i) }
	for round := range 100 {
		space := 20 + rng.IntN(500)
		var hist []*writeSet
		var x historyIndex
		seen := make(map[*historyLevel]bool)
		floor := uint64(0)
		seq := uint64(0)
		for range 1 + rng.IntN(40) {
			// A few groups recorded, then the floor rises and the index
			// takes them, or not.
			for range 1 + rng.IntN([]int{1, 5, 60}[rng.IntN(3)]) {
				b := NewBatch()
				for range 1 + rng.IntN([]int{1, 3, 30}[rng.IntN(3)]) {
					k := key(rng.IntN(space))
					if rng.IntN(6) == 0 {
						s := k
						if rng.IntN(10) == 0 {
							s = []byte{}
						}
						mustDo(t, b.DeleteRange(s, key(rng.IntN(space)+1)))
						continue
					}
					mustDo(t, b.Put(k, nil))
				}
				if b.count == 0 {
					continue
				}
				ws := &writeSet{}
				ws.add(b.setSeq(seq + 1))
				seq += uint64(b.count)
				if ws.empty() {
					continue
				}
				ws.seq, ws.sealed = seq, true
				hist = append(hist, ws)
			}
			if rng.IntN(3) == 0 {
				floor += uint64(rng.IntN(int(seq-floor) + 1))
			}
			if rng.IntN(2) == 0 {
				x.checked.Store(1 << 40) // the checks paid for the index
			}
			levels, next := x.levelsFor(hist, floor)
			// A level's size is its keys and pieces, counted here apart
			// from historyLevel.size, which the merge policy uses.
			size := func(l *historyLevel) int { return len(l.ends) + len(l.frags) }
			for n := 1; n < len(levels); n++ {
				if 2*size(levels[n]) >= size(levels[n-1]) && size(levels[n-1]) > 0 {
					t.Fatalf("round %d: level %d holds %d, the one before %d", round, n, size(levels[n]), size(levels[n-1]))
				}
			}
			// A level holds each key once (sorted, distinct) and its
			// pieces sorted and disjoint: a merge that kept a key of
			// both levels twice answered right, at twice the memory.
			// A level never changes once made: each is checked once.
			for n, l := range levels {
				if seen[l] {
					continue
				}
				seen[l] = true
				for i := 1; i < len(l.ends); i++ {
					if bytes.Compare(l.key(i-1), l.key(i)) >= 0 {
						t.Fatalf("round %d: level %d holds %q then %q", round, n, l.key(i-1), l.key(i))
					}
				}
				for i := 1; i < len(l.frags); i++ {
					if bytes.Compare(l.frags[i-1].end, l.frags[i].start) > 0 {
						t.Fatalf("round %d: level %d holds pieces %q and %q", round, n, l.frags[i-1].keySpan, l.frags[i].keySpan)
					}
				}
			}
			for range 20 {
				reads := randomReads(rng, space, key)
				readSeq := floor + uint64(rng.IntN(int(seq-floor)+1))
				want := false
				for _, ws := range hist {
					want = want || ws.seq > readSeq && ws.conflicts(reads)
				}
				got := false
				for _, l := range levels {
					got = got || l.meets(reads, readSeq)
				}
				for _, ws := range hist[newerThan(hist, next):] {
					got = got || ws.seq > readSeq && ws.conflicts(reads)
				}
				if got != want {
					t.Fatalf("round %d: %d groups, %d levels, floor %d, read sequence %d, reads %q: conflict %v, want %v",
						round, len(hist), len(levels), floor, readSeq, reads, got, want)
				}
			}
		}
	}
}

// TestTxnCommitsAfterManyGroupsStayLinear: transactions open together
// that then commit one after another each check the groups the ones
// before them committed through the history index, once it pays, not
// one by one: checked one by one, 32,000 such commits took 17 s of CPU
// between them (O(t²)), now about 0.2 s; the bound is 2 s. Every 1000th
// reads a key written by the one before it and must conflict.
func TestTxnCommitsAfterManyGroupsStayLinear(t *testing.T) {
	const n = 32_000
	db := mustOpen(t, t.TempDir(), &Options{MemtableSize: 64 << 20})
	defer db.Close()
	txns := make([]*Txn, n)
	for i := range txns {
		txns[i] = db.NewTransaction(true)
		read := fmt.Appendf(nil, "r%06d", i)
		if i%1000 == 999 {
			read = fmt.Appendf(nil, "w%06d", i-1)
		}
		if _, err := txns[i].Get(read); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		mustDo(t, txns[i].Put(fmt.Appendf(nil, "w%06d", i), []byte("v")))
	}
	cpuWithin(t, fmt.Sprintf("%d commits of transactions open together", n), 2*time.Second, func() {
		for i, txn := range txns {
			if err, want := txn.Commit(), i%1000 == 999; want != errors.Is(err, ErrConflict) {
				t.Fatalf("transaction %d: %v, want a conflict: %v", i, err, want)
			}
		}
	})
	// What each wrote is there, and nothing of those that conflicted.
	for i := range n {
		_, err := db.Get(fmt.Appendf(nil, "w%06d", i))
		if conflicted := i%1000 == 999; conflicted != errors.Is(err, ErrNotFound) {
			t.Fatalf("w%06d: %v, transaction conflicted: %v", i, err, conflicted)
		}
	}
}

// TestHistoryIndexConcurrentIncrements: read-modify-write transactions
// that each span more groups than historyIndexMin (plain writes between
// their read and their commit), run concurrently on two counters, lose
// no increment: each commit is checked through the history index, which
// concurrent commits extend and read at once.
func TestHistoryIndexConcurrentIncrements(t *testing.T) {
	const workers, increments = 4, 40
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	counter := func(i int) []byte { return fmt.Appendf(nil, "c%d", i%2) }
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range increments {
				err := db.UpdateWith(&UpdateOptions{Retries: 1 << 20}, func(txn *Txn) error {
					n := 0
					v, err := txn.Get(counter(w + i))
					if err == nil {
						n, _ = strconv.Atoi(string(v))
					} else if !errors.Is(err, ErrNotFound) {
						return err
					}
					for j := range historyIndexMin + 8 {
						if err := db.Put(fmt.Appendf(nil, "f%d-%d", w, j), nil); err != nil {
							return err
						}
					}
					return txn.Put(counter(w+i), strconv.AppendInt(nil, int64(n+1), 10))
				})
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- errDone
		}()
	}
	for done := 0; done < workers; {
		switch err := <-errs; {
		case err == errDone:
			done++
		case err != nil:
			t.Fatal(err)
		}
	}
	sum := 0
	for i := range 2 {
		v, err := db.Get(counter(i))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(string(v))
		sum += n
	}
	if sum != workers*increments {
		t.Fatalf("the counters sum to %d after %d increments", sum, workers*increments)
	}
}

var errDone = errors.New("done")

// TestHistoryIndexCapped: the index holds at most indexLimit bytes; past
// that the groups it does not hold are checked one by one, and commits
// come out as without it: each transaction that read a key written after
// it began conflicts, and no other.
func TestHistoryIndexCapped(t *testing.T) {
	defer func(l int) { txnHistoryLimit = l }(txnHistoryLimit)
	txnHistoryLimit = 4 << 20
	const n = 6000
	db := mustOpen(t, t.TempDir(), &Options{MemtableSize: 64 << 20})
	defer db.Close()
	// Keys of 200 bytes: the index would take more than its limit of
	// them, the history less than its own.
	written := func(i int) []byte { return fmt.Appendf(nil, "w%06d-%0193d", i, 0) }
	txns := make([]*Txn, n)
	for i := range txns {
		txns[i] = db.NewTransaction(true)
		read := fmt.Appendf(nil, "r%06d", i)
		if i%100 == 99 {
			read = written(i - 1)
		}
		if _, err := txns[i].Get(read); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		mustDo(t, txns[i].Put(written(i), nil))
	}
	most, indexed := 0, uint64(0)
	for i, txn := range txns {
		err := txn.Commit()
		if want := i%100 == 99; want != errors.Is(err, ErrConflict) || err != nil && !want {
			t.Fatalf("transaction %d: %v, want a conflict: %v", i, err, want)
		}
		x := &db.txns.idx
		x.mu.Lock()
		most = max(most, x.bytes)
		x.mu.Unlock()
		indexed = max(indexed, x.next.Load())
	}
	if most > indexLimit() {
		t.Fatalf("the index held %d bytes, more than its limit %d", most, indexLimit())
	}
	if indexed == 0 || most < indexLimit()/2 {
		t.Fatalf("the index held at most %d bytes (limit %d), indexed up to seq %d: the test does not reach the cap", most, indexLimit(), indexed)
	}
	t.Logf("index: at most %d bytes of %d", most, indexLimit())
}

// TestHistoryLevelBytesCharged: what a level of the index is charged
// (levelBytes, which the index's cap, indexLimit, counts) is the heap it
// holds, within a quarter, for a level built from groups and for one
// merged from two: keys, their ends, the segment tree over their
// sequence numbers and the pieces of range deletions. The cap's test
// reads the charge itself, so a charge that forgot or subtracted a part
// let the index grow past its cap unnoticed.
func TestHistoryLevelBytesCharged(t *testing.T) {
	groups := func(from, n int) []*writeSet {
		var hist []*writeSet
		for g := range n {
			b := NewBatch()
			for i := range 100 {
				mustDo(t, b.Put(fmt.Appendf(nil, "k%07d", (from+g)*100+i), nil))
			}
			for i := range 5 {
				k := (from+g)*100 + 20*i
				mustDo(t, b.DeleteRange(fmt.Appendf(nil, "k%07d", k), fmt.Appendf(nil, "k%07d", k+10)))
			}
			ws := &writeSet{}
			ws.add(b.setSeq(uint64(from+g)*1000 + 1))
			ws.seq, ws.sealed = uint64(from+g)*1000+uint64(b.count), true
			hist = append(hist, ws)
		}
		return hist
	}
	older, newer := groups(0, 200), groups(200, 200)
	check := func(what string, build func() *historyLevel) *historyLevel {
		before := heapstat.Live()
		l := build()
		held := heapstat.Live() - before
		charged := int64(levelBytes(l))
		if held > charged/4*5+4<<10 || charged > held/4*5+4<<10 {
			t.Errorf("%s of %d keys and %d pieces: holds %d bytes of heap, charged %d", what, len(l.ends), len(l.frags), held, charged)
		}
		return l
	}
	a := check("a level of 200 groups", func() *historyLevel { return levelOf(older, 0) })
	b := check("a level of 200 groups", func() *historyLevel { return levelOf(newer, 0) })
	check("a merge of two levels", func() *historyLevel { return mergeLevels(a, b, 0) })
	runtime.KeepAlive(older) // alive through every measurement
	runtime.KeepAlive(newer)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}
