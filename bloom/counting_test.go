package bloom

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func mustCounting(t testing.TB, g Geometry) *Counting {
	t.Helper()
	c, err := NewCounting(g)
	if err != nil {
		t.Fatalf("NewCounting(%+v): %v", g, err)
	}
	return c
}

// saturated reports whether any counter has reached counterMax: only then
// may removals leave bits behind.
func (c *Counting) saturated() bool {
	for p := range c.g.Bits {
		if c.get(p) == counterMax {
			return true
		}
	}
	return false
}

func TestNewCountingInvalid(t *testing.T) {
	if c, err := NewCounting(Geometry{Layout: Blocked, Bits: 100, K: 3}); c != nil || !errors.Is(err, ErrGeometry) {
		t.Errorf("NewCounting of an invalid geometry = %v, %v; want ErrGeometry", c, err)
	}
}

// TestCountingModel adds and removes random keys, checking against a
// multiset: keys still present are always found, Count follows the model,
// and the plain filter of the counters is the filter of the present keys.
func TestCountingModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	tests := []struct {
		g         Geometry
		keys      int // drawn from keys 0..keys-1
		saturates bool
	}{
		{Geometry{Layout: Blocked, Bits: 512 * 32, K: 6}, 2000, false},
		{Geometry{Layout: Classic, Bits: 64 * 200, K: 5, Seed: 3}, 2000, false},
		{Geometry{Layout: Blocked, Bits: 512, K: 32}, 300, true}, // small and crowded
	}
	for _, tt := range tests {
		g := tt.g
		c := mustCounting(t, g)
		model := map[string]int{}
		var total uint64
		for step := range 3000 {
			k := testKey(0, uint64(rng.IntN(tt.keys)))
			if rng.IntN(5) < 3 || model[string(k)] == 0 {
				c.Add(k)
				model[string(k)]++
				total++
			} else {
				if !c.Remove(k) {
					t.Fatalf("%+v step %d: Remove of a present key refused", g, step)
				}
				model[string(k)]--
				total--
			}
			if c.Count() != total {
				t.Fatalf("%+v step %d: Count %d, want %d", g, step, c.Count(), total)
			}
			if step%100 == 0 {
				checkCountingModel(t, c, model)
			}
		}
		// Remove everything: without saturation no counter may be left.
		saturated := c.saturated()
		for k, n := range model {
			for range n {
				if !c.Remove([]byte(k)) {
					t.Fatalf("%+v: final Remove of present key %x refused", g, k)
				}
			}
			delete(model, k)
		}
		checkCountingModel(t, c, model)
		if c.Count() != 0 {
			t.Errorf("%+v: Count %d after removing everything", g, c.Count())
		}
		if empty := onesCount(c.Filter().bits) == 0; !saturated && !empty {
			t.Errorf("%+v: counters left after removing every key (no counter saturated)", g)
		}
		if saturated != tt.saturates {
			t.Errorf("%+v: saturated = %v, want %v (the test must cover both cases)", g, saturated, tt.saturates)
		}
	}
}

// checkCountingModel checks every key the model holds, and compares the
// counters' plain filter with a filter built from the model's keys.
func checkCountingModel(t *testing.T, c *Counting, model map[string]int) {
	t.Helper()
	plain := mustGeometry(t, c.g)
	for k, n := range model {
		if n == 0 {
			continue
		}
		if !c.Contains([]byte(k)) {
			t.Fatalf("%+v: false negative for key %x held %d times", c.g, k, n)
		}
		for range n {
			plain.Add([]byte(k))
		}
	}
	f := c.Filter()
	if f.Count() != plain.Count() {
		t.Fatalf("%+v: Filter().Count() = %d, want %d", c.g, f.Count(), plain.Count())
	}
	if c.saturated() {
		if !isSuperset(f.bits, plain.bits) {
			t.Fatalf("%+v: counting filter misses bits of the present keys", c.g)
		}
		return
	}
	sameBits(t, "Counting.Filter() vs filter of the present keys", f, plain)
}

// isSuperset reports whether every bit set in sub is set in super.
func isSuperset(super, sub []byte) bool {
	for i := range sub {
		if sub[i]&^super[i] != 0 {
			return false
		}
	}
	return true
}

func TestCountingFilterEqualsPlain(t *testing.T) {
	for _, g := range testGeometries {
		keys := testKeys(0, 200)
		c := mustCounting(t, g)
		for _, k := range keys {
			c.Add(k)
		}
		if c.saturated() {
			continue // the tiny geometries; TestCountingModel covers them
		}
		f := c.Filter()
		sameBits(t, "Counting.Filter()", f, buildFilter(t, g, keys))
		if f.Count() != 200 {
			t.Errorf("%+v: Filter().Count() = %d, want 200", g, f.Count())
		}
		for _, k := range keys {
			if !f.Contains(k) {
				t.Fatalf("%+v: converted filter lost key %x", g, k)
			}
		}
	}
}

func TestCountingSaturation(t *testing.T) {
	g := Geometry{Layout: Blocked, Bits: 512 * 4, K: 5}
	c := mustCounting(t, g)
	others := testKeys(1, 50)
	for _, k := range others {
		c.Add(k)
	}
	hot := []byte("hot key")
	for range 20 {
		c.Add(hot)
	}
	if !c.saturated() {
		t.Fatal("20 adds of one key did not saturate its counters")
	}
	for i := range 20 {
		if !c.Remove(hot) {
			t.Fatalf("Remove %d of the hot key refused", i+1)
		}
	}
	// Its counters stuck at 15: the key is still reported, which a Bloom
	// filter allows; losing any other key would not be.
	if !c.Contains(hot) {
		t.Error("saturated counters were decremented: hot key gone")
	}
	for _, k := range others {
		if !c.Contains(k) {
			t.Fatalf("false negative for %x after saturating removes", k)
		}
	}
	if c.Count() != uint64(len(others)) {
		t.Errorf("Count %d, want %d", c.Count(), len(others))
	}
	checkCountingModel(t, c, countsOf(others))
}

func countsOf(keys [][]byte) map[string]int {
	m := map[string]int{}
	for _, k := range keys {
		m[string(k)]++
	}
	return m
}

func TestCountingRemoveAbsent(t *testing.T) {
	g := GeometryFor(Classic, 100, 10)
	c := mustCounting(t, g)
	for _, k := range testKeys(0, 100) {
		c.Add(k)
	}
	before := bytes.Clone(c.counters)
	var refused int
	for _, k := range testKeys(1, 1000) {
		if c.Contains(k) {
			continue // a false positive; removing it is the caller's error
		}
		if c.Remove(k) {
			t.Fatalf("Remove of absent key %x succeeded", k)
		}
		refused++
	}
	if !bytes.Equal(c.counters, before) || c.Count() != 100 {
		t.Error("refused removes changed the counters or the count")
	}
	if refused < 900 {
		t.Errorf("only %d of 1000 absent keys were absent", refused)
	}
}

func TestCountingUsesFilterProbes(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, g := range testGeometries {
		c, f := mustCounting(t, g), mustGeometry(t, g)
		for range 100 {
			h := rng.Uint64()
			c.AddHash(h)
			f.AddHash(h)
			if !c.ContainsHash(h) {
				t.Fatalf("%+v: counting filter lost hash %#x", g, h)
			}
		}
		for range 1000 {
			h := rng.Uint64()
			if c.ContainsHash(h) != f.ContainsHash(h) {
				t.Fatalf("%+v: counting and plain filter disagree on %#x", g, h)
			}
		}
	}
}

func TestCountingString(t *testing.T) {
	c := mustCounting(t, Geometry{Layout: Classic, Bits: 128, K: 2})
	c.Add([]byte("x"))
	if got, want := c.String(), "bloom.Counting{classic, 128 bits, k=2, 1 keys}"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestCountingSaturatesAtFifteen: a counter counts to 14 and back (a key
// added and removed 14 times is gone), and sticks once it reaches 15 (a
// key added 15 times stays through 15 removes), as the type's comment
// promises. One probe per key, so each add moves one counter by one.
func TestCountingSaturatesAtFifteen(t *testing.T) {
	g := Geometry{Layout: Classic, Bits: 1024, K: 1}
	for _, tc := range []struct {
		adds int
		kept bool
	}{{14, false}, {15, true}} {
		c := mustCounting(t, g)
		key := []byte("key")
		for range tc.adds {
			c.Add(key)
		}
		for i := range tc.adds {
			if !c.Remove(key) {
				t.Fatalf("%d adds: remove %d refused", tc.adds, i+1)
			}
		}
		if c.Contains(key) != tc.kept || c.saturated() != tc.kept {
			t.Errorf("%d adds and removes: present %v, saturated %v; want %v", tc.adds, c.Contains(key), c.saturated(), tc.kept)
		}
	}
}
