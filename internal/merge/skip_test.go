package merge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// manySources is randomSources with up to 12 sources, so that the heap
// is several levels deep and a sift that picks the wrong child or stops
// a level early puts entries out of order.
func manySources(rng *rand.Rand) ([]*sliceSource, []entry) {
	return sources(rng, 13, 30)
}

func iters(srcs []*sliceSource) []base.InternalIterator {
	its := make([]base.InternalIterator, len(srcs))
	for i, s := range srcs {
		its[i] = s
	}
	return its
}

// at checks that every accessor of m describes the same entry and returns
// it: InternalKey agrees with Key, Seq and Kind, and Value is the value of
// that entry's source.
func at(t *testing.T, m *Iter) entry {
	t.Helper()
	k, tr := m.InternalKey()
	e := current(m)
	if string(k) != e.key || tr != base.MakeTrailer(e.seq, e.kind) {
		t.Fatalf("InternalKey %q/%#x, Key/Seq/Kind say %v", k, tr, e)
	}
	if v := string(m.Value()); v != fmt.Sprint(e.seq) {
		t.Fatalf("Value %q at %v, want the value of seq %d", v, e, e.seq)
	}
	return e
}

func forward(t *testing.T, m *Iter, ok bool) []entry {
	t.Helper()
	var got []entry
	for ; ok; ok = m.Next() {
		got = append(got, at(t, m))
	}
	if m.Error() != nil {
		t.Fatalf("forward: %v", m.Error())
	}
	return got
}

func backward(t *testing.T, m *Iter, ok bool) []entry {
	t.Helper()
	var got []entry
	for ; ok; ok = m.Prev() {
		got = append(got, at(t, m))
	}
	if m.Error() != nil {
		t.Fatalf("backward: %v", m.Error())
	}
	return got
}

// TestMergeOrderManySources: with up to a dozen sources, both directions
// yield the merged order, seeks land on the right entry, and the accessors
// agree on it.
func TestMergeOrderManySources(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 200 {
		srcs, all := manySources(rng)
		m := New(iters(srcs)...)
		if got := forward(t, m, m.First()); !slices.Equal(got, all) {
			t.Fatalf("trial %d forward: %v, want %v", trial, got, all)
		}
		back := backward(t, m, m.Last())
		slices.Reverse(back)
		if !slices.Equal(back, all) {
			t.Fatalf("trial %d backward: %v, want %v", trial, back, all)
		}
		k := fmt.Sprintf("k%02d", rng.IntN(32))
		i := firstAtOrAbove(all, k)
		if got := forward(t, m, m.SeekGE([]byte(k))); !slices.Equal(got, all[i:]) {
			t.Fatalf("trial %d from SeekGE(%s): %v, want %v", trial, k, got, all[i:])
		}
		want := slices.Clone(all[:i])
		slices.Reverse(want)
		if got := backward(t, m, m.SeekLT([]byte(k))); !slices.Equal(got, want) {
			t.Fatalf("trial %d from SeekLT(%s): %v, want %v", trial, k, got, want)
		}
	}
}

func firstAtOrAbove(es []entry, k string) int {
	i, _ := slices.BinarySearchFunc(es, k, func(e entry, k string) int {
		if e.key < k {
			return -1
		}
		return 1
	})
	return i
}

// TestMergeSkipTo: after SeekGE(from) and a few steps, SkipTo(to, skip)
// moves the selected sources past every key below to and leaves the others
// where they are: the merge goes on with what each source had left, less
// the selected sources' entries below to. A source part way through the
// versions of to itself stays where it is rather than going back to the
// newest one.
func TestMergeSkipTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := range 400 {
		srcs, all := manySources(rng)
		sel := rng.Uint32()
		skip := func(i int) bool { return sel&(1<<i) != 0 }
		from := fmt.Sprintf("k%02d", rng.IntN(32))
		m := New(iters(srcs)...)
		ok := m.SeekGE([]byte(from))
		consumed := map[uint64]bool{}
		for range rng.IntN(4) {
			if !ok {
				break
			}
			consumed[at(t, m).seq] = true
			ok = m.Next()
		}
		to := fmt.Sprintf("k%02d", rng.IntN(32))
		if ok && rng.IntN(2) == 0 {
			to = current(m).key // often part way through its versions
		}
		var want []entry
		for i, s := range srcs {
			for _, e := range s.es {
				if e.key >= from && !consumed[e.seq] && (!skip(i) || e.key >= to) {
					want = append(want, e)
				}
			}
		}
		slices.SortFunc(want, cmpEntry)
		m.SkipTo([]byte(to), skip)
		if ok = m.Valid(); ok != (len(want) > 0) {
			t.Fatalf("trial %d SkipTo(%s) from %s: valid %v, want %d entries", trial, to, from, ok, len(want))
		}
		if got := forward(t, m, ok); !slices.Equal(got, want) {
			t.Fatalf("trial %d SkipTo(%s) from %s over %b: %v, want %v", trial, to, from, sel, got, want)
		}

		// Backward, SkipTo is not SkipBackTo: it leaves the merge alone.
		i := firstAtOrAbove(all, from)
		back := slices.Clone(all[:i])
		slices.Reverse(back)
		ok = m.SeekLT([]byte(from))
		m.SkipTo([]byte(to), skip)
		if got := backward(t, m, ok && m.Valid()); !slices.Equal(got, back) {
			t.Fatalf("trial %d SkipTo(%s) backward from %s: %v, want %v", trial, to, from, got, back)
		}
	}
}

// TestMergeSkipBackTo mirrors TestMergeSkipTo: after SeekLT(from), the
// selected sources leave every key at or above to; forward it does
// nothing.
func TestMergeSkipBackTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 400 {
		srcs, all := manySources(rng)
		sel := rng.Uint32()
		skip := func(i int) bool { return sel&(1<<i) != 0 }
		from := fmt.Sprintf("k%02d", rng.IntN(32))
		to := fmt.Sprintf("k%02d", rng.IntN(32))
		var want []entry
		for i, s := range srcs {
			for _, e := range s.es {
				if e.key < from && (!skip(i) || e.key < to) {
					want = append(want, e)
				}
			}
		}
		slices.SortFunc(want, cmpEntry)
		slices.Reverse(want)
		m := New(iters(srcs)...)
		m.SeekLT([]byte(from))
		m.SkipBackTo([]byte(to), skip)
		ok := m.Valid()
		if ok != (len(want) > 0) {
			t.Fatalf("trial %d SkipBackTo(%s) from %s: valid %v, want %d entries", trial, to, from, ok, len(want))
		}
		if got := backward(t, m, ok); !slices.Equal(got, want) {
			t.Fatalf("trial %d SkipBackTo(%s) from %s over %b: %v, want %v", trial, to, from, sel, got, want)
		}

		i := firstAtOrAbove(all, from)
		ok = m.SeekGE([]byte(from))
		m.SkipBackTo([]byte(to), skip)
		if got := forward(t, m, ok && m.Valid()); !slices.Equal(got, all[i:]) {
			t.Fatalf("trial %d SkipBackTo(%s) forward from %s: %v, want %v", trial, to, from, got, all[i:])
		}
	}
}

// TestMergeEndIsSticky: a merge that ran out answers false to another
// step in the same direction, and stays invalid.
func TestMergeEndIsSticky(t *testing.T) {
	m := New(&sliceSource{es: []entry{{"a", 2, base.KindPut}}}, &sliceSource{es: []entry{{"b", 1, base.KindPut}}})
	for ok := m.First(); ok; ok = m.Next() {
	}
	if m.Next() || m.Valid() || m.Error() != nil {
		t.Fatalf("Next past the end: valid %v err %v", m.Valid(), m.Error())
	}
	for ok := m.Last(); ok; ok = m.Prev() {
	}
	if m.Prev() || m.Valid() || m.Error() != nil {
		t.Fatalf("Prev past the start: valid %v err %v", m.Valid(), m.Error())
	}
	if New().First() || New().Last() || New().SeekGE([]byte("a")) {
		t.Fatal("a merge of no sources has an entry")
	}
	if m := New(); m.Prev() || m.Error() != ErrDirection {
		t.Fatalf("Prev on a new merge of no sources: err %v, want ErrDirection", m.Error())
	}
}

// failSource is a sliceSource that fails once it has made ok moves.
type failSource struct {
	sliceSource
	ok  int
	err error
}

func (s *failSource) step(moved bool) bool {
	if s.ok == 0 {
		s.err = errFail
		return false
	}
	s.ok--
	return moved
}
func (s *failSource) First() bool                   { return s.step(s.sliceSource.First()) }
func (s *failSource) Last() bool                    { return s.step(s.sliceSource.Last()) }
func (s *failSource) Next() bool                    { return s.step(s.sliceSource.Next()) }
func (s *failSource) Prev() bool                    { return s.step(s.sliceSource.Prev()) }
func (s *failSource) SeekGE(k []byte) bool          { return s.step(s.sliceSource.SeekGE(k)) }
func (s *failSource) SeekLT(k []byte) bool          { return s.step(s.sliceSource.SeekLT(k)) }
func (s *failSource) Error() error                  { return s.err }
func (s *failSource) Value() []byte                 { return s.sliceSource.Value() }
func (s *failSource) InternalKey() ([]byte, uint64) { return s.sliceSource.InternalKey() }

var errFail = errors.New("source failed")

// TestMergeSourceError: a source's error at a positioning, a step or a
// skip ends the merge (false, invalid) with that error, and further steps,
// in either direction, answer false without touching the sources or
// replacing the error.
func TestMergeSourceError(t *testing.T) {
	es := []entry{{"a", 3, base.KindPut}, {"b", 2, base.KindPut}, {"c", 1, base.KindPut}}
	good := func() *sliceSource { return &sliceSource{es: []entry{{"a", 9, base.KindPut}, {"z", 8, base.KindPut}}} }
	for _, tc := range []struct {
		name string
		ok   int // moves the failing source makes before it fails
		run  func(m *Iter) bool
		step func(m *Iter) bool // a step in the direction run left
	}{
		{"First", 0, (*Iter).First, (*Iter).Next},
		{"Last", 0, (*Iter).Last, (*Iter).Prev},
		{"SeekGE", 0, func(m *Iter) bool { return m.SeekGE([]byte("b")) }, (*Iter).Next},
		{"Next", 1, func(m *Iter) bool { m.First(); return m.Next() && m.Next() && m.Next() }, (*Iter).Next},
		{"Prev", 1, func(m *Iter) bool { m.Last(); return m.Prev() && m.Prev() && m.Prev() }, (*Iter).Prev},
		{"SkipTo", 1, func(m *Iter) bool { m.First(); m.SkipTo([]byte("c"), EverySource); return m.Valid() }, (*Iter).Next},
		{"SkipBackTo", 1, func(m *Iter) bool { m.Last(); m.SkipBackTo([]byte("b"), EverySource); return m.Valid() }, (*Iter).Prev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The failing source comes second so that a source ahead of it
			// is already in the heap when it fails.
			m := New(good(), &failSource{sliceSource: sliceSource{es: es}, ok: tc.ok})
			if tc.run(m) {
				t.Fatal("a failed move reported an entry")
			}
			if m.Valid() || !errors.Is(m.Error(), errFail) {
				t.Fatalf("after the failure: valid %v err %v, want %v", m.Valid(), m.Error(), errFail)
			}
			if tc.step(m) || m.Valid() || !errors.Is(m.Error(), errFail) {
				t.Fatalf("a step after the failure: valid %v err %v", m.Valid(), m.Error())
			}
			// A step the other way is refused, but the error reported is
			// still the source's, the first met.
			if m.Next() || m.Prev() || !errors.Is(m.Error(), errFail) {
				t.Fatalf("steps both ways after the failure: valid %v err %v, want %v", m.Valid(), m.Error(), errFail)
			}
			m.SkipTo([]byte("a"), EverySource)
			m.SkipBackTo([]byte("a"), EverySource)
			if m.Valid() || !errors.Is(m.Error(), errFail) {
				t.Fatalf("a skip after the failure: valid %v err %v", m.Valid(), m.Error())
			}
		})
	}
}

// TestMergeReset: Reset makes an unpositioned merge of the new sources,
// whatever the old one was (positioned backward, failed, with more or
// fewer sources), with no error left over.
func TestMergeReset(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	m := New() // no memory to reuse yet
	m.Reset(&failSource{sliceSource: sliceSource{es: []entry{{"a", 1, base.KindPut}}}})
	m.First()
	if m.Error() == nil {
		t.Fatal("the failing source did not fail")
	}
	for trial := range 200 {
		srcs, all := manySources(rng)
		m.Reset(iters(srcs)...)
		if m.Valid() || m.Error() != nil {
			t.Fatalf("trial %d: after Reset valid %v err %v, want unpositioned", trial, m.Valid(), m.Error())
		}
		if got := forward(t, m, m.First()); !slices.Equal(got, all) {
			t.Fatalf("trial %d forward after Reset: %v, want %v", trial, got, all)
		}
		// Leave it positioned backward for the next Reset.
		m.Last()
	}
}

// rawSource hands out a value record (base.RawValuer).
type rawSource struct{ sliceSource }

func (s *rawSource) RawValue() ([]byte, int, bool) {
	return []byte("rec" + fmt.Sprint(s.es[s.i].seq)), int(s.es[s.i].seq), true
}

// TestMergePassesOnSource: Source is the current entry's source, and
// RawValue passes on that source's value record, or ok false for a source
// that has none.
func TestMergePassesOnSource(t *testing.T) {
	plain := &sliceSource{es: []entry{{"a", 2, base.KindPut}}}
	raw := &rawSource{sliceSource{es: []entry{{"b", 1, base.KindPut}}}}
	m := New(plain, raw)
	if !m.First() || m.Source() != plain {
		t.Fatalf("at a: Source %v, want the plain source", m.Source())
	}
	if rec, n, ok := m.RawValue(); ok || rec != nil || n != 0 {
		t.Fatalf("RawValue from a source without records: %q %d %v", rec, n, ok)
	}
	if !m.Next() || m.Source() != raw {
		t.Fatalf("at b: Source %v, want the raw source", m.Source())
	}
	if rec, n, ok := m.RawValue(); !ok || string(rec) != "rec1" || n != 1 {
		t.Fatalf("RawValue: %q %d %v, want rec1 1 true", rec, n, ok)
	}
}

// TestMergeDropsExhaustedKeys: a source that runs out, whether at a
// positioning, a step or a skip, keeps no key in the merge, which could
// pin the last block it read.
func TestMergeDropsExhaustedKeys(t *testing.T) {
	short := func() *sliceSource { return &sliceSource{es: []entry{{"a", 4, base.KindPut}}} }
	long := func() *sliceSource {
		return &sliceSource{es: []entry{{"b", 3, base.KindPut}, {"c", 2, base.KindPut}, {"d", 1, base.KindPut}}}
	}
	check := func(what string, m *Iter, i int) {
		t.Helper()
		if m.items[i].key != nil {
			t.Fatalf("%s: the exhausted source %d still holds key %q", what, i, m.items[i].key)
		}
	}
	m := New(short(), long())
	m.First()
	m.Next()
	check("Next", m, 0)
	m.First()
	m.SeekGE([]byte("b"))
	check("SeekGE", m, 0)
	m.First()
	m.SkipTo([]byte("b"), func(i int) bool { return i == 0 })
	check("SkipTo", m, 0)
	if !m.Valid() || string(m.Key()) != "b" {
		t.Fatal("SkipTo lost the other source")
	}
}
