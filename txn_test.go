package bloomkv

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// txnKey is key i of the small key space the transaction tests share, so
// that random operations collide.
func txnKey(i int) []byte { return fmt.Appendf(nil, "k%03d", i) }

// txnView is the model of what a transaction sees: a map, with sorted
// keys for iteration.
type txnView map[string]string

func (v txnView) clone() txnView {
	c := make(txnView, len(v))
	for k, x := range v {
		c[k] = x
	}
	return c
}

func (v txnView) deleteRange(start, end []byte) {
	for k := range v {
		if k >= string(start) && k < string(end) {
			delete(v, k)
		}
	}
}

// sorted returns the keys in [lower, upper) (nil: unbounded), ascending.
func (v txnView) sorted(lower, upper []byte) []string {
	var ks []string
	for k := range v {
		if (lower == nil || k >= string(lower)) && (upper == nil || k < string(upper)) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

// txnRange returns a range of txnKeys, sometimes with an empty start.
func txnRange(rng *rand.Rand, n int) (start, end []byte) {
	a := rng.IntN(n)
	b := a + 1 + rng.IntN(20)
	if rng.IntN(8) == 0 {
		return []byte{}, txnKey(b)
	}
	return txnKey(a), txnKey(b)
}

// TestTxnReadYourWrites is a model test of what a read-write transaction
// sees: the snapshot of when it began (not the writes committed after),
// plus its own Puts, Deletes and DeleteRanges, through Get, Has and
// iterators moved at random (forward, backward, seeks, direction
// changes, bounds), over data in the memtable and in segments. Then the
// commit must leave exactly the model's state.
func TestTxnReadYourWrites(t *testing.T) {
	const keys = 120
	seeds := uint64(8)
	if raceEnabled || testing.Short() {
		seeds = 3
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			db := mustOpen(t, t.TempDir(), smallOptions())
			defer db.Close()
			model := txnView{}
			for i := range 400 {
				randomDBWrite(t, db, model, rng, keys, i)
				if i == 200 {
					mustDo(t, db.Flush())
				}
			}
			txn := db.NewTransaction(true)
			defer txn.Discard()
			// With odd seeds, writes committed after the transaction
			// began: invisible to it, and since it reads them (300 random
			// steps over 120 keys), its commit must conflict.
			late := model.clone()
			if seed%2 == 1 {
				for i := range 30 {
					k, v := txnKey(rng.IntN(keys)), fmt.Sprintf("late%d", i)
					mustDo(t, db.Put(k, []byte(v)))
					late[string(k)] = v
				}
			}
			view := model.clone()
			for step := range 300 {
				k := txnKey(rng.IntN(keys))
				switch op := rng.IntN(12); {
				case op < 3:
					v := fmt.Sprintf("txn%d", step)
					mustDo(t, txn.Put(k, []byte(v)))
					view[string(k)] = v
				case op < 4:
					mustDo(t, txn.Delete(k))
					delete(view, string(k))
				case op < 5:
					s, e := txnRange(rng, keys)
					mustDo(t, txn.DeleteRange(s, e))
					view.deleteRange(s, e)
				case op < 8:
					got, err := txn.Get(k)
					want, ok := view[string(k)]
					if ok != (err == nil) || ok && string(got) != want || !ok && !errors.Is(err, ErrNotFound) {
						t.Fatalf("step %d: Get %s = %q, %v; want %q, %v", step, k, got, err, want, ok)
					}
					has, err := txn.Has(k)
					if err != nil || has != ok {
						t.Fatalf("step %d: Has %s = %v, %v; want %v", step, k, has, err, ok)
					}
				default:
					checkTxnIterator(t, rng, txn, view, keys, step)
				}
			}
			err := txn.Commit()
			want := view
			if seed%2 == 1 {
				if !errors.Is(err, ErrConflict) {
					t.Fatalf("Commit after reading keys written since = %v, want ErrConflict", err)
				}
				want = late // nothing of the transaction
			} else {
				mustDo(t, err)
			}
			checkStoreEquals(t, db, want)
		})
	}
}

// checkStoreEquals checks that a scan of db yields exactly want.
func checkStoreEquals(t *testing.T, db *DB, want txnView) {
	t.Helper()
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	defer it.Close()
	got := txnView{}
	for k, v := range it.All() {
		got[string(k)] = string(v)
	}
	mustDo(t, it.Error())
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("store has %s=%q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("store has %d keys, want %d", len(got), len(want))
	}
}

// checkTxnIterator makes an iterator with random bounds and moves it at
// random, checking every position against the model.
func checkTxnIterator(t *testing.T, rng *rand.Rand, txn *Txn, view txnView, keys, step int) {
	t.Helper()
	randomOptions := func() IterOptions {
		var o IterOptions
		if rng.IntN(2) == 0 {
			o.LowerBound = txnKey(rng.IntN(keys))
		}
		if rng.IntN(2) == 0 {
			o.UpperBound = txnKey(rng.IntN(keys + 10))
		}
		if rng.IntN(6) == 0 {
			o = IterOptions{Prefix: []byte(fmt.Sprintf("k%02d", rng.IntN(keys/10)))}
		}
		return o
	}
	o := randomOptions()
	lower, upper := bounds(&o)
	want := view.sorted(lower, upper)
	it, err := txn.NewIterator(&o)
	mustDo(t, err)
	defer it.Close()
	pos := -1 // index in want; -1 or len: not valid
	for move := range 40 {
		var name string
		var ok bool
		switch m := rng.IntN(7); {
		case m == 6:
			// New bounds on the same iterator: unpositioned until the
			// next seek, then the keys within them.
			o := randomOptions()
			lower, upper = bounds(&o)
			want = view.sorted(lower, upper)
			if o.Prefix != nil {
				it.SetPrefix(o.Prefix)
			} else {
				it.SetBounds(o.LowerBound, o.UpperBound)
				if o.LowerBound != nil {
					o.LowerBound[0] = 'x' // the bounds were copied
				}
			}
			if it.Valid() || it.Next() || it.Prev() {
				t.Fatalf("step %d move %d: positioned after SetBounds(%q, %q)", step, move, lower, upper)
			}
			pos = -1
			continue
		case m == 0:
			name, ok = "First", it.First()
			pos = 0
		case m == 1:
			name, ok = "Last", it.Last()
			pos = len(want) - 1
		case m == 2:
			k := txnKey(rng.IntN(keys + 10))
			name, ok = "Seek "+string(k), it.Seek(k)
			pos = sort.SearchStrings(want, string(k))
		case m == 3:
			k := txnKey(rng.IntN(keys + 10))
			name, ok = "SeekLT "+string(k), it.SeekLT(k)
			pos = sort.SearchStrings(want, string(k)) - 1
		case m == 4:
			if !it.Valid() {
				continue
			}
			name, ok = "Next", it.Next()
			pos++
		default:
			if !it.Valid() {
				continue
			}
			name, ok = "Prev", it.Prev()
			pos--
		}
		wantOK := pos >= 0 && pos < len(want)
		if ok != wantOK || it.Valid() != wantOK {
			t.Fatalf("step %d move %d: %s (bounds %q %q) = %v, want %v (keys %v)", step, move, name, lower, upper, ok, wantOK, want)
		}
		if !wantOK {
			pos = -1
			continue
		}
		if string(it.Key()) != want[pos] || string(it.Value()) != view[want[pos]] {
			t.Fatalf("step %d move %d: %s at %q=%q, want %q=%q", step, move, name, it.Key(), it.Value(), want[pos], view[want[pos]])
		}
	}
	mustDo(t, it.Error())
	// A full pass each way agrees with the model too.
	var fwd, bwd []string
	for k := range it.All() {
		fwd = append(fwd, string(k))
	}
	for k := range it.Backward() {
		bwd = append(bwd, string(k))
	}
	slices.Reverse(bwd)
	if !slices.Equal(fwd, want) || !slices.Equal(bwd, want) {
		t.Fatalf("step %d: All = %v, Backward = %v, want %v", step, fwd, bwd, want)
	}
}

// TestTxnHistoryLimit: a transaction that began before the conflict
// history outgrew its limit fails with ErrConflict rather than commit
// unchecked, though nothing it read was written; one that began after
// commits. Once no transaction is open, the history is empty.
func TestTxnHistoryLimit(t *testing.T) {
	defer func(n int) { txnHistoryLimit = n }(txnHistoryLimit)
	txnHistoryLimit = 4 << 10
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	old := db.NewTransaction(true)
	defer old.Discard()
	old.Get([]byte("read"))
	old.Put([]byte("mine"), nil)
	fill := func() {
		for i := range 200 { // ~14 KiB of keys, none of them "read"
			mustDo(t, db.Put(fmt.Appendf(nil, "other-key-%05d", i), nil))
		}
	}
	fill()
	young := db.NewTransaction(true)
	defer young.Discard()
	young.Get([]byte("read"))
	young.Put([]byte("mine"), []byte("young"))
	mustDo(t, db.Put([]byte("unrelated"), nil))
	err := old.Commit()
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "older than the conflict history") {
		t.Fatalf("Commit of a transaction older than the history = %v, want ErrConflict", err)
	}
	if strings.Count(err.Error(), "bloomkv:") != 1 {
		t.Fatalf("%q: want one \"bloomkv:\" prefix", err)
	}
	mustDo(t, young.Commit())
	db.txns.mu.Lock()
	n, bytes := len(db.txns.history), db.txns.bytes
	db.txns.mu.Unlock()
	if n != 0 || bytes != 0 {
		t.Fatalf("no transaction open, history holds %d groups, %d bytes", n, bytes)
	}
	// While one is open, plain writes are recorded, and trimmed to the
	// limit.
	txn := db.NewTransaction(true)
	fill()
	db.txns.mu.Lock()
	n, bytes = len(db.txns.history), db.txns.bytes
	db.txns.mu.Unlock()
	if n == 0 || bytes > txnHistoryLimit {
		t.Fatalf("with a transaction open: %d groups, %d bytes (limit %d)", n, bytes, txnHistoryLimit)
	}
	txn.Discard()
}

// TestTxnLifecycle: the errors of a transaction used after its end, of
// writes to a read-only one, of a closed DB; Update writes nothing when
// fn fails; UpdateWith retries conflicts as many times as asked.
func TestTxnLifecycle(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	txn := db.NewTransaction(true)
	mustDo(t, txn.Put([]byte("a"), []byte("1")))
	mustDo(t, txn.Commit())
	for name, err := range map[string]error{
		"Commit":      txn.Commit(),
		"Put":         txn.Put([]byte("a"), nil),
		"Delete":      txn.Delete([]byte("a")),
		"DeleteRange": txn.DeleteRange([]byte("a"), []byte("b")),
	} {
		if !errors.Is(err, ErrTxnDiscarded) {
			t.Errorf("%s after Commit = %v, want ErrTxnDiscarded", name, err)
		}
	}
	if _, err := txn.Get([]byte("a")); !errors.Is(err, ErrTxnDiscarded) {
		t.Errorf("Get after Commit = %v", err)
	}
	if _, err := txn.NewIterator(nil); !errors.Is(err, ErrTxnDiscarded) {
		t.Errorf("NewIterator after Commit = %v", err)
	}
	txn.Discard() // harmless

	ro := db.NewTransaction(false)
	if err := ro.Delete([]byte("a")); !errors.Is(err, ErrTxnReadOnly) {
		t.Errorf("Delete in a read-only transaction = %v", err)
	}
	if err := ro.DeleteRange([]byte("a"), []byte("b")); !errors.Is(err, ErrTxnReadOnly) {
		t.Errorf("DeleteRange in a read-only transaction = %v", err)
	}
	ro.Discard()

	txn = db.NewTransaction(true)
	if err := txn.Put(nil, nil); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Put of an empty key = %v", err)
	}
	if err := txn.Put([]byte("k"), make([]byte, MaxValueSize+1)); !errors.Is(err, ErrValueTooLarge) {
		t.Errorf("Put of a large value = %v", err)
	}
	txn.Discard()

	boom := errors.New("boom")
	if err := db.Update(func(txn *Txn) error {
		txn.Put([]byte("a"), []byte("2"))
		return boom
	}); err != boom {
		t.Fatalf("Update = %v, want fn's error", err)
	}
	if v, _ := db.Get([]byte("a")); string(v) != "1" {
		t.Fatalf("a = %q after a failed Update, want 1", v)
	}

	// Each run conflicts: a plain write of what it read, made inside it.
	for _, retries := range []int{0, 3} {
		runs := 0
		err := db.UpdateWith(&UpdateOptions{Retries: retries}, func(txn *Txn) error {
			runs++
			txn.Get([]byte("a"))
			mustDo(t, db.Put([]byte("a"), fmt.Appendf(nil, "%d", runs)))
			return txn.Put([]byte("b"), nil)
		})
		if !errors.Is(err, ErrConflict) || runs != retries+1 {
			t.Fatalf("UpdateWith Retries %d: %v after %d runs, want ErrConflict after %d", retries, err, runs, retries+1)
		}
	}
	// A synced commit.
	mustDo(t, db.UpdateWith(&UpdateOptions{Sync: true}, func(txn *Txn) error { return txn.Put([]byte("s"), nil) }))

	open := db.NewTransaction(true)
	mustDo(t, db.Close())
	if _, err := open.Get([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	open.Put([]byte("x"), nil)
	if err := open.Commit(); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close = %v, want ErrClosed", err)
	}
	closed := db.NewTransaction(true)
	if _, err := closed.Get([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get in a transaction begun after Close = %v", err)
	}
	if err := db.View(func(*Txn) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("View after Close = %v", err)
	}
	if err := db.Update(func(*Txn) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Close = %v", err)
	}
	if db.txns.active.Load() != 0 {
		t.Errorf("%d transactions counted open", db.txns.active.Load())
	}
}

// TestCompareAndSet: the cases one at a time, then concurrent increments
// of one counter, none lost.
func TestCompareAndSet(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	k := []byte("k")
	steps := []struct {
		old, new []byte
		swapped  bool
		after    string // "": absent
	}{
		{[]byte("x"), []byte("1"), false, ""}, // absent, not "x"
		{nil, []byte("1"), true, "1"},         // absent, as wanted
		{nil, []byte("2"), false, "1"},        // present
		{[]byte("2"), []byte("3"), false, "1"},
		{[]byte("1"), []byte{}, true, "="}, // "=": the empty value
		{nil, []byte("4"), false, "="},     // an empty value is not absence
		{[]byte{}, nil, true, ""},          // compare and delete
	}
	for i, s := range steps {
		swapped, err := db.CompareAndSet(k, s.old, s.new)
		mustDo(t, err)
		v, err := db.Get(k)
		got := string(v)
		if err == nil && len(v) == 0 {
			got = "="
		}
		if swapped != s.swapped || got != s.after {
			t.Fatalf("step %d: CompareAndSet(%q, %q) = %v, then %q; want %v, %q", i, s.old, s.new, swapped, got, s.swapped, s.after)
		}
	}
	const workers, each = 4, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					v, err := db.Get(k)
					old := v
					if errors.Is(err, ErrNotFound) {
						old = nil
					} else if err != nil {
						t.Error(err)
						return
					}
					n, _ := strconv.Atoi(string(v))
					ok, err := db.CompareAndSet(k, old, strconv.AppendInt(nil, int64(n+1), 10))
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	if v, _ := db.Get(k); string(v) != strconv.Itoa(workers*each) {
		t.Fatalf("counter = %s after %d increments", v, workers*each)
	}
}

// TestTxnCorrupt: damage under a transaction's reads is reported as
// ErrCorrupt naming the file, by Get and by an iterator, which stops
// there rather than go on with the transaction's own writes past it.
func TestTxnCorrupt(t *testing.T) {
	fx := newCorruptFixture(t)
	bad := bytes.Clone(fx.segData)
	bad[fx.layout.regions[0].start+2] ^= 1 // data block 0, which holds corruptKey(0)
	dir := fx.copyStore(t, map[string][]byte{fx.seg: bad})
	db := mustOpen(t, dir, corruptOptions(false))
	defer db.Close()
	txn := db.NewTransaction(true)
	defer txn.Discard()
	_, err := txn.Get([]byte(corruptKey(0)))
	wantMessage(t, "Txn.Get", err, dir, fx.seg)
	mustDo(t, txn.Put([]byte("zzz"), []byte("past the damage")))
	it, err := txn.NewIterator(nil)
	mustDo(t, err)
	for k := range it.All() {
		if string(k) == "zzz" {
			t.Fatal("the iterator went on past the damage to the transaction's write")
		}
	}
	wantMessage(t, "TxnIterator.Error", it.Error(), dir, fx.seg)
	wantMessage(t, "TxnIterator.Close", it.Close(), dir, fx.seg)
}

// TestTxnManyDeleteRangesStayLinear: a transaction's range deletions cost
// about O(log n) each to record, as a batch's do, not O(n) — copying and
// re-sorting every earlier one at each call made 10^4 of them take 8 s,
// and 3·10^4 (the batch that once made Open take 42 s) over a minute. It
// counts the bytes the calls allocate, which the copies dominate, and
// checks that reads between the calls see each deletion at once.
func TestTxnManyDeleteRangesStayLinear(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	mustDo(t, db.Put([]byte("k0000003"), []byte("v")))
	const n = 1 << 13
	txn := db.NewTransaction(true)
	defer txn.Discard()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		mustDo(t, txn.DeleteRange(fmt.Appendf(nil, "k%07d", 2*(n-i)), fmt.Appendf(nil, "k%07d", 2*(n-i)+1)))
		if i%512 == 0 {
			k := fmt.Appendf(nil, "k%07d", 2*(n-i))
			if _, err := txn.Get(k); !errors.Is(err, ErrNotFound) {
				t.Fatalf("after %d range deletions, Get(%s) = %v, want ErrNotFound", i+1, k, err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	// Each call allocates its two bounds (about 40 bytes) and, amortized,
	// a few span copies per level it merges (48 bytes each, log₂ n
	// levels): some kilobytes. Copying every span at every call allocates
	// 48·n/2 bytes a call on average, 196 KiB here.
	if perCall := (after.TotalAlloc - before.TotalAlloc) / n; perCall > 8<<10 {
		t.Fatalf("%d range deletions allocated %d bytes each: the cost of a call grows with the number before it", n, perCall)
	}
	if _, err := txn.Get([]byte("k0000003")); err != nil {
		t.Fatalf("a key between the deleted ranges: %v", err)
	}
	mustDo(t, txn.Commit())
	for _, k := range []string{"k0000002", "k0000003", "k0016384"} {
		_, err := db.Get([]byte(k))
		if want := k == "k0000003"; want != (err == nil) {
			t.Fatalf("after commit, Get(%s) = %v", k, err)
		}
	}
}

// TestTxnIteratorRunsMatchModel is a model test of the sorted runs a
// transaction keeps its pending writes in for its iterators
// (Txn.sortedRuns): over many more writes than TestTxnReadYourWrites
// makes, with an iterator after every few, so that runs of many sizes
// merge, overwrites leave stale writes behind in older runs (enough that
// all runs are merged to drop them), range deletions cut runs, and
// iterators that step long enough merge theirs (TxnIterator.stepPending).
// Every iterator is checked against the model, some again after later
// writes, and the commit leaves exactly the model's state.
func TestTxnIteratorRunsMatchModel(t *testing.T) {
	const keys = 400
	steps := 3000
	if raceEnabled || testing.Short() {
		steps = 1000
	}
	rng := rand.New(rand.NewPCG(11, 3))
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	model := txnView{}
	for i := range 300 {
		randomDBWrite(t, db, model, rng, keys, i)
	}
	txn := db.NewTransaction(true)
	defer txn.Discard()
	view := model.clone()
	type old struct {
		it   *TxnIterator
		want []string
		view txnView
	}
	var olds []old
	for step := range steps {
		k := txnKey(rng.IntN(keys))
		switch op := rng.IntN(20); {
		case op < 9:
			v := strings.Repeat("v", rng.IntN(200)) + strconv.Itoa(step)
			mustDo(t, txn.Put(k, []byte(v)))
			view[string(k)] = v
		case op < 11:
			mustDo(t, txn.Delete(k))
			delete(view, string(k))
		case op < 12:
			s, e := txnRange(rng, keys)
			mustDo(t, txn.DeleteRange(s, e))
			view.deleteRange(s, e)
		case op < 19:
			checkTxnIterator(t, rng, txn, view, keys, step)
		default:
			it, err := txn.NewIterator(nil)
			mustDo(t, err)
			olds = append(olds, old{it, view.sorted(nil, nil), view.clone()})
		}
		if n := len(txn.runs); n > 2*bits.Len(uint(len(txn.pending)))+2 {
			t.Fatalf("step %d: %d runs for %d pending writes", step, n, len(txn.pending))
		}
	}
	for i, o := range olds {
		var got []string
		for k, v := range o.it.All() {
			if string(v) != o.view[string(k)] {
				t.Fatalf("iterator %d: %s=%q, want %q", i, k, v, o.view[string(k)])
			}
			got = append(got, string(k))
		}
		if !slices.Equal(got, o.want) {
			t.Fatalf("iterator %d: keys %v, want %v", i, got, o.want)
		}
		mustDo(t, o.it.Close())
	}
	mustDo(t, txn.Commit())
	checkStoreEquals(t, db, view)
}

// TestTxnIteratorAfterWriteStaysCheap: an iterator made after each write
// of a transaction that holds n pending writes costs about O(log n) of
// copying per write, amortized, not a sorted copy of all n: sorting every
// pending write again for each iterator made 10^5 of them cost 140 ms
// each. It counts the bytes the pairs allocate, which the copies
// dominate.
func TestTxnIteratorAfterWriteStaysCheap(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	const n, pairs = 1 << 14, 1 << 10
	txn := db.NewTransaction(true)
	defer txn.Discard()
	for i := range n {
		mustDo(t, txn.Put(fmt.Appendf(nil, "k%07d", 2*i), []byte("v")))
	}
	it, err := txn.NewIterator(nil)
	mustDo(t, err)
	mustDo(t, it.Close())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range pairs {
		k := fmt.Appendf(nil, "k%07d", 2*i+1)
		mustDo(t, txn.Put(k, []byte("w")))
		it, err := txn.NewIterator(nil)
		mustDo(t, err)
		if !it.Seek(k) || !bytes.Equal(it.Key(), k) || string(it.Value()) != "w" {
			t.Fatalf("pair %d: Seek(%s) at %q=%q", i, k, it.Key(), it.Value())
		}
		mustDo(t, it.Close())
	}
	runtime.ReadMemStats(&after)
	// An iterator and a write allocate a few kilobytes, and the runs'
	// merges, amortized, 8 bytes per write per level (log₂ n levels): a
	// sorted copy of every write is 8·n bytes, 128 KiB here.
	if perPair := (after.TotalAlloc - before.TotalAlloc) / pairs; perPair > 16<<10 {
		t.Fatalf("a write and an iterator allocated %d bytes each: the cost grows with the writes pending", perPair)
	}
}

// TestTxnIteratorKeepsItsMoment is a model test of open iterators of a
// transaction that goes on writing: each shows the transaction's writes
// made before it (puts, deletes, range deletions) over the snapshot, not
// those made after nor the DB's writes since the transaction began, and
// keeps showing that view after SetBounds and SetPrefix, through seeks,
// steps and direction changes, while flushes move the data to segments.
func TestTxnIteratorKeepsItsMoment(t *testing.T) {
	const keys = 60
	seeds := uint64(10)
	if raceEnabled || testing.Short() {
		seeds = 3
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 9))
		o := smallOptions()
		o.Prefix = FixedPrefix(3)
		db := mustOpen(t, t.TempDir(), o)
		model := txnView{}
		for i := range 300 {
			randomDBWrite(t, db, model, rng, keys, i)
			if i%100 == 50 {
				mustDo(t, db.Flush())
			}
		}
		txn := db.NewTransaction(seed%3 != 0)
		view := model.clone()
		type open struct {
			it   *TxnIterator
			view txnView  // what the transaction saw when it was made
			want []string // view's keys within the bounds
			pos  int      // in want; -1: not positioned
		}
		var its []*open
		for step := range 400 {
			k := txnKey(rng.IntN(keys))
			switch op := rng.IntN(14); {
			case op < 3 && txn.update:
				v := fmt.Sprintf("txn%d", step)
				mustDo(t, txn.Put(k, []byte(v)))
				view[string(k)] = v
			case op < 4 && txn.update:
				mustDo(t, txn.Delete(k))
				delete(view, string(k))
			case op < 5 && txn.update:
				s, e := txnRange(rng, keys)
				mustDo(t, txn.DeleteRange(s, e))
				view.deleteRange(s, e)
			case op < 6:
				mustDo(t, db.Put(k, fmt.Appendf(nil, "late%d", step)))
			case op < 7:
				if len(its) < 3 {
					it, err := txn.NewIterator(nil)
					mustDo(t, err)
					its = append(its, &open{it: it, view: view.clone(), want: view.sorted(nil, nil), pos: -1})
				}
			case op < 8 && len(its) > 0:
				s := its[rng.IntN(len(its))]
				var lo, hi []byte
				if rng.IntN(2) == 0 {
					lo = fmt.Appendf(nil, "k%d", rng.IntN(7))
					s.it.SetPrefix(lo)
					hi = prefixEnd(lo)
				} else {
					if rng.IntN(2) == 0 {
						lo = txnKey(rng.IntN(keys))
					}
					if rng.IntN(2) == 0 {
						hi = txnKey(rng.IntN(keys + 5))
					}
					s.it.SetBounds(lo, hi)
				}
				s.want, s.pos = s.view.sorted(lo, hi), -1
			case len(its) > 0:
				s := its[rng.IntN(len(its))]
				var name string
				var ok bool
				switch rng.IntN(6) {
				case 0:
					name, ok, s.pos = "First", s.it.First(), 0
				case 1:
					name, ok, s.pos = "Last", s.it.Last(), len(s.want)-1
				case 2:
					name, ok, s.pos = "Seek "+string(k), s.it.Seek(k), sort.SearchStrings(s.want, string(k))
				case 3:
					name, ok, s.pos = "SeekLT "+string(k), s.it.SeekLT(k), sort.SearchStrings(s.want, string(k))-1
				case 4:
					if !s.it.Valid() {
						continue
					}
					name, ok = "Next", s.it.Next()
					s.pos++
				default:
					if !s.it.Valid() {
						continue
					}
					name, ok = "Prev", s.it.Prev()
					s.pos--
				}
				if wantOK := s.pos >= 0 && s.pos < len(s.want); ok != wantOK {
					t.Fatalf("seed %d step %d: %s = %v, want %v", seed, step, name, ok, wantOK)
				}
				if !ok {
					s.pos = -1
					continue
				}
				if w := s.want[s.pos]; string(s.it.Key()) != w || string(s.it.Value()) != s.view[w] {
					t.Fatalf("seed %d step %d: %s at %q=%q, want %q=%q", seed, step, name, s.it.Key(), s.it.Value(), w, s.view[w])
				}
			}
			if rng.IntN(50) == 0 {
				mustDo(t, db.Flush())
			}
		}
		for _, s := range its {
			mustDo(t, s.it.Close())
		}
		txn.Discard()
		mustDo(t, db.Close())
	}
}

// TestTxnDelsDeletesMatchesModel: a transaction's range deletions answer
// whether a deletion made after a write covers the write's key exactly as
// a scan of every deletion would, however the deletions overlap, nest or
// touch, at every size the lists merge at; and the merged spans cover
// exactly the keys some deletion covers.
func TestTxnDelsDeletesMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	key := func(i int) []byte { return fmt.Appendf(nil, "k%02d", i) }
	for trial := range 200 {
		var d txnDels
		type del struct {
			r     keySpan
			order uint64
		}
		var model []del
		n := 1 + rng.IntN(40)
		for order := uint64(1); order <= uint64(n); order++ {
			a, b := rng.IntN(30), rng.IntN(31)
			if a >= b {
				continue // Txn.DeleteRange drops an empty range
			}
			r := keySpan{start: key(a), end: key(b)}
			if rng.IntN(8) == 0 {
				r.start = []byte{} // from the first key
			}
			d = d.add(r, order)
			model = append(model, del{r, order})
			for k := range 32 {
				kb := key(k)
				for _, w := range []uint64{0, order / 2, order - 1, order} {
					want := false
					for _, m := range model {
						if m.order > w && bytes.Compare(m.r.start, kb) <= 0 && bytes.Compare(kb, m.r.end) < 0 {
							want = true
						}
					}
					if got := d.deletes(kb, w); got != want {
						t.Fatalf("trial %d after %d deletions: deletes(%s, %d) = %v, want %v", trial, len(model), kb, w, got, want)
					}
					if w == 0 {
						if covered := d.covering(kb) != nil; covered != want {
							t.Fatalf("trial %d after %d deletions: covering(%s) = %v, want %v", trial, len(model), kb, covered, want)
						}
					}
				}
			}
		}
	}
}

// randomDBWrite makes the i-th of a model test's random writes to db
// outside any transaction, over keys txnKey(0) to txnKey(keys-1): a
// delete, a range deletion or a put, and applies it to model.
func randomDBWrite(t *testing.T, db *DB, model txnView, rng *rand.Rand, keys, i int) {
	t.Helper()
	k := txnKey(rng.IntN(keys))
	switch rng.IntN(10) {
	case 0:
		mustDo(t, db.Delete(k))
		delete(model, string(k))
	case 1:
		s, e := txnRange(rng, keys)
		mustDo(t, db.DeleteRange(s, e))
		model.deleteRange(s, e)
	default:
		v := fmt.Sprintf("db%d", i)
		mustDo(t, db.Put(k, []byte(v)))
		model[string(k)] = v
	}
}

// TestTxnAfterClose: a transaction begun before its DB was closed, read
// only or not, and one begun after, refuse every method with ErrClosed,
// reads of its own pending writes among them, rather than buffering
// writes that only Commit would refuse.
func TestTxnAfterClose(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	if err := db.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	txns := map[string]*Txn{"update": db.NewTransaction(true), "read-only": db.NewTransaction(false)}
	if err := txns["update"].Put([]byte("own"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	txns["after Close"] = db.NewTransaction(true)
	for name, txn := range txns {
		ops := map[string]func() error{
			"Get own":     func() error { _, err := txn.Get([]byte("own")); return err },
			"Get":         func() error { _, err := txn.Get([]byte("a")); return err },
			"Has":         func() error { _, err := txn.Has([]byte("own")); return err },
			"Put":         func() error { return txn.Put([]byte("k"), nil) },
			"Delete":      func() error { return txn.Delete([]byte("k")) },
			"DeleteRange": func() error { return txn.DeleteRange([]byte("a"), []byte("b")) },
			"NewIterator": func() error { _, err := txn.NewIterator(nil); return err },
			"Commit":      txn.Commit,
		}
		for _, op := range []string{"Get own", "Get", "Has", "Put", "Delete", "DeleteRange", "NewIterator", "Commit"} {
			if err := ops[op](); !errors.Is(err, ErrClosed) {
				t.Errorf("%s transaction: %s after Close = %v, want ErrClosed", name, op, err)
			}
		}
		txn.Discard()
	}
}
