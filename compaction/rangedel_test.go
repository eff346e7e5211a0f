package compaction

import (
	"fmt"
	"math/rand/v2"
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

// TestDedupWithRangeDelsKeepsWhatReadersSee: for random versions, range
// tombstones and snapshots, every snapshot and the latest reader see the
// same through Dedup's versions and KeepRangeDels' tombstones as through
// the input — with dropOldestStripe too, as the input is then all there
// is. (Dedup's own model test has no range tombstones.)
func TestDedupWithRangeDelsKeepsWhatReadersSee(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	// sees reports whether a reader at seq sees a value of key.
	sees := func(vs []version, l *rangedel.List, key string, at uint64) bool {
		for _, v := range vs { // newest first within a key
			if v.key == key && v.seq <= at {
				return v.kind == base.KindPut && l.Covering([]byte(key), at) < v.seq
			}
		}
		return false
	}
	for trial := range 2000 {
		var vs []version
		var ts []rangedel.Tombstone
		n := 1 + rng.IntN(60)
		for seq := 1; seq <= n; seq++ {
			if rng.IntN(4) == 0 {
				a, b := rng.IntN(8), rng.IntN(9)
				ts = append(ts, rangedel.Tombstone{Start: fmt.Appendf(nil, "k%d", a), End: fmt.Appendf(nil, "k%d", b), Seq: uint64(seq)})
				continue
			}
			vs = append(vs, version{fmt.Sprintf("k%d", rng.IntN(8)), uint64(seq), base.Kind(rng.IntN(2))})
		}
		sortVersions(vs)
		snaps, drop := randomSnapshots(rng, n)
		l := rangedel.Build(ts)
		d := NewDedup(&versions{vs: vs}, snaps, drop)
		d.SetRangeDels(l)
		var out []version
		for ok := d.First(); ok; ok = d.Next() {
			k, trailer := d.InternalKey()
			seq, kind := base.SplitTrailer(trailer)
			out = append(out, version{string(k), seq, kind})
		}
		kept := KeepRangeDels(l, snaps, drop)
		for k := range 8 {
			key := fmt.Sprintf("k%d", k)
			for _, at := range append(slices.Clone(snaps), uint64(n)) {
				if sees(vs, l, key, at) != sees(out, kept, key, at) {
					t.Fatalf("trial %d: reader at %d sees %s differently (snaps %v, drop %v)\nin  %v %v\nout %v %v",
						trial, at, key, snaps, drop, vs, l.Tombstones(), out, kept.Tombstones())
				}
			}
		}
	}
}
