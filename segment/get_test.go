package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// The copying point reads the tests use. The store reads with Lookup,
// which copies nothing: it copies the value it needs while it holds the
// segment (LIFETIMES.md).

// Get returns the newest version of key with a sequence number <= maxSeq.
// found is false if the segment holds none; for a tombstone found is true
// and kind is base.KindDelete. value is a fresh copy.
func (r *Reader) Get(key []byte, maxSeq uint64) (value []byte, kind base.Kind, found bool, err error) {
	return r.GetAppend(nil, key, maxSeq)
}

// GetAppend is Get appending the value to dst; it returns dst unchanged
// if nothing was found. With a warm cache and enough capacity in dst it
// does not allocate.
func (r *Reader) GetAppend(dst, key []byte, maxSeq uint64) (value []byte, kind base.Kind, found bool, err error) {
	value, _, kind, found, err = r.GetVersion(dst, key, maxSeq)
	return value, kind, found, err
}

// GetVersion is GetAppend that also returns the sequence number of the
// version found, which a reader compares with the range tombstones that
// cover key.
func (r *Reader) GetVersion(dst, key []byte, maxSeq uint64) (value []byte, seq uint64, kind base.Kind, found bool, err error) {
	value, seq, kind, found, err = r.Lookup(key, bloom.Hash(key), maxSeq)
	if found {
		value = append(dst, value...)
	} else {
		value = dst
	}
	return value, seq, kind, found, err
}

// TestKeyHeadOrder checks the property searchIndex relies on: a head
// below another's means a key below the other's, for keys short and long,
// with zero bytes where padding would be. A head that broke it would send
// a Get to the wrong block: a present key reported absent.
func TestKeyHeadOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0, 1, 0x7f, 0x80, 0xff}
	key := func() []byte {
		k := make([]byte, rng.IntN(11))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return k
	}
	for range 200_000 {
		a, b := key(), key()
		ha, hb := keyHead(a), keyHead(b)
		if ha < hb && bytes.Compare(a, b) >= 0 || ha > hb && bytes.Compare(a, b) <= 0 {
			t.Fatalf("keyHead(%x) = %x, keyHead(%x) = %x: heads disagree with the keys' order", a, ha, b, hb)
		}
	}
}

// TestEntriesCovered: the index's estimate of the entries that range
// tombstones cover is within a block per fragment of the count, the same
// by either walk (fragments, or blocks where fragments are more), 0 for
// tombstones outside the segment's keys or not newer than its entries,
// and stops where its work runs out.
func TestEntriesCovered(t *testing.T) {
	const n = 5000
	var es []entry
	for i := range n {
		es = append(es, entry{key: fmt.Appendf(nil, "k%05d", i), seq: uint64(i + 1), kind: base.KindPut, value: make([]byte, 40)})
	}
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 1024})
	r := openSegment(t, data, ReaderOptions{Name: "e.seg"})
	perBlock := n / r.Blocks()
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	covered := func(l *rangedel.List, minSeq uint64) uint64 {
		work := 1 << 20
		return r.EntriesCovered(l, minSeq, &work)
	}
	for _, c := range []struct{ lo, hi int }{{0, n}, {0, 100}, {1234, 4321}, {4000, n}, {-1, n + 1}} {
		lo, hi := []byte("a"), []byte("z")
		if c.lo >= 0 {
			lo = key(c.lo)
		}
		if c.hi <= n {
			hi = key(c.hi)
		}
		want := min(c.hi, n) - max(c.lo, 0)
		one := rangedel.Build([]rangedel.Tombstone{{Start: lo, End: hi, Seq: n + 1}})
		got := int(covered(one, 0))
		if got+perBlock+1 < want || got > want+perBlock+1 {
			t.Errorf("[%s, %s): %d entries covered, want %d within a block (%d)", lo, hi, got, want, perBlock)
		}
		// Every other key of the range, one fragment each: more fragments
		// than the segment has blocks, so the other walk: about half.
		var ts []rangedel.Tombstone
		for i := max(c.lo, 0); i < min(c.hi, n); i += 2 {
			ts = append(ts, rangedel.Tombstone{Start: key(i), End: key(i + 1), Seq: n + 1})
		}
		if many := rangedel.Build(ts); many.Len() > r.Blocks() {
			if got, half := int(covered(many, 0)), want/2; got > half+want/5+perBlock || got+want/5+perBlock < half {
				t.Errorf("every other key of [%s, %s), %d fragments: %d entries covered, want about %d", lo, hi, many.Len(), got, half)
			}
			if got := covered(many, n+1); got != 0 {
				t.Errorf("every other key of [%s, %s), no newer than the entries: %d covered, want 0", lo, hi, got)
			}
		}
		if got := covered(one, n+1); got != 0 {
			t.Errorf("[%s, %s), no newer than the entries: %d covered, want 0", lo, hi, got)
		}
	}
	for _, span := range [][2]string{{"a", "b"}, {"l", "m"}, {"k00010", "k00011"}} {
		if got := covered(rangedel.Build([]rangedel.Tombstone{{Start: []byte(span[0]), End: []byte(span[1]), Seq: n + 1}}), 0); got != 0 {
			t.Errorf("[%s, %s): %d covered, want 0", span[0], span[1], got)
		}
	}
	// Every key a fragment of its own, their sequence numbers alternating
	// so that none merge: more fragments than blocks, touching, up to the
	// last key and its block's separator; all of them covered.
	var each []rangedel.Tombstone
	for i := range n {
		each = append(each, rangedel.Tombstone{Start: key(i), End: key(i + 1), Seq: uint64(n + 1 + i%2)})
	}
	if l := rangedel.Build(each); l.Len() <= r.Blocks() {
		t.Fatalf("%d fragments for %d blocks", l.Len(), r.Blocks())
	} else if got := int(covered(l, 0)); got+perBlock+1 < n || got > n {
		t.Errorf("every key a fragment: %d entries covered, want %d within a block (%d)", got, n, perBlock)
	}
	// Fragments apart from each other, fewer than the blocks, then more.
	for _, step := range []int{40, 2} {
		var ts []rangedel.Tombstone
		for i := 0; i < n; i += step {
			ts = append(ts, rangedel.Tombstone{Start: key(i), End: key(i + step/2), Seq: n + 1})
		}
		l := rangedel.Build(ts)
		for _, budget := range []int{0, 10, 100} {
			work := budget
			got := r.EntriesCovered(l, 0, &work)
			if work > 0 || budget == 0 && got != 0 || got >= uint64(n)/4 {
				t.Errorf("%d fragments, work %d: %d entries covered, %d work left: want the walk cut short", l.Len(), budget, got, work)
			}
		}
	}
}
