package bloomkv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// randomBounds returns SetBounds arguments: each bound absent, a random
// key, or (rarely) empty.
func randomBounds(rng *rand.Rand) (lower, upper []byte) {
	bound := func() []byte {
		switch rng.IntN(6) {
		case 0, 1:
			return nil
		case 2:
			return []byte{}
		}
		return fmt.Appendf(nil, "k%04d", rng.IntN(1200))
	}
	return bound(), bound()
}

// TestIteratorSetBoundsModel reuses one Iterator of the DB and one of a
// Snapshot across many random bounds and prefixes (SetBounds, SetPrefix)
// and checks random moves after each against a sorted map, over a store
// of several segments, a memtable, point and (in one half) range
// deletions, and snapshots that keep old versions through compactions.
// Without range deletions, after a compaction, and with bounds or a
// prefix that only one segment meets, the iterator reads that segment
// directly (the single-segment path); the test checks that it did.
func TestIteratorSetBoundsModel(t *testing.T) {
	for _, rangeDels := range []bool{false, true} {
		t.Run(fmt.Sprintf("rangeDels=%v", rangeDels), func(t *testing.T) {
			testSetBoundsModel(t, rangeDels)
		})
	}
}

func testSetBoundsModel(t *testing.T, rangeDels bool) {
	rng := rand.New(rand.NewPCG(*modelSeed, 11))
	o := smallOptions()
	o.Prefix = FixedPrefix(3)
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	model := map[string]string{}
	rounds, single := 24, 0
	if testing.Short() {
		rounds = 8
	}
	for round := range rounds {
		randomModelWrites(t, db, rng, model, round, rangeDels)
		switch rng.IntN(3) {
		case 0:
			mustDo(t, db.Flush())
		case 1:
			mustDo(t, db.Compact())
		}
		// A snapshot taken now, read after more writes and a compaction
		// that must keep the versions it sees.
		snap, err := db.NewSnapshot()
		mustDo(t, err)
		snapModel := maps.Clone(model)
		for range 100 {
			k := fmt.Sprintf("k%04d", rng.IntN(1000))
			if rng.IntN(3) == 0 {
				mustDo(t, db.Delete([]byte(k)))
				delete(model, k)
			} else {
				v := fmt.Sprintf("w%d-%d", round, rng.IntN(1e6))
				mustDo(t, db.Put([]byte(k), []byte(v)))
				model[k] = v
			}
		}
		if rng.IntN(2) == 0 {
			mustDo(t, db.Compact())
		}
		it, err := db.NewIterator(randomIterOptions(rng))
		mustDo(t, err)
		sit, err := snap.NewIterator(nil)
		mustDo(t, err)
		for range 12 {
			for _, c := range []struct {
				it    *Iterator
				model map[string]string
			}{{it, model}, {sit, snapModel}} {
				// SetBounds and SetPrefix get copies that are scribbled
				// over once they return: they must have copied them.
				opts := &IterOptions{}
				if rng.IntN(3) == 0 {
					opts.Prefix = fmt.Appendf(nil, "k%02d", rng.IntN(12))
					p := bytes.Clone(opts.Prefix)
					c.it.SetPrefix(p)
					copy(p, "zzz")
				} else {
					opts.LowerBound, opts.UpperBound = randomBounds(rng)
					lo, hi := bytes.Clone(opts.LowerBound), bytes.Clone(opts.UpperBound)
					c.it.SetBounds(lo, hi)
					for _, b := range [][]byte{lo, hi} {
						for i := range b {
							b[i] = 'z'
						}
					}
				}
				if c.it.Valid() || c.it.Next() || c.it.Prev() || c.it.Key() != nil {
					t.Fatalf("round %d: iterator positioned after SetBounds", round)
				}
				if c.it.seg != nil {
					single++
				}
				checkIter(t, rng, c.it, newSortedModel(c.model, opts), 60)
			}
		}
		mustDo(t, it.Close())
		mustDo(t, sit.Close())
		mustDo(t, snap.Close())
	}
	if !rangeDels && single == 0 {
		t.Fatal("the single-segment path was never taken")
	}
}

// TestSetBoundsOnClosedIterator: SetBounds and SetPrefix leave a closed
// iterator closed.
func TestSetBoundsOnClosedIterator(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	mustDo(t, it.Close())
	it.SetBounds(nil, nil)
	it.SetPrefix([]byte("a"))
	if it.First() || it.Error() != ErrIteratorClosed {
		t.Fatalf("closed iterator: First valid, err %v", it.Error())
	}
}

// TestSetPrefixUsesPrefixFilters: an iterator reused with SetPrefix skips
// the segments whose prefix filter rules the prefix out, as one made with
// IterOptions.Prefix does, and reads no block for an absent prefix.
func TestSetPrefixUsesPrefixFilters(t *testing.T) {
	o := DefaultOptions()
	o.Prefix = FixedPrefix(4)
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for s := range 4 { // four segments, each with its own prefixes
		for i := range 200 {
			mustDo(t, db.Put(fmt.Appendf(nil, "p%d%02d/%03d", s, i%50, i), []byte("v")))
		}
		mustDo(t, db.Flush())
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if n != 800 {
		t.Fatalf("full scan: %d keys, want 800", n)
	}
	it.SetPrefix([]byte("p213"))
	n = 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if n != 4 || it.seg == nil {
		t.Fatalf("prefix p213: %d keys (want 4), single segment %v", n, it.seg != nil)
	}
	mid := db.Stats()
	it.SetPrefix([]byte("p12a")) // absent, inside the key range of segment 1 only
	if it.First() {
		t.Fatalf("absent prefix: at %q", it.Key())
	}
	after := db.Stats()
	if after.PrefixFilterSkips-mid.PrefixFilterSkips != 1 || after.BlockReads != mid.BlockReads {
		t.Fatalf("absent prefix: %d prefix filter skips, %d block reads", after.PrefixFilterSkips-mid.PrefixFilterSkips, after.BlockReads-mid.BlockReads)
	}
}

// TestBoundsPrefix: only bounds that are exactly the range of the keys
// with a prefix are read as that prefix (and so let the prefix filters
// skip segments); bounds whose ends differ in their last byte by more
// than one, or whose upper is longer, are a range of several prefixes.
func TestBoundsPrefix(t *testing.T) {
	for _, c := range []struct {
		lower, upper, want string
		isPrefix           bool
	}{
		{"k01", "k02", "k01", true},
		{"ab", "ac", "ab", true},
		{"a\xff", "b", "a\xff", true},
		{"a\xff\xff", "b", "a\xff\xff", true},
		{"k01", "k04", "", false}, // k01, k02 and k03
		{"k01", "k0", "", false},
		{"ab", "b", "", false}, // ab to az: not all of a
		{"a\xff", "a\xff\x01", "", false},
		{"a", "b\x00", "", false},
		{"", "a", "", false},
		{"\xff", "", "", false},
		{"a\xfe", "b", "", false},
	} {
		got := boundsPrefix([]byte(c.lower), []byte(c.upper))
		if (got != nil) != c.isPrefix || string(got) != c.want {
			t.Errorf("boundsPrefix(%q, %q) = %q, want %q (a prefix: %v)", c.lower, c.upper, got, c.want, c.isPrefix)
		}
	}
}

// TestSetBoundsOverSeveralPrefixes: bounds that span several whole
// prefixes, ends differing only in their last byte, find the keys of
// every prefix between them, though a prefix filter would rule out the
// first one in some segments.
func TestSetBoundsOverSeveralPrefixes(t *testing.T) {
	o := DefaultOptions()
	o.Prefix = FixedPrefix(3)
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for _, p := range []string{"k01", "k03", "k05"} { // a segment each
		for i := range 3 {
			mustDo(t, db.Put(fmt.Appendf(nil, "%s/%d", p, i), []byte("v")))
		}
		mustDo(t, db.Flush())
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	defer it.Close()
	want := "[k01/0 k01/1 k01/2 k03/0 k03/1 k03/2]"
	it.SetBounds([]byte("k01"), []byte("k04"))
	var got []string
	for k := range it.All() {
		got = append(got, string(k))
	}
	if fmt.Sprint(got) != want {
		t.Fatalf("SetBounds(k01, k04): %v, want %v", got, want)
	}
	it2, err := db.NewIterator(&IterOptions{LowerBound: []byte("k01"), UpperBound: []byte("k04")})
	mustDo(t, err)
	defer it2.Close()
	got = got[:0]
	for k := range it2.Backward() {
		got = append([]string{string(k)}, got...)
	}
	if fmt.Sprint(got) != want {
		t.Fatalf("bounds k01, k04 backward: %v, want %v", got, want)
	}
}

// BenchmarkBoundedScanBesideWrites: a reused iterator scans 2-byte-prefix
// ranges (about 1.5 keys each) of a compacted store of 10^5 keys while the
// memtable holds 1,000 recent writes in another part of the key space
// (keys starting 0xff), as a service reading one region while it writes
// another does. One op is a SetBounds and its scan.
func BenchmarkBoundedScanBesideWrites(b *testing.B) {
	db := mustOpen(b, b.TempDir(), nil)
	defer db.Close()
	var k [16]byte
	v := make([]byte, 100)
	for i := range uint64(100_000) {
		key := benchKey(k[:], i)
		key[0] &= 0x7f // below the written region
		mustDo(b, db.Put(key, benchValue(v, i)))
	}
	mustDo(b, db.Compact())
	for i := range uint64(1000) {
		key := benchKey(k[:], i)
		key[0] = 0xff
		mustDo(b, db.Put(key, v))
	}
	it, err := db.NewIterator(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	lower, upper := make([]byte, 2), make([]byte, 2)
	keys := 0
	for b.Loop() {
		p := uint16(rng.IntN(0x7fff))
		binary.BigEndian.PutUint16(lower, p)
		binary.BigEndian.PutUint16(upper, p+1)
		it.SetBounds(lower, upper)
		for ok := it.First(); ok; ok = it.Next() {
			keys++
		}
	}
	b.ReportMetric(float64(keys)/float64(b.N), "keys/op")
}

// TestLongerPrefixUsesPrefixFilters: a scan of a prefix longer than the
// extractor's (p = "p213/1" under FixedPrefix(4), "u213:1" under
// SeparatorPrefix(':')) reads only keys whose prefix is its whole prefix
// q ("p213", "u213:"), so the prefix filters of q may skip segments: an
// absent one inside a segment's key range reads no block, and a present
// one finds every key.
func TestLongerPrefixUsesPrefixFilters(t *testing.T) {
	for _, c := range []struct {
		px              *PrefixExtractor
		key             func(s, i int) []byte
		present, absent string
		want            int
	}{
		{FixedPrefix(4), func(s, i int) []byte { return fmt.Appendf(nil, "p%d%02d/%03d", s, i%50, i) }, "p213/1", "p12a/1", 2},
		{SeparatorPrefix(':'), func(s, i int) []byte { return fmt.Appendf(nil, "u%d%02d:%03d", s, i%50, i) }, "u213:1", "u12a:1", 2},
	} {
		o := DefaultOptions()
		o.Prefix = c.px
		o.DisableAutoCompaction = true
		db := mustOpen(t, t.TempDir(), o)
		for s := range 4 { // four segments, each with its own prefixes
			for i := range 200 {
				mustDo(t, db.Put(c.key(s, i), []byte("v")))
			}
			mustDo(t, db.Flush())
		}
		scan := func(p string) (n int, skips, blocks uint64) {
			before := db.Stats()
			it, err := db.NewIterator(&IterOptions{Prefix: []byte(p)})
			mustDo(t, err)
			for ok := it.First(); ok; ok = it.Next() {
				if !bytes.HasPrefix(it.Key(), []byte(p)) {
					t.Fatalf("%s: prefix %q: key %q", c.px.Name, p, it.Key())
				}
				n++
			}
			mustDo(t, it.Close())
			after := db.Stats()
			return n, after.PrefixFilterSkips - before.PrefixFilterSkips, after.BlockReads - before.BlockReads
		}
		if n, _, _ := scan(c.present); n != c.want {
			t.Errorf("%s: prefix %q: %d keys, want %d", c.px.Name, c.present, n, c.want)
		}
		if n, skips, blocks := scan(c.absent); n != 0 || skips != 1 || blocks != 0 {
			t.Errorf("%s: absent prefix %q: %d keys, %d segments skipped, %d blocks read; want 0, 1, 0", c.px.Name, c.absent, n, skips, blocks)
		}
		mustDo(t, db.Close())
	}
}
