package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
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

// TestEntriesBetween: the index's estimate of the entries in a key range
// is within a block of the count, adds up over adjacent ranges (to within
// rounding), and is 0
// for a range outside the segment's keys or within one block.
func TestEntriesBetween(t *testing.T) {
	const n = 5000
	var es []entry
	for i := range n {
		es = append(es, entry{key: fmt.Appendf(nil, "k%05d", i), seq: uint64(i + 1), kind: base.KindPut, value: make([]byte, 40)})
	}
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 1024})
	r := openSegment(t, data, ReaderOptions{Name: "e.seg"})
	perBlock := uint64(n / r.Blocks())
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	for _, c := range []struct{ lo, hi int }{{0, n}, {0, 100}, {1234, 4321}, {4000, n}, {-1, n + 1}} {
		lo, hi := []byte("a"), []byte("z")
		if c.lo >= 0 {
			lo = key(c.lo)
		}
		if c.hi <= n {
			hi = key(c.hi)
		}
		want := uint64(min(c.hi, n) - max(c.lo, 0))
		got := r.EntriesBetween(lo, hi)
		if got+perBlock+1 < want || got > want+perBlock+1 {
			t.Errorf("EntriesBetween(%s, %s) = %d, want %d within a block (%d)", lo, hi, got, want, perBlock)
		}
		mid := key((max(c.lo, 0) + min(c.hi, n)) / 2)
		if sum := r.EntriesBetween(lo, mid) + r.EntriesBetween(mid, hi); sum > got || sum+1 < got {
			t.Errorf("EntriesBetween(%s, %s) = %d is not the sum over [%s, %s) and [%s, %s)", lo, hi, got, lo, mid, mid, hi)
		}
	}
	if got := r.EntriesBetween(key(0), nil); got != n {
		t.Errorf("EntriesBetween(first key, nil) = %d, want %d", got, n)
	}
	for _, span := range [][2][]byte{{[]byte("a"), []byte("b")}, {[]byte("l"), nil}, {key(10), key(11)}} {
		if got := r.EntriesBetween(span[0], span[1]); got != 0 {
			t.Errorf("EntriesBetween(%q, %q) = %d, want 0", span[0], span[1], got)
		}
	}
}
