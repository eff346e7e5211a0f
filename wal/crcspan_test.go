package wal

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestCRCSpans: the checksum of a span computed from prefix checksums
// (crcSpans) is the checksum of its bytes, for spans short and long, at
// and across the stored prefixes' boundaries.
func TestCRCSpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	b := make([]byte, 5*spanChunk+123)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	s := crcSpans{b: b}
	check := func(lo, hi int) {
		if got, want := s.sum(lo, hi), crc32.Checksum(b[lo:hi], crcTable); got != want {
			t.Fatalf("sum(%d, %d) = %#x, want %#x", lo, hi, got, want)
		}
	}
	for _, lo := range []int{0, 1, spanChunk - 1, spanChunk, spanChunk + 1, 2*spanChunk + 7} {
		for _, hi := range []int{lo, lo + 1, lo + spanChunk, lo + spanChunk + 1, 4 * spanChunk, 4*spanChunk + 1, len(b)} {
			if hi >= lo && hi <= len(b) {
				check(lo, hi)
			}
		}
	}
	for range 2000 {
		lo := rng.IntN(len(b) + 1)
		check(lo, lo+rng.IntN(len(b)-lo+1))
	}
}
