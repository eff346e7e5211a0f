package memtable

// arena hands out byte slices carved from large chunks, so that a memtable
// holding millions of keys and values costs the garbage collector a few
// dozen pointer-free objects instead of millions of small ones. Memory is
// never freed individually: the whole arena is dropped with its memtable.
//
// An arena is used by the single writer only. Readers see the bytes through
// slices published by the skiplist, after they were written.
type arena struct {
	chunk     []byte // current chunk; chunk[len(chunk):cap(chunk)] is free
	chunkSize int
}

const (
	minChunkSize = 4 << 10
	maxChunkSize = 1 << 20
)

// newArena sizes chunks at a quarter of the expected memtable size, within
// [minChunkSize, maxChunkSize]: big enough that chunk allocation is rare,
// small enough that a mostly empty memtable does not pin a lot of memory.
func newArena(sizeHint int) arena {
	return arena{chunkSize: min(max(sizeHint/4, minChunkSize), maxChunkSize)}
}

// alloc returns a zeroed slice of length n whose capacity is also n, so
// that an append by whoever holds it cannot spill into a neighbour's bytes.
func (a *arena) alloc(n int) []byte {
	if n > a.chunkSize/4 {
		// A large value gets its own allocation rather than wasting the
		// tail of the current chunk or forcing an oversized chunk.
		return make([]byte, n)
	}
	if cap(a.chunk)-len(a.chunk) < n {
		a.chunk = make([]byte, 0, a.chunkSize)
	}
	start := len(a.chunk)
	a.chunk = a.chunk[:start+n]
	return a.chunk[start : start+n : start+n]
}
