package segment

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestKeepValueRecordsOff: KeepValueRecords with a length of 0 or below
// keeps nothing: every value is decoded, and RawValue has no record, as
// for an Iter never asked to keep them.
func TestKeepValueRecordsOff(t *testing.T) {
	es := rawCopyEntries(rand.New(rand.NewPCG(8, 9)), 200)
	data, _ := writeSegment(t, es, WriterOptions{SeparateValues: 256})
	for _, mapped := range []bool{false, true} {
		ro := ReaderOptions{Name: "v.seg"}
		if mapped {
			ro.Mapped = data
		}
		r := openSegment(t, data, ro)
		for _, keep := range []int{0, -1} {
			it := r.NewIter(false)
			it.KeepValueRecords(keep)
			i := 0
			for ok := it.First(); ok; ok = it.Next() {
				if rec, _, ok := it.RawValue(); ok {
					t.Fatalf("mapped %v, KeepValueRecords(%d): a record of %d bytes kept at %q", mapped, keep, len(rec), it.Key())
				}
				if e := es[i]; e.kind == base.KindPut && !bytes.Equal(it.Value(), e.value) {
					t.Fatalf("mapped %v, KeepValueRecords(%d): %q = %d bytes, want %d", mapped, keep, it.Key(), len(it.Value()), len(e.value))
				}
				i++
			}
			if err := it.Close(); err != nil || i != len(es) {
				t.Fatalf("mapped %v, KeepValueRecords(%d): %d of %d entries, %v", mapped, keep, i, len(es), err)
			}
		}
	}
}
