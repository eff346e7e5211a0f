// Package bloom is bloomkv's Bloom filter: a compact set that answers
// "definitely not here" or "maybe here" and never forgets a key it was given.
//
// Every segment of the store carries one, so a Get for an absent key is
// answered from memory instead of from the disk. The package is also a
// general-purpose library:
//
//   - Two layouts behind one API. Blocked (the default) keeps all k probes of
//     a key inside one 64-byte block, so a lookup costs one cache miss however
//     large the filter; Classic spreads the probes over the whole bit array
//     and gives the lowest false-positive rate (FPR) per bit.
//   - Hash once, probe many: Hash computes the one 64-bit hash of a key
//     (xxhash64) from which every probe position is derived, and
//     AddHash/ContainsHash take it, so a store probing many filters for one
//     key hashes the key once.
//   - Union ORs two filters of the same geometry; the result is bit-identical
//     to the filter of the union of their key sets.
//   - Fold folds a filter to half its size; the result is bit-identical to
//     the filter built directly at half the size. Both layouts map a hash to
//     a position by "fast range" (the high half of a 64×64-bit product), for
//     which halving the range maps position p to p/2: folding ORs
//     neighbouring blocks (Blocked) or neighbouring bits (Classic).
//   - Estimates from the bits alone: the number of keys, the FPR, and the
//     size of the intersection of two filters' sets.
//   - A counting variant (4-bit saturating counters) that supports Remove.
//   - A stable, checksummed binary encoding (see FORMAT.md) with a zero-copy
//     decoder.
//
// A Filter is safe for concurrent readers (Contains, ContainsHash, the
// estimates, MarshalBinary); anything that changes it (Add, Union, Fold,
// UnmarshalBinary) needs exclusive access.
package bloom

import (
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// Layout selects how probe positions are spread over the bit array.
type Layout uint8

const (
	// Blocked is the cache-local layout: the hash picks one 512-bit
	// (64-byte, one cache line) block and all k probes fall inside it.
	Blocked Layout = 1
	// Classic spreads the k probes over the whole bit array by
	// Kirsch–Mitzenmacher double hashing.
	Classic Layout = 2
)

func (l Layout) String() string {
	switch l {
	case Blocked:
		return "blocked"
	case Classic:
		return "classic"
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

const (
	blockBits  = 512
	blockBytes = blockBits / 8
	wordBits   = 64

	// MaxK is the largest number of probes per key. Beyond ~24 probes no
	// bits-per-key setting gains anything (the optimum at 32 bits/key is 22).
	MaxK = 32

	// MaxBits bounds a filter's size (32 GiB of bits) so that a geometry
	// taken from a hostile header can never demand an absurd allocation.
	MaxBits = 1 << 38

	// DefaultSeed is the seed of Hash. All filters of a store share it so
	// that one hash serves all of them.
	DefaultSeed = 0
)

// Geometry is everything that decides where a key's bits go. Two filters
// can be combined by Union only if their geometries are equal.
type Geometry struct {
	Layout Layout
	Bits   uint64 // size of the bit array; a multiple of 512 (Blocked) or 64 (Classic)
	K      int    // probes per key, 1..MaxK
	Seed   uint64 // hash seed; filters sharing a seed can share one Hash per key
}

// ErrGeometry is matched by errors about an invalid or mismatched geometry.
var ErrGeometry = errors.New("bloom: invalid or mismatched geometry")

// Validate reports whether g describes a filter this package can build.
func (g Geometry) Validate() error {
	unit := uint64(wordBits)
	switch g.Layout {
	case Blocked:
		unit = blockBits
	case Classic:
	default:
		return fmt.Errorf("%w: unknown layout %d", ErrGeometry, g.Layout)
	}
	if g.Bits == 0 || g.Bits%unit != 0 || g.Bits > MaxBits {
		return fmt.Errorf("%w: %s filter of %d bits (want a positive multiple of %d, at most %d)",
			ErrGeometry, g.Layout, g.Bits, unit, uint64(MaxBits))
	}
	if g.K < 1 || g.K > MaxK {
		return fmt.Errorf("%w: k=%d (want 1..%d)", ErrGeometry, g.K, MaxK)
	}
	return nil
}

// units is the number of fold units: blocks (Blocked) or 64-bit words (Classic).
func (g Geometry) units() uint64 {
	if g.Layout == Blocked {
		return g.Bits / blockBits
	}
	return g.Bits / wordBits
}

// Halvings is how many times a filter of this geometry can be halved: the
// number of trailing zero bits of its unit count (blocks for Blocked, 64-bit
// words for Classic), since each fold pairs neighbouring units.
func (g Geometry) Halvings() int {
	u := g.units()
	if u == 0 {
		return 0
	}
	return bits.TrailingZeros64(u)
}

// Filter is a Bloom filter. The zero value is not usable; build one with
// New, NewBitsPerKey or NewGeometry, or decode one.
type Filter struct {
	g     Geometry
	bits  []byte // little-endian bit order: bit i is bits[i/8] & (1 << (i%8))
	units uint64 // g.modulus(), cached for the probe loops
	count uint64 // keys added (Add calls, summed by Union): an upper bound on distinct keys
}

// New returns a Blocked filter for n keys with false-positive rate p
// (0 < p < 1): sized by the optimal formula bits = -n·ln p / ln²2, raised
// until the blocked layout's own FPR formula reaches p, then rounded up as
// NewBitsPerKey documents. It panics if p is not in (0, 1).
func New(n int, p float64) *Filter {
	if !(p > 0 && p < 1) {
		panic(fmt.Sprintf("bloom: New with false-positive rate %v, want 0 < p < 1", p))
	}
	return NewBitsPerKey(n, BitsPerKeyFor(Blocked, p))
}

// NewBitsPerKey returns a Blocked filter for n keys at bitsPerKey bits per
// key, with k chosen to minimise the FPR (see GeometryFor for the rounding).
func NewBitsPerKey(n int, bitsPerKey float64) *Filter {
	f, err := NewGeometry(GeometryFor(Blocked, n, bitsPerKey))
	if err != nil {
		panic(err) // GeometryFor only returns valid geometries
	}
	return f
}

// NewGeometry returns an empty filter of exactly geometry g.
func NewGeometry(g Geometry) (*Filter, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return newFilter(g, make([]byte, g.Bits/8)), nil
}

func newFilter(g Geometry, b []byte) *Filter {
	return &Filter{g: g, bits: b, units: g.modulus()}
}

// modulus is the range fast range maps a hash onto: the block count
// (Blocked) or the bit count (Classic).
func (g Geometry) modulus() uint64 {
	if g.Layout == Blocked {
		return g.Bits / blockBits
	}
	return g.Bits
}

// GeometryFor sizes a filter of the given layout for n keys at bitsPerKey.
//
// Rounding: the bit count is n·bitsPerKey rounded up to whole units (512-bit
// blocks or 64-bit words, at least one), and then, above 64 units, up to a
// size c·2^j with 32 ≤ c < 64. That costs at most 1/32 (3.1%) extra memory
// and buys j exact halvings, and makes sizes of similar filters coincide so
// that Union applies. k is then chosen for the bits per key actually
// allocated: round(bits/n · ln 2) for Classic, and for Blocked the k that
// minimises the blocked FPR formula (the same or one less up to about
// 22 bits per key, further below above that).
// A bitsPerKey below 1 is treated as 1.
func GeometryFor(layout Layout, n int, bitsPerKey float64) Geometry {
	n = max(n, 1)
	g := Geometry{Layout: layout, Bits: BitsFor(layout, n, bitsPerKey), Seed: DefaultSeed}
	g.K = OptimalK(layout, float64(g.Bits)/float64(n))
	return g
}

// BitsFor is the size in bits of GeometryFor(layout, n, bitsPerKey)
// without choosing k, which for Blocked costs a few evaluations of FPR:
// for planners that weigh many sizes (compaction.AllocateBits).
func BitsFor(layout Layout, n int, bitsPerKey float64) uint64 {
	n = max(n, 1)
	bitsPerKey = max(bitsPerKey, 1)
	unit := uint64(wordBits)
	if layout == Blocked {
		unit = blockBits
	}
	want := math.Ceil(float64(n) * bitsPerKey)
	// Clamp in floating point: converting a float beyond 2^64 to uint64 is
	// implementation-defined, and rounding a count near 2^64 overflows.
	units := uint64(min(math.Ceil(want/float64(unit)), MaxBits/float64(unit)))
	units = max(roundHalvable(units), 1)
	return units * unit
}

// roundHalvable rounds u up to c·2^j with 32 ≤ c < 64 (u unchanged below 64).
func roundHalvable(u uint64) uint64 {
	if u <= 64 {
		return u
	}
	shift := bits.Len64(u) - 6
	c := (u + 1<<shift - 1) >> shift
	return c << shift
}

// OptimalK is the probe count for a filter of bitsPerKey: for Blocked the
// integer k that minimises its theoretical FPR; for Classic round(b·ln 2),
// the nearest integer to the real k that minimises (1-e^(-k/b))^k, which
// the integer minimiser differs from only near a half-integer and by under
// 1% of FPR (at 2.1 bits per key k = 2 passes 37.7% of absent keys, the
// k = 1 returned 37.9%).
func OptimalK(layout Layout, bitsPerKey float64) int {
	k0 := int(math.Round(bitsPerKey * math.Ln2))
	k0 = min(max(k0, 1), MaxK)
	if layout != Blocked {
		return k0
	}
	// The blocked FPR is unimodal in k with its minimum at or below k0
	// (far below at high bits/key), so walk down while it improves.
	best, bestFPR := k0, FPR(layout, bitsPerKey, k0)
	if k := k0 + 1; k <= MaxK {
		if p := FPR(layout, bitsPerKey, k); p < bestFPR {
			return k
		}
	}
	for k := k0 - 1; k >= 1; k-- {
		p := FPR(layout, bitsPerKey, k)
		if p >= bestFPR {
			break
		}
		best, bestFPR = k, p
	}
	return best
}

// BitsPerKeyFor returns the bits per key the layout needs, at its optimal k,
// for false-positive rate p: -ln p / ln²2 for Classic; for Blocked that
// value raised in 1% steps until the blocked formula reaches p.
func BitsPerKeyFor(layout Layout, p float64) float64 {
	bpk := -math.Log(p) / (math.Ln2 * math.Ln2)
	if layout != Blocked {
		return bpk
	}
	for i := 0; i < 200 && FPR(Blocked, bpk, OptimalK(Blocked, bpk)) > p; i++ {
		bpk *= 1.01
	}
	return bpk
}

// FPR is the theoretical false-positive rate of a layout at bitsPerKey with
// k probes, for keys hashed uniformly.
//
// Classic: (1 - e^(-k/b))^k with b bits per key.
// Blocked: a block receives Poisson(λ = 512/b) keys; a block holding i keys
// answers a probe with FPR (1 - (1-1/512)^(k·i))^k, so the filter's FPR is
// the Poisson-weighted sum over i. The unevenness of block loads is why
// Blocked needs slightly more bits than Classic for the same FPR.
func FPR(layout Layout, bitsPerKey float64, k int) float64 {
	if bitsPerKey <= 0 {
		return 1
	}
	kf := float64(k)
	if layout != Blocked {
		return math.Pow(-math.Expm1(-kf/bitsPerKey), kf)
	}
	lambda := blockBits / bitsPerKey
	if lambda > 1<<15 {
		// Even the emptiest likely block has had >59 probes per bit: every
		// probe hits to double precision. Also bounds blockedFPR's range,
		// which grows with √lambda (a hostile count must not cost hours).
		return 1
	}
	if lambda == 0 { // infinitely many bits per key: no block holds a key
		return 0
	}
	return blockedFPR(lambda, k)
}

// blockedFPR is Σ_i P(X=i)·(1-(1-1/512)^(k·i))^k for X ~ Poisson(lambda):
// the Blocked layout's FPR. The store evaluates it for every live segment
// at each flush and merge, holding its mutex (Stats' expected reads, the
// filter budget's plan), so it must be cheap however many segments there
// are: the sum starts at the mode and runs outwards, each Poisson weight
// from its neighbour's (P(i±1) from P(i), one multiplication), each
// term's power by multiplications, until the terms are negligible against
// the sum (below 2^-60 of it: every term further out is smaller still,
// and their total is too). Summing a fixed 12σ range with a log-gamma per
// term took 15 µs at 10 bits per key; this agrees with it to 1e-12
// (TestBlockedFPRMatchesReference).
func blockedFPR(lambda float64, k int) float64 {
	// A block of i keys has had k·i probes; each bit stays clear with
	// (1-1/512)^(k·i) = e^(c·i), and a probe hits with 1-e^(c·i). Those
	// powers too come from their neighbours' (r = e^c). 1-e^(c·i) would
	// lose digits only where c·i is near 0, at a handful of keys per
	// block, where no weight is large enough to matter.
	c := float64(k) * math.Log1p(-1.0/blockBits)
	r := math.Exp(c)
	mode := math.Floor(lambda)
	p0, e0 := poissonAtMode(lambda, mode), math.Exp(c*mode)
	sum := p0 * powInt(-math.Expm1(c*mode), k)
	const negligible = 0x1p-60
	// Above the mode a term's power only grows (towards 1), so the
	// weights alone decide where to stop.
	for i, p, e := mode+1, p0, e0; ; i++ {
		p, e = p*lambda/i, e*r
		sum += p * powInt(1-e, k)
		if p <= negligible*sum || p == 0 {
			break
		}
	}
	// Below it weights and powers both fall.
	for i, p, e := mode, p0, e0; i > 0; i-- {
		p, e = p*i/lambda, e/r
		t := p * powInt(1-e, k)
		sum += t
		if t <= negligible*sum {
			break
		}
	}
	return sum
}

// poissonAtMode is P(X=m) for X ~ Poisson(lambda), m = ⌊lambda⌋. For
// large m, e^(-λ)·λ^m/m! is written with Stirling's series for m! so that
// no two large numbers are subtracted: exp(-(λ-m) + m·ln(1+(λ-m)/m) -
// δ(m)) / √(2πm), δ(m) = 1/(12m) - 1/(360m³) + 1/(1260m⁵) - 1/(1680m⁷),
// exact to double precision from m = 16 on. The plain form's exponent,
// -λ + m·ln λ - ln m!, loses about 10^-11 of the weight to rounding near
// λ = 10^4.
func poissonAtMode(lambda, m float64) float64 {
	if m < 16 {
		lg, _ := math.Lgamma(m + 1)
		return math.Exp(-lambda + m*math.Log(lambda) - lg)
	}
	f, m2 := lambda-m, m*m
	delta := (1.0/12 - (1.0/360-(1.0/1260-1/(1680*m2))/m2)/m2) / m
	return math.Exp(-f+m*math.Log1p(f/m)-delta) / math.Sqrt(2*math.Pi*m)
}

// powInt is x^k for k >= 0, by squaring.
func powInt(x float64, k int) float64 {
	r := 1.0
	for ; k > 0; k >>= 1 {
		if k&1 != 0 {
			r *= x
		}
		x *= x
	}
	return r
}

// Hash is the 64-bit hash of key from which every probe position is derived:
// xxhash64 with DefaultSeed. Filters created by this package use
// DefaultSeed, so one Hash serves AddHash and ContainsHash of all of them.
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

// HashSeed is xxhash64 of key with the given seed, for filters whose
// geometry carries a non-default seed.
func HashSeed(key []byte, seed uint64) uint64 {
	if seed == 0 {
		return xxhash.Sum64(key) // xxhash64 with seed 0, without a Digest
	}
	var d xxhash.Digest
	d.ResetWithSeed(seed)
	d.Write(key)
	return d.Sum64()
}

// Geometry returns the filter's geometry.
func (f *Filter) Geometry() Geometry { return f.g }

// Count returns the number of keys added (summed over unions). Adding a key
// twice counts twice, so it is an upper bound on the distinct keys held.
func (f *Filter) Count() uint64 { return f.count }

// SizeBytes returns the size of the bit array in bytes.
func (f *Filter) SizeBytes() int { return len(f.bits) }

// BitsPerKey returns bits per added key (Count), or +Inf for an empty filter.
func (f *Filter) BitsPerKey() float64 {
	return float64(f.g.Bits) / float64(f.count)
}

// Add inserts key.
func (f *Filter) Add(key []byte) { f.AddHash(HashSeed(key, f.g.Seed)) }

// Contains reports whether key may have been added. False means it was not.
func (f *Filter) Contains(key []byte) bool { return f.ContainsHash(HashSeed(key, f.g.Seed)) }

// Probe derivation, shared by every operation (AddHash and ContainsHash
// inline it for speed; probes() is the reference the tests compare against).
//
// Blocked: block = hi64(h · blocks); the in-block positions come from the
// low 32 bits x of h: position = x >> 23 (9 bits, 0..511), then x *= φ32
// for the next probe — the scheme RocksDB's FastLocalBloom uses, whose
// successive top bits behave as independent for k ≤ 32.
//
// Classic: g_i = h1 + i·h2 (mod 2^64) with h1 = h and h2 an odd remix of h
// (Kirsch–Mitzenmacher), position = hi64(g_i · bits).
const phi32 = 0x9e3779b9

func remix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h | 1
}

// AddHash inserts the key whose Hash is h.
func (f *Filter) AddHash(h uint64) {
	f.count++
	if f.g.Layout == Classic {
		f.addClassic(h)
		return
	}
	blk, _ := bits.Mul64(h, f.units)
	b := (*[blockBytes]byte)(f.bits[blk*blockBytes:])
	x := uint32(h)
	for i := f.g.K; i > 0; i-- {
		p := x >> 23
		b[p>>3] |= 1 << (p & 7)
		x *= phi32
	}
}

// ContainsHash reports whether the key whose Hash is h may have been added.
func (f *Filter) ContainsHash(h uint64) bool {
	if f.g.Layout == Classic {
		return f.containsClassic(h)
	}
	blk, _ := bits.Mul64(h, f.units)
	b := (*[blockBytes]byte)(f.bits[blk*blockBytes:])
	// All k probes are tested without an early exit: they are in one cache
	// line, and a loop with a fixed trip count ending in one branch is
	// predictable, where an early exit mispredicts about once per absent
	// key. Measured (BenchmarkContainsAbsent/blocked, 10^6 keys, 10 bits per
	// key, hash included): 26.1 ns with the early exit, 14.6 ns without.
	x := uint32(h)
	acc := byte(1)
	for i := f.g.K; i > 0; i-- {
		p := x >> 23
		acc &= b[p>>3] >> (p & 7)
		x *= phi32
	}
	return acc&1 != 0
}

func (f *Filter) addClassic(h uint64) {
	g, d := h, remix(h)
	for i := f.g.K; i > 0; i-- {
		p, _ := bits.Mul64(g, f.units)
		f.bits[p>>3] |= 1 << (p & 7)
		g += d
	}
}

func (f *Filter) containsClassic(h uint64) bool {
	g, d := h, remix(h)
	for i := f.g.K; i > 0; i-- {
		p, _ := bits.Mul64(g, f.units)
		if f.bits[p>>3]&(1<<(p&7)) == 0 {
			return false
		}
		g += d
	}
	return true
}

// probes appends the global bit positions of hash h to dst: the reference
// definition of the layouts, used by the counting filter and by tests.
func (g Geometry) probes(h uint64, dst []uint64) []uint64 {
	if g.Layout == Classic {
		p, d := h, remix(h)
		for i := 0; i < g.K; i++ {
			pos, _ := bits.Mul64(p, g.Bits)
			dst = append(dst, pos)
			p += d
		}
		return dst
	}
	blk, _ := bits.Mul64(h, g.Bits/blockBits)
	x := uint32(h)
	for i := 0; i < g.K; i++ {
		dst = append(dst, blk*blockBits+uint64(x>>23))
		x *= phi32
	}
	return dst
}

// Union ORs other into f. Both must have the same geometry; the result is
// bit-identical to a filter of that geometry built from both key sets, and
// its Count is the sum of both counts.
func (f *Filter) Union(other *Filter) error {
	if f.g != other.g {
		return fmt.Errorf("%w: union of %+v with %+v", ErrGeometry, f.g, other.g)
	}
	orBytes(f.bits, other.bits)
	f.count += other.count
	return nil
}

// Fold halves f: it folds the bit array onto itself, keeping k and the seed. The result is
// bit-identical to the filter of the halved geometry built from the same
// keys: fast range maps position p of the halved range to p/2, so new block
// (Blocked) or bit (Classic) i is the OR of old 2i and 2i+1. It fails if the
// geometry has no halvings left (Geometry.Halvings).
//
// Folding keeps k, so a filter folded below the size its k was chosen for
// has a higher FPR than one built at the smaller size; build filters that
// will be folded with NewGeometry and the k of the target size.
func (f *Filter) Fold() error {
	if f.g.Halvings() == 0 {
		return fmt.Errorf("%w: %s filter of %d bits cannot be halved", ErrGeometry, f.g.Layout, f.g.Bits)
	}
	half := make([]byte, len(f.bits)/2)
	if f.g.Layout == Blocked {
		foldBlocks(half, f.bits)
	} else {
		foldBits(half, f.bits)
	}
	g := f.g
	g.Bits /= 2
	*f = Filter{g: g, bits: half, units: g.modulus(), count: f.count}
	return nil
}
