package main

import (
	"bytes"
	"slices"
	"testing"
)

func TestDataset(t *testing.T) {
	const n, vs = 5000, 37
	d := newDataset(n, vs, 42)
	if d.len() != n {
		t.Fatalf("len %d, want %d", d.len(), n)
	}
	for i := 1; i < n; i++ {
		if bytes.Compare(d.key(i-1), d.key(i)) >= 0 {
			t.Fatalf("keys %d and %d are not strictly increasing", i-1, i)
		}
	}
	var buf [keySize]byte
	for i := range n {
		k := d.key(i)
		if len(k) != keySize || k[keySize-1]&1 != 0 {
			t.Fatalf("key %d = %x: want %d bytes with the last bit clear", i, k, keySize)
		}
		a := d.absentKey(i, &buf)
		if j, found := d.search(a); found {
			t.Fatalf("absent twin of key %d equals present key %d", i, j)
		}
		if v := d.value(i); len(v) != vs {
			t.Fatalf("value %d has %d bytes, want %d", i, len(v), vs)
		}
	}
	perm := slices.Clone(d.perm)
	slices.Sort(perm)
	for i, p := range perm {
		if int(p) != i {
			t.Fatalf("perm is not a permutation of 0..%d", n-1)
		}
	}
	if slices.IsSorted(d.perm) {
		t.Error("perm is the identity: fill-random would be fill-seq")
	}

	again := newDataset(n, vs, 42)
	if !bytes.Equal(again.keys, d.keys) || !slices.Equal(again.perm, d.perm) || !bytes.Equal(again.value(7), d.value(7)) {
		t.Error("the same seed gave a different data set")
	}
	if other := newDataset(n, vs, 43); bytes.Equal(other.keys, d.keys) {
		t.Error("another seed gave the same keys")
	}
}

// search finds key among d's sorted keys.
func (d *dataset) search(key []byte) (int, bool) {
	lo, hi := 0, d.len()
	for lo < hi {
		mid := (lo + hi) / 2
		if bytes.Compare(d.key(mid), key) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < d.len() && bytes.Equal(d.key(lo), key)
}
