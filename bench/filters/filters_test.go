package filters

import (
	"bytes"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
)

// fixture is the N-key data set every benchmark of one kind shares. The
// parent benchmark builds it once; its sub-benchmarks reuse it across the
// repeated runs the testing package makes to find b.N.
type fixture struct {
	present, absent Keys
	built           []Filter  // per Impls() entry, holding present
	quality         []Quality // per Impls() entry
}

func newFixture(n int) *fixture {
	fx := &fixture{}
	fx.present, fx.absent = GenerateKeys(n, Seed)
	for _, im := range Impls() {
		f := Build(im, &fx.present)
		fx.built = append(fx.built, f)
		fx.quality = append(fx.quality, Measure(f, &fx.present, &fx.absent))
	}
	return fx
}

func report(b *testing.B, q Quality) {
	b.ReportMetric(100*q.FPR, "fpr%")
	b.ReportMetric(q.BitsPerKey, "bits/key")
}

func BenchmarkAdd(b *testing.B) {
	fx := newFixture(N)
	for i, im := range Impls() {
		b.Run(im.Name(), func(b *testing.B) {
			f := im.New(N)
			b.ReportAllocs()
			b.ResetTimer()
			f.AddLoop(&fx.present, b.N)
			report(b, fx.quality[i]) // after ResetTimer, which deletes metrics
		})
	}
}

func BenchmarkContainsPresent(b *testing.B) {
	benchContains(b, func(fx *fixture) *Keys { return &fx.present })
}

func BenchmarkContainsAbsent(b *testing.B) {
	benchContains(b, func(fx *fixture) *Keys { return &fx.absent })
}

func benchContains(b *testing.B, keys func(*fixture) *Keys) {
	fx := newFixture(N)
	for i, im := range Impls() {
		b.Run(im.Name(), func(b *testing.B) {
			f := fx.built[i]
			b.ReportAllocs()
			b.ResetTimer()
			f.ContainsLoop(keys(fx), b.N)
			report(b, fx.quality[i]) // after ResetTimer, which deletes metrics
		})
	}
}

func TestGenerateKeys(t *testing.T) {
	p1, a1 := GenerateKeys(1000, Seed)
	p2, _ := GenerateKeys(1000, Seed)
	p3, _ := GenerateKeys(1000, Seed+1)
	seen := map[string]bool{}
	for i := range 1000 {
		if !bytes.Equal(p1.Keys[i], p2.Keys[i]) {
			t.Fatalf("key %d differs between runs with one seed", i)
		}
		if len(p1.Keys[i]) != KeyLen || len(a1.Keys[i]) != KeyLen {
			t.Fatalf("key %d: lengths %d, %d, want %d", i, len(p1.Keys[i]), len(a1.Keys[i]), KeyLen)
		}
		seen[string(p1.Keys[i])] = true
	}
	for i, k := range a1.Keys {
		if seen[string(k)] {
			t.Fatalf("absent key %d is also present", i)
		}
	}
	if bytes.Equal(p1.Keys[0], p3.Keys[0]) {
		t.Fatal("different seeds gave the same first key")
	}
}

// TestQuality checks every configuration at a smaller n: no false
// negatives, memory near the budget, and an FPR near the ~1% that 10
// bits/key buys (a wrong probe scheme or a hash ignoring part of the key
// would show up as a far higher rate).
func TestQuality(t *testing.T) {
	const n = 100_000
	fx := newFixture(n)
	for i, im := range Impls() {
		q := fx.quality[i]
		t.Logf("%-28s bits/key %.2f  k %d  fpr %.3f%%", im.Name(), q.BitsPerKey, q.K, 100*q.FPR)
		if q.FalseNeg != 0 {
			t.Errorf("%s: %d false negatives", im.Name(), q.FalseNeg)
		}
		if q.BitsPerKey < 10 || q.BitsPerKey > 10.5 {
			t.Errorf("%s: %.2f bits/key, want ~%d", im.Name(), q.BitsPerKey, BitsPerKey)
		}
		if q.FPR <= 0.002 || q.FPR > 0.02 {
			t.Errorf("%s: FPR %.4f, want within (0.2%%, 2%%]", im.Name(), q.FPR)
		}
		if q.K < 4 || q.K > 8 {
			t.Errorf("%s: k=%d, want 4..8 at 10 bits/key", im.Name(), q.K)
		}
	}
}

// TestBloomkvDefaults checks that the default bloomkv configurations are
// the filters of the documented constructors, and that the exact variants
// really use the budget.
func TestBloomkvDefaults(t *testing.T) {
	for _, n := range []int{1, 1000, N} {
		byName := map[string]Filter{}
		for _, im := range Impls() {
			byName[im.Name()] = im.New(n)
		}
		want := bloom.NewBitsPerKey(n, BitsPerKey).Geometry()
		if got := byName["bloomkv/blocked"].(*bloomkvKey).f.Geometry(); got != want {
			t.Errorf("n=%d: blocked geometry %+v, NewBitsPerKey gives %+v", n, got, want)
		}
		if got := byName["bloomkv/blocked-hash"].(*bloomkvHash).f.Geometry(); got != want {
			t.Errorf("n=%d: blocked-hash geometry %+v, NewBitsPerKey gives %+v", n, got, want)
		}
		for _, name := range []string{"bloomkv/blocked-exact", "bloomkv/classic-exact"} {
			g := byName[name].(*bloomkvKey).f.Geometry()
			if budget := uint64(n) * BitsPerKey; g.Bits < budget || g.Bits >= budget+512 {
				t.Errorf("n=%d: %s has %d bits, want the first unit multiple >= %d", n, name, g.Bits, budget)
			}
		}
	}
}

// TestPebbleAddLoopFinishes checks that Pebble's AddLoop seals a filter
// every n keys, so that a filter built by cycling past n still answers for
// all keys (the Add benchmark relies on it to include Finish's cost).
func TestPebbleAddLoopFinishes(t *testing.T) {
	const n = 1000
	present, _ := GenerateKeys(n, Seed)
	for _, im := range Impls() {
		if im.Library != "pebble" {
			continue
		}
		f := im.New(n)
		f.AddLoop(&present, 2*n+10) // two full filters, then 10 pending keys
		if f.SizeBytes() == 0 {
			t.Fatal("no filter finished after 2n adds")
		}
		if got := f.ContainsLoop(&present, n); got != n {
			t.Fatalf("finished filter holds %d of %d keys", got, n)
		}
	}
}
