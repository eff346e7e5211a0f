package segment

import (
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
)

// TestUseFilter: UseFilter takes the stored filter or a fold of it, which
// MayContain then consults, and refuses a filter of another layout, k,
// seed or a size that does not divide the stored one, leaving the
// resident filter as it was; a segment without a filter refuses any.
func TestUseFilter(t *testing.T) {
	es := randomEntries(rand.New(rand.NewPCG(3, 4)), 2000, 1500)
	data, _ := writeSegment(t, es, WriterOptions{BitsPerKey: 10})
	r := openSegment(t, data, ReaderOptions{Name: corruptName})
	stored := r.Filter()
	s := stored.Geometry()
	fold, err := bloom.NewGeometry(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := fold.Union(stored); err != nil {
		t.Fatal(err)
	}
	if err := fold.Fold(); err != nil {
		t.Fatal(err)
	}
	if err := r.UseFilter(fold); err != nil || r.ResidentFilter() != fold {
		t.Fatalf("UseFilter(a fold %+v of %+v): %v", fold.Geometry(), s, err)
	}
	for _, e := range es {
		if !r.MayContain(bloom.Hash(e.key)) {
			t.Fatalf("the fold lost %q", e.key)
		}
	}
	other := func(change func(*bloom.Geometry)) *bloom.Filter {
		g := s
		change(&g)
		f, err := bloom.NewGeometry(g)
		if err != nil {
			t.Fatalf("%+v: %v", g, err)
		}
		return f
	}
	for name, f := range map[string]*bloom.Filter{
		"nil":            nil,
		"other layout":   other(func(g *bloom.Geometry) { g.Layout = bloom.Classic }),
		"other k":        other(func(g *bloom.Geometry) { g.K++ }),
		"other seed":     other(func(g *bloom.Geometry) { g.Seed++ }),
		"twice the size": other(func(g *bloom.Geometry) { g.Bits *= 2 }),
		"a third":        other(func(g *bloom.Geometry) { g.Bits = g.Bits / 512 / 3 * 512 }),
	} {
		if err := r.UseFilter(f); err == nil || r.ResidentFilter() != fold {
			t.Errorf("UseFilter(%s): err %v, resident %p; want an error and the fold (%p) kept", name, err, r.ResidentFilter(), fold)
		}
	}
	if err := r.UseFilter(stored); err != nil || !r.MayContain(bloom.Hash(es[0].key)) {
		t.Fatalf("UseFilter(the stored filter): %v", err)
	}

	noFilter := openSegment(t, func() []byte { d, _ := writeSegment(t, es, WriterOptions{}); return d }(), ReaderOptions{})
	if err := noFilter.UseFilter(fold); err == nil {
		t.Fatal("a segment without a filter took one")
	}
}
