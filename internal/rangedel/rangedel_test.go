package rangedel

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveCovering is the definition Covering must agree with: the newest
// visible tombstone whose range holds key.
func naiveCovering(ts []Tombstone, key []byte, readSeq uint64) uint64 {
	var best uint64
	for _, t := range ts {
		if bytes.Compare(t.Start, key) <= 0 && bytes.Compare(key, t.End) < 0 && t.Seq <= readSeq && t.Seq > best {
			best = t.Seq
		}
	}
	return best
}

// keyShapes are the key spaces the tests draw from: short keys, and keys
// that share their first 8 bytes, or end in zero bytes, which Find's
// 8-byte prefixes cannot tell apart.
var keyShapes = []func(i int) []byte{
	func(i int) []byte { return fmt.Appendf(nil, "k%02d", i) },
	func(i int) []byte { return fmt.Appendf(nil, "sameprefk%02d", i) },
	func(i int) []byte { return append([]byte{'k'}, make([]byte, i%7)...) },
}

var keyShape = keyShapes[0]

func randKey(rng *rand.Rand) []byte { return keyShape(rng.IntN(40)) }

func randTombstones(rng *rand.Rand, n int, seq *uint64) []Tombstone {
	ts := make([]Tombstone, n)
	for i := range ts {
		*seq++
		ts[i] = Tombstone{Start: randKey(rng), End: randKey(rng), Seq: *seq}
	}
	return ts
}

// TestBuildAgreesWithDefinition checks Covering, Bounds, Merge and the
// fragment invariants against a brute-force search over the raw
// tombstones.
func TestBuildAgreesWithDefinition(t *testing.T) {
	for i, shape := range keyShapes {
		keyShape = shape
		t.Run(fmt.Sprint("shape", i), testBuildAgreesWithDefinition)
	}
	keyShape = keyShapes[0]
}

func testBuildAgreesWithDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		var seq uint64
		a := randTombstones(rng, rng.IntN(8), &seq)
		b := randTombstones(rng, rng.IntN(8), &seq)
		all := append(append([]Tombstone(nil), a...), b...)
		added := Build(nil)
		for _, j := range rng.Perm(len(all)) {
			added = added.Add(all[j])
		}
		lists := map[string]*List{"built": Build(all), "merged": Merge(Build(a), Build(b)), "added": added}
		var lo, hi []byte // the bounds of the tombstones that delete something
		for _, ts := range all {
			if bytes.Compare(ts.Start, ts.End) < 0 {
				if lo == nil || bytes.Compare(ts.Start, lo) < 0 {
					lo = ts.Start
				}
				if hi == nil || bytes.Compare(ts.End, hi) > 0 {
					hi = ts.End
				}
			}
		}
		for name, l := range lists {
			checkInvariants(t, l)
			if start, end := l.Bounds(); !bytes.Equal(start, lo) || !bytes.Equal(end, hi) {
				t.Fatalf("trial %d %s: Bounds %q, %q; want %q, %q", trial, name, start, end, lo, hi)
			}
			for k := range 42 {
				key := keyShape(k)
				for readSeq := uint64(0); readSeq <= seq+1; readSeq++ {
					if got, want := l.Covering(key, readSeq), naiveCovering(all, key, readSeq); got != want {
						t.Fatalf("trial %d %s: Covering(%s, %d) = %d, want %d (tombstones %v)", trial, name, key, readSeq, got, want, all)
					}
				}
			}
		}
	}
}

func checkInvariants(t *testing.T, l *List) {
	t.Helper()
	n := 0
	for i, f := range l.Fragments() {
		if bytes.Compare(f.Start, f.End) >= 0 {
			t.Fatalf("fragment %d empty: %q..%q", i, f.Start, f.End)
		}
		if i > 0 && bytes.Compare(l.frags[i-1].End, f.Start) > 0 {
			t.Fatalf("fragments %d and %d overlap", i-1, i)
		}
		for j := 1; j < len(f.Seqs); j++ {
			if f.Seqs[j-1] <= f.Seqs[j] {
				t.Fatalf("fragment %d seqs not strictly descending: %v", i, f.Seqs)
			}
		}
		if len(f.Seqs) == 0 {
			t.Fatalf("fragment %d has no seqs", i)
		}
		n += len(f.Seqs)
	}
	if n != l.Len() {
		t.Fatalf("Len %d, fragments hold %d", l.Len(), n)
	}
	bytes := 0
	for _, f := range l.Fragments() {
		bytes += fragmentOverhead + 8*len(f.Seqs)
	}
	if bytes != l.Bytes() {
		t.Fatalf("Bytes %d, fragments hold %d", l.Bytes(), bytes)
	}
}

func TestCoversSpan(t *testing.T) {
	l := Build([]Tombstone{
		{Start: []byte("a"), End: []byte("f"), Seq: 10},
		{Start: []byte("f"), End: []byte("m"), Seq: 12},
		{Start: []byte("p"), End: []byte("z"), Seq: 20},
	})
	tests := []struct {
		start, last     string
		minSeq, readSeq uint64
		want            bool
	}{
		{"a", "l", 9, 100, true},   // two touching fragments
		{"a", "m", 9, 100, false},  // m is not below the end "m"
		{"b", "c", 10, 100, false}, // tombstone not newer than the data
		{"b", "c", 9, 9, false},    // tombstone not visible to the reader
		{"g", "q", 1, 100, false},  // gap [m, p)
		{"q", "y", 19, 100, true},  // inside one fragment
		{"0", "b", 1, 100, false},  // starts before every fragment
		{"a", "a", 9, 10, true},    // single key
		{"f", "f", 11, 100, true},  // the second fragment alone
		{"e", "g", 11, 100, false}, // [a,f) is too old for minSeq 11
	}
	for _, tc := range tests {
		if got := l.CoversSpan([]byte(tc.start), []byte(tc.last), tc.minSeq, tc.readSeq); got != tc.want {
			t.Errorf("CoversSpan(%s, %s, %d, %d) = %v, want %v", tc.start, tc.last, tc.minSeq, tc.readSeq, got, tc.want)
		}
	}
}

func TestFilterDropsEmptyFragments(t *testing.T) {
	l := Build([]Tombstone{{Start: []byte("a"), End: []byte("c"), Seq: 5}, {Start: []byte("b"), End: []byte("d"), Seq: 7}})
	got := l.Filter(func(seqs []uint64) []uint64 { return seqs[:1] }) // newest only
	checkInvariants(t, got)
	if got.Len() != 2 || got.Covering([]byte("b"), 100) != 7 || got.Covering([]byte("a"), 100) != 5 {
		t.Fatalf("Filter kept %v", got.Tombstones())
	}
	if none := l.Filter(func([]uint64) []uint64 { return nil }); !none.Empty() {
		t.Fatalf("Filter dropping every seq left %v", none.Tombstones())
	}
}

func BenchmarkCovering1000(b *testing.B) {
	ts := make([]Tombstone, 1000)
	for i := range ts {
		ts[i] = Tombstone{Start: []byte(fmt.Sprintf("key%08d", i*10)), End: []byte(fmt.Sprintf("key%08d", i*10+5)), Seq: uint64(i + 1)}
	}
	l := Build(ts)
	key := []byte("key00004567")
	b.ResetTimer()
	for range b.N {
		l.Covering(key, 1<<40)
	}
}

// BenchmarkCovering1000Random is BenchmarkCovering1000 with random 16-byte
// keys, whose 8-byte prefixes differ (the other's share theirs in runs).
func BenchmarkCovering1000Random(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	ts := make([]Tombstone, 1000)
	for i := range ts {
		k := fmt.Appendf(nil, "%016x", rng.Uint64())
		ts[i] = Tombstone{Start: k, End: append(k, 0), Seq: uint64(i + 1)}
	}
	l := Build(ts)
	key := []byte("7fffffffffffffff")
	b.ResetTimer()
	for range b.N {
		l.Covering(key, 1<<40)
	}
}

// TestReach: a chain runs over touching fragments whose tombstones are
// visible, in either direction, reporting the oldest visible tombstone so
// far, and stops at a gap, at an invisible fragment and at the limit.
func TestReach(t *testing.T) {
	l := Build([]Tombstone{
		{Start: []byte("a"), End: []byte("c"), Seq: 5},
		{Start: []byte("c"), End: []byte("e"), Seq: 9},
		{Start: []byte("e"), End: []byte("g"), Seq: 3},
		{Start: []byte("g"), End: []byte("h"), Seq: 50}, // invisible at 20
		{Start: []byte("j"), End: []byte("k"), Seq: 7},  // after a gap
	})
	type step struct {
		bound  string
		oldest uint64
	}
	walk := func(key string, forward bool, limit int) []step {
		c := NewCursor(l)
		c.At([]byte(key))
		var out []step
		c.Reach(20, forward, limit, func(b []byte, o uint64) { out = append(out, step{string(b), o}) })
		return out
	}
	tests := []struct {
		key     string
		forward bool
		limit   int
		want    []step
	}{
		{"b", true, 64, []step{{"c", 5}, {"e", 5}, {"g", 3}}}, // stops before the invisible fragment
		{"d", false, 64, []step{{"c", 9}, {"a", 5}}},
		{"b", true, 2, []step{{"c", 5}, {"e", 5}}},
		{"j", false, 64, []step{{"j", 7}}}, // the gap before it
		{"i", true, 64, nil},               // in no fragment
	}
	for _, tc := range tests {
		if got := walk(tc.key, tc.forward, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("Reach from %s forward=%v limit %d: %v, want %v", tc.key, tc.forward, tc.limit, got, tc.want)
		}
	}
}

// TestUnionIsBuild checks that Union and Merge give exactly the fragments
// Build gives for the same tombstones: the same canonical form, not only
// the same answers.
func TestUnionIsBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 2000 {
		var seq uint64
		parts := make([][]Tombstone, 1+rng.IntN(4))
		var all []Tombstone
		lists := make([]*List, len(parts))
		for i := range parts {
			parts[i] = randTombstones(rng, rng.IntN(6), &seq)
			all = append(all, parts[i]...)
			lists[i] = Build(parts[i])
		}
		want := Build(all)
		got := Merge(lists...)
		checkInvariants(t, got)
		if !slices.EqualFunc(got.Fragments(), want.Fragments(), func(a, b Fragment) bool {
			return bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End) && slices.Equal(a.Seqs, b.Seqs)
		}) {
			t.Fatalf("trial %d: Merge = %v, Build = %v", trial, got.Fragments(), want.Fragments())
		}
		// A list united with itself (the same tombstones on both sides,
		// sequence numbers and all) is that list: each number once.
		self := Union(want, want)
		checkInvariants(t, self)
		if !slices.EqualFunc(self.Fragments(), want.Fragments(), func(a, b Fragment) bool {
			return bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End) && slices.Equal(a.Seqs, b.Seqs)
		}) {
			t.Fatalf("trial %d: Union with itself = %v, want %v", trial, self.Fragments(), want.Fragments())
		}
	}
}

// TestBuildNewest checks that keeping only a batch's newest covering
// tombstone answers every read that can see the batch as the whole
// fragmentation does, and reads that cannot see it not at all.
func TestBuildNewest(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 1000 {
		seq := uint64(rng.IntN(3))
		ts := randTombstones(rng, rng.IntN(10), &seq)
		first := seq - uint64(len(ts)) + 1
		l := BuildNewest(ts)
		checkInvariants(t, l)
		for _, f := range l.Fragments() {
			if len(f.Seqs) != 1 {
				t.Fatalf("trial %d: fragment with %d sequence numbers", trial, len(f.Seqs))
			}
		}
		for k := range 42 {
			key := keyShape(k)
			if got := l.Covering(key, first-1); got != 0 {
				t.Fatalf("trial %d: a read before the batch sees %d", trial, got)
			}
			if got, want := l.Covering(key, seq), naiveCovering(ts, key, seq); got != want {
				t.Fatalf("trial %d: Covering(%s) = %d, want %d (%v)", trial, key, got, want, ts)
			}
		}
	}
}

// TestLargeBatchesStayLinear: n nested tombstones in one batch are 2n-1
// fragments of one sequence number each (all of them kept would be n²
// pieces), and adding them to a list of n more by Union stays linear.
func TestLargeBatchesStayLinear(t *testing.T) {
	const n = 100_000
	ts := make([]Tombstone, n)
	for i := range ts {
		ts[i] = Tombstone{Start: fmt.Appendf(nil, "k%07d", i), End: fmt.Appendf(nil, "k%07d", 2*n-i), Seq: uint64(i + 1)}
	}
	l := BuildNewest(ts)
	if l.Len() != 2*n-1 || len(l.Fragments()) != 2*n-1 {
		t.Fatalf("%d fragments, %d pieces; want %d each", len(l.Fragments()), l.Len(), 2*n-1)
	}
	if got := l.Covering([]byte("k0100000"), n); got != n {
		t.Fatalf("innermost fragment covered by %d, want %d", got, n)
	}
	for i := range ts {
		ts[i].Seq += n
	}
	u := Union(l, BuildNewest(ts))
	if u.Len() != 2*(2*n-1) {
		t.Fatalf("union holds %d pieces, want %d", u.Len(), 2*(2*n-1))
	}
}

// BenchmarkVisibleOldReader asks a fragment covered by n tombstones what
// a reader older than all but the oldest sees (a snapshot taken before a
// range was deleted n times over). The cost must not grow with n: a scan
// of the sequence numbers made a snapshot's scan of k keys there O(k·n).
func BenchmarkVisibleOldReader(b *testing.B) {
	for _, n := range []int{16, 1024, 65536} {
		b.Run(fmt.Sprint("seqs=", n), func(b *testing.B) {
			ts := make([]Tombstone, n)
			for i := range ts {
				ts[i] = Tombstone{Start: []byte("a"), End: []byte("z"), Seq: uint64(10 * (i + 1))}
			}
			f := &Build(ts).Fragments()[0]
			for b.Loop() {
				if f.Visible(15) != 10 {
					b.Fatal("wrong tombstone")
				}
			}
		})
	}
}

// TestEmptyListQueries pins the answers of an empty list, nil or built
// from nothing: no bounds, no fragment holding any key, nothing covered.
func TestEmptyListQueries(t *testing.T) {
	for name, l := range map[string]*List{"nil": nil, "zero": {}, "built from nothing": Build(nil)} {
		if start, end := l.Bounds(); start != nil || end != nil {
			t.Errorf("%s: Bounds = %q, %q; want nil, nil", name, start, end)
		}
		if i := l.Find([]byte("k")); i != -1 {
			t.Errorf("%s: Find = %d, want -1", name, i)
		}
		if s := l.Covering([]byte("k"), 100); s != 0 {
			t.Errorf("%s: Covering = %d, want 0", name, s)
		}
		if !l.Empty() || l.Len() != 0 {
			t.Errorf("%s: Empty %v, Len %d; want true, 0", name, l.Empty(), l.Len())
		}
	}
}

// TestCursorAgreesWithFind pins that a cursor answers as Find does for
// every key, whatever key it was asked before: in order, in reverse, and
// jumping across fragments, gaps and past either end of the list.
func TestCursorAgreesWithFind(t *testing.T) {
	l := Build([]Tombstone{
		{Start: []byte("b"), End: []byte("d"), Seq: 5},
		{Start: []byte("f"), End: []byte("h"), Seq: 7},
		{Start: []byte("h"), End: []byte("j"), Seq: 9},
	})
	keys := []string{"", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "z"}
	var orders [][]string
	rev := slices.Clone(keys)
	slices.Reverse(rev)
	orders = append(orders, keys, rev)
	orders = append(orders, []string{"c", "z", "b", "k", "a", "g", "i", "e", "j", "d", "h", "", "f"})
	for _, order := range orders {
		c := NewCursor(l)
		for _, k := range order {
			var want *Fragment
			if i := l.Find([]byte(k)); i >= 0 {
				want = &l.Fragments()[i]
			}
			if got := c.At([]byte(k)); got != want {
				t.Errorf("order %q: At(%q) = %v, want %v", order, k, got, want)
			}
		}
	}
	var empty Cursor
	if f := empty.At([]byte("k")); f != nil {
		t.Errorf("zero Cursor: At = %v, want nil", f)
	}
}

// TestCoverSpanMatchesModel checks CoverSpan over the union of several
// lists against a key-by-key model: a key is covered if a tombstone of any
// list covers it with a sequence number in (minSeq, readSeq]. Keys and
// bounds come from a small universe (one or two letters of a to f), which
// makes the model exact: a gap between two fragments starts at a key of
// the universe, and so does the span, so a gap inside the span holds one.
func TestCoverSpanMatchesModel(t *testing.T) {
	var universe []string
	for a := 'a'; a <= 'f'; a++ {
		universe = append(universe, string(a))
		for b := 'a'; b <= 'f'; b++ {
			universe = append(universe, string(a)+string(b))
		}
	}
	slices.Sort(universe)
	rng := rand.New(rand.NewPCG(7, 11))
	for iter := range 3000 {
		var lists []*List
		var all []Tombstone
		for range 1 + rng.IntN(4) {
			var ts []Tombstone
			for range rng.IntN(6) {
				i, j := rng.IntN(len(universe)), rng.IntN(len(universe))
				if i > j {
					i, j = j, i
				}
				ts = append(ts, Tombstone{Start: []byte(universe[i]), End: []byte(universe[j]), Seq: 1 + uint64(rng.IntN(20))})
			}
			all = append(all, ts...)
			lists = append(lists, Build(ts))
		}
		i, j := rng.IntN(len(universe)), rng.IntN(len(universe))
		if i > j {
			i, j = j, i
		}
		start, last := universe[i], universe[j]
		minSeq, readSeq := uint64(rng.IntN(20)), uint64(rng.IntN(22))
		want := true
		for _, k := range universe[i : j+1] {
			if !slices.ContainsFunc(all, func(ts Tombstone) bool {
				return string(ts.Start) <= k && k < string(ts.End) && ts.Seq > minSeq && ts.Seq <= readSeq
			}) {
				want = false
				break
			}
		}
		if got := CoverSpan(lists, []byte(start), []byte(last), minSeq, readSeq); got != want {
			t.Fatalf("iteration %d: CoverSpan(%v, %s, %s, %d, %d) = %v, want %v", iter, all, start, last, minSeq, readSeq, got, want)
		}
		if got := Merge(lists...).CoversSpan([]byte(start), []byte(last), minSeq, readSeq); got != want {
			t.Fatalf("iteration %d: CoversSpan of the merged lists = %v, want %v", iter, got, want)
		}
	}
}

// TestBuildSharedSeqs: tombstones that share sequence numbers (a batch's
// do) overlap into fragments that hold each number once, and Covering
// still agrees with the definition.
func TestBuildSharedSeqs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		ts := make([]Tombstone, rng.IntN(10))
		for i := range ts {
			ts[i] = Tombstone{Start: randKey(rng), End: randKey(rng), Seq: 1 + rng.Uint64N(3)}
		}
		l := Build(ts)
		checkInvariants(t, l)
		for k := range 42 {
			key := keyShape(k)
			for readSeq := range uint64(5) {
				if got, want := l.Covering(key, readSeq), naiveCovering(ts, key, readSeq); got != want {
					t.Fatalf("trial %d: Covering(%s, %d) = %d, want %d (tombstones %v)", trial, key, readSeq, got, want, ts)
				}
			}
		}
	}
}
