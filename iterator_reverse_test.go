package bloomkv

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestIteratorSingleSegmentReverseModel checks the single-segment path
// backward against a map: one compacted segment of small blocks whose
// entries are partly short (restart intervals of several entries, keys
// rebuilt from shared prefixes) and partly of 64 bytes and more (an
// interval each, keys aliased in the block) or stored apart (value
// records), with deletions and old
// versions that snapshots keep, some keys' versions spanning blocks.
// Values compress, so that an iterator that does not fill the cache
// decodes each block into the buffer of the one before: a key or value
// kept across a step into another block would read the new block's bytes.
// Each view (the DB and every snapshot) is walked fully backward, then by
// random mixed moves (Next, Prev, seeks, First, Last) under random bounds.
func TestIteratorSingleSegmentReverseModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(*modelSeed, 23))
	o := smallOptions()
	o.LargeValueSize = 200 // the longest values are stored apart, as value records
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	value := func(round int) string {
		n := rng.IntN(8)
		switch rng.IntN(3) {
		case 1:
			n = 60 + rng.IntN(60)
		case 2:
			n = 150 + rng.IntN(200)
		}
		return fmt.Sprintf("%d-", round) + strings.Repeat(string(rune('a'+rng.IntN(26))), n)
	}
	model := map[string]string{}
	type view struct {
		s     *Snapshot
		model map[string]string
	}
	var views []view
	defer func() {
		for _, v := range views {
			v.s.Close()
		}
	}()
	rounds := 12
	if testing.Short() {
		rounds = 6
	}
	for round := range rounds {
		for range 150 {
			k := fmt.Sprintf("k%04d", rng.IntN(400))
			if rng.IntN(5) == 0 {
				mustDo(t, db.Delete([]byte(k)))
				delete(model, k)
				continue
			}
			v := value(round)
			mustDo(t, db.Put([]byte(k), []byte(v)))
			model[k] = v
		}
		// Hot keys get a large version each round, which the snapshots
		// keep: their versions fill several blocks.
		for _, k := range []string{"k0100", "k0101", "k0300"} {
			v := fmt.Sprintf("%d-", round) + strings.Repeat("h", 300)
			mustDo(t, db.Put([]byte(k), []byte(v)))
			model[k] = v
		}
		s, err := db.NewSnapshot()
		mustDo(t, err)
		views = append(views, view{s, maps.Clone(model)})
	}
	mustDo(t, db.Compact())
	newIter := func(v view, opts *IterOptions) *Iterator {
		var it *Iterator
		var err error
		if v.s == nil {
			it, err = db.NewIterator(opts)
		} else {
			it, err = v.s.NewIterator(opts)
		}
		mustDo(t, err)
		return it
	}
	for i, v := range append([]view{{nil, model}}, views...) {
		for _, fill := range []bool{false, true} {
			it := newIter(v, &IterOptions{FillCache: fill})
			if it.seg == nil {
				t.Fatalf("view %d: the iterator does not read the one segment directly", i)
			}
			sm := newSortedModel(v.model, &IterOptions{})
			n := len(sm.keys)
			for ok := it.Last(); ok; ok = it.Prev() {
				n--
				if n < 0 || string(it.Key()) != sm.keys[n] || string(it.Value()) != v.model[sm.keys[n]] {
					t.Fatalf("view %d: backward scan at %q=%.20q, want key %d", i, it.Key(), it.Value(), n)
				}
			}
			if it.Error() != nil || n != 0 {
				t.Fatalf("view %d: backward scan stopped %d keys early: %v", i, n, it.Error())
			}
			checkIter(t, rng, it, sm, 300)
			for range 4 {
				lower, upper := randomBounds(rng)
				it.SetBounds(lower, upper)
				checkIter(t, rng, it, newSortedModel(v.model, &IterOptions{LowerBound: lower, UpperBound: upper}), 200)
			}
			p := []byte(fmt.Sprintf("k0%d", rng.IntN(4)))
			it.SetPrefix(p)
			checkIter(t, rng, it, newSortedModel(v.model, &IterOptions{Prefix: p}), 200)
			mustDo(t, it.Close())
		}
	}
}
