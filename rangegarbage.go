package bloomkv

import (
	"slices"

	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// The puts a range tombstone covers in segments older than its own stay
// on disk until one merge takes the tombstone and them together. The
// size-tiered policy merges segments of like size, so a DeleteRange of
// most of a store that then stops growing kept its old data forever: 90%
// of 3·10^5 keys deleted, the disk still held all 38 MB. Each segment
// therefore carries an estimate of what its range tombstones cover in the
// live segments older than it (coversOlder), which the garbage merge counts
// (garbageMergeLocked) beside the garbage a segment holds itself, once it
// is a memtable's worth of bytes; the merge it starts, from the newest
// segment with garbage down to the oldest, takes the tombstones and what
// they cover together.
//
// The estimate is per older segment, so that it follows the live set: a
// segment that leaves it (merged, or dropped whole by a delete-only
// compaction) takes its share with it (pruneCoverageLocked), and a merge's
// output, installed older than a tombstone's segment, gets its share from
// that segment anew (coverageFor). A raft log truncated by DeleteRange
// drops whole old segments without a merge; only what partly covered
// segments keep counts.

// coverage is an estimate of how many entries of the segment older hold
// keys that range tombstones of a newer segment cover.
type coverage struct {
	older *segHandle
	n     uint64
}

// coveredBy is coverage seen from the older segment: the newer segment
// whose range tombstones cover about n of its entries.
type coveredBy struct {
	newer *segHandle
	n     uint64
}

// coverageWork bounds the index searches of one pass of estimates (an
// install, or Open). The estimates feed a heuristic, and unbounded they
// grew with the pairs of segments times the fragments of each: a store of
// hundreds of segments, each with 10^4 range deletions over all the
// others, gets partial ones (its merges come later) rather than an Open
// or a flush that takes seconds. An Open of 80 segments, 40 of them with
// 3·10^4 range deletions over the other 40, took 0.30-0.52 s with the
// estimates and 0.41 s without (noise larger than their cost). A variable
// so that tests can lower it.
var coverageWork = 1 << 18

// coveredEntries estimates how many entries of s the range tombstones rd
// cover (segment.Reader.EntriesCovered: those newer than s's oldest
// entry), charging its index searches to *work.
func coveredEntries(rd *rangedel.List, s *segHandle, work *int) uint64 {
	return min(s.reader.EntriesCovered(rd, s.meta.MinSeq, work), s.meta.Entries)
}

// coverageOf returns the estimates of what rd covers in each of older
// that it covers at all.
func coverageOf(rd *rangedel.List, older []*segHandle, work *int) []coverage {
	var out []coverage
	for _, s := range older {
		if n := coveredEntries(rd, s, work); n > 0 {
			out = append(out, coverage{s, n})
		}
	}
	return out
}

// coverageFor estimates, outside db.mu, what the range tombstones of the
// segment e adds cover of the live segments older than it (own: its
// coversOlder), and what those of the live segments newer than it cover of it
// (newer: the segment whose tombstones cover, and how much). The segments
// read are referenced meanwhile. A segment the live set loses before e is
// installed is pruned then.
func (db *DB) coverageFor(e *shapeEdit) (own []coverage, newer []coveredBy) {
	x := e.added
	if x == nil {
		return nil, nil
	}
	gone := make(map[*segHandle]bool, len(e.removed))
	for _, s := range e.removed {
		gone[s] = true
	}
	db.mu.Lock()
	// x takes the place of the newest segment e removes (the front if
	// none): the segments before that are newer, those after the last
	// removed one older.
	first, last := len(db.segments), -1
	for i, s := range db.segments {
		if gone[s] {
			first, last = min(first, i), i
		}
	}
	if last < 0 {
		first, last = 0, -1
	}
	var above, below []*segHandle
	for _, s := range db.segments[:first] {
		if !s.reader.RangeDels().Empty() {
			above = append(above, s)
		}
	}
	if !x.reader.RangeDels().Empty() {
		below = db.segments[last+1:]
	}
	refs := append(append([]*segHandle(nil), above...), below...)
	for _, s := range refs {
		s.refs.Add(1)
	}
	db.mu.Unlock()
	defer unrefAll(refs)

	work := coverageWork
	own = coverageOf(x.reader.RangeDels(), below, &work)
	for _, s := range above {
		if n := coveredEntries(s.reader.RangeDels(), x, &work); n > 0 {
			newer = append(newer, coveredBy{s, n})
		}
	}
	return own, newer
}

// installCoverageLocked records what coverageFor found for the segment
// an edit added: its own estimates, and the newer segments' estimates of
// it (a newer segment the live set lost meanwhile gets nothing).
func (db *DB) installCoverageLocked(x *segHandle, own []coverage, newer []coveredBy) {
	x.coversOlder = own
	for _, c := range newer {
		if !c.newer.obsolete.Load() {
			c.newer.coversOlder = append(c.newer.coversOlder, coverage{x, c.n})
		}
	}
}

// pruneCoverageLocked drops the estimates of segments no longer live, so
// that they stop counting and their handles are not kept reachable.
func (db *DB) pruneCoverageLocked() {
	for _, s := range db.segments {
		s.coversOlder = slices.DeleteFunc(s.coversOlder, func(c coverage) bool { return c.older.obsolete.Load() })
	}
}

// coveredGarbage is the estimate of what s's range tombstones cover in
// the live segments older than it. db.mu must be held.
func (s *segHandle) coveredGarbage() uint64 {
	var n uint64
	for _, c := range s.coversOlder {
		n += c.n
	}
	return n
}

// coveredBytesLocked estimates the bytes the live segments' range
// tombstones cover in older live segments: each estimate of entries at its
// segment's mean bytes per entry. db.mu must be held.
func (db *DB) coveredBytesLocked() uint64 {
	var b uint64
	for _, s := range db.segments {
		for _, c := range s.coversOlder {
			b += c.n * (uint64(max(c.older.meta.Size, 0)) / max(c.older.meta.Entries, 1))
		}
	}
	return b
}

// loadCoverage computes every segment's estimates at Open, when the live
// segments are loaded and nothing else runs.
func (db *DB) loadCoverage() {
	work := coverageWork
	for i, s := range db.segments {
		if rd := s.reader.RangeDels(); !rd.Empty() {
			s.coversOlder = coverageOf(rd, db.segments[i+1:], &work)
		}
	}
}
