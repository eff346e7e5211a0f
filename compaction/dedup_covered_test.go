package compaction

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// TestDedupCountsRangeCovered: for random versions, range tombstones and
// snapshots, RangeCovered is the number of keys whose newest version
// Dedup passes on is a put that some tombstone newer than it covers,
// found by brute force over the tombstones; with no snapshot it is 0
// (the tombstones drop such versions).
func TestDedupCountsRangeCovered(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var total uint64
	for trial := range 2000 {
		var vs []version
		var ts []rangedel.Tombstone
		n := rng.IntN(60)
		for seq := 1; seq <= n; seq++ {
			if rng.IntN(8) == 0 {
				a, b := rng.IntN(8), rng.IntN(8)
				a, b = min(a, b), max(a, b)+1
				ts = append(ts, rangedel.Tombstone{Start: fmt.Appendf(nil, "k%d", a), End: fmt.Appendf(nil, "k%d", b), Seq: uint64(seq)})
				continue
			}
			vs = append(vs, version{fmt.Sprintf("k%d", rng.IntN(8)), uint64(seq), base.Kind(rng.IntN(2))})
		}
		sortVersions(vs)
		snaps, drop := randomSnapshots(rng, n)
		if trial%4 == 0 {
			snaps = nil
		}
		d := NewDedup(&versions{vs: vs}, snaps, drop)
		d.SetRangeDels(rangedel.Build(ts))
		var want uint64
		prev := ""
		for ok := d.First(); ok; ok = d.Next() {
			k, trailer := d.InternalKey()
			seq, kind := base.SplitTrailer(trailer)
			if string(k) == prev {
				continue
			}
			prev = string(k)
			if kind != base.KindPut {
				continue
			}
			for _, t := range ts {
				if string(t.Start) <= string(k) && string(k) < string(t.End) && t.Seq > seq {
					want++
					break
				}
			}
		}
		if got := d.RangeCovered(); got != want {
			t.Fatalf("trial %d: RangeCovered %d, want %d (snaps %v, tombstones %v, versions %v)", trial, got, want, snaps, ts, vs)
		}
		if len(snaps) == 0 && want != 0 {
			t.Fatalf("trial %d: %d covered versions kept with no snapshot open", trial, want)
		}
		total += want
		// A second pass counts afresh.
		for ok := d.First(); ok; ok = d.Next() {
		}
		if got := d.RangeCovered(); got != want {
			t.Fatalf("trial %d: second pass counts %d, want %d", trial, got, want)
		}
	}
	if total == 0 {
		t.Fatal("no trial kept a covered version: the test tests nothing")
	}
	t.Logf("%d covered versions kept over the trials", total)
}
