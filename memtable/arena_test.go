package memtable

import "testing"

// TestArenaChunkSize pins the chunk size: a quarter of the size hint,
// within [minChunkSize, maxChunkSize].
func TestArenaChunkSize(t *testing.T) {
	for _, tc := range []struct{ hint, want int }{
		{0, minChunkSize}, {4 * minChunkSize, minChunkSize}, {64 << 10, 16 << 10},
		{4 * maxChunkSize, maxChunkSize}, {64 << 20, maxChunkSize},
	} {
		if got := newArena(tc.hint).chunkSize; got != tc.want {
			t.Errorf("newArena(%d).chunkSize = %d, want %d", tc.hint, got, tc.want)
		}
	}
}

// TestArenaPacksChunks pins how alloc uses a chunk: allocations of up to a
// quarter of the chunk size are packed into it until it is exactly full,
// and a larger one is allocated on its own without touching the chunk.
func TestArenaPacksChunks(t *testing.T) {
	a := newArena(0)
	quarter := a.chunkSize / 4
	var got [][]byte
	for range 4 {
		got = append(got, a.alloc(quarter))
	}
	if len(a.chunk) != a.chunkSize || cap(a.chunk) != a.chunkSize {
		t.Fatalf("after four quarter-chunk allocations the chunk has len %d, cap %d; want both %d",
			len(a.chunk), cap(a.chunk), a.chunkSize)
	}
	for i, b := range got {
		if len(b) != quarter || cap(b) != quarter || &b[0] != &a.chunk[i*quarter] {
			t.Errorf("allocation %d: len %d, cap %d, not at offset %d of the chunk", i, len(b), cap(b), i*quarter)
		}
	}
	if big := a.alloc(quarter + 1); len(big) != quarter+1 || len(a.chunk) != a.chunkSize {
		t.Errorf("an allocation over a quarter chunk: len %d, and the chunk's len went from %d to %d",
			len(big), a.chunkSize, len(a.chunk))
	}
	if b := a.alloc(1); len(b) != 1 || len(a.chunk) != 1 {
		t.Errorf("an allocation after the chunk is full: len %d, new chunk's len %d; want 1, 1", len(b), len(a.chunk))
	}
}
