package bloom

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// testKey returns key i of a numbered key set. Keys of different sets never
// collide, so set 0 can be the keys added and set 1 the absent keys.
func testKey(set byte, i uint64) []byte {
	k := make([]byte, 9)
	k[0] = set
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

// testKeys returns keys 0..n-1 of a set.
func testKeys(set byte, n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = testKey(set, uint64(i))
	}
	return keys
}

// mustGeometry builds an empty filter of g, failing the test on error.
func mustGeometry(t testing.TB, g Geometry) *Filter {
	t.Helper()
	f, err := NewGeometry(g)
	if err != nil {
		t.Fatalf("NewGeometry(%+v): %v", g, err)
	}
	return f
}

// buildFilter is the reference construction every identity test compares
// against: a fresh filter of g with keys added one by one.
func buildFilter(t testing.TB, g Geometry, keys [][]byte) *Filter {
	t.Helper()
	f := mustGeometry(t, g)
	for _, k := range keys {
		f.Add(k)
	}
	return f
}

// sameBits fails the test unless f and want have the same geometry and
// bit array.
func sameBits(t testing.TB, what string, f, want *Filter) {
	t.Helper()
	if f.g != want.g {
		t.Fatalf("%s: geometry %+v, want %+v", what, f.g, want.g)
	}
	if !bytes.Equal(f.bits, want.bits) {
		t.Fatalf("%s: bit arrays differ (%d vs %d bits set, first difference at byte %d)",
			what, onesCount(f.bits), onesCount(want.bits), firstDiff(f.bits, want.bits))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// clone is a deep copy, to check that a failed operation left f unchanged.
func clone(f *Filter) *Filter {
	c := *f
	c.bits = bytes.Clone(f.bits)
	return &c
}

// testGeometries covers both layouts, sizes with and without halvings,
// small and large k, and a non-default seed.
var testGeometries = []Geometry{
	{Layout: Blocked, Bits: 512, K: 1},
	{Layout: Blocked, Bits: 512 * 3, K: 7},
	{Layout: Blocked, Bits: 512 * 64, K: 6, Seed: 42},
	{Layout: Blocked, Bits: 512 * 96, K: 32},
	{Layout: Blocked, Bits: 512 * 48 << 4, K: 10},
	{Layout: Classic, Bits: 64, K: 3},
	{Layout: Classic, Bits: 64 * 5, K: 1},
	{Layout: Classic, Bits: 64 * 48, K: 7, Seed: 1 << 63},
	{Layout: Classic, Bits: 64 * 1024, K: 32},
	{Layout: Classic, Bits: 64 * 40 << 5, K: 10},
}

func TestValidate(t *testing.T) {
	tests := []struct {
		g  Geometry
		ok bool
	}{
		{Geometry{Layout: Blocked, Bits: 512, K: 1}, true},
		{Geometry{Layout: Blocked, Bits: MaxBits, K: MaxK}, true},
		{Geometry{Layout: Classic, Bits: 64, K: 1}, true},
		{Geometry{Layout: Classic, Bits: MaxBits, K: 7, Seed: 9}, true},
		{Geometry{Layout: 0, Bits: 512, K: 1}, false},
		{Geometry{Layout: 3, Bits: 512, K: 1}, false},
		{Geometry{Layout: Blocked, Bits: 0, K: 1}, false},
		{Geometry{Layout: Blocked, Bits: 64, K: 1}, false},
		{Geometry{Layout: Blocked, Bits: 512 + 64, K: 1}, false},
		{Geometry{Layout: Blocked, Bits: MaxBits + 512, K: 1}, false},
		{Geometry{Layout: Classic, Bits: 0, K: 1}, false},
		{Geometry{Layout: Classic, Bits: 8, K: 1}, false},
		{Geometry{Layout: Classic, Bits: 96, K: 1}, false},
		{Geometry{Layout: Classic, Bits: MaxBits + 64, K: 1}, false},
		{Geometry{Layout: Classic, Bits: 1 << 63, K: 1}, false},
		{Geometry{Layout: Classic, Bits: 64, K: 0}, false},
		{Geometry{Layout: Classic, Bits: 64, K: -1}, false},
		{Geometry{Layout: Blocked, Bits: 512, K: MaxK + 1}, false},
		// MaxBits is 2^38 (FORMAT.md), spelled out so the bound itself is pinned.
		{Geometry{Layout: Classic, Bits: 1 << 38, K: 1}, true},
		{Geometry{Layout: Classic, Bits: 1<<38 + 64, K: 1}, false},
		{Geometry{Layout: Blocked, Bits: 1<<38 + 512, K: 1}, false},
	}
	for _, tt := range tests {
		err := tt.g.Validate()
		if tt.ok && err != nil {
			t.Errorf("%+v: unexpected error %v", tt.g, err)
		}
		if !tt.ok && !errors.Is(err, ErrGeometry) {
			t.Errorf("%+v: error %v, want ErrGeometry", tt.g, err)
		}
		if tt.g.Bits > 1<<20 && err == nil {
			continue // accepted, but too large to allocate in a test
		}
		f, err := NewGeometry(tt.g)
		if tt.ok && (err != nil || f.SizeBytes() != int(tt.g.Bits/8) || f.Geometry() != tt.g) {
			t.Errorf("NewGeometry(%+v) = %v, %v", tt.g, f, err)
		}
		if !tt.ok && (f != nil || !errors.Is(err, ErrGeometry)) {
			t.Errorf("NewGeometry(%+v) = %v, %v; want ErrGeometry", tt.g, f, err)
		}
	}
}

func TestLayoutString(t *testing.T) {
	for l, want := range map[Layout]string{Blocked: "blocked", Classic: "classic", 7: "layout(7)"} {
		if got := l.String(); got != want {
			t.Errorf("Layout(%d).String() = %q, want %q", l, got, want)
		}
	}
}

func TestHalvings(t *testing.T) {
	tests := []struct {
		g    Geometry
		want int
	}{
		{Geometry{Layout: Blocked, Bits: 512}, 0},
		{Geometry{Layout: Blocked, Bits: 512 * 2}, 1},
		{Geometry{Layout: Blocked, Bits: 512 * 3}, 0},
		{Geometry{Layout: Blocked, Bits: 512 * 48}, 4},
		{Geometry{Layout: Blocked, Bits: 512 * 1024}, 10},
		{Geometry{Layout: Classic, Bits: 64}, 0},
		{Geometry{Layout: Classic, Bits: 128}, 1},
		{Geometry{Layout: Classic, Bits: 512}, 3}, // 8 words, not 9 (bits are not the unit)
		{Geometry{Layout: Classic, Bits: 64 * 40}, 3},
		// Less than one unit: nothing to halve, not the 64 trailing zeros of 0.
		{Geometry{}, 0},
		{Geometry{Layout: Blocked, Bits: 256}, 0},
		{Geometry{Layout: Classic, Bits: 32}, 0},
	}
	for _, tt := range tests {
		if got := tt.g.Halvings(); got != tt.want {
			t.Errorf("%+v.Halvings() = %d, want %d", tt.g, got, tt.want)
		}
	}
}

func TestHash(t *testing.T) {
	// Published xxhash64 test vectors (seed 0): the filter format depends on
	// them, so a change of hash function must fail here.
	vectors := map[string]uint64{
		"":    0xef46db3751d8e999,
		"a":   0xd24ec4f1a98c6e5b,
		"abc": 0x44bc2cf5ad770999,
	}
	for key, want := range vectors {
		if got := Hash([]byte(key)); got != want {
			t.Errorf("Hash(%q) = %#x, want %#x", key, got, want)
		}
		if got := HashSeed([]byte(key), 0); got != want {
			t.Errorf("HashSeed(%q, 0) = %#x, want %#x", key, got, want)
		}
	}
	for _, seed := range []uint64{1, 42, 1 << 63, math.MaxUint64} {
		for _, key := range []string{"", "a", "a key longer than thirty-two bytes, to use the stripes"} {
			got := HashSeed([]byte(key), seed)
			if got == Hash([]byte(key)) {
				t.Errorf("HashSeed(%q, %d) equals the unseeded hash", key, seed)
			}
			d := xxhash.NewWithSeed(seed)
			d.WriteString(key)
			if want := d.Sum64(); got != want {
				t.Errorf("HashSeed(%q, %d) = %#x, want xxhash64 %#x", key, seed, got, want)
			}
		}
	}
}

func TestSeededFilter(t *testing.T) {
	for _, layout := range []Layout{Blocked, Classic} {
		g := GeometryFor(layout, 1000, 10)
		g.Seed = 7
		f := buildFilter(t, g, testKeys(0, 1000))
		for i, k := range testKeys(0, 1000) {
			if !f.Contains(k) || !f.ContainsHash(HashSeed(k, 7)) {
				t.Fatalf("%s seeded filter: false negative for key %d", layout, i)
			}
		}
		// Add must have hashed with the seed: the unseeded hashes of the
		// same keys address other bits, so most of them are absent.
		var hits int
		for _, k := range testKeys(0, 1000) {
			if f.ContainsHash(Hash(k)) {
				hits++
			}
		}
		if hits > 100 {
			t.Errorf("%s seeded filter: %d of 1000 keys found under the unseeded hash", layout, hits)
		}
	}
}

// specProbes is the probe derivation of FORMAT.md, written independently of
// probes() (128-bit products by math/big), so the spec and the code must
// agree.
func specProbes(g Geometry, h uint64) []uint64 {
	hi64 := func(a, b uint64) uint64 {
		p := new(big.Int).Mul(new(big.Int).SetUint64(a), new(big.Int).SetUint64(b))
		return p.Rsh(p, 64).Uint64()
	}
	var out []uint64
	if g.Layout == Blocked {
		block := hi64(h, g.Bits/512)
		x := uint32(h)
		for range g.K {
			out = append(out, 512*block+uint64(x>>23))
			x *= 0x9e3779b9
		}
		return out
	}
	h2 := h ^ h>>33
	h2 *= 0xff51afd7ed558ccd
	h2 ^= h2 >> 33
	h2 |= 1
	for i := range uint64(g.K) {
		out = append(out, hi64(h+i*h2, g.Bits))
	}
	return out
}

// specialHashes are hashes at the edges of the fast-range and multiply steps.
var specialHashes = []uint64{0, 1, math.MaxUint64, 1 << 63, 1<<63 - 1, 0xffffffff, 0xffffffff00000000, 0x9e3779b9}

func TestProbesMatchSpecAndInlinedLoops(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range testGeometries {
		hashes := append([]uint64(nil), specialHashes...)
		for range 300 {
			hashes = append(hashes, rng.Uint64())
		}
		ref := mustGeometry(t, g)
		inlined := mustGeometry(t, g)
		for _, h := range hashes {
			ps := g.probes(h, nil)
			if want := specProbes(g, h); !slicesEqual(ps, want) {
				t.Fatalf("%+v: probes(%#x) = %v, spec says %v", g, h, ps, want)
			}
			// A lookup before the key is added must agree with the
			// reference: present iff every probe bit is already set.
			allSet := true
			for _, p := range ps {
				if p >= g.Bits {
					t.Fatalf("%+v: probe %d of hash %#x out of range", g, p, h)
				}
				allSet = allSet && ref.bits[p/8]&(1<<(p%8)) != 0
			}
			if got := inlined.ContainsHash(h); got != allSet {
				t.Fatalf("%+v: ContainsHash(%#x) = %v, reference says %v", g, h, got, allSet)
			}
			for _, p := range ps {
				ref.bits[p/8] |= 1 << (p % 8)
			}
			inlined.AddHash(h)
			if !bytes.Equal(ref.bits, inlined.bits) {
				t.Fatalf("%+v: AddHash(%#x) set other bits than probes()", g, h)
			}
		}
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBitOrder pins the bit numbering of FORMAT.md: bit i is byte i/8,
// mask 1<<(i%8), and a Blocked filter's block b is bytes 64b..64b+63.
func TestBitOrder(t *testing.T) {
	g := Geometry{Layout: Classic, Bits: 128, K: 1}
	// With k=1 the only probe is hi64(h·128) = h>>57.
	for _, pos := range []uint64{0, 7, 8, 63, 64, 127} {
		f := mustGeometry(t, g)
		f.AddHash(pos << 57)
		want := make([]byte, 16)
		want[pos/8] = 1 << (pos % 8)
		if !bytes.Equal(f.bits, want) {
			t.Errorf("bit %d: array %x, want %x", pos, f.bits, want)
		}
	}
	bg := Geometry{Layout: Blocked, Bits: 512 * 4, K: 1}
	f := mustGeometry(t, bg)
	// Block = h>>62 (4 blocks); in-block bit = low 32 bits >> 23.
	f.AddHash(3<<62 | 511<<23)
	want := make([]byte, 256)
	want[3*64+63] = 0x80
	if !bytes.Equal(f.bits, want) {
		t.Errorf("blocked: array %x, want %x", f.bits, want)
	}
}

func TestUnionBitIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, g := range testGeometries {
		for _, n := range []int{0, 1, 50, 2000} {
			var a, b, all [][]byte
			for i := range n {
				k := testKey(0, uint64(i))
				switch rng.IntN(3) {
				case 0:
					a = append(a, k)
				case 1:
					b = append(b, k)
				default: // in both sets
					a, b = append(a, k), append(b, k)
				}
				all = append(all, k)
			}
			fa, fb := buildFilter(t, g, a), buildFilter(t, g, b)
			if err := fa.Union(fb); err != nil {
				t.Fatalf("%+v: Union: %v", g, err)
			}
			sameBits(t, "union", fa, buildFilter(t, g, all))
			if want := uint64(len(a) + len(b)); fa.Count() != want {
				t.Errorf("%+v: Count after union = %d, want %d", g, fa.Count(), want)
			}
			for _, k := range all {
				if !fa.Contains(k) {
					t.Fatalf("%+v: union lost key %x", g, k)
				}
			}
		}
	}
}

func TestUnionMismatchedGeometry(t *testing.T) {
	base := Geometry{Layout: Classic, Bits: 1024, K: 5, Seed: 3}
	change := map[string]func(*Geometry){
		"layout": func(g *Geometry) { g.Layout = Blocked },
		"bits":   func(g *Geometry) { g.Bits *= 2 },
		"k":      func(g *Geometry) { g.K++ },
		"seed":   func(g *Geometry) { g.Seed++ },
	}
	for name, mutate := range change {
		og := base
		mutate(&og)
		f := buildFilter(t, base, testKeys(0, 40))
		other := buildFilter(t, og, testKeys(1, 40))
		before := clone(f)
		err := f.Union(other)
		if !errors.Is(err, ErrGeometry) {
			t.Errorf("%s differs: Union error %v, want ErrGeometry", name, err)
		}
		sameBits(t, name+" differs: receiver after failed union", f, before)
		if f.Count() != before.Count() {
			t.Errorf("%s differs: Count changed to %d", name, f.Count())
		}
		if _, err := f.EstimateIntersection(other); !errors.Is(err, ErrGeometry) {
			t.Errorf("%s differs: EstimateIntersection error %v, want ErrGeometry", name, err)
		}
	}
}

func TestFoldBitIdentity(t *testing.T) {
	for _, g := range testGeometries {
		for _, n := range []int{1, 100, 3000} {
			keys := testKeys(0, n)
			f := buildFilter(t, g, keys)
			for j := 1; j <= g.Halvings(); j++ {
				if err := f.Fold(); err != nil {
					t.Fatalf("%+v: halving %d: %v", g, j, err)
				}
				hg := g
				hg.Bits = g.Bits >> j
				sameBits(t, "halved", f, buildFilter(t, hg, keys))
				if f.Count() != uint64(n) {
					t.Fatalf("%+v: Count after halving = %d, want %d", g, f.Count(), n)
				}
			}
			if f.Geometry().Halvings() != 0 {
				t.Fatalf("%+v: %d halvings left after Halvings() halvings", g, f.Geometry().Halvings())
			}
			before := clone(f)
			if err := f.Fold(); !errors.Is(err, ErrGeometry) {
				t.Fatalf("%+v: Fold with no halvings left: error %v, want ErrGeometry", g, err)
			}
			sameBits(t, "after refused halving", f, before)
		}
	}
}

// TestFoldDoesNotWriteInput checks that Fold leaves the old array alone,
// which matters for a filter decoded in place from a caller's buffer.
func TestFoldDoesNotWriteInput(t *testing.T) {
	f := buildFilter(t, Geometry{Layout: Blocked, Bits: 512 * 8, K: 7}, testKeys(0, 300))
	data, _ := f.MarshalBinary()
	orig := bytes.Clone(data)
	d, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Fold(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, orig) {
		t.Error("Fold of a decoded filter modified the encoded input")
	}
}

func TestFoldWord(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		w := rng.Uint64()
		var want uint32
		for j := range 32 {
			if w>>(2*j)&3 != 0 {
				want |= 1 << j
			}
		}
		if got := foldWord(w); got != want {
			t.Fatalf("foldWord(%#x) = %#x, want %#x", w, got, want)
		}
	}
}

// TestNoAllocs checks the hot paths: membership tests and inserts must not
// allocate, with the default seed or another.
func TestNoAllocs(t *testing.T) {
	key := []byte("some key")
	for _, g := range []Geometry{GeometryFor(Blocked, 100, 10), GeometryFor(Classic, 100, 10), {Layout: Blocked, Bits: 512, K: 6, Seed: 9}} {
		f := mustGeometry(t, g)
		for name, fn := range map[string]func(){
			"Add":          func() { f.Add(key) },
			"Contains":     func() { f.Contains(key) },
			"AddHash":      func() { f.AddHash(99) },
			"ContainsHash": func() { f.ContainsHash(99) },
			"Hash":         func() { Hash(key) },
			"HashSeed":     func() { HashSeed(key, 9) },
		} {
			if n := testing.AllocsPerRun(100, fn); n != 0 {
				t.Errorf("%+v: %s allocates %v times", g, name, n)
			}
		}
	}
}

func TestNewPanicsOnBadRate(t *testing.T) {
	for _, p := range []float64{0, 1, -0.5, 2, math.NaN(), math.Inf(1)} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, "false-positive rate") {
					t.Errorf("New(10, %v): recovered %v, want a panic about the rate", p, r)
				}
			}()
			New(10, p)
		}()
	}
}

func TestNewSizing(t *testing.T) {
	tests := []struct {
		n int
		p float64
	}{
		{1, 0.5}, {1, 0.01}, {10, 0.1}, {1000, 0.01}, {12345, 0.05},
		{100_000, 0.001}, {100_000, 0.0001}, {1_000_000, 0.01}, {3_000_000, 1e-6},
	}
	for _, tt := range tests {
		f := New(tt.n, tt.p)
		g := f.Geometry()
		if g.Layout != Blocked || g.Seed != DefaultSeed {
			t.Errorf("New(%d, %v): geometry %+v, want Blocked with the default seed", tt.n, tt.p, g)
		}
		f.count = uint64(tt.n) // as if n keys were added; the formula needs only the count
		if got := f.TheoreticalFPR(); got > tt.p || got <= 0 {
			t.Errorf("New(%d, %v): TheoreticalFPR %v with %d keys, want in (0, p]", tt.n, tt.p, got, tt.n)
		}
		// Not oversized either: the bits per key BitsPerKeyFor asks for,
		// plus the rounding GeometryFor allows.
		want := BitsPerKeyFor(Blocked, tt.p) * float64(tt.n)
		if limit := want*(1+1.0/32) + 2*blockBits; float64(g.Bits) > limit {
			t.Errorf("New(%d, %v): %d bits, want at most %.0f", tt.n, tt.p, g.Bits, limit)
		}
	}
}

func TestBitsPerKeyFor(t *testing.T) {
	for _, p := range []float64{0.5, 0.1, 0.01, 0.001, 1e-4, 1e-6} {
		classic := BitsPerKeyFor(Classic, p)
		if want := -math.Log(p) / (math.Ln2 * math.Ln2); math.Abs(classic-want) > 1e-9 {
			t.Errorf("BitsPerKeyFor(Classic, %v) = %v, want %v", p, classic, want)
		}
		blocked := BitsPerKeyFor(Blocked, p)
		if blocked < classic {
			t.Errorf("BitsPerKeyFor(Blocked, %v) = %v, below Classic's %v", p, blocked, classic)
		}
		if got := FPR(Blocked, blocked, OptimalK(Blocked, blocked)); got > p {
			t.Errorf("BitsPerKeyFor(Blocked, %v) = %v gives FPR %v", p, blocked, got)
		}
		// Raised in 1% steps: one step less must miss p (unless no raise).
		if less := blocked / 1.01; less >= classic && FPR(Blocked, less, OptimalK(Blocked, less)) <= p {
			t.Errorf("BitsPerKeyFor(Blocked, %v) = %v, but %v already reaches p", p, blocked, less)
		}
	}
}

func TestGeometryForRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	type input struct {
		n   int
		bpk float64
	}
	inputs := []input{{0, 10}, {1, 10}, {1, 0.1}, {10, 1}, {100, 10}, {1000, 6}, {12345, 9.7}, {1 << 20, 10}, {1_000_000, 16}, {3, 1000}}
	for range 200 {
		inputs = append(inputs, input{1 + rng.IntN(5_000_000), 1 + 30*rng.Float64()})
	}
	for _, layout := range []Layout{Blocked, Classic} {
		unit := uint64(wordBits)
		if layout == Blocked {
			unit = blockBits
		}
		for _, in := range inputs {
			g := GeometryFor(layout, in.n, in.bpk)
			if err := g.Validate(); err != nil {
				t.Fatalf("GeometryFor(%s, %d, %v) = %+v: %v", layout, in.n, in.bpk, g, err)
			}
			want := math.Ceil(float64(max(in.n, 1)) * max(in.bpk, 1))
			if float64(g.Bits) < want {
				t.Errorf("GeometryFor(%s, %d, %v): %d bits, below the %v asked for", layout, in.n, in.bpk, g.Bits, want)
			}
			if limit := want*(1+1.0/32) + float64(unit); float64(g.Bits) > limit {
				t.Errorf("GeometryFor(%s, %d, %v): %d bits, more than 1/32 + one unit over %v", layout, in.n, in.bpk, g.Bits, want)
			}
			// Above 64 units the count is c·2^j with 32 ≤ c < 64.
			if u := g.Bits / unit; u > 64 {
				j := bits.Len64(u) - 6
				if c := u >> j; c<<j != u || c < 32 || c >= 64 || g.Halvings() < j {
					t.Errorf("GeometryFor(%s, %d, %v): %d units, not c·2^j with 32 ≤ c < 64", layout, in.n, in.bpk, u)
				}
			}
			if want := OptimalK(layout, float64(g.Bits)/float64(max(in.n, 1))); g.K != want {
				t.Errorf("GeometryFor(%s, %d, %v): k=%d, want OptimalK of the allocated bits/key = %d", layout, in.n, in.bpk, g.K, want)
			}
		}
	}
}

// TestGeometryForHugeInput: a request beyond MaxBits must be capped at
// MaxBits, never wrap around to a tiny filter.
func TestGeometryForHugeInput(t *testing.T) {
	tests := []struct {
		n   int
		bpk float64
	}{
		{1 << 40, 1 << 20},
		{math.MaxInt, 1e6},
		// n·bpk/64 = 2^64-2^56: the unit count fits in a uint64 but
		// rounding it up to c·2^j overflows.
		{1 << 62, 255},
	}
	for _, tt := range tests {
		if g := GeometryFor(Classic, tt.n, tt.bpk); g.Bits != MaxBits {
			t.Errorf("GeometryFor(Classic, %d, %v) = %+v, want Bits = MaxBits", tt.n, tt.bpk, g)
		}
	}
}

func TestOptimalK(t *testing.T) {
	tests := []struct {
		bpk              float64
		classic, blocked int
	}{
		{0.5, 1, 1}, {1, 1, 1}, {4, 3, 3}, {6, 4, 4}, {8, 6, 5}, {10, 7, 7},
		{16, 11, 10}, {20, 14, 11}, {24, 17, 13}, {32, 22, 15}, {64, 32, 20}, {1000, 32, 32},
		// Classic is round(b·ln 2) (1 here, where k=2 would be a hair
		// better); Blocked's optimum is one above that rounding.
		{2.1, 1, 2},
	}
	for _, tt := range tests {
		if got := OptimalK(Classic, tt.bpk); got != tt.classic {
			t.Errorf("OptimalK(Classic, %v) = %d, want %d", tt.bpk, got, tt.classic)
		}
		if got := OptimalK(Blocked, tt.bpk); got != tt.blocked {
			t.Errorf("OptimalK(Blocked, %v) = %d, want %d", tt.bpk, got, tt.blocked)
		}
	}
	// The Blocked k must minimise the Blocked formula over every allowed k.
	for bpk := 1.0; bpk <= 40; bpk += 0.5 {
		best := 1
		for k := 2; k <= MaxK; k++ {
			if FPR(Blocked, bpk, k) < FPR(Blocked, bpk, best) {
				best = k
			}
		}
		if k := OptimalK(Blocked, bpk); FPR(Blocked, bpk, k) > FPR(Blocked, bpk, best)*(1+1e-9) {
			t.Errorf("OptimalK(Blocked, %v) = %d (FPR %.3g), but k=%d gives %.3g",
				bpk, k, FPR(Blocked, bpk, k), best, FPR(Blocked, bpk, best))
			break // the first failing bits/key is enough
		}
	}
}

func TestFPRFormula(t *testing.T) {
	// Classic at 10 bits/key, k=7: (1-e^-0.7)^7.
	if got, want := FPR(Classic, 10, 7), math.Pow(1-math.Exp(-0.7), 7); math.Abs(got-want) > 1e-12 {
		t.Errorf("FPR(Classic, 10, 7) = %v, want %v", got, want)
	}
	for _, bpk := range []float64{4, 10, 20} {
		c, b := FPR(Classic, bpk, 5), FPR(Blocked, bpk, 5)
		if !(b > c) {
			t.Errorf("at %v bits/key, Blocked FPR %v should exceed Classic %v (uneven block loads)", bpk, b, c)
		}
	}
	if got := FPR(Blocked, 0, 3); got != 1 {
		t.Errorf("FPR at 0 bits/key = %v, want 1", got)
	}
}

func TestEmptyFilter(t *testing.T) {
	for _, layout := range []Layout{Blocked, Classic} {
		f := mustGeometry(t, GeometryFor(layout, 100, 10))
		if f.Count() != 0 || !math.IsInf(f.BitsPerKey(), 1) || f.TheoreticalFPR() != 0 ||
			f.EstimatedCount() != 0 || f.EstimatedFPR() != 0 || f.FillRatio() != 0 {
			t.Errorf("%s empty filter: count %d, bits/key %v, FPR %v, est. count %v, est. FPR %v, fill %v",
				layout, f.Count(), f.BitsPerKey(), f.TheoreticalFPR(), f.EstimatedCount(), f.EstimatedFPR(), f.FillRatio())
		}
		if f.Contains([]byte("x")) {
			t.Errorf("%s empty filter contains a key", layout)
		}
	}
}

// TestFullFilterEstimates pins the estimates of a filter with every bit
// set, in both layouts (a Blocked block with all 512 bits set included):
// an FPR of 1 and an unbounded count.
func TestFullFilterEstimates(t *testing.T) {
	for _, tc := range []struct {
		g     Geometry
		shift uint // hash i<<shift sets bit i with k=1
	}{
		{Geometry{Layout: Classic, Bits: 64, K: 1}, 58},
		{Geometry{Layout: Blocked, Bits: 512, K: 1}, 23},
	} {
		f := mustGeometry(t, tc.g)
		for i := range tc.g.Bits {
			f.AddHash(i << tc.shift)
		}
		if f.FillRatio() != 1 || !math.IsInf(f.EstimatedCount(), 1) || f.EstimatedFPR() != 1 {
			t.Errorf("full %s filter: fill %v, est. count %v, est. FPR %v", tc.g.Layout, f.FillRatio(), f.EstimatedCount(), f.EstimatedFPR())
		}
	}
}

// TestEstimatedCountInvertsTheLayoutsFill pins that the count estimate
// inverts the expected fill of the filter's own layout: given the number of
// bits n keys are expected to set, it answers n. Blocked and Classic differ
// (by about 3% at k=32), since a Blocked key's probes share one block.
func TestEstimatedCountInvertsTheLayoutsFill(t *testing.T) {
	for _, tc := range []struct {
		g Geometry
		n float64
	}{
		{Geometry{Layout: Blocked, Bits: 512 * 64, K: 32}, 500},
		{Geometry{Layout: Blocked, Bits: 512 * 1024, K: 7}, 50_000},
		{Geometry{Layout: Classic, Bits: 512 * 64, K: 32}, 500},
		{Geometry{Layout: Classic, Bits: 64 * 1000, K: 7}, 5_000},
	} {
		m := float64(tc.g.Bits)
		// q: the probability that one key sets a given bit.
		q := 1 - math.Pow(1-1/m, float64(tc.g.K))
		if tc.g.Layout == Blocked {
			q = (1 - math.Pow(1-1.0/blockBits, float64(tc.g.K))) / (m / blockBits)
		}
		ones := math.Round(m * (1 - math.Pow(1-q, tc.n)))
		if got := tc.g.countFromOnes(uint64(ones)); math.Abs(got-tc.n) > tc.n*0.002 {
			t.Errorf("%+v: %v bits set estimates %.1f keys, want %v", tc.g, ones, got, tc.n)
		}
	}
}

func TestEstimateIntersectionDisjoint(t *testing.T) {
	g := GeometryFor(Blocked, 2000, 10)
	a, b := buildFilter(t, g, testKeys(0, 1000)), buildFilter(t, g, testKeys(1, 1000))
	est, err := a.EstimateIntersection(b)
	if err != nil {
		t.Fatal(err)
	}
	if est < 0 || est > 50 {
		t.Errorf("intersection of disjoint sets estimated at %v", est)
	}
	self, _ := a.EstimateIntersection(a)
	if math.Abs(self-a.EstimatedCount()) > 1e-6 {
		t.Errorf("intersection with itself %v, want its estimated count %v", self, a.EstimatedCount())
	}
}

// TestTheoreticalFPRHostileCount: count comes from the encoding unchecked,
// so an overfull filter (count ≫ bits) must still get its FPR (≈ 1)
// quickly. The Blocked formula sums a Poisson distribution over a range
// that grows with √(512/bitsPerKey); it must stay bounded.
func TestTheoreticalFPRHostileCount(t *testing.T) {
	for _, count := range []uint64{1 << 20, 1 << 36} {
		f, err := Decode(forge("bkvf", 1, byte(Blocked), 7, 0, 512, 0, count, make([]byte, 64)))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p := f.TheoreticalFPR()
		if d := time.Since(start); d > 20*time.Millisecond {
			t.Errorf("TheoreticalFPR with count %d on 512 bits took %v", count, d)
		}
		if p < 0.999 || p > 1+1e-9 {
			t.Errorf("TheoreticalFPR with count %d on 512 bits = %v, want ≈ 1", count, p)
		}
	}
}

// referenceBlockedFPR is the Blocked layout's FPR as the formula reads: a
// Poisson-weighted sum over a fixed range of 12σ either side of lambda,
// every weight from the log-gamma function. blockedFPR must agree with it.
func referenceBlockedFPR(lambda float64, k int) float64 {
	kf := float64(k)
	spread := 12*math.Sqrt(lambda) + 12
	var sum float64
	for i := max(0, math.Floor(lambda-spread)); i <= math.Ceil(lambda+spread); i++ {
		lg, _ := math.Lgamma(i + 1)
		sum += math.Exp(-lambda+i*math.Log(lambda)-lg) * math.Pow(-math.Expm1(kf*i*math.Log1p(-1.0/blockBits)), kf)
	}
	return sum
}

// TestBlockedFPRMatchesReference: the fast sum (from the mode outwards,
// weights by recurrence, stopping where terms are negligible) agrees with
// the plain formula to 1e-12, relative, from 1/4 to 64 bits per key (the
// store never goes below 1) and for every k the planners use; to 1e-9
// below that, where the plain formula's weights, exponentials of
// differences of numbers near 10^5, are the less exact. With k = 0 every
// term is 1 and the sum is the Poisson distribution's whole mass: 1, to
// 1e-13, at every size.
func TestBlockedFPRMatchesReference(t *testing.T) {
	for bpk := 1.0 / 64; bpk <= 64; bpk *= 1.07 {
		for k := 0; k <= 40; k++ {
			lambda := blockBits / bpk
			got, want := FPR(Blocked, bpk, k), referenceBlockedFPR(lambda, k)
			tol := 1e-12
			if bpk < 1.0/4 {
				tol = 1e-9
			}
			if d := math.Abs(got - want); d > tol*want || math.IsNaN(got) {
				t.Fatalf("FPR(Blocked, %v, %d) = %v, want %v (relative error %.3g)", bpk, k, got, want, d/want)
			}
		}
	}
	for bpk := 1.0 / 64; bpk <= 64; bpk *= 1.07 {
		if got := FPR(Blocked, bpk, 0); math.Abs(got-1) > 1e-13 {
			t.Fatalf("FPR(Blocked, %v, 0) = %v, want 1", bpk, got)
		}
	}
	if got := FPR(Blocked, math.Inf(1), 7); got != 0 {
		t.Errorf("FPR(Blocked, +Inf, 7) = %v, want 0", got)
	}
}

// BenchmarkFPR is the cost of one theoretical FPR, which the store
// computes for every live segment at each flush and merge.
func BenchmarkFPR(b *testing.B) {
	for _, layout := range []Layout{Classic, Blocked} {
		b.Run(layout.String(), func(b *testing.B) {
			var sum float64
			for i := 0; b.Loop(); i++ {
				sum += FPR(layout, 8+float64(i%64)/16, 7)
			}
			if sum <= 0 {
				b.Fatal(sum)
			}
		})
	}
}
