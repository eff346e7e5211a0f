package memtable

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/heapstat"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// TestRangeDeletesAreRecorded pins what AddRangeDeletes leaves behind: a
// batch of one tombstone is kept like a larger one, the table is no longer
// Empty though Len stays 0, MaxSeq covers the tombstones' sequence numbers,
// the keys are copied, and an empty batch changes nothing.
func TestRangeDeletesAreRecorded(t *testing.T) {
	m := New(0)
	m.AddRangeDeletes(nil)
	if !m.Empty() || m.RangeDels() != nil || m.RangeDelLists() != nil || m.ApproximateSize() != 0 {
		t.Fatalf("after an empty batch: Empty %v, RangeDels %v, size %d; want true, nil, 0",
			m.Empty(), m.RangeDels(), m.ApproximateSize())
	}
	start, end := []byte("b"), []byte("d")
	m.AddRangeDeletes([]rangedel.Tombstone{{Start: start, End: end, Seq: 7}})
	start[0], end[0] = 'x', 'z' // the table must hold its own copy
	if m.Empty() || m.Len() != 0 {
		t.Errorf("with one range tombstone: Empty %v, Len %d; want false, 0", m.Empty(), m.Len())
	}
	if m.MaxSeq() != 7 || m.ApproximateSize() <= 0 {
		t.Errorf("with one range tombstone: MaxSeq %d, size %d; want 7, > 0", m.MaxSeq(), m.ApproximateSize())
	}
	for _, tc := range []struct {
		key     string
		readSeq uint64
		want    uint64
	}{
		{"a", 10, 0}, {"b", 10, 7}, {"c", 7, 7}, {"c", 6, 0}, {"d", 10, 0}, {"y", 10, 0},
	} {
		if got := m.RangeDels().Covering([]byte(tc.key), tc.readSeq); got != tc.want {
			t.Errorf("Covering(%q, %d) = %d, want %d", tc.key, tc.readSeq, got, tc.want)
		}
	}

	m.Add(9, base.KindPut, []byte("k"), []byte("v"))
	m.AddRangeDeletes([]rangedel.Tombstone{{Start: []byte("c"), End: []byte("f"), Seq: 8}})
	if m.Empty() || m.MaxSeq() != 9 || m.RangeDels().Covering([]byte("e"), 10) != 8 || m.RangeDels().Covering([]byte("c"), 10) != 8 {
		t.Errorf("after a second batch: Empty %v, MaxSeq %d, tombstones %v", m.Empty(), m.MaxSeq(), m.RangeDels().Fragments())
	}

	points := New(0)
	points.Add(1, base.KindPut, []byte("k"), nil)
	if points.Empty() {
		t.Error("a table with one entry and no range tombstone is Empty")
	}
}

// TestRangeDelListsHalve pins the shape of the tombstone lists after each
// batch: each list holds fewer than half the pieces of the one before it,
// so a reader looks through at most about log₂ n lists, and nothing is
// lost in the merging.
func TestRangeDelListsHalve(t *testing.T) {
	m := New(0)
	for i := range 100 {
		m.AddRangeDeletes([]rangedel.Tombstone{{
			Start: fmt.Appendf(nil, "k%03d", i), End: fmt.Appendf(nil, "k%03d~", i), Seq: uint64(i + 1),
		}})
		lists, total := m.RangeDelLists(), 0
		for j, l := range lists {
			total += l.Len()
			if j > 0 && 2*l.Len() >= lists[j-1].Len() {
				t.Fatalf("after %d batches: list %d has %d pieces, not under half of the %d before it",
					i+1, j, l.Len(), lists[j-1].Len())
			}
		}
		if total != i+1 || m.RangeDels().Len() != i+1 {
			t.Fatalf("after %d batches: %d pieces in the lists, %d merged; want %d", i+1, total, m.RangeDels().Len(), i+1)
		}
	}
	if n := len(m.RangeDelLists()); n != 3 { // 100 = 64 + 32 + 4
		t.Errorf("100 batches in %d lists, want 3", n)
	}
}

// TestRangeDeleteCopiesCharged: the table charges its size for the
// bounds of every range tombstone it copies, also those no fragment keeps
// (a range deleted again; a tombstone its batch's newer ones hide), so
// that what it holds stays within a small factor of ApproximateSize,
// which decides when it is flushed. Charged only for its fragments, the
// table below held 65 times its size, and with 64 KiB bounds a 4 MiB
// memtable of a store took 300 MB of heap.
func TestRangeDeleteCopiesCharged(t *testing.T) {
	start, end := bytes.Repeat([]byte("a"), 4<<10), bytes.Repeat([]byte("b"), 4<<10)
	const n = 500
	base0 := heapstat.Live()
	m := New(4 << 20)
	for i := range n {
		m.Add(uint64(2*i+1), base.KindPut, fmt.Appendf(nil, "k%05d", i), nil)
		m.AddRangeDeletes([]rangedel.Tombstone{{Start: start, End: end, Seq: uint64(2*i + 2)}})
	}
	batch := make([]rangedel.Tombstone, n)
	for i := range batch {
		batch[i] = rangedel.Tombstone{Start: start, End: end, Seq: uint64(2*n + i + 1)}
	}
	m.AddRangeDeletes(batch)
	held := heapstat.Live() - base0
	copied := 2 * n * (len(start) + len(end))
	size := m.ApproximateSize()
	if size < copied {
		t.Errorf("ApproximateSize %d, less than the %d bytes of bounds the table copied", size, copied)
	}
	// Beside the charge: arena chunks' unused tails (under a quarter of
	// each) and the first chunk and node slab of any table.
	if limit := int64(2*size) + 1<<20; held > limit {
		t.Errorf("the table holds %d bytes of heap for an ApproximateSize of %d (limit %d)", held, size, limit)
	}
	if got := m.RangeDels().Len(); got != n+1 {
		t.Errorf("%d tombstone pieces, want %d (one fragment, a sequence number per batch)", got, n+1)
	}
	runtime.KeepAlive(m)
}

// TestPointBytesLeaveOutRangeDeletes: PointBytes grows with every point
// entry as ApproximateSize does, and range tombstones grow only
// ApproximateSize.
func TestPointBytesLeaveOutRangeDeletes(t *testing.T) {
	m := New(0)
	for i := range 100 {
		m.Add(uint64(i+1), base.Kind(i%2), fmt.Appendf(nil, "k%03d", i), bytes.Repeat([]byte("v"), i))
		if p, s := m.PointBytes(), m.ApproximateSize(); p != s || p <= 0 {
			t.Fatalf("after %d point entries: PointBytes %d, ApproximateSize %d; want them equal and positive", i+1, p, s)
		}
	}
	points := m.PointBytes()
	m.AddRangeDeletes([]rangedel.Tombstone{{Start: []byte("k010"), End: []byte("k020"), Seq: 200}})
	if m.PointBytes() != points || m.ApproximateSize() <= points {
		t.Fatalf("after a range tombstone: PointBytes %d (was %d), ApproximateSize %d; want PointBytes unchanged, size above it",
			m.PointBytes(), points, m.ApproximateSize())
	}
}

// TestEmptyRangeDeletesNotCharged: tombstones that delete nothing (end at
// or before start) are not copied, so they are charged nothing, neither by
// their own batch nor by a later one: a table given them and then a real
// tombstone has the size of one given only the real tombstone.
func TestEmptyRangeDeletesNotCharged(t *testing.T) {
	real := []rangedel.Tombstone{{Start: []byte("b"), End: []byte("d"), Seq: 3}}
	with, without := New(0), New(0)
	with.AddRangeDeletes([]rangedel.Tombstone{
		{Start: []byte("same"), End: []byte("same"), Seq: 1},
		{Start: []byte("z-start"), End: []byte("a-end"), Seq: 2},
	})
	if with.ApproximateSize() != 0 || with.RangeDels() != nil || with.MaxSeq() != 2 {
		t.Fatalf("after empty tombstones: size %d, RangeDels %v, MaxSeq %d; want 0, nil, 2",
			with.ApproximateSize(), with.RangeDels(), with.MaxSeq())
	}
	with.AddRangeDeletes(real)
	without.AddRangeDeletes(real)
	if a, b := with.ApproximateSize(), without.ApproximateSize(); a != b {
		t.Fatalf("size %d after empty tombstones and a real one, %d after the real one alone", a, b)
	}
}

// TestRangeDeleteChargeReplaced: each batch of range tombstones replaces
// the tombstones' charge with the new one (the copied bounds and the
// lists' own memory), rather than adding it to the old: ApproximateSize
// stays PointBytes plus exactly that charge, batch after batch.
func TestRangeDeleteChargeReplaced(t *testing.T) {
	m := New(0)
	for i := range 50 {
		m.Add(uint64(2*i+1), base.KindPut, fmt.Appendf(nil, "k%03d", i), []byte("v"))
		m.AddRangeDeletes([]rangedel.Tombstone{{
			Start: fmt.Appendf(nil, "k%03d", i), End: fmt.Appendf(nil, "k%03d~", i+i%3), Seq: uint64(2*i + 2),
		}})
		want := m.rangeDelKeys
		for _, l := range m.RangeDelLists() {
			want += l.Bytes()
		}
		if got := m.ApproximateSize() - m.PointBytes(); got != want {
			t.Fatalf("after %d batches: size less point bytes %d, want the tombstones' charge %d", i+1, got, want)
		}
	}
}
