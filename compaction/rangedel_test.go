package compaction

import (
	"fmt"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// TestKeepRangeDels: of a fragment's tombstones, one per snapshot stripe
// stays (the newest), and the oldest stripe's goes only when asked.
func TestKeepRangeDels(t *testing.T) {
	ts := []rangedel.Tombstone{}
	for _, s := range []uint64{3, 5, 9, 12, 20} {
		ts = append(ts, rangedel.Tombstone{Start: []byte("a"), End: []byte("z"), Seq: s})
	}
	l := rangedel.Build(ts)
	tests := []struct {
		snapshots []uint64
		drop      bool
		want      []uint64
	}{
		{nil, false, []uint64{20}},
		{nil, true, nil},
		{[]uint64{10}, false, []uint64{20, 9}}, // stripes (≤10) and (>10)
		{[]uint64{10}, true, []uint64{20}},     // the oldest stripe's goes
		{[]uint64{4, 10}, false, []uint64{20, 9, 3}},
		{[]uint64{10, 4, 10}, true, []uint64{20, 9}}, // unsorted, repeated
		{[]uint64{20}, false, []uint64{20}},          // a snapshot at a tombstone sees it
	}
	for _, tc := range tests {
		got := KeepRangeDels(l, tc.snapshots, tc.drop)
		var seqs []uint64
		for _, f := range got.Fragments() {
			seqs = append(seqs, f.Seqs...)
		}
		if !slices.Equal(seqs, tc.want) {
			t.Errorf("snapshots %v drop %v: kept %v, want %v", tc.snapshots, tc.drop, seqs, tc.want)
		}
	}
}

// BenchmarkDedupNewerThanTombstones runs Dedup over 1,000 versions newer
// than the n tombstones of the one fragment that covers them (a range
// deleted n times, then written again, in one memtable). The cost per
// version must not grow with n: a scan of the fragment's sequence numbers
// for the oldest tombstone newer than each version made a flush O(v·n).
func BenchmarkDedupNewerThanTombstones(b *testing.B) {
	for _, n := range []int{16, 1024, 65536} {
		b.Run(fmt.Sprint("seqs=", n), func(b *testing.B) {
			ts := make([]rangedel.Tombstone, n)
			for i := range ts {
				ts[i] = rangedel.Tombstone{Start: []byte("a"), End: []byte("z"), Seq: uint64(i + 1)}
			}
			l := rangedel.Build(ts)
			var vs []version
			for i := range 1000 {
				vs = append(vs, version{fmt.Sprintf("k%04d", i), uint64(n + 1 + i), base.KindPut})
			}
			for b.Loop() {
				d := NewDedup(&versions{vs: vs}, nil, false)
				d.SetRangeDels(l)
				kept := 0
				for ok := d.First(); ok; ok = d.Next() {
					kept++
				}
				if kept != len(vs) {
					b.Fatalf("kept %d of %d versions, none of them covered", kept, len(vs))
				}
			}
		})
	}
}
