package main

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
)

// keySize is the size of every generated key.
const keySize = 16

// dataset is a deterministic set of distinct keys, their values, and for
// each key an absent twin.
//
// The keys are kept sorted so that fill-seq can walk them in order; the
// random fill order is perm. Every present key has its last bit clear and
// its absent twin is the same key with that bit set: the twin is certainly
// not stored, and it sorts right next to a present key, so a lookup for it
// lands inside a segment's key range and, without a filter, costs a real
// index search and block read.
type dataset struct {
	keys      []byte  // n keys of keySize bytes, sorted ascending
	perm      []int32 // a random permutation of 0..n-1: the fill-random order
	values    []byte  // values are windows of this buffer
	valueSize int
}

// valueSourceSize is the buffer values are cut from: big enough that
// neighbouring values in a block differ, small enough to build instantly.
const valueSourceSize = 1 << 20

func newDataset(n, valueSize int, seed uint64) *dataset {
	r := rand.New(rand.NewPCG(seed, 0x6b657973)) // "keys"
	// The first 8 bytes come from sorted 63-bit random numbers, made
	// strictly increasing (+1 cannot overflow 63 bits for n < 2^62): that
	// sorts the keys and makes them distinct whatever the last 8 bytes are.
	hi := make([]uint64, n)
	for i := range hi {
		hi[i] = r.Uint64() >> 1
	}
	slices.Sort(hi)
	d := &dataset{keys: make([]byte, n*keySize), perm: make([]int32, n), valueSize: valueSize}
	for i, h := range hi {
		if i > 0 && h <= hi[i-1] {
			h = hi[i-1] + 1
			hi[i] = h
		}
		k := d.keys[i*keySize:]
		binary.BigEndian.PutUint64(k, h)
		binary.BigEndian.PutUint64(k[8:], r.Uint64()&^1)
	}
	for i := range d.perm {
		d.perm[i] = int32(i)
	}
	r.Shuffle(n, func(i, j int) { d.perm[i], d.perm[j] = d.perm[j], d.perm[i] })
	d.values = valueSource(r, valueSourceSize+valueSize)
	return d
}

// valueSource returns n bytes in 32-byte pieces of 16 random bytes followed
// by the same 16 again, so that snappy compresses values to about half, as
// db_bench's default does: all-random values would make compression pure
// cost, all-zero ones would make the files unrealistically small.
func valueSource(r *rand.Rand, n int) []byte {
	b := make([]byte, n+32)
	for off := 0; off < n; off += 32 {
		binary.LittleEndian.PutUint64(b[off:], r.Uint64())
		binary.LittleEndian.PutUint64(b[off+8:], r.Uint64())
		copy(b[off+16:off+32], b[off:off+16])
	}
	return b[:n]
}

func (d *dataset) len() int { return len(d.perm) }

// key returns key i (in sorted order). The slice aliases the data set.
func (d *dataset) key(i int) []byte {
	return d.keys[i*keySize : (i+1)*keySize : (i+1)*keySize]
}

// absentKey writes the absent twin of key i into dst and returns it.
func (d *dataset) absentKey(i int, dst *[keySize]byte) []byte {
	copy(dst[:], d.key(i))
	dst[keySize-1] |= 1
	return dst[:]
}

// value returns the value of key i. The slice aliases the data set.
func (d *dataset) value(i int) []byte {
	// 1031 is prime and far from a power of two, so consecutive keys get
	// windows at unrelated offsets.
	off := (i * 1031) % (len(d.values) - d.valueSize + 1)
	return d.values[off : off+d.valueSize : off+d.valueSize]
}

// bytes is the user data volume of the data set: keys plus values.
func (d *dataset) bytes() int64 { return int64(d.len()) * int64(keySize+d.valueSize) }
