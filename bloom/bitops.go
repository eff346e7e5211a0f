package bloom

import (
	"encoding/binary"
	"math/bits"
)

// The bit array is a []byte so that a filter can be decoded in place from
// any byte slice (no alignment requirement); bulk operations work on it in
// little-endian 64-bit words, which on amd64 and arm64 compile to plain
// unaligned loads and stores. Every length handled here is a multiple of 8.

var le = binary.LittleEndian

// orBytes sets dst |= src; the slices have equal length.
func orBytes(dst, src []byte) {
	src = src[:len(dst)]
	for i := 0; i+8 <= len(dst); i += 8 {
		le.PutUint64(dst[i:], le.Uint64(dst[i:])|le.Uint64(src[i:]))
	}
}

// foldBlocks writes into half (len(old)/2 bytes) the OR of each pair of
// neighbouring 64-byte blocks of old: new block i = old 2i | old 2i+1.
func foldBlocks(half, old []byte) {
	for i := 0; i < len(half); i += blockBytes {
		j := 2 * i
		copy(half[i:i+blockBytes], old[j:j+blockBytes])
		orBytes(half[i:i+blockBytes], old[j+blockBytes:j+2*blockBytes])
	}
}

// foldBits writes into half the OR of each pair of neighbouring bits of old:
// new bit i = old bit 2i | old bit 2i+1. Each 64-bit word of old yields 32
// bits of half.
func foldBits(half, old []byte) {
	for i := 0; i+8 <= len(old); i += 8 {
		le.PutUint32(half[i/2:], foldWord(le.Uint64(old[i:])))
	}
}

// foldWord ORs each pair of bits (2j, 2j+1) of w into bit j of the result,
// by OR-ing each odd bit onto its even neighbour and then compacting the 32
// even bits into the low half with the classic bit-unshuffle steps.
func foldWord(w uint64) uint32 {
	x := (w | w>>1) & 0x5555555555555555
	x = (x | x>>1) & 0x3333333333333333
	x = (x | x>>2) & 0x0f0f0f0f0f0f0f0f
	x = (x | x>>4) & 0x00ff00ff00ff00ff
	x = (x | x>>8) & 0x0000ffff0000ffff
	x = (x | x>>16) & 0x00000000ffffffff
	return uint32(x)
}

// onesCount returns the number of set bits in b.
func onesCount(b []byte) uint64 {
	var n int
	for i := 0; i+8 <= len(b); i += 8 {
		n += bits.OnesCount64(le.Uint64(b[i:]))
	}
	return uint64(n)
}

// onesCountOr returns the number of set bits in a|b without building it.
func onesCountOr(a, b []byte) uint64 {
	b = b[:len(a)]
	var n int
	for i := 0; i+8 <= len(a); i += 8 {
		n += bits.OnesCount64(le.Uint64(a[i:]) | le.Uint64(b[i:]))
	}
	return uint64(n)
}
