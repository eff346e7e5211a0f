package segment

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestVisibleAtEntrySeqs: a reader as of a sequence number sees the
// version written at exactly that number. SkipToVisible and NextVisible at
// every entry's own sequence number (and below and above all of them)
// show each key's newest version at or below it, if that is a put.
func TestVisibleAtEntrySeqs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var es []entry
	seq := uint64(0)
	for k := range 40 {
		for range 1 + rng.IntN(3) {
			seq++
			kind := base.KindPut
			if rng.IntN(3) == 0 {
				kind = base.KindDelete
			}
			es = append(es, entry{key: fmt.Appendf(nil, "k%02d", k), seq: seq, kind: kind, value: []byte("v")})
		}
	}
	rng.Shuffle(len(es), func(i, j int) { es[i].seq, es[j].seq = es[j].seq, es[i].seq })
	slices.SortFunc(es, compareEntries)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 128, RestartInterval: 4})
	r := openSegment(t, data, ReaderOptions{})
	for s := range seq + 2 {
		var want []string
		for i, e := range es {
			newest := e.seq <= s && (i == 0 || string(es[i-1].key) != string(e.key) || !visibleBefore(es, i, s))
			if newest && e.kind == base.KindPut {
				want = append(want, fmt.Sprintf("%s@%d", e.key, e.seq))
			}
		}
		var got []string
		it := r.NewIter(false)
		for ok := it.First() && it.SkipToVisible(s, nil); ok; ok = it.NextVisible(s, nil) {
			got = append(got, fmt.Sprintf("%s@%d", it.Key(), it.Seq()))
		}
		if err := it.Close(); err != nil || !slices.Equal(got, want) {
			t.Fatalf("as of %d: %v (%v), want %v", s, got, err, want)
		}
	}
}

// visibleBefore reports whether a version of es[i]'s key before i (a newer
// one) is at or below s.
func visibleBefore(es []entry, i int, s uint64) bool {
	for j := i - 1; j >= 0 && string(es[j].key) == string(es[i].key); j-- {
		if es[j].seq <= s {
			return true
		}
	}
	return false
}
