package wal

import "hash/crc32"

// spanChunk is the spacing of the prefix checksums a crcSpans keeps.
const spanChunk = 4 << 10

// spanCost is what findRecord charges its budget for a span longer than
// spanChunk, in bytes checksummed: at most two chunks to reach the span's
// ends from the prefix checksums before them, and the shift (a few dozen
// carry-less multiplications, about what a chunk costs to checksum).
const spanCost = 3 * spanChunk

// crcSpans gives the CRC-32C of any span of b at a cost that does not
// grow with the span's length. findRecord checks every position of a
// damaged record's bytes that could start a record, and in random bytes
// (a torn batch of compressed values, say) about len(b)/2^40 of the
// positions carry a known type and a length that fits: checksummed one by
// one, their spans cost O(len(b)³/2^40) in all, which for 8 MiB of random
// bytes already ran past findRecord's budget, and the search then stopped
// checking batches. With prefix checksums every spanChunk bytes, the
// checksum of b[lo:hi] is that of b[:hi] with that of b[:lo] shifted out
// (crc32_combine in reverse), each prefix at most spanChunk bytes from a
// stored one.
type crcSpans struct {
	b  []byte
	cp []uint32 // cp[k] is the checksum of b[:k*spanChunk], filled on demand
}

// sum returns crc32.Checksum(s.b[lo:hi], crcTable).
func (s *crcSpans) sum(lo, hi int) uint32 {
	if hi-lo <= spanChunk {
		return crc32.Checksum(s.b[lo:hi], crcTable)
	}
	// Checksum(A‖B) = Checksum(A)·x^(8|B|) + Checksum(B), over GF(2)
	// modulo the polynomial.
	return s.prefix(hi) ^ mulModP(xPow8n(hi-lo), s.prefix(lo))
}

// prefix returns the checksum of s.b[:x]. The stored checksums are
// extended as far as needed, so all of them together cost one pass over b.
func (s *crcSpans) prefix(x int) uint32 {
	k := x / spanChunk
	if len(s.cp) == 0 {
		s.cp = append(make([]uint32, 0, len(s.b)/spanChunk+1), 0) // the empty prefix
	}
	for j := len(s.cp); j <= k; j++ {
		s.cp = append(s.cp, crc32.Update(s.cp[j-1], crcTable, s.b[(j-1)*spanChunk:j*spanChunk]))
	}
	return crc32.Update(s.cp[k], crcTable, s.b[k*spanChunk:x])
}

// mulModP returns a·b modulo the CRC-32C polynomial, both in the bit order
// of the checksums (reflected: bit 31 holds x^0).
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0 && a != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			a &^= m
		}
		if b&1 != 0 {
			b = b>>1 ^ crc32.Castagnoli
		} else {
			b >>= 1
		}
	}
	return p
}

// x2n[k] is x^(2^k) modulo the CRC-32C polynomial.
var x2n = func() (t [64]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = mulModP(p, p)
	}
	return t
}()

// xPow8n returns x^(8n) modulo the CRC-32C polynomial: appending n bytes
// to a message multiplies its checksum's contribution by it.
func xPow8n(n int) uint32 {
	p := uint32(1) << 31 // x^0
	for k, e := 0, uint64(n)<<3; e != 0; k, e = k+1, e>>1 {
		if e&1 != 0 {
			p = mulModP(x2n[k], p)
		}
	}
	return p
}
