package bloomkv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
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
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			db := mustOpen(t, t.TempDir(), smallOptions())
			defer db.Close()
			model := txnView{}
			for i := range 400 {
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
	lower, upper := bounds(&o)
	want := view.sorted(lower, upper)
	it, err := txn.NewIterator(&o)
	mustDo(t, err)
	defer it.Close()
	pos := -1 // index in want; -1 or len: not valid
	for move := range 40 {
		var name string
		var ok bool
		switch m := rng.IntN(6); {
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

