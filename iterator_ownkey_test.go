package bloomkv

import (
	"fmt"
	"testing"
)

// ownKeyStores fills a store three ways for the tests of seeks and bounds
// given the iterator's own key: every key in one segment (the Iterator
// reads it directly, its Key rebuilt in the block iterator's buffer from
// the block's prefix compression), every key in the memtable, and the
// even keys in a segment with the odd ones in the memtable (a merge).
// Keys share a prefix and values are short, so most entries of a block
// are prefix-compressed rather than restart points.
func ownKeyStores(t *testing.T, n int) map[string]*DB {
	t.Helper()
	stores := map[string]*DB{}
	for _, name := range []string{"segment", "memtable", "merged"} {
		db := mustOpen(t, t.TempDir(), &Options{DisableCompression: true})
		t.Cleanup(func() { db.Close() })
		put := func(i int) {
			if err := db.Put(fmt.Appendf(nil, "key%05d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if name != "merged" || i%2 == 0 {
				put(i)
			}
		}
		if name != "memtable" {
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if name == "merged" {
			for i := 1; i < n; i += 2 {
				put(i)
			}
		}
		stores[name] = db
	}
	return stores
}

// seeker is what Iterator and TxnIterator share for these tests.
type seeker interface {
	First() bool
	Next() bool
	Seek([]byte) bool
	SeekLT([]byte) bool
	Key() []byte
}

// checkSeekOwnKey steps through it and, at every key, seeks to that key
// with the slice Key returned, forward and backward: Seek must land on
// the key itself, SeekLT on the key before it.
func checkSeekOwnKey(t *testing.T, it seeker, n int) {
	t.Helper()
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 5 {
			t.Errorf(format, args...)
		}
	}
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		want := fmt.Sprintf("key%05d", i)
		if got := string(it.Key()); got != want {
			t.Fatalf("step %d at %q, want %q", i, got, want)
		}
		if !it.Seek(it.Key()) || string(it.Key()) != want {
			report("Seek(Key()) at %s landed on %q", want, it.Key())
			if !it.Seek([]byte(want)) {
				t.Fatalf("Seek(%s) found nothing", want)
			}
		}
		if i > 0 {
			before := fmt.Sprintf("key%05d", i-1)
			if !it.SeekLT(it.Key()) || string(it.Key()) != before {
				report("SeekLT(Key()) at %s landed on %q, want %s", want, it.Key(), before)
			}
			// Back to want, through Next: a step from a backward move.
			if !it.Next() || string(it.Key()) != want {
				t.Fatalf("Next after SeekLT to %s: at %q, want %s", before, it.Key(), want)
			}
		}
		i++
	}
	if i != n {
		t.Fatalf("walked %d keys, want %d", i, n)
	}
	if bad > 0 {
		t.Errorf("%d of %d seeks to the iterator's own key landed elsewhere", bad, 2*n-1)
	}
}

// TestIteratorSeekOwnKey checks that Seek and SeekLT given the slice the
// iterator's Key returned land where that key says, though the move
// rewrites the memory the slice points into.
func TestIteratorSeekOwnKey(t *testing.T) {
	const n = 300
	for name, db := range ownKeyStores(t, n) {
		t.Run(name, func(t *testing.T) {
			it, err := db.NewIterator(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer it.Close()
			checkSeekOwnKey(t, it, n)
		})
	}
}

// TestTxnIteratorSeekOwnKey is TestIteratorSeekOwnKey through a
// transaction's iterator, whose keys come from the store and from the
// transaction's own writes.
func TestTxnIteratorSeekOwnKey(t *testing.T) {
	const n = 300
	for name, db := range ownKeyStores(t, n) {
		t.Run(name, func(t *testing.T) {
			txn := db.NewTransaction(true)
			defer txn.Discard()
			// Pending writes of keys the store holds: Seek must find both
			// sources at the key.
			for i := 0; i < n; i += 7 {
				if err := txn.Put(fmt.Appendf(nil, "key%05d", i), []byte("p")); err != nil {
					t.Fatal(err)
				}
			}
			it, err := txn.NewIterator(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer it.Close()
			checkSeekOwnKey(t, it, n)
		})
	}
}

// TestSetPrefixOwnKey narrows iterators to a prefix of their current key,
// as a skip scan does: the bounds must be copied before the iterator lets
// go of the key (in the invariants build, reading them afterwards
// faults).
func TestSetPrefixOwnKey(t *testing.T) {
	const n = 300
	for name, db := range ownKeyStores(t, n) {
		t.Run(name, func(t *testing.T) {
			it, err := db.NewIterator(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer it.Close()
			txn := db.NewTransaction(false)
			defer txn.Discard()
			tit, err := txn.NewIterator(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tit.Close()
			for _, s := range []interface {
				seeker
				SetPrefix([]byte)
				SetBounds(lower, upper []byte)
			}{it, tit} {
				if !s.Seek([]byte("key00150")) {
					t.Fatal("Seek(key00150) found nothing")
				}
				s.SetPrefix(s.Key()[:7]) // "key0015": key00150 to key00159
				keys := 0
				for ok := s.First(); ok; ok = s.Next() {
					keys++
				}
				if keys != 10 {
					t.Errorf("%T: prefix key0015 holds %d keys, want 10", s, keys)
				}
				if !s.First() {
					t.Fatal("First found nothing")
				}
				s.SetBounds(s.Key(), nil) // from key00150 on, with no upper bound
				keys = 0
				for ok := s.First(); ok; ok = s.Next() {
					keys++
				}
				if keys != n-150 {
					t.Errorf("%T: [key00150, ∞) holds %d keys, want %d", s, keys, n-150)
				}
			}
		})
	}
}
