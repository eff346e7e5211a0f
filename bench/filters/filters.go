// Package filters puts bloomkv's Bloom filter side by side with other Go
// Bloom filter libraries, under identical keys and (nearly) identical
// memory, for the benchmarks in this directory and for cmd/filtertable.
//
// Each library sits behind Filter, whose methods run whole loops of
// operations: the timed code then calls the library directly rather than
// through an interface once per key, so dispatch cost does not blur
// differences of a few nanoseconds.
package filters

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	bitsbloom "github.com/bits-and-blooms/bloom/v3"
	"github.com/bloomkv/bloomkv/bloom"
	"github.com/cockroachdb/pebble/v2"
	pebblebloom "github.com/cockroachdb/pebble/v2/bloom"
)

const (
	// N is the number of keys in each filter under test.
	N = 1_000_000
	// BitsPerKey is the memory budget every library is configured for.
	BitsPerKey = 10
	// KeyLen is the length of every key in bytes.
	KeyLen = 16
	// Seed makes the key sets, and so every measured FPR, reproducible.
	Seed = 20261122
)

// Keys is a key set together with each key's bloom.Hash, computed once up
// front for the variants that measure bloomkv's hash-once path.
type Keys struct {
	Keys   [][]byte
	Hashes []uint64
}

// Len returns the number of keys.
func (ks *Keys) Len() int { return len(ks.Keys) }

// GenerateKeys returns two disjoint sets of n random KeyLen-byte keys drawn
// from a PCG generator seeded with seed: the same seed gives the same sets.
func GenerateKeys(n int, seed uint64) (present, absent Keys) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	seen := make(map[[KeyLen]byte]struct{}, 2*n)
	// One backing array per set keeps the keys contiguous, like keys read
	// from a block, and costs two allocations instead of 2n.
	next := func() [KeyLen]byte {
		for {
			var k [KeyLen]byte
			binary.LittleEndian.PutUint64(k[:8], rng.Uint64())
			binary.LittleEndian.PutUint64(k[8:], rng.Uint64())
			if _, dup := seen[k]; !dup {
				seen[k] = struct{}{}
				return k
			}
		}
	}
	fill := func() Keys {
		buf := make([]byte, n*KeyLen)
		ks := Keys{Keys: make([][]byte, n), Hashes: make([]uint64, n)}
		for i := range n {
			k := buf[i*KeyLen : (i+1)*KeyLen : (i+1)*KeyLen]
			kk := next()
			copy(k, kk[:])
			ks.Keys[i] = k
			ks.Hashes[i] = bloom.Hash(k)
		}
		return ks
	}
	present = fill()
	absent = fill()
	return present, absent
}

// Filter is one library's filter, reduced to what the comparison measures.
// The loops cycle through the key set, so ops may exceed its length.
type Filter interface {
	// AddLoop adds ops keys of ks.
	AddLoop(ks *Keys, ops int)
	// Seal makes every added key queryable. Only Pebble needs it: its
	// writer buffers hashes and sets the bits when the filter is finished.
	Seal()
	// ContainsLoop queries ops keys of ks and returns how many the filter
	// reported as possibly present.
	ContainsLoop(ks *Keys, ops int) int
	// SizeBytes is the memory the filter's bits occupy (plus any fixed
	// trailer stored with them).
	SizeBytes() int
	// K is the number of probes per key.
	K() int
}

// Impl is one configuration under test.
type Impl struct {
	Library string
	Layout  string // "blocked" (all probes in one cache line) or "classic"
	// Variant is empty for a library used as its documentation shows, or
	// one of the bloomkv variants: VariantHash, VariantExact.
	Variant string
	// New returns an empty filter for n keys at BitsPerKey.
	New func(n int) Filter
}

const (
	// VariantHash drives bloomkv through AddHash/ContainsHash with
	// bloom.Hash precomputed, as the store does (it hashes a key once and
	// probes many segments' filters); hashing is then not timed.
	VariantHash = "hash"
	// VariantExact sizes bloomkv with NewGeometry to exactly the budget
	// (n·BitsPerKey rounded up to whole units only), without the up to
	// 3.1% that GeometryFor adds so that filters can be halved; it makes
	// the FPR comparable with libraries that use exactly the budget.
	VariantExact = "exact"
)

// Name is a benchmark-friendly name: library/layout[-variant].
func (im Impl) Name() string {
	name := im.Library + "/" + im.Layout
	if im.Variant != "" {
		name += "-" + im.Variant
	}
	return name
}

// Impls returns every configuration under test, bloomkv first.
func Impls() []Impl {
	var impls []Impl
	for _, layout := range []bloom.Layout{bloom.Blocked, bloom.Classic} {
		impls = append(impls,
			Impl{"bloomkv", layout.String(), "", func(n int) Filter {
				return &bloomkvKey{newBloomkv(bloom.GeometryFor(layout, n, BitsPerKey))}
			}},
			Impl{"bloomkv", layout.String(), VariantHash, func(n int) Filter {
				return &bloomkvHash{newBloomkv(bloom.GeometryFor(layout, n, BitsPerKey))}
			}},
			Impl{"bloomkv", layout.String(), VariantExact, func(n int) Filter {
				return &bloomkvKey{newBloomkv(exactGeometry(layout, n))}
			}},
		)
	}
	return append(impls,
		Impl{"bits-and-blooms", "classic", "", func(n int) Filter {
			// New(m, k) rather than NewWithEstimates so that memory equals
			// the budget exactly; k=7 is optimal at 10 bits/key.
			return &bitsAndBlooms{bitsbloom.New(uint(n*BitsPerKey), 7)}
		}},
		Impl{"pebble", "blocked", "", func(n int) Filter {
			p := pebblebloom.FilterPolicy(BitsPerKey)
			return &pebbleFilter{policy: p, w: p.NewWriter(pebble.TableFilter), n: n}
		}},
	)
}

// newBloomkv returns an empty filter of g. GeometryFor(Blocked, …) is what
// bloom.NewBitsPerKey uses, so the blocked default is NewBitsPerKey's filter.
func newBloomkv(g bloom.Geometry) *bloom.Filter {
	f, err := bloom.NewGeometry(g)
	if err != nil {
		panic(fmt.Sprintf("filters: %+v: %v", g, err)) // callers pass valid geometries
	}
	return f
}

// exactGeometry is n·BitsPerKey bits rounded up to the layout's unit
// (512-bit blocks or 64-bit words), with the optimal k for that size.
func exactGeometry(layout bloom.Layout, n int) bloom.Geometry {
	unit := uint64(64)
	if layout == bloom.Blocked {
		unit = 512
	}
	bits := (uint64(n)*BitsPerKey + unit - 1) / unit * unit
	return bloom.Geometry{
		Layout: layout,
		Bits:   bits,
		K:      bloom.OptimalK(layout, float64(bits)/float64(n)),
		Seed:   bloom.DefaultSeed,
	}
}

// bloomkvKey passes keys, so every call hashes the key (Add, Contains).
type bloomkvKey struct{ f *bloom.Filter }

func (b *bloomkvKey) AddLoop(ks *Keys, ops int) {
	for j := 0; ops > 0; ops-- {
		b.f.Add(ks.Keys[j])
		if j++; j == len(ks.Keys) {
			j = 0
		}
	}
}

func (b *bloomkvKey) ContainsLoop(ks *Keys, ops int) int {
	hits := 0
	for j := 0; ops > 0; ops-- {
		if b.f.Contains(ks.Keys[j]) {
			hits++
		}
		if j++; j == len(ks.Keys) {
			j = 0
		}
	}
	return hits
}

func (b *bloomkvKey) Seal()          {}
func (b *bloomkvKey) SizeBytes() int { return b.f.SizeBytes() }
func (b *bloomkvKey) K() int         { return b.f.Geometry().K }

// bloomkvHash passes precomputed bloom.Hash values (AddHash, ContainsHash):
// the store hashes a key once and probes every segment's filter with it.
type bloomkvHash struct{ f *bloom.Filter }

func (b *bloomkvHash) AddLoop(ks *Keys, ops int) {
	for j := 0; ops > 0; ops-- {
		b.f.AddHash(ks.Hashes[j])
		if j++; j == len(ks.Hashes) {
			j = 0
		}
	}
}

func (b *bloomkvHash) ContainsLoop(ks *Keys, ops int) int {
	hits := 0
	for j := 0; ops > 0; ops-- {
		if b.f.ContainsHash(ks.Hashes[j]) {
			hits++
		}
		if j++; j == len(ks.Hashes) {
			j = 0
		}
	}
	return hits
}

func (b *bloomkvHash) Seal()          {}
func (b *bloomkvHash) SizeBytes() int { return b.f.SizeBytes() }
func (b *bloomkvHash) K() int         { return b.f.Geometry().K }

// bitsAndBlooms is github.com/bits-and-blooms/bloom/v3, used as its README
// shows: Add and Test on byte slices (it hashes with 128-bit murmur3).
type bitsAndBlooms struct{ f *bitsbloom.BloomFilter }

func (b *bitsAndBlooms) AddLoop(ks *Keys, ops int) {
	for j := 0; ops > 0; ops-- {
		b.f.Add(ks.Keys[j])
		if j++; j == len(ks.Keys) {
			j = 0
		}
	}
}

func (b *bitsAndBlooms) ContainsLoop(ks *Keys, ops int) int {
	hits := 0
	for j := 0; ops > 0; ops-- {
		if b.f.Test(ks.Keys[j]) {
			hits++
		}
		if j++; j == len(ks.Keys) {
			j = 0
		}
	}
	return hits
}

func (b *bitsAndBlooms) Seal()          {}
func (b *bitsAndBlooms) SizeBytes() int { return 8 * len(b.f.BitSet().Words()) }
func (b *bitsAndBlooms) K() int         { return int(b.f.K()) }

// pebbleFilter is Pebble's table filter (RocksDB's legacy full-filter
// format, 32-bit hash, cache-line blocked) built through its public
// FilterPolicy: a writer collects key hashes and Finish sets the bits.
//
// AddLoop finishes a filter every n keys into a reused buffer, so the cost
// per key includes the deferred bit-setting, amortized as in a real build.
type pebbleFilter struct {
	policy  pebblebloom.FilterPolicy
	w       pebble.FilterWriter
	n       int    // keys per finished filter
	pending int    // keys added since the last Finish
	buf     []byte // reused output buffer of Finish
	filter  []byte // the last finished filter
}

func (p *pebbleFilter) AddLoop(ks *Keys, ops int) {
	for j := 0; ops > 0; ops-- {
		p.w.AddKey(ks.Keys[j])
		if j++; j == len(ks.Keys) {
			j = 0
		}
		if p.pending++; p.pending == p.n {
			p.Seal()
		}
	}
}

func (p *pebbleFilter) Seal() {
	if p.pending == 0 {
		return
	}
	p.buf = p.w.Finish(p.buf[:0])
	p.filter = p.buf
	p.pending = 0
}

func (p *pebbleFilter) ContainsLoop(ks *Keys, ops int) int {
	hits := 0
	for j := 0; ops > 0; ops-- {
		if p.policy.MayContain(pebble.TableFilter, p.filter, ks.Keys[j]) {
			hits++
		}
		if j++; j == len(ks.Keys) {
			j = 0
		}
	}
	return hits
}

func (p *pebbleFilter) SizeBytes() int { return len(p.filter) }

// K reads the probe count from the filter's trailer: the byte before the
// 4-byte line count.
func (p *pebbleFilter) K() int {
	if len(p.filter) < 5 {
		return 0
	}
	return int(p.filter[len(p.filter)-5])
}

// Build returns a filter of im holding every key of present, sealed.
func Build(im Impl, present *Keys) Filter {
	f := im.New(present.Len())
	f.AddLoop(present, present.Len())
	f.Seal()
	return f
}

// Quality is what a built filter costs and how often it errs.
type Quality struct {
	BitsPerKey float64 // SizeBytes·8 / keys held
	K          int
	FPR        float64 // fraction of absent keys reported present
	FalseNeg   int     // present keys reported absent; must be 0
}

// Measure checks f, built from present, against both key sets.
func Measure(f Filter, present, absent *Keys) Quality {
	return Quality{
		BitsPerKey: float64(8*f.SizeBytes()) / float64(present.Len()),
		K:          f.K(),
		FPR:        float64(f.ContainsLoop(absent, absent.Len())) / float64(absent.Len()),
		FalseNeg:   present.Len() - f.ContainsLoop(present, present.Len()),
	}
}
