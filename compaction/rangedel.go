package compaction

import (
	"slices"

	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// KeepRangeDels returns the range tombstones of l that some reader still
// needs, by the rule Dedup applies to point versions: within a fragment,
// of the tombstones that fall between two consecutive snapshots only the
// newest can matter, so one per snapshot stripe is kept. With
// dropOldestStripe (a merge whose output is the oldest data there is) the
// oldest stripe's tombstone goes too: every version it covers is in this
// merge, older than it and in its stripe, so Dedup drops them all, and
// nothing older is left anywhere for it to hide.
func KeepRangeDels(l *rangedel.List, snapshots []uint64, dropOldestStripe bool) *rangedel.List {
	if l.Empty() {
		return nil
	}
	snaps := sortedSnapshots(snapshots)
	return l.Filter(func(seqs []uint64) []uint64 {
		out := seqs[:0]
		prevStripe := -1
		for _, s := range seqs { // newest first
			st := stripeOf(snaps, s)
			if st == prevStripe || (dropOldestStripe && st == 0) {
				continue
			}
			out = append(out, s)
			prevStripe = st
		}
		return out
	})
}

// sortedSnapshots returns the distinct snapshot sequence numbers,
// ascending.
func sortedSnapshots(snapshots []uint64) []uint64 {
	snaps := slices.Clone(snapshots)
	slices.Sort(snaps)
	return slices.Compact(snaps)
}

// stripeOf returns the index of the oldest snapshot that sees seq, or
// len(snaps) if only readers of the latest state do.
func stripeOf(snaps []uint64, seq uint64) int {
	i, _ := slices.BinarySearch(snaps, seq)
	return i
}

// coveredInStripe reports whether f holds a tombstone newer than seq in
// the same snapshot stripe: then the version at seq is deleted for every
// reader that could see it, and need not be kept.
func coveredInStripe(f *rangedel.Fragment, snaps []uint64, seq uint64, stripe int) bool {
	if f == nil {
		return false
	}
	// Seqs are descending: the oldest tombstone newer than seq is the
	// last one above it, and the only one that can share seq's stripe. It
	// is found by a binary search: a memtable's fragment holds every
	// tombstone that covers it (a range deleted n times over is n), and
	// a scan from the oldest made a flush of v versions newer than them
	// O(v·n).
	s := f.Seqs
	lo, hi := 0, len(s) // lo ends at the first tombstone older than seq
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s[mid] >= seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo > 0 && stripeOf(snaps, s[lo-1]) == stripe
}
