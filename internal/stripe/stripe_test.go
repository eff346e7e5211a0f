package stripe

import (
	"sync"
	"testing"
	"unsafe"
)

func TestCounterSums(t *testing.T) {
	var c Counter
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Add(Pick(), int64(g+1))
			}
		})
	}
	wg.Wait()
	if got, want := c.Load(), int64(1000*(1+2+3+4+5+6+7+8)); got != want {
		t.Fatalf("Load = %d, want %d", got, want)
	}
}

func TestCellsOwnTheirLines(t *testing.T) {
	var c Counter
	if d := uintptr(unsafe.Pointer(&c.cells[1])) - uintptr(unsafe.Pointer(&c.cells[0])); d != cellSize {
		t.Fatalf("cells %d bytes apart, want %d", d, cellSize)
	}
	// Goroutines, each on a stack of its own, spread over the stripes;
	// one goroutine keeps to one.
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := Pick()
			if i < 0 || i >= Stripes || Pick() != i {
				t.Errorf("Pick = %d, then %d", i, Pick())
			}
			mu.Lock()
			seen[i] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(seen) < Stripes/2 {
		t.Fatalf("256 goroutines picked %d of %d stripes", len(seen), Stripes)
	}
}

// BenchmarkAdd compares a striped counter with one shared atomic word
// under RunParallel: run with -cpu 1,2,4,... to see the shared word stop
// scaling.
func BenchmarkAdd(b *testing.B) {
	b.Run("striped", func(b *testing.B) {
		var c Counter
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Add(Pick(), 1)
			}
		})
	})
	b.Run("shared", func(b *testing.B) {
		var c cell
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.v.Add(1)
			}
		})
	})
}

func BenchmarkPick(b *testing.B) {
	n := 0
	for range b.N {
		n += Pick()
	}
	_ = n
}

// TestGroupFieldsApart: each counter of a Group sums its own adds, from
// many goroutines, and a stripe's counters lie within 64 bytes, a cell
// apart from the next stripe's.
func TestGroupFieldsApart(t *testing.T) {
	var g Group
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			i := Pick()
			for range 1000 {
				for f := range GroupFields {
					g.Add(i, f, int64(f*10+w))
				}
			}
		})
	}
	wg.Wait()
	for f := range GroupFields {
		if got, want := g.Load(f), int64(1000*(8*f*10+0+1+2+3+4+5+6+7)); got != want {
			t.Errorf("Load(%d) = %d, want %d", f, got, want)
		}
	}
	if d := uintptr(unsafe.Pointer(&g.cells[1])) - uintptr(unsafe.Pointer(&g.cells[0])); d != cellSize {
		t.Fatalf("cells %d bytes apart, want %d", d, cellSize)
	}
	if d := uintptr(unsafe.Pointer(&g.cells[0].v[GroupFields-1])) - uintptr(unsafe.Pointer(&g.cells[0])); d+8 > 64 {
		t.Fatalf("last counter %d bytes into its cell: the counters span more than 64 bytes", d)
	}
}
