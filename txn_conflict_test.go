package bloomkv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestWriteSetConflictsMatchesModel: a write set answers whether it wrote
// a key in a transaction's read spans exactly as a check of every key and
// range against every span would, whether it looks the keys up in the
// spans or the spans up in its sorted runs (more keys than spans times
// runs), over batches of many sizes, repeated keys, point and range reads
// (unbounded ones included) and range deletions, with checks between the
// batches, so that the runs are built and extended as the keys come.
func TestWriteSetConflictsMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	key := func(i int) []byte { return fmt.Appendf(nil, "k%04d", i) }
	for round := range 300 {
		ws := &writeSet{}
		var written [][]byte
		var ranges []keySpan
		space := 50 + rng.IntN(2000)
		check := func(checks int) {
			for range checks {
				var reads []keySpan
				for range 1 + rng.IntN([]int{1, 4, 100}[rng.IntN(3)]) {
					a := rng.IntN(space + 10)
					switch rng.IntN(4) {
					case 0:
						reads = append(reads, keySpan{key(a), key(a + 1 + rng.IntN(30))})
					case 1:
						if rng.IntN(10) == 0 {
							reads = append(reads, keySpan{[]byte{}, key(a)})
						} else {
							reads = append(reads, keySpan{key(a), nil})
						}
					default:
						reads = append(reads, pointSpan(key(a)))
					}
				}
				reads = mergeSpans(reads)
				in := func(k []byte) bool {
					for _, r := range reads {
						if bytes.Compare(r.start, k) <= 0 && (r.end == nil || bytes.Compare(k, r.end) < 0) {
							return true
						}
					}
					return false
				}
				want := false
				for _, k := range written {
					want = want || in(k)
				}
				for _, d := range ranges {
					for _, r := range reads {
						want = want || (r.end == nil || bytes.Compare(d.start, r.end) < 0) && bytes.Compare(r.start, d.end) < 0
					}
				}
				if got := ws.conflicts(reads); got != want {
					t.Fatalf("round %d: %d keys in %d runs, %d reads: conflicts = %v, want %v", round, len(ws.ends), len(ws.runs), len(reads), got, want)
				}
			}
		}
		for range 1 + rng.IntN(12) {
			b := NewBatch()
			for range rng.IntN([]int{2, 20, 300}[rng.IntN(3)]) {
				k := key(rng.IntN(space))
				if rng.IntN(20) == 0 {
					e := key(rng.IntN(space))
					b.DeleteRange(k, e)
					if bytes.Compare(k, e) < 0 {
						ranges = append(ranges, keySpan{k, e})
					}
					continue
				}
				b.Put(k, nil)
				written = append(written, k)
			}
			if b.count > 0 {
				ws.add(b.setSeq(1))
			}
			check(3) // the keys so far indexed, the next ones added to them
		}
		check(20)
		ws.index()
		for n := 1; n < len(ws.runs); n++ {
			if len(ws.runs[n]) >= len(ws.runs[n-1]) {
				t.Fatalf("round %d: run %d holds %d keys, the one before %d", round, n, len(ws.runs[n]), len(ws.runs[n-1]))
			}
		}
	}
}
