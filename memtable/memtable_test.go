package memtable

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

func TestEmpty(t *testing.T) {
	m := New(0)
	if _, _, found := m.Get([]byte("a"), base.MaxSeq); found {
		t.Error("Get on empty memtable found something")
	}
	if m.Len() != 0 || m.ApproximateSize() != 0 {
		t.Errorf("Len, ApproximateSize = %d, %d; want 0, 0", m.Len(), m.ApproximateSize())
	}
	it := m.NewIter()
	for name, move := range map[string]func() bool{
		"Next":   it.Next,
		"Prev":   it.Prev,
		"First":  it.First,
		"Last":   it.Last,
		"SeekGE": func() bool { return it.SeekGE(nil) },
		"SeekLT": func() bool { return it.SeekLT([]byte{0xff}) },
	} {
		if move() || it.Valid() {
			t.Errorf("%s on empty memtable: valid iterator", name)
		}
	}
}

func TestGet(t *testing.T) {
	m := New(0)
	m.Add(10, base.KindPut, []byte("a"), []byte("a10"))
	m.Add(20, base.KindDelete, []byte("a"), nil)
	m.Add(30, base.KindPut, []byte("a"), []byte("a30"))
	m.Add(15, base.KindPut, []byte("b"), []byte("b15"))
	m.Add(5, base.KindPut, []byte(""), []byte("empty key"))
	m.Add(7, base.KindPut, []byte("c"), []byte(""))

	tests := []struct {
		key    string
		maxSeq uint64
		value  string
		kind   base.Kind
		found  bool
	}{
		{"a", 9, "", 0, false},
		{"a", 10, "a10", base.KindPut, true},
		{"a", 19, "a10", base.KindPut, true},
		{"a", 20, "", base.KindDelete, true},
		{"a", 29, "", base.KindDelete, true},
		{"a", 30, "a30", base.KindPut, true},
		{"a", base.MaxSeq, "a30", base.KindPut, true},
		{"a", base.MaxSeq + 1, "a30", base.KindPut, true}, // clamped to MaxSeq
		{"a", math.MaxUint64, "a30", base.KindPut, true},
		{"b", 14, "", 0, false},
		{"b", 15, "b15", base.KindPut, true},
		{"", 5, "empty key", base.KindPut, true},
		{"", 4, "", 0, false},
		{"c", 100, "", base.KindPut, true},
		{"a\x00", 100, "", 0, false},
		{"0", 100, "", 0, false},
		{"d", 100, "", 0, false},
	}
	for _, tt := range tests {
		value, kind, found := m.Get([]byte(tt.key), tt.maxSeq)
		if string(value) != tt.value || kind != tt.kind || found != tt.found {
			t.Errorf("Get(%q, %d) = %q, %v, %v; want %q, %v, %v",
				tt.key, tt.maxSeq, value, kind, found, tt.value, tt.kind, tt.found)
		}
	}
	if m.Len() != 6 {
		t.Errorf("Len = %d, want 6", m.Len())
	}
}

func TestAddCopiesKeyAndValue(t *testing.T) {
	m := New(0)
	key, value := []byte("key"), []byte("value")
	m.Add(1, base.KindPut, key, value)
	copy(key, "XXX")
	copy(value, "XXXXX")
	got, _, found := m.Get([]byte("key"), 1)
	if !found || string(got) != "value" {
		t.Errorf("Get after caller reused its buffers = %q, %v; want \"value\", true", got, found)
	}
}

// An append to a returned key or value must not overwrite the arena bytes
// that follow it (the entry's value, or the next entry's key).
func TestReturnedSlicesAreCapped(t *testing.T) {
	m := New(0)
	m.Add(1, base.KindPut, []byte("k1"), []byte("v1"))
	m.Add(2, base.KindPut, []byte("k2"), []byte("v2"))
	v, _, _ := m.Get([]byte("k1"), 10)
	_ = append(v, 'Z')
	it := m.NewIter()
	it.First()
	_ = append(it.Key(), 'Z')
	if v, _, _ := m.Get([]byte("k1"), 10); string(v) != "v1" {
		t.Errorf("k1 = %q after append to its key", v)
	}
	if v, _, found := m.Get([]byte("k2"), 10); !found || string(v) != "v2" {
		t.Errorf("k2 = %q, %v after append to k1's value", v, found)
	}
}

func TestLargeValues(t *testing.T) {
	m := New(0) // smallest chunks, so these values exceed them
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string][]byte{}
	for i, n := range []int{minChunkSize - 1, minChunkSize, 3 * minChunkSize, 1 << 20, 10} {
		key := fmt.Sprintf("k%d", i)
		value := make([]byte, n)
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		want[key] = value
		m.Add(uint64(i+1), base.KindPut, []byte(key), value)
	}
	for key, value := range want {
		if got, _, found := m.Get([]byte(key), base.MaxSeq); !found || !bytes.Equal(got, value) {
			t.Errorf("Get(%q): found=%v, %d bytes, want %d bytes equal to what was added", key, found, len(got), len(value))
		}
	}
}

func TestSizeAndLen(t *testing.T) {
	m := New(0)
	prev := 0
	for i := range 1000 {
		key := fmt.Appendf(nil, "key%04d", i)
		value := bytes.Repeat([]byte("v"), i%50)
		m.Add(uint64(i+1), base.KindPut, key, value)
		size := m.ApproximateSize()
		if grew := size - prev; grew < len(key)+len(value)+nodeOverhead(1) {
			t.Fatalf("Add %d: size grew by %d, less than entry bytes %d + node overhead", i, grew, len(key)+len(value))
		}
		prev = size
		if m.Len() != i+1 {
			t.Fatalf("Len = %d after %d adds", m.Len(), i+1)
		}
	}
}

func TestAddPanicsOnCallerBugs(t *testing.T) {
	tests := []struct {
		name string
		add  func(m *Memtable)
	}{
		{"same kind", func(m *Memtable) { m.Add(5, base.KindPut, []byte("b"), nil) }},
		{"other kind", func(m *Memtable) { m.Add(5, base.KindDelete, []byte("b"), nil) }},
		{"seq above MaxSeq", func(m *Memtable) { m.Add(base.MaxSeq+1, base.KindPut, []byte("c"), nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(0)
			m.Add(5, base.KindPut, []byte("b"), []byte("x"))
			m.Add(4, base.KindPut, []byte("b"), []byte("y"))
			m.Add(5, base.KindPut, []byte("a"), []byte("z"))
			defer func() {
				if recover() == nil {
					t.Error("Add did not panic")
				}
			}()
			tt.add(m)
		})
	}
	// Neighbouring (key, seq) pairs are not duplicates.
	m := New(0)
	m.Add(0, base.KindPut, nil, nil) // empty key at seq 0 must not clash with the head sentinel
	m.Add(5, base.KindPut, []byte("b"), nil)
	m.Add(4, base.KindPut, []byte("b"), nil)
	m.Add(6, base.KindPut, []byte("b"), nil)
	m.Add(5, base.KindPut, []byte("b\x00"), nil)
	if m.Len() != 5 {
		t.Errorf("Len = %d, want 5", m.Len())
	}
}

func TestIterStopsAtEnds(t *testing.T) {
	m := New(0)
	for i, k := range []string{"a", "b", "c"} {
		m.Add(uint64(i+1), base.KindPut, []byte(k), nil)
	}
	it := m.NewIter()
	if it.Valid() || it.Next() || it.Prev() {
		t.Fatal("unpositioned iterator moved")
	}
	if !it.Last() || it.Next() || it.Valid() || it.Prev() {
		t.Error("Next past the last entry should invalidate the iterator, and Prev should then stay invalid")
	}
	if !it.First() || it.Prev() || it.Valid() || it.Next() {
		t.Error("Prev before the first entry should invalidate the iterator, and Next should then stay invalid")
	}
	if it.SeekGE([]byte("c\x00")) {
		t.Error("SeekGE past the last key found an entry")
	}
	if it.SeekLT([]byte("a")) {
		t.Error("SeekLT at the first key found an entry")
	}
}

func TestRandomHeightDistribution(t *testing.T) {
	m := New(0)
	const draws = 100000
	var counts [maxHeight + 1]int
	for range draws {
		counts[m.randomHeight()]++
	}
	// With p = 1/4, P(height = 1) = 3/4 and P(height = 2) = 3/16.
	for h, want := range map[int]float64{1: 0.75, 2: 0.1875} {
		if got := float64(counts[h]) / draws; math.Abs(got-want) > 0.01 {
			t.Errorf("P(height = %d) = %.4f, want %.4f", h, got, want)
		}
	}
	if counts[0] != 0 {
		t.Errorf("randomHeight returned 0 %d times", counts[0])
	}
}

// entry is one version in the model: a plain slice kept in internal order.
type entry struct {
	key   string
	seq   uint64
	kind  base.Kind
	value string
}

func compareEntries(a, b entry) int {
	if c := cmp.Compare(a.key, b.key); c != 0 {
		return c
	}
	return cmp.Compare(b.seq, a.seq)
}

// randomKey draws from a small alphabet including 0x00 and 0xff, so user
// keys share prefixes, and byte order (not string order of runes) matters.
func randomKey(rng *rand.Rand, maxLen int) string {
	const alphabet = "\x00ab\xff"
	b := make([]byte, rng.IntN(maxLen+1))
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// TestModel checks the memtable against a sorted slice under random
// operations: Adds of puts and deletes, Gets at random snapshots, full
// iteration both ways, and seeks followed by random walks.
func TestModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	m := New(1 << 12)
	var model []entry
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = randomKey(rng, 6)
	}
	seq := uint64(0)
	for op := range 4000 {
		seq += 1 + uint64(rng.IntN(3)) // gaps in seq, as after a failed batch
		e := entry{key: keys[rng.IntN(len(keys))], seq: seq, kind: base.KindPut}
		if rng.IntN(4) == 0 {
			e.kind = base.KindDelete
		} else {
			e.value = randomKey(rng, 20)
		}
		m.Add(e.seq, e.kind, []byte(e.key), []byte(e.value))
		i, _ := slices.BinarySearchFunc(model, e, compareEntries)
		model = slices.Insert(model, i, e)

		checkGet(t, m, model, keys[rng.IntN(len(keys))], uint64(rng.IntN(int(seq)+5)))
		checkGet(t, m, model, randomKey(rng, 7), seq)
		if op%500 == 0 {
			checkIteration(t, m, model)
			for range 50 {
				checkSeek(t, rng, m, model, randomKey(rng, 7))
				checkSeek(t, rng, m, model, keys[rng.IntN(len(keys))]) // one of many versions
			}
		}
		if t.Failed() {
			t.Fatalf("failed after %d adds", op+1)
		}
	}
	checkIteration(t, m, model)
	for range 500 {
		checkSeek(t, rng, m, model, randomKey(rng, 7))
		checkSeek(t, rng, m, model, keys[rng.IntN(len(keys))])
	}
	if m.Len() != len(model) {
		t.Errorf("Len = %d, want %d", m.Len(), len(model))
	}
}

func checkGet(t *testing.T, m *Memtable, model []entry, key string, maxSeq uint64) {
	t.Helper()
	var want *entry
	for i := range model {
		if model[i].key == key && model[i].seq <= maxSeq {
			want = &model[i] // internal order: the first match is the newest
			break
		}
	}
	value, kind, found := m.Get([]byte(key), maxSeq)
	switch {
	case want == nil && found:
		t.Errorf("Get(%q, %d) found %v %q, want not found", key, maxSeq, kind, value)
	case want != nil && (!found || kind != want.kind || string(value) != want.value):
		t.Errorf("Get(%q, %d) = %q, %v, %v; want %q, %v, true", key, maxSeq, value, kind, found, want.value, want.kind)
	}
}

func current(it *Iter) entry {
	return entry{string(it.Key()), it.Seq(), it.Kind(), string(it.Value())}
}

func checkIteration(t *testing.T, m *Memtable, model []entry) {
	t.Helper()
	var forward, backward []entry
	it := m.NewIter()
	for ok := it.First(); ok; ok = it.Next() {
		forward = append(forward, current(it))
	}
	for ok := it.Last(); ok; ok = it.Prev() {
		backward = append(backward, current(it))
	}
	slices.Reverse(backward)
	if !slices.Equal(forward, model) {
		t.Errorf("forward iteration differs from model: %d entries, want %d", len(forward), len(model))
	}
	if !slices.Equal(backward, model) {
		t.Errorf("reverse iteration differs from model: %d entries, want %d", len(backward), len(model))
	}
}

// checkSeek checks SeekGE and SeekLT at key, then a random walk of Next
// and Prev from each position, against the model's index.
func checkSeek(t *testing.T, rng *rand.Rand, m *Memtable, model []entry, key string) {
	t.Helper()
	// Index of the first entry with user key >= key.
	ge, _ := slices.BinarySearchFunc(model, key, func(e entry, k string) int { return cmp.Compare(e.key, k) })
	// Index of the first entry at or after version seq of key: key's newest
	// version at or below seq, else the next user key's first entry.
	seq := rng.Uint64N(10_000)
	gv := ge
	for gv < len(model) && model[gv].key == key && model[gv].seq > seq {
		gv++
	}
	it := m.NewIter()
	for _, seek := range []struct {
		name string
		do   func([]byte) bool
		want int
	}{
		{"SeekGE", it.SeekGE, ge},
		{"SeekLT", it.SeekLT, ge - 1},
		{fmt.Sprintf("SeekGEVersion(seq %d)", seq), func(k []byte) bool { return it.SeekGEVersion(k, seq) }, gv},
	} {
		i := seek.want
		ok := seek.do([]byte(key))
		what := fmt.Sprintf("%s(%q)", seek.name, key)
		for step := 0; ; step++ {
			if !checkPosition(t, it, ok, model, i, what) || i < 0 || i >= len(model) || step == 8 {
				break
			}
			if rng.IntN(2) == 0 {
				ok, i, what = it.Next(), i+1, what+".Next"
			} else {
				ok, i, what = it.Prev(), i-1, what+".Prev"
			}
		}
	}
}

// checkPosition reports whether the iterator (which returned ok) is where
// the model says, at index i (out of range meaning invalid).
func checkPosition(t *testing.T, it *Iter, ok bool, model []entry, i int, what string) bool {
	t.Helper()
	wantValid := i >= 0 && i < len(model)
	if ok != wantValid || it.Valid() != wantValid {
		t.Errorf("%s: returned %v, Valid %v; want %v", what, ok, it.Valid(), wantValid)
		return false
	}
	if wantValid && current(it) != model[i] {
		t.Errorf("%s: at %+v, want %+v", what, current(it), model[i])
		return false
	}
	return true
}

// TestKeyPrefixOrder: whenever two keys' prefixes differ, they order the
// keys as bytes.Compare does. Short keys over a tiny alphabet with zero
// bytes are where zero padding could go wrong.
func TestKeyPrefixOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	key := func() []byte {
		k := make([]byte, rng.IntN(12))
		for i := range k {
			k[i] = []byte{0, 1, 0xff}[rng.IntN(3)]
		}
		return k
	}
	for range 200_000 {
		a, b := key(), key()
		pa, pb := base.KeyPrefix(a), base.KeyPrefix(b)
		if pa != pb && cmp.Compare(pa, pb) != bytes.Compare(a, b) {
			t.Fatalf("%x vs %x: prefixes %x, %x order them wrongly", a, b, pa, pb)
		}
	}
}
