package compaction

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
)

const testBPK = 10 // the DB's default bits per key

// keyOf is the user key of number i; absent keys in tests have bit 62 set.
func keyOf(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

// filterOf returns a filter of geometry g holding the keys lo..hi-1.
func filterOf(t testing.TB, g bloom.Geometry, lo, hi uint64) *bloom.Filter {
	t.Helper()
	f, err := bloom.NewGeometry(g)
	if err != nil {
		t.Fatal(err)
	}
	for i := lo; i < hi; i++ {
		f.AddHash(bloom.Hash(keyOf(i)))
	}
	return f
}

// writerGeometry is the geometry the segment writer gives n keys.
func writerGeometry(n int) bloom.Geometry { return bloom.GeometryFor(bloom.Blocked, n, testBPK) }

// bitArray returns f's bit array, read through its encoding (FORMAT.md:
// a 32-byte header, the bits, a 4-byte checksum), so that two filters can
// be compared bit for bit whatever their counts.
func bitArray(t testing.TB, f *bloom.Filter) []byte {
	t.Helper()
	enc, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return enc[32 : len(enc)-4]
}

// measuredFPR probes n keys that no test filter holds.
func measuredFPR(f *bloom.Filter, n int) float64 {
	hits := 0
	for i := range uint64(n) {
		if f.ContainsHash(bloom.Hash(keyOf(1<<62 | i))) {
			hits++
		}
	}
	return float64(hits) / float64(n)
}

func TestPlanFilterPaths(t *testing.T) {
	const n = 20_000
	g := writerGeometry(n)
	wide := g // twice the bits, same k: a filter built with headroom
	wide.Bits *= 2
	otherK := g
	otherK.K++
	odd := g // three times the bits: no number of folds lands on g
	odd.Bits *= 3
	type input struct {
		g      bloom.Geometry
		lo, hi uint64
	}
	same := input{g, 0, n}
	tests := []struct {
		name       string
		inputs     []input
		want       FilterPath
		inputFolds int
		folds      int
	}{
		{"one input", []input{same}, PathUnion, 0, 0},
		{"overwrites: same keys", []input{same, same, same, same}, PathUnion, 0, 0},
		{"overwrites: 98% shared", []input{same, {g, n / 50, n + n/50}}, PathUnion, 0, 0},
		{"80% shared", []input{same, {g, n / 5, n + n/5}}, PathRebuild, 0, 0},
		{"disjoint pair", []input{same, {g, n, 2 * n}}, PathRebuild, 0, 0},
		{"disjoint four", []input{same, {g, n, 2 * n}, {g, 2 * n, 3 * n}, {g, 3 * n, 4 * n}}, PathRebuild, 0, 0},
		{"fold to match", []input{same, {wide, 0, n}}, PathUnion, 1, 0},
		{"fold to match, disjoint", []input{same, {wide, n, 2 * n}}, PathRebuild, 1, 0},
		{"no fold lands", []input{same, {odd, 0, n}}, PathRebuild, 0, 0},
		{"different k", []input{same, {otherK, 0, n}}, PathRebuild, 0, 0},
		{"headroom: union then halve", []input{{wide, 0, n * 9 / 10}, {wide, 0, n * 9 / 10}}, PathUnionFold, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fs []*bloom.Filter
			for _, in := range tt.inputs {
				fs = append(fs, filterOf(t, in.g, in.lo, in.hi))
			}
			plan, f, err := PlanFilter(fs, testBPK)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: estimated FPR %.4f, target %.4f, bits %d → %d",
				plan.Path, plan.EstimatedFPR, plan.TargetFPR, plan.InputBits, plan.OutputBits)
			if plan.Path != tt.want || plan.InputFolds != tt.inputFolds || plan.Folds != tt.folds {
				t.Fatalf("plan %+v, want path %s, %d input folds, %d folds", plan, tt.want, tt.inputFolds, tt.folds)
			}
			if (f == nil) != (plan.Path == PathRebuild) {
				t.Fatalf("path %s with filter %v", plan.Path, f)
			}
			if plan.Path == PathRebuild {
				if plan.OutputBits != 0 {
					t.Errorf("rebuild with OutputBits %d", plan.OutputBits)
				}
				return
			}
			if plan.EstimatedFPR > plan.TargetFPR*(1+UnionSlack) || plan.EstimatedFPR != f.EstimatedFPR() {
				t.Errorf("estimated FPR %v (filter says %v), target %v", plan.EstimatedFPR, f.EstimatedFPR(), plan.TargetFPR)
			}
			if plan.OutputBits != f.Geometry().Bits {
				t.Errorf("OutputBits %d, filter has %d", plan.OutputBits, f.Geometry().Bits)
			}
		})
	}
}

// TestPlanFilterUnionMatchesRebuild: when the inputs hold the same keys,
// the union is bit for bit the filter a rebuild at that geometry makes.
func TestPlanFilterUnionMatchesRebuild(t *testing.T) {
	const n = 20_000
	g := writerGeometry(n)
	wide := g
	wide.Bits *= 4
	for _, tt := range []struct {
		name   string
		inputs []bloom.Geometry
	}{
		{"equal geometry", []bloom.Geometry{g, g, g}},
		{"larger inputs folded down", []bloom.Geometry{wide, g, wide}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var fs []*bloom.Filter
			for _, ig := range tt.inputs {
				fs = append(fs, filterOf(t, ig, 0, n))
			}
			plan, got, err := PlanFilter(fs, testBPK)
			if err != nil || got == nil {
				t.Fatalf("plan %+v, err %v: want a union", plan, err)
			}
			want := filterOf(t, g, 0, n)
			if !bytes.Equal(bitArray(t, got), bitArray(t, want)) {
				t.Fatal("union differs from the rebuilt filter")
			}
			if got.Count() != uint64(len(fs))*n {
				t.Errorf("Count %d, want the sum of the inputs' %d", got.Count(), len(fs)*n)
			}
		})
	}
}

// TestPlanFilterProperty checks random merges against their key sets: a
// union never misses a key of any input, meets the FPR bound, and leaves
// the inputs, decoded in place from encodings, untouched.
func TestPlanFilterProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	paths := map[FilterPath]int{}
	for trial := range 60 {
		n := 500 + rng.IntN(3000)
		base := writerGeometry(n)
		var (
			fs     []*bloom.Filter
			encs   [][]byte
			ranges [][2]uint64
		)
		for range 1 + rng.IntN(4) {
			g := base
			switch rng.IntN(6) {
			case 0:
				g = writerGeometry(n + rng.IntN(n)) // sized for its own count
			case 1:
				g.Bits <<= uint(rng.IntN(3)) // built with headroom
			}
			lo := uint64(rng.IntN(n / 10 * (1 + rng.IntN(4)))) // mostly overlapping ranges
			hi := lo + uint64(n)
			f := filterOf(t, g, lo, hi)
			enc, _ := f.MarshalBinary()
			view, err := bloom.Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if rng.IntN(20) == 0 {
				view = nil // a segment without a filter
			}
			// encs keeps the bytes the view lives in, to check them afterwards.
			fs, encs, ranges = append(fs, view), append(encs, enc), append(ranges, [2]uint64{lo, hi})
		}
		saved := make([][]byte, len(encs))
		for i, e := range encs {
			saved[i] = bytes.Clone(e)
		}
		plan, f, err := PlanFilter(fs, testBPK)
		if err != nil {
			t.Fatal(err)
		}
		paths[plan.Path]++
		for i := range encs {
			if !bytes.Equal(encs[i], saved[i]) {
				t.Fatalf("trial %d: input %d was modified", trial, i)
			}
		}
		if f == nil {
			continue
		}
		if plan.EstimatedFPR > plan.TargetFPR*(1+UnionSlack) {
			t.Fatalf("trial %d: union with estimated FPR %v over target %v", trial, plan.EstimatedFPR, plan.TargetFPR)
		}
		for _, r := range ranges {
			for k := r[0]; k < r[1]; k++ {
				if !f.Contains(keyOf(k)) {
					t.Fatalf("trial %d: plan %+v lost key %d", trial, plan, k)
				}
			}
		}
	}
	t.Logf("paths over 60 random merges: %v", paths)
	if paths[PathRebuild] == 0 || paths[PathUnion]+paths[PathUnionFold] == 0 {
		t.Errorf("paths %v: the generator should exercise both rebuild and union", paths)
	}
}

func TestPlanFilterEdges(t *testing.T) {
	f := filterOf(t, writerGeometry(100), 0, 100)
	for _, bpk := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, _, err := PlanFilter([]*bloom.Filter{f}, bpk); !errors.Is(err, ErrBitsPerKey) {
			t.Errorf("bits per key %v: err %v, want ErrBitsPerKey", bpk, err)
		}
	}
	// Any positive number is a setting, below one bit per key too.
	for _, bpk := range []float64{math.SmallestNonzeroFloat64, 0.5, 1} {
		if _, _, err := PlanFilter([]*bloom.Filter{f}, bpk); err != nil {
			t.Errorf("bits per key %v: %v, want a plan", bpk, err)
		}
	}
	for name, in := range map[string][]*bloom.Filter{"no inputs": nil, "missing filter": {f, nil}} {
		plan, got, err := PlanFilter(in, testBPK)
		if err != nil || got != nil || plan.Path != PathRebuild || plan.EstimatedFPR != 1 {
			t.Errorf("%s: plan %+v, filter %v, err %v; want a rebuild with EstimatedFPR 1", name, plan, got, err)
		}
	}
	plan, got, _ := PlanFilter([]*bloom.Filter{f}, testBPK)
	if got == f {
		t.Error("the union of one input is that input, want a copy")
	}
	if plan.InputBits != f.Geometry().Bits {
		t.Errorf("InputBits %d, want %d", plan.InputBits, f.Geometry().Bits)
	}
}

// TestRightSizeAfterDeletes: a filter sized for 4n keys of which n
// survived folds exactly twice, back to about the target bits per key.
func TestRightSizeAfterDeletes(t *testing.T) {
	const n = 100_000
	f := filterOf(t, writerGeometry(4*n), 0, n)
	before := bytes.Clone(bitArray(t, f))
	target := TargetFPR(testBPK)
	got, folds := RightSize(f, target)
	t.Logf("%d folds: %d → %d bits, estimated FPR %.4f (target %.4f), measured %.4f",
		folds, f.Geometry().Bits, got.Geometry().Bits, got.EstimatedFPR(), target, measuredFPR(got, 100_000))
	if folds != 2 || got.Geometry().Bits != f.Geometry().Bits/4 {
		t.Fatalf("%d folds to %d bits, want 2 folds to %d", folds, got.Geometry().Bits, f.Geometry().Bits/4)
	}
	if got.EstimatedFPR() > target {
		t.Errorf("estimated FPR %v over target %v", got.EstimatedFPR(), target)
	}
	if !bytes.Equal(bitArray(t, f), before) || f.Geometry().Bits != writerGeometry(4*n).Bits {
		t.Error("RightSize modified its input")
	}
	for k := range uint64(n) {
		if !got.Contains(keyOf(k)) {
			t.Fatalf("key %d lost", k)
		}
	}
	if same, folds := RightSize(got, target); same != got || folds != 0 {
		t.Errorf("right-sized again: %d more folds, want none and the same filter", folds)
	}
}

// BenchmarkFilterPaths compares the ways of getting a merge's filter for
// 10^6 keys: a union of four inputs holding the same keys (overwrites),
// the planner's wasted trial on a disjoint merge before it rebuilds, and
// the rebuild itself (hash and add every key). fpr is the measured FPR.
func BenchmarkFilterPaths(b *testing.B) {
	const n = 1_000_000
	g := writerGeometry(n)
	same := make([]*bloom.Filter, 4)
	for i := range same {
		same[i] = filterOf(b, g, 0, n)
	}
	quarter := writerGeometry(n / 4)
	disjoint := make([]*bloom.Filter, 4)
	for i := range disjoint {
		disjoint[i] = filterOf(b, quarter, uint64(i)*n/4, uint64(i+1)*n/4)
	}
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = keyOf(uint64(i))
	}
	plan := func(b *testing.B, in []*bloom.Filter, want FilterPath) {
		var f *bloom.Filter
		for b.Loop() {
			p, got, err := PlanFilter(in, testBPK)
			if err != nil || p.Path != want {
				b.Fatalf("plan %+v, err %v, want %s", p, err, want)
			}
			f = got
		}
		if f != nil {
			b.ReportMetric(measuredFPR(f, 200_000), "fpr")
		}
	}
	b.Run("union-overwrites", func(b *testing.B) { b.ReportAllocs(); plan(b, same, PathUnion) })
	b.Run("trial-disjoint", func(b *testing.B) { b.ReportAllocs(); plan(b, disjoint, PathRebuild) })
	b.Run("rebuild", func(b *testing.B) {
		b.ReportAllocs()
		var f *bloom.Filter
		for b.Loop() {
			f = bloom.NewBitsPerKey(n, testBPK)
			for _, k := range keys {
				f.AddHash(bloom.Hash(k))
			}
		}
		b.ReportMetric(measuredFPR(f, 200_000), "fpr")
	})
}

func TestFold(t *testing.T) {
	g := writerGeometry(10_000)
	f := filterOf(t, g, 0, 10_000)
	before := bytes.Clone(bitArray(t, f))
	got, err := Fold(f, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Geometry().Bits != g.Bits/4 || got.Count() != f.Count() {
		t.Errorf("folded to %d bits, count %d; want %d bits, count %d", got.Geometry().Bits, got.Count(), g.Bits/4, f.Count())
	}
	if !bytes.Equal(bitArray(t, f), before) || f.Geometry() != g {
		t.Error("Fold modified its input")
	}
	direct := g
	direct.Bits /= 4
	if !bytes.Equal(bitArray(t, got), bitArray(t, filterOf(t, direct, 0, 10_000))) {
		t.Error("folded filter differs from one built at the folded size")
	}
	if same, err := Fold(f, 0); err != nil || same != f {
		t.Errorf("Fold(f, 0) = %p, %v; want f itself", same, err)
	}
	for _, n := range []int{-1, g.Halvings() + 1} {
		if _, err := Fold(f, n); !errors.Is(err, bloom.ErrGeometry) {
			t.Errorf("Fold(f, %d): err %v, want bloom.ErrGeometry", n, err)
		}
	}
}

// TestRightSizeFoldsToTheEnd: a filter whose estimate allows every fold
// (one key in room for thousands, any FPR accepted) is folded as far as
// its geometry goes, to no halvings left, and keeps its key.
func TestRightSizeFoldsToTheEnd(t *testing.T) {
	f := filterOf(t, writerGeometry(4096), 0, 1)
	want := f.Geometry().Halvings()
	got, folds := RightSize(f, 1)
	if want == 0 || folds != want || got.Geometry().Halvings() != 0 {
		t.Fatalf("%d folds of %d possible, %d halvings left; want all of them, none left", folds, want, got.Geometry().Halvings())
	}
	if !got.ContainsHash(bloom.Hash(keyOf(0))) {
		t.Fatal("the folded filter lost its key")
	}
}
