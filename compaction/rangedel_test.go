package compaction

import (
	"slices"
	"testing"

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
