package bloomkv

import (
	"runtime"
	"testing"
	"weak"

	"github.com/bloomkv/bloomkv/memtable"
)

// collected runs the garbage collector and reports how many of ws still
// point at a live object.
func reachable[T any](ws []weak.Pointer[T]) int {
	runtime.GC()
	runtime.GC()
	n := 0
	for _, w := range ws {
		if w.Value() != nil {
			n++
		}
	}
	return n
}

// TestFlushedMemtablesReleased: once a memtable is flushed and no reader
// holds it, nothing in the DB keeps it. The frozen list dropped its head
// by reslicing, and the array's first slot kept the flushed memtable (4
// MiB by default, up to 1 GiB) alive until a later rotation outgrew the
// array: one memtable after each Flush, and after a burst of rotations
// as many as had waited for their flush at once.
func TestFlushedMemtablesReleased(t *testing.T) {
	db := mustOpen(t, t.TempDir(), &Options{MemtableSize: 32 << 10, DisableAutoCompaction: true})
	defer db.Close()
	var flushed []weak.Pointer[memtable.Memtable]
	current := func() *memtable.Memtable {
		db.mu.Lock()
		defer db.mu.Unlock()
		return db.mem
	}
	value := make([]byte, 1000)
	for round := range 4 {
		// A few rotations in a row, so that several memtables wait for
		// their flush together and the frozen list's array grows.
		for i := range 200 {
			m := current()
			mustDo(t, db.Put([]byte{byte(round), byte(i)}, value))
			if next := current(); next != m {
				flushed = append(flushed, weak.Make(m))
			}
		}
		m := current()
		mustDo(t, db.Flush())
		flushed = append(flushed, weak.Make(m))
		if n := reachable(flushed); n > 0 {
			t.Fatalf("round %d: %d of the %d memtables flushed so far are still reachable", round, n, len(flushed))
		}
	}
}
