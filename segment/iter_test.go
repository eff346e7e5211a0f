package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestIterRandomWalk moves an Iter at random (seeks to keys held and
// not, Next, Prev, NextUserKey, changes of direction) over segments of
// every writer configuration, checking each position against the model and
// SameUserKey against the entries it moved between: the prev cache and
// the same-key detection must agree with a plain walk of the entries.
// Also over a segment with one entry per user key (as compaction leaves),
// where the steps skip the same-key comparisons.
func TestIterRandomWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for ci, opts := range writerConfigs {
		for _, distinct := range []bool{false, true} {
			t.Run(fmt.Sprint(ci, "/distinct=", distinct), func(t *testing.T) {
				testIterRandomWalk(t, rng, opts, distinct)
			})
		}
	}
}

func testIterRandomWalk(t *testing.T, rng *rand.Rand, opts WriterOptions, distinct bool) {
	es := randomEntries(rng, 2000, 300)
	if distinct {
		es = slices.CompactFunc(randomEntries(rng, 2000, 1<<30), func(a, b entry) bool { return bytes.Equal(a.key, b.key) })
	}
	data, _ := writeSegment(t, es, opts)
	r := openSegment(t, data, ReaderOptions{Cache: NewCache(1 << 16)})
	if got := r.props.Entries == r.props.DistinctKeys; got != distinct {
		t.Fatalf("segment of distinct keys: %v, want %v", got, distinct)
	}
	for _, fill := range []bool{false, true} {
		it := r.NewIter(fill)
		walk(t, rng, it, es)
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func walk(t *testing.T, rng *rand.Rand, it *Iter, es []entry) {
	t.Helper()
	i := -1 // the model's position; -1 or len(es): not at an entry
	for step := range 4000 {
		var op string
		switch from := i; rng.IntN(10) {
		case 0:
			op, i = "First", 0
			it.First()
		case 1:
			op, i = "Last", len(es)-1
			it.Last()
		case 2:
			key := es[rng.IntN(len(es))].key
			if rng.IntN(2) == 0 {
				// A key the segment lacks, just after one it holds: its
				// hash bucket, where not empty, names another key's
				// interval, which may lie past the one to land in.
				key = append(slices.Clip(key), 0)
			}
			op = fmt.Sprintf("SeekGE(%q)", key)
			i, _ = slices.BinarySearchFunc(es, key, func(e entry, k []byte) int { return bytes.Compare(e.key, k) })
			it.SeekGE(key)
		case 3:
			key := es[rng.IntN(len(es))].key
			op = fmt.Sprintf("SeekLT(%q)", key)
			i, _ = slices.BinarySearchFunc(es, key, func(e entry, k []byte) int { return bytes.Compare(e.key, k) })
			i--
			it.SeekLT(key)
		case 4, 5, 6:
			if i < 0 || i >= len(es) {
				continue
			}
			op = "Prev"
			i--
			it.Prev()
			if i >= 0 && it.SameUserKey() != bytes.Equal(es[i].key, es[from].key) {
				t.Fatalf("step %d: Prev from %d to %d: SameUserKey %v", step, from, i, it.SameUserKey())
			}
		case 7, 8:
			if i < 0 || i >= len(es) {
				continue
			}
			op = "Next"
			i++
			it.Next()
			if i < len(es) && it.SameUserKey() != bytes.Equal(es[i].key, es[from].key) {
				t.Fatalf("step %d: Next from %d to %d: SameUserKey %v", step, from, i, it.SameUserKey())
			}
		case 9:
			if i < 0 || i >= len(es) {
				continue
			}
			op = "NextUserKey"
			for i < len(es) && bytes.Equal(es[i].key, es[from].key) {
				i++
			}
			it.NextUserKey()
			if it.Valid() && it.SameUserKey() {
				t.Fatalf("step %d: NextUserKey ends at another version of the same key", step)
			}
		}
		if i < 0 || i >= len(es) {
			if it.Valid() || it.Error() != nil {
				t.Fatalf("step %d: %s: valid %v (err %v), want exhausted", step, op, it.Valid(), it.Error())
			}
			continue
		}
		checkEntry(t, it, es[i], fmt.Sprintf("step %d: %s to %d", step, op, i))
	}
}

// TestPrevCacheBoundsLongInterval walks a block of one restart interval
// and more entries than the prev cache holds (maxPrevEntries), each
// repeating a long prefix, as a damaged or hostile block may: backward
// from its end, from a seek into its middle, and at random (steps either
// way, seeks), every entry must be reached in order, while the cache
// holds at most maxPrevEntries entries and one whole key per
// checkpoint.
func TestPrevCacheBoundsLongInterval(t *testing.T) {
	w := blockWriter{restartInterval: 1 << 30}
	prefix := bytes.Repeat([]byte("k"), 100)
	n := 5*maxPrevEntries/2 + 7
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(bytes.Clone(prefix), "%08d\x00\x00\x00\x00\x00\x00\x00\x01", i)
		w.add(keys[i], nil)
	}
	key := func(i int) []byte { return keys[i] }
	var it blockIter
	if err := it.init(w.finish(), true, "test", 0); err != nil {
		t.Fatal(err)
	}
	check := func(what string, i int) {
		t.Helper()
		if !it.valid || !bytes.Equal(it.key, key(i)) {
			t.Fatalf("%s: at %q (valid %v, err %v), want entry %d", what, it.key[min(len(it.key), len(prefix)):], it.valid, it.err, i)
		}
		if c, k := cap(it.prevCache), cap(it.prevKeys); c > 2*maxPrevEntries || k > 2*(n/maxPrevEntries)*len(key(0)) {
			t.Fatalf("%s: prev cache of %d entries and %d key bytes", what, c, k)
		}
	}
	i := n - 1
	for ok := it.last(); ok; ok = it.prev() {
		check("backward from the end", i)
		i--
	}
	if it.err != nil || i != -1 {
		t.Fatalf("backward from the end: stopped before entry %d: %v", i, it.err)
	}
	i = n/2 + 3
	for ok := it.seekGE(key(i)[:len(key(i))-base.TrailerLen], maxTrailer); ok; ok = it.prev() {
		check("backward from a seek", i)
		i--
	}
	if it.err != nil || i != -1 {
		t.Fatalf("backward from a seek: stopped before entry %d: %v", i, it.err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	i = -1
	steps := 2000
	if raceEnabled || testing.Short() {
		steps = 300
	}
	for step := range steps {
		var ok bool
		switch op := rng.IntN(20); {
		case op == 0:
			ok, i = it.last(), n-1
		case op == 1:
			ok, i = it.first(), 0
		case op == 2:
			i = rng.IntN(n)
			ok = it.seekGE(key(i)[:len(key(i))-base.TrailerLen], maxTrailer)
		case i < 0:
			continue
		case op < 11:
			ok, i = it.prev(), i-1
		default:
			ok, i = it.next(), i+1
		}
		if i < 0 || i >= n {
			if ok || it.err != nil {
				t.Fatalf("step %d: past either end, valid %v, err %v", step, ok, it.err)
			}
			i = -1
			continue
		}
		check(fmt.Sprintf("step %d", step), i)
	}
}

// TestPrevLongIntervalDecodedOnce: entered in the middle of a long
// restart interval, as after a seek, the first step back decodes the
// entries before the target once, into the prev cache, and the following
// steps pop them: a backward walk of the interval must not decode it
// again at each step (the square of its length). Every entry is still
// reached, in order.
func TestPrevLongIntervalDecodedOnce(t *testing.T) {
	w := blockWriter{restartInterval: 1 << 30}
	const n = 1000
	key := func(i int) []byte { return fmt.Appendf(nil, "key%06d\x00\x00\x00\x00\x00\x00\x00\x01", i) }
	for i := range n {
		w.add(key(i), []byte("v"))
	}
	var it blockIter
	if err := it.init(w.finish(), true, "test", 0); err != nil {
		t.Fatal(err)
	}
	if !it.seekGE(key(n / 2)[:9], maxTrailer) || !bytes.Equal(it.key, key(n/2)) {
		t.Fatalf("seek: at %q, %v", it.key, it.err)
	}
	got := n / 2
	for ok := it.prev(); ok; ok = it.prev() {
		if got--; !bytes.Equal(it.key, key(got)) {
			t.Fatalf("at %q, want %q", it.key, key(got))
		}
		if len(it.prevCache) != got {
			t.Fatalf("at entry %d, %d entries cached before it: the interval is decoded again", got, len(it.prevCache))
		}
	}
	if it.err != nil || got != 0 {
		t.Fatalf("stopped %d entries from the start: %v", got, it.err)
	}
}

// TestNextVisibleStopsAtBound checks the store iterator's step over one
// segment: it passes over tombstones and versions too new for its seq,
// and stops at the first user key at or past upper, however many
// tombstones lie beyond (it must not scan them).
func TestNextVisibleStopsAtBound(t *testing.T) {
	es := []entry{
		{key: []byte("a"), seq: 50, kind: base.KindPut, value: []byte("a50")},
		{key: []byte("a"), seq: 10, kind: base.KindPut, value: []byte("a10")},
		{key: []byte("b"), seq: 60, kind: base.KindPut, value: []byte("b60")}, // too new for seq 40
		{key: []byte("b"), seq: 20, kind: base.KindDelete},
		{key: []byte("c"), seq: 30, kind: base.KindPut, value: []byte("c30")},
	}
	for i := range 1000 {
		es = append(es, entry{key: fmt.Appendf(nil, "d%04d", i), seq: 5, kind: base.KindDelete})
	}
	es = append(es, entry{key: []byte("e"), seq: 5, kind: base.KindPut, value: []byte("e5")})
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 64})
	r := openSegment(t, data, ReaderOptions{Name: "b.seg"})
	it := r.NewIter(false)
	defer it.Close()
	if !it.First() || !it.SkipToVisible(40, nil) || string(it.Value()) != "a10" {
		t.Fatalf("SkipToVisible at seq 40 from a: %q@%d %q", it.Key(), it.Seq(), it.Value())
	}
	if !it.NextVisible(40, nil) || string(it.Value()) != "c30" {
		t.Fatalf("NextVisible at seq 40 from a: %q@%d %q, want c30 (b is too new, then deleted)", it.Key(), it.Seq(), it.Value())
	}
	if it.NextVisible(40, []byte("d0000")) || string(it.Key()) != "d0000" {
		t.Fatalf("NextVisible with bound d0000 from c: %v at %q, want false at d0000", it.Valid(), it.Key())
	}
	it.SeekGE([]byte("c"))
	if !it.NextVisible(40, nil) || string(it.Value()) != "e5" {
		t.Fatalf("NextVisible without a bound from c: %q %q, want e5", it.Key(), it.Value())
	}
}

// TestReverseApartLayouts walks backward, against the model (a sorted
// slice), segments that mix values kept in their blocks with values
// stored apart, in each layout the writer makes of them: blocks of one or
// two entries, 4 KiB blocks where every entry holding a value handle
// starts its own restart interval (restartApart), and larger blocks where
// such entries share intervals two or three at a time. Each step's key,
// value, sequence number, kind and SameUserKey must be the model's, over
// keys with several versions and over keys with one (as compaction
// leaves), from the end and from seeks.
func TestReverseApartLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, opts := range []WriterOptions{
		{BlockSize: 48, SeparateValues: 40},
		{BlockSize: 100, SeparateValues: 40, BitsPerKey: 10},
		{SeparateValues: 40, BitsPerKey: 10},
		{BlockSize: 8 << 10, SeparateValues: 40},
	} {
		for _, distinct := range []bool{false, true} {
			t.Run(fmt.Sprintf("block=%d/distinct=%v", opts.BlockSize, distinct), func(t *testing.T) {
				es := randomEntries(rng, 3000, 600)
				if distinct {
					es = slices.CompactFunc(randomEntries(rng, 3000, 1<<30), func(a, b entry) bool { return bytes.Equal(a.key, b.key) })
				}
				data, props := writeSegment(t, es, opts)
				if props.Values == 0 || props.Values == uint64(len(es)) {
					t.Fatalf("%d of %d values stored apart, want a mix", props.Values, len(es))
				}
				r := openSegment(t, data, ReaderOptions{Name: "rev.seg"})
				it := r.NewIter(false)
				defer it.Close()
				i := len(es) - 1
				for ok := it.Last(); ok; ok = it.Prev() {
					checkEntry(t, it, es[i], fmt.Sprintf("backward %d", i))
					if i < len(es)-1 && it.SameUserKey() != bytes.Equal(es[i].key, es[i+1].key) {
						t.Fatalf("backward %d: SameUserKey %v", i, it.SameUserKey())
					}
					i--
				}
				if it.Error() != nil || i != -1 {
					t.Fatalf("backward iteration stopped at %d (err %v)", i, it.Error())
				}
				for range 200 {
					key := es[rng.IntN(len(es))].key
					j, _ := slices.BinarySearchFunc(es, key, func(e entry, k []byte) int { return bytes.Compare(e.key, k) })
					it.SeekLT(key)
					for stop := j - 40; j > 0 && j > stop; {
						j--
						checkEntry(t, it, es[j], fmt.Sprintf("SeekLT(%q) then back to %d", key, j))
						it.Prev()
					}
					if j == 0 && (it.Valid() || it.Error() != nil) {
						t.Fatalf("SeekLT(%q) then back past the first entry: valid %v, err %v", key, it.Valid(), it.Error())
					}
				}
			})
		}
	}
}

// TestRestartApartLayout checks the writer's restart points in data
// blocks of values stored apart: with blocks of 4 KiB (the default) every
// entry holding a value handle starts a restart interval, with larger
// blocks or without a hash index they share intervals as other entries
// do; every block keeps its hash index where the writer makes one.
func TestRestartApartLayout(t *testing.T) {
	es := make([]entry, 3000)
	for i := range es {
		es[i] = entry{key: fmt.Appendf(nil, "key%08d", i), seq: 1, kind: base.KindPut, value: bytes.Repeat([]byte{'v'}, 10)}
		if i%4 != 0 {
			es[i].value = bytes.Repeat([]byte{'v'}, 100) // stored apart
		}
	}
	for _, c := range []struct {
		opts    WriterOptions
		singles bool
	}{
		{WriterOptions{SeparateValues: 64}, true},
		{WriterOptions{BlockSize: 4 << 10, SeparateValues: 64}, true},
		{WriterOptions{BlockSize: 8 << 10, SeparateValues: 64}, false},
		{WriterOptions{NoHashIndex: true, SeparateValues: 64}, false},
	} {
		data, _ := writeSegment(t, es, c.opts)
		r := openSegment(t, data, ReaderOptions{})
		alone, shared := 0, 0 // entries holding value handles: at a restart point, or not
		for i := range r.index {
			block, err := r.dataBlock(i, cacheLookup, nil)
			if err != nil {
				t.Fatal(err)
			}
			if hasHashIndex(block) == c.opts.NoHashIndex {
				t.Fatalf("%+v: block %d has a hash index: %v", c.opts, i, hasHashIndex(block))
			}
			var it blockIter
			if err := it.init(block, true, "", 0); err != nil {
				t.Fatal(err)
			}
			starts := map[int]bool{}
			for j := range it.numRestarts {
				starts[it.restart(j)] = true
			}
			for ok := it.first(); ok; ok = it.next() {
				switch {
				case !isValueHandle(it.key):
				case starts[it.offset]:
					alone++
				default:
					shared++
				}
			}
		}
		if alone+shared != len(es)*3/4 || (shared == 0) != c.singles {
			t.Fatalf("%+v: %d value handles at restart points, %d not (want all at them: %v)", c.opts, alone, shared, c.singles)
		}
	}
}

// TestScanGEMatchesCompare checks the block seek's scan, which compares
// keys only past the prefix each shares with the one before, against a
// whole comparison of every key: over blocks of keys with long common
// prefixes, keys that are prefixes of others, several versions of a key,
// any restart layout, and targets in the block or between its keys.
func TestScanGEMatchesCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		// User keys over a two-letter alphabet, so that they share long
		// prefixes and are prefixes of each other.
		seen := map[string]bool{}
		var ukeys []string
		for range 1 + rng.IntN(60) {
			k := make([]byte, rng.IntN(20))
			for i := range k {
				k[i] = 'a' + byte(rng.IntN(2))
			}
			if !seen[string(k)] {
				seen[string(k)] = true
				ukeys = append(ukeys, string(k))
			}
		}
		slices.Sort(ukeys)
		var ikeys [][]byte
		for _, k := range ukeys {
			for v := rng.IntN(3) + 1; v > 0; v-- { // newest first
				ikeys = append(ikeys, appendInternalKey(nil, []byte(k), base.MakeTrailer(uint64(10*v+rng.IntN(5)), base.KindPut)))
			}
		}
		w := blockWriter{restartInterval: 1 + rng.IntN(20)}
		for _, k := range ikeys {
			w.add(k, []byte("v"))
		}
		var it blockIter
		if err := it.init(bytes.Clone(w.finish()), true, "test", 0); err != nil {
			t.Fatal(err)
		}
		for range 50 {
			var target []byte
			if rng.IntN(2) == 0 {
				target = []byte(ukeys[rng.IntN(len(ukeys))])
			}
			for range rng.IntN(20) {
				target = append(target, 'a'+byte(rng.IntN(3)))
			}
			trailer := base.MakeTrailer(uint64(rng.IntN(40)), base.KindPut)
			if rng.IntN(4) == 0 {
				trailer = maxTrailer
			}
			want := len(ikeys)
			for i, k := range ikeys {
				if compareInternal(k, target, trailer) >= 0 {
					want = i
					break
				}
			}
			ok := it.seekGE(target, trailer)
			if it.err != nil || ok != (want < len(ikeys)) || ok && !bytes.Equal(it.key, ikeys[want]) {
				t.Fatalf("round %d: seekGE(%q, %x) = %v at %q, err %v; want entry %d of %q", round, target, trailer, ok, it.key, it.err, want, ikeys)
			}
		}
	}
}
