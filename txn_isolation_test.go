package bloomkv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestTxnWriteSkew is the anomaly snapshot isolation allows and
// serializability refuses: two doctors on call, each may go off call if
// the other is still on. Each transaction reads both and writes its own;
// the second to commit must fail, or both would be off call.
func TestTxnWriteSkew(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	mustDo(t, db.Put([]byte("alice"), []byte("on")))
	mustDo(t, db.Put([]byte("bob"), []byte("on")))
	goOff := func(txn *Txn, me, other string) {
		t.Helper()
		a, err := txn.Get([]byte(me))
		mustDo(t, err)
		b, err := txn.Get([]byte(other))
		mustDo(t, err)
		if string(a) != "on" || string(b) != "on" {
			t.Fatalf("%s sees %s=%s %s=%s", me, me, a, other, b)
		}
		mustDo(t, txn.Put([]byte(me), []byte("off")))
	}
	t1, t2 := db.NewTransaction(true), db.NewTransaction(true)
	defer t1.Discard()
	defer t2.Discard()
	goOff(t1, "alice", "bob")
	goOff(t2, "bob", "alice")
	mustDo(t, t1.Commit())
	if err := t2.Commit(); !errors.Is(err, ErrConflict) {
		t.Fatalf("second commit of a write skew = %v, want ErrConflict", err)
	}
	if v, _ := db.Get([]byte("bob")); string(v) != "on" {
		t.Fatalf("bob = %s after the refused commit, want on", v)
	}
}

// TestTxnConflicts: what makes a commit conflict and what does not, one
// case at a time. Each case reads in a transaction, then something else
// writes, then the transaction writes one key of its own and commits.
func TestTxnConflicts(t *testing.T) {
	type step func(db *DB, txn *Txn) error
	get := func(k string) step {
		return func(_ *DB, txn *Txn) error {
			_, err := txn.Get([]byte(k))
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			return err
		}
	}
	// scan reads [lower, upper) forward with n Nexts after the First (-1:
	// to the end).
	scan := func(lower, upper string, n int, backward bool) step {
		return func(_ *DB, txn *Txn) error {
			o := &IterOptions{LowerBound: []byte(lower), UpperBound: []byte(upper)}
			if upper == "" {
				o.UpperBound = nil
			}
			it, err := txn.NewIterator(o)
			if err != nil {
				return err
			}
			ok := it.First()
			if backward {
				ok = it.Last()
			}
			for i := 0; ok && (n < 0 || i < n); i++ {
				if backward {
					ok = it.Prev()
				} else {
					ok = it.Next()
				}
			}
			return it.Close()
		}
	}
	put := func(k string) step {
		return func(db *DB, _ *Txn) error { return db.Put([]byte(k), []byte("other")) }
	}
	cases := []struct {
		name     string
		read     step
		write    step // by someone else, after the transaction began
		conflict bool
	}{
		{"read key, then put", get("b"), put("b"), true},
		{"read key, then delete", get("b"), func(db *DB, _ *Txn) error { return db.Delete([]byte("b")) }, true},
		{"read key, then range delete", get("b"), func(db *DB, _ *Txn) error { return db.DeleteRange([]byte("a"), []byte("c")) }, true},
		{"read key, then range delete elsewhere", get("b"), func(db *DB, _ *Txn) error { return db.DeleteRange([]byte("c"), []byte("d")) }, false},
		{"read absent key, then insert (phantom)", get("bb"), put("bb"), true},
		{"read key, then another key written", get("b"), put("c"), false},
		{"read key, then batch", get("b"), func(db *DB, _ *Txn) error {
			b := NewBatch()
			b.Put([]byte("x"), nil)
			b.Delete([]byte("b"))
			return db.Write(b)
		}, true},
		{"read key, then a transaction writes it", get("b"), func(db *DB, _ *Txn) error {
			return db.Update(func(o *Txn) error { return o.Put([]byte("b"), []byte("txn")) })
		}, true},
		{"read key, then a transaction reads it", get("b"), func(db *DB, _ *Txn) error {
			return db.Update(func(o *Txn) error { _, err := o.Get([]byte("b")); return err })
		}, false},
		{"scan to end, then insert in range", scan("a", "", -1, false), put("zz"), true},
		{"scan bounded, then insert past bound", scan("a", "c", -1, false), put("c"), false},
		{"scan bounded, then insert before bound", scan("a", "c", -1, false), put("bz"), true},
		{"scan stopped at b, then insert past it", scan("a", "", 1, false), put("bb"), false},
		{"scan stopped at b, then insert before it", scan("a", "", 1, false), put("ab"), true},
		{"scan stopped at b, then put b", scan("a", "", 1, false), put("b"), true},
		{"backward scan stopped at c, then insert past it", scan("", "z", 1, true), put("bb"), false},
		{"backward scan stopped at c, then insert after it", scan("", "z", 1, true), put("cc"), true},
		{"backward scan to start, then insert first key", scan("", "z", -1, true), put("0"), true},
		{"read own write, then put", func(_ *DB, txn *Txn) error {
			txn.Put([]byte("b"), []byte("mine"))
			return get("b")(nil, txn)
		}, put("b"), false},
		{"read inside own range delete, then put", func(_ *DB, txn *Txn) error {
			txn.DeleteRange([]byte("b"), []byte("c"))
			return get("b")(nil, txn)
		}, put("b"), false},
		{"blind write, then put", func(_ *DB, txn *Txn) error { return nil }, put("mine"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := mustOpen(t, t.TempDir(), nil)
			defer db.Close()
			for _, k := range []string{"a", "b", "c", "d"} {
				mustDo(t, db.Put([]byte(k), []byte("v")))
			}
			txn := db.NewTransaction(true)
			defer txn.Discard()
			mustDo(t, c.read(db, txn))
			mustDo(t, c.write(db, txn))
			mustDo(t, txn.Put([]byte("mine"), []byte("1")))
			err := txn.Commit()
			if c.conflict != errors.Is(err, ErrConflict) || !c.conflict && err != nil {
				t.Fatalf("Commit = %v, want conflict %v", err, c.conflict)
			}
			_, err = db.Get([]byte("mine"))
			if c.conflict == (err == nil) {
				t.Fatalf("after Commit, Get of its key: %v (conflict %v)", err, c.conflict)
			}
		})
	}
}

// TestTxnReadOnlyNeverConflicts: a read-only transaction reads its
// snapshot while everything it read changes, and commits.
func TestTxnReadOnlyNeverConflicts(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	err := db.View(func(txn *Txn) error {
		mustDo(t, db.Put([]byte("a"), []byte("2")))
		v, err := txn.Get([]byte("a"))
		if err != nil || string(v) != "1" {
			t.Fatalf("Get in View = %q, %v; want the snapshot's 1", v, err)
		}
		if err := txn.Put([]byte("a"), nil); !errors.Is(err, ErrTxnReadOnly) {
			t.Fatalf("Put in View = %v, want ErrTxnReadOnly", err)
		}
		return txn.Commit()
	})
	mustDo(t, err)
	// A read-write transaction that wrote nothing commits too.
	txn := db.NewTransaction(true)
	txn.Get([]byte("a"))
	mustDo(t, db.Put([]byte("a"), []byte("3")))
	mustDo(t, txn.Commit())
}

// TestTxnIsolationModel is a model test of the isolation level. Up to
// four transactions are open at a time, interleaved at random with each
// other and with plain writes, in one goroutine so that the schedule is
// the seed's. A model (a map and, per key, the logical time of its last
// write) predicts every read — the snapshot plus the transaction's own
// writes — and every commit's outcome exactly: a conflict if and only if
// a key the transaction read, or a key in a range it traversed, was
// written after it began. The store must end as the model.
func TestTxnIsolationModel(t *testing.T) {
	const keys = 12
	seeds := uint64(20)
	if raceEnabled || testing.Short() {
		seeds = 6
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runIsolationModel(t, seed, keys)
		})
	}
}

type modelTxn struct {
	txn     *Txn
	update  bool
	start   int // model time it began at
	view    txnView
	own     map[string]bool // keys it wrote (or range-deleted): reads of them are not reads
	written bool
	reads   map[string]bool
}

func runIsolationModel(t *testing.T, seed uint64, keys int) {
	rng := rand.New(rand.NewPCG(seed, 11))
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	state := txnView{}
	wtime := map[string]int{}
	now := 0
	space := make([]string, keys)
	for i := range space {
		space[i] = string(txnKey(i))
	}
	inRange := func(s, e string) []string {
		var ks []string
		for _, k := range space {
			if k >= s && k < e {
				ks = append(ks, k)
			}
		}
		return ks
	}
	var open []*modelTxn
	var conflicts, commits int
	for step := range 1500 {
		k := space[rng.IntN(keys)]
		switch op := rng.IntN(20); {
		case op < 2 || len(open) == 0: // begin
			if len(open) == 4 {
				continue
			}
			m := &modelTxn{update: rng.IntN(5) != 0, start: now, view: state.clone(), own: map[string]bool{}, reads: map[string]bool{}}
			m.txn = db.NewTransaction(m.update)
			open = append(open, m)
		case op < 4: // a plain write
			now++
			switch rng.IntN(3) {
			case 0:
				mustDo(t, db.Delete([]byte(k)))
				delete(state, k)
				wtime[k] = now
			case 1:
				s, e := txnRange(rng, keys)
				mustDo(t, db.DeleteRange(s, e))
				state.deleteRange(s, e)
				for _, x := range inRange(string(s), string(e)) {
					wtime[x] = now
				}
			default:
				v := fmt.Sprintf("plain%d", step)
				mustDo(t, db.Put([]byte(k), []byte(v)))
				state[k], wtime[k] = v, now
			}
		default:
			i := rng.IntN(len(open))
			m := open[i]
			switch op := rng.IntN(10); {
			case op < 3: // Get
				got, err := m.txn.Get([]byte(k))
				want, ok := m.view[k]
				if ok != (err == nil) || ok && string(got) != want || !ok && !errors.Is(err, ErrNotFound) {
					t.Fatalf("seed %d step %d: Get %s = %q, %v; want %q, %v", seed, step, k, got, err, want, ok)
				}
				if !m.own[k] {
					m.reads[k] = true
				}
			case op < 5: // a scan: all of a range, or a few keys from a seek
				lo, hi := txnRange(rng, keys)
				it, err := m.txn.NewIterator(&IterOptions{LowerBound: lo, UpperBound: hi})
				mustDo(t, err)
				want := m.view.sorted(lo, hi)
				n := len(want)
				if rng.IntN(2) == 0 {
					n = rng.IntN(3)
				}
				var got []string
				for ok := it.First(); ok && len(got) < n+1; ok = it.Next() {
					got = append(got, string(it.Key()))
					if len(got) == n+1 {
						break
					}
				}
				mustDo(t, it.Close())
				wantGot := want[:min(n+1, len(want))]
				if fmt.Sprint(got) != fmt.Sprint(wantGot) {
					t.Fatalf("seed %d step %d: scan [%s, %s) = %v, want %v", seed, step, lo, hi, got, wantGot)
				}
				// Traversed: from the lower bound through the last key
				// shown, or to the upper bound if it ran off the end.
				end := string(hi)
				if len(got) == n+1 {
					end = got[n] + "\x00"
				}
				for _, x := range inRange(string(lo), end) {
					m.reads[x] = true
				}
			case op < 8: // a write
				if !m.update {
					if err := m.txn.Put([]byte(k), nil); !errors.Is(err, ErrTxnReadOnly) {
						t.Fatalf("Put in a read-only transaction = %v", err)
					}
					continue
				}
				m.written = true
				switch rng.IntN(4) {
				case 0:
					mustDo(t, m.txn.Delete([]byte(k)))
					delete(m.view, k)
					m.own[k] = true
				case 1:
					s, e := txnRange(rng, keys)
					mustDo(t, m.txn.DeleteRange(s, e))
					m.view.deleteRange(s, e)
					for _, x := range inRange(string(s), string(e)) {
						m.own[x] = true
					}
				default:
					v := fmt.Sprintf("txn%d", step)
					mustDo(t, m.txn.Put([]byte(k), []byte(v)))
					m.view[k] = v
					m.own[k] = true
				}
			default: // commit
				wantConflict := false
				if m.update && m.written {
					for x := range m.reads {
						wantConflict = wantConflict || wtime[x] > m.start
					}
				}
				err := m.txn.Commit()
				if wantConflict != errors.Is(err, ErrConflict) || !wantConflict && err != nil {
					t.Fatalf("seed %d step %d: Commit = %v, want conflict %v (began at %d, read %v)", seed, step, err, wantConflict, m.start, m.reads)
				}
				if wantConflict {
					conflicts++
				} else if m.written {
					commits++
					now++
					for x := range m.own {
						if v, ok := m.view[x]; ok {
							state[x] = v
						} else {
							delete(state, x)
						}
						wtime[x] = now
					}
				}
				open = append(open[:i], open[i+1:]...)
			}
		}
	}
	for _, m := range open {
		m.txn.Discard()
	}
	checkStoreEquals(t, db, state)
	if conflicts == 0 || commits == 0 {
		t.Fatalf("seed %d: %d conflicts and %d commits with writes: the schedule tested little", seed, conflicts, commits)
	}
	db.txns.mu.Lock()
	defer db.txns.mu.Unlock()
	if db.txns.open.Len() != 0 || len(db.txns.history) != 0 || db.txns.active.Load() != 0 {
		t.Fatalf("after every transaction ended: %d open, %d groups of history", db.txns.open.Len(), len(db.txns.history))
	}
}

// TestTxnIteratorSetBoundsReads: a reused iterator's read set is every
// range it traversed under each of its bounds, and nothing between them.
func TestTxnIteratorSetBoundsReads(t *testing.T) {
	for _, tc := range []struct {
		write    string
		conflict bool
	}{
		{"b1", true},  // inside the first bounds, traversed
		{"y1", true},  // inside the second
		{"m1", false}, // between them: never read
	} {
		t.Run(tc.write, func(t *testing.T) {
			db := mustOpen(t, t.TempDir(), nil)
			defer db.Close()
			for _, k := range []string{"a", "b", "m", "x", "y"} {
				mustDo(t, db.Put([]byte(k), []byte("v")))
			}
			txn := db.NewTransaction(true)
			defer txn.Discard()
			it, err := txn.NewIterator(&IterOptions{LowerBound: []byte("a"), UpperBound: []byte("c")})
			mustDo(t, err)
			n := 0
			for ok := it.First(); ok; ok = it.Next() {
				n++
			}
			it.SetBounds([]byte("x"), []byte("z"))
			for ok := it.First(); ok; ok = it.Next() {
				n++
			}
			mustDo(t, it.Close())
			if n != 4 {
				t.Fatalf("the two scans saw %d keys, want 4", n)
			}
			mustDo(t, txn.Put([]byte("out"), []byte("1")))
			mustDo(t, db.Put([]byte(tc.write), []byte("other")))
			if err := txn.Commit(); errors.Is(err, ErrConflict) != tc.conflict {
				t.Fatalf("commit after a write of %s: %v, want conflict %v", tc.write, err, tc.conflict)
			}
		})
	}
}

// TestTxnIteratorsClosedInAnyOrder: iterators closed in any order leave
// the transaction tracking exactly those still open, so that Commit reads
// the spans of each once: the read set is what every iterator, open or
// closed, traversed. Each of n iterators reads one key; a write of any of
// them after the transaction began makes its commit conflict, a write of
// a key none read does not.
func TestTxnIteratorsClosedInAnyOrder(t *testing.T) {
	const n = 40
	rng := rand.New(rand.NewPCG(5, 5))
	for _, written := range []int{-1, 0, n / 2, n - 1} {
		db := mustOpen(t, t.TempDir(), smallOptions())
		for i := range n {
			mustDo(t, db.Put(fmt.Appendf(nil, "k%03d", 2*i), []byte("v")))
		}
		txn := db.NewTransaction(true)
		its := make([]*TxnIterator, n)
		for i := range its {
			it, err := txn.NewIterator(&IterOptions{LowerBound: fmt.Appendf(nil, "k%03d", 2*i), UpperBound: fmt.Appendf(nil, "k%03d", 2*i+1)})
			mustDo(t, err)
			if !it.First() {
				t.Fatalf("iterator %d found nothing", i)
			}
			its[i] = it
		}
		open := map[*TxnIterator]bool{}
		for _, i := range rng.Perm(n)[:n/2] {
			mustDo(t, its[i].Close())
		}
		for _, it := range its {
			if !it.closed {
				open[it] = true
			}
		}
		if len(txn.iters) != len(open) {
			t.Fatalf("%d iterators tracked, %d open", len(txn.iters), len(open))
		}
		for i, it := range txn.iters {
			if !open[it] || it.idx != i {
				t.Fatalf("tracked iterator %d: open %v, idx %d", i, open[it], it.idx)
			}
			delete(open, it)
		}
		k := []byte("k999") // read by none
		if written >= 0 {
			k = fmt.Appendf(nil, "k%03d", 2*written)
		}
		mustDo(t, db.Put(k, []byte("w")))
		mustDo(t, txn.Put([]byte("out"), []byte("x")))
		if err := txn.Commit(); errors.Is(err, ErrConflict) != (written >= 0) {
			t.Fatalf("write of %s: Commit = %v", k, err)
		}
		for _, it := range its {
			it.Close()
		}
		mustDo(t, db.Close())
	}
}
