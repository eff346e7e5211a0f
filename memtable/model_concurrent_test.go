package memtable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestModelConcurrentMap checks the memtable against a Go map while one
// writer adds and four readers look up, as the store uses it. Keys are
// random 16-byte keys, as the fill benchmarks write, mixed with keys that
// share their first 8 bytes (the prefix a search compares as an integer)
// and differ after, so both ways a comparison ends are taken; versions
// of a key come with random kinds. The map (key to the indexes of its
// versions, built before the writer starts and never changed) gives the
// answer to Get(key, seq) for any seq: the newest version at or below
// it. A reader probes, among the entries added so far, random (key,
// snapshot) pairs and keys never added, and from time to time walks the
// whole table, which must hold exactly the entries added in order. Tall
// towers come from the number of entries: at 30000, several nodes reach
// height 6 or more.
func TestModelConcurrentMap(t *testing.T) {
	n := 30000
	if testing.Short() {
		n = 10000
	}
	rng := rand.New(rand.NewPCG(5, 6))
	shared := randomBytes(rng, 8)
	var pool [][]byte
	for len(pool) < n/3 {
		k := randomBytes(rng, 16)
		if rng.IntN(3) == 0 {
			copy(k, shared) // same prefix, different tail
			k = k[:8+rng.IntN(9)]
		}
		pool = append(pool, k)
	}
	type version struct {
		kind  base.Kind
		value []byte
	}
	keys := make([][]byte, n)
	vs := make([]version, n)
	model := map[string][]int{} // key -> indexes of its versions, ascending (seq = index+1)
	for i := range n {
		keys[i] = pool[rng.IntN(len(pool))]
		vs[i] = version{base.KindPut, fmt.Appendf(nil, "v%d", i)}
		if rng.IntN(6) == 0 {
			vs[i] = version{kind: base.KindDelete}
		}
		model[string(keys[i])] = append(model[string(keys[i])], i)
	}
	absent := randomKeys(rng, 1000)
	for _, k := range absent {
		if _, ok := model[string(k)]; ok {
			t.Fatal("an absent key is in the pool")
		}
	}

	m := New(1 << 20)
	var done atomic.Int64
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 77))
			for round := 0; ; round++ {
				finished := done.Load() == int64(n)
				d := int(done.Load())
				for range 100 {
					if d == 0 {
						break
					}
					i := rng.IntN(d)
					snap := uint64(i + 1 + rng.IntN(d-i)) // within what is added
					idx := model[string(keys[i])]
					j := idx[lastAtOrBelow(idx, int(snap))] // newest version with seq <= snap
					value, kind, found := m.Get(keys[i], snap)
					if !found || kind != vs[j].kind || !bytes.Equal(value, vs[j].value) {
						t.Errorf("reader %d: Get(%x, %d) = %q, %v, %v; want %q, %v (seq %d)", r, keys[i], snap, value, kind, found, vs[j].value, vs[j].kind, j+1)
						return
					}
					if k := absent[rng.IntN(len(absent))]; func() bool { _, _, found := m.Get(k, base.MaxSeq); return found }() {
						t.Errorf("reader %d: absent key %x found", r, k)
						return
					}
				}
				if round%20 == 0 || finished {
					it := m.NewIter()
					seen := 0
					var pk []byte
					var pt uint64
					for ok := it.First(); ok; ok = it.Next() {
						k, tr := it.InternalKey()
						seq := it.Seq()
						if seq < 1 || seq > uint64(n) || !bytes.Equal(k, keys[seq-1]) || it.Kind() != vs[seq-1].kind || !bytes.Equal(it.Value(), vs[seq-1].value) {
							t.Errorf("reader %d: scan met a wrong entry (%x, seq %d)", r, k, seq)
							return
						}
						if seen > 0 && base.Compare(pk, pt, k, tr) >= 0 {
							t.Errorf("reader %d: scan out of order at seq %d", r, seq)
							return
						}
						pk, pt = k, tr
						seen++
					}
					if seen < d {
						t.Errorf("reader %d: scan saw %d entries, %d were added before it", r, seen, d)
						return
					}
				}
				if finished {
					return
				}
			}
		})
	}
	for i := range n {
		m.Add(uint64(i+1), vs[i].kind, keys[i], vs[i].value)
		done.Store(int64(i + 1))
	}
	wg.Wait()
	if m.Len() != n {
		t.Errorf("Len = %d, want %d", m.Len(), n)
	}
	if h := m.height.Load(); h < 6 {
		t.Errorf("tallest tower %d: the test wants towers above the %d inline levels", h, inlineLevels)
	}
}

// lastAtOrBelow returns the position in idx (ascending entry indexes, entry i at
// seq i+1) of the last entry with seq <= snap.
func lastAtOrBelow(idx []int, snap int) int {
	p, _ := slices.BinarySearch(idx, snap) // first index >= snap, i.e. seq > snap
	return p - 1
}
