package compaction

// This file holds the executor's filter over a merged stream
// (internal/merge does the merging): it keeps the versions some reader can
// still see and drops the rest. The package comment is in doc.go.

import (
	"bytes"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// Dedup passes on the versions a reader can still see. Open snapshots
// split the sequence numbers into stripes: the versions visible to a
// snapshot at sequence s are those with seq <= s, so of the versions of one
// key that fall between two consecutive snapshots only the newest can ever
// be read. Dedup keeps exactly that one per stripe (with no snapshots: the
// newest version of each key), as LevelDB and Pebble do.
//
// With dropTombstones it also drops a deletion in the oldest stripe, with
// the older versions it hides — correct only when the output is the oldest
// data there is (a merge that includes the oldest segment), since otherwise
// the tombstone must keep shadowing older versions elsewhere. A deletion in
// a newer stripe stays: an older snapshot may see a version below it.
//
// Given range tombstones (SetRangeDels), it also drops every version that a
// tombstone newer than it covers within the same stripe: no reader that
// sees the version misses the tombstone.
type Dedup struct {
	src            base.ForwardIterator
	snapshots      []uint64 // sequence numbers of open snapshots, ascending
	dropTombstones bool
	rangeDels      rangedel.Cursor
	prev           []byte
	prevStripe     int
	started        bool
	passedKey      bool // a version of prev was passed on
	rangeCovered   uint64
}

// NewDedup wraps src. snapshots holds the sequence numbers of the open
// snapshots in any order; Dedup keeps its own sorted copy.
func NewDedup(src base.ForwardIterator, snapshots []uint64, dropTombstones bool) *Dedup {
	return &Dedup{src: src, snapshots: sortedSnapshots(snapshots), dropTombstones: dropTombstones}
}

// SetRangeDels gives Dedup the range tombstones that apply to its source
// (those of the memtable or segments it reads, or newer ones); the versions
// they cover within a stripe are dropped.
func (d *Dedup) SetRangeDels(l *rangedel.List) { d.rangeDels = rangedel.NewCursor(l) }

// RangeCovered returns how many of the versions passed on since First
// are puts, the newest of their key, and deleted for a reader of the latest
// state by a range tombstone newer than them (one an open snapshot's
// stripe kept them from dropping). A scan of the latest state steps over
// each, and a merge with no snapshot open drops them: the store records
// the count in the output (segment.Properties.RangeCovered) to know when
// such a merge pays. Older versions need no count of their own (entries
// minus distinct keys), nor point tombstones.
func (d *Dedup) RangeCovered() uint64 { return d.rangeCovered }

// First positions at the first visible entry.
func (d *Dedup) First() bool {
	d.started = false
	d.rangeCovered = 0
	if !d.src.First() {
		return false
	}
	return d.settle()
}

// Next advances to the next version some reader can see.
func (d *Dedup) Next() bool {
	if !d.src.Next() {
		return false
	}
	return d.settle()
}

// stripe returns the index of the oldest snapshot that sees seq, or
// len(snapshots) if only readers of the latest state do.
func (d *Dedup) stripe(seq uint64) int { return stripeOf(d.snapshots, seq) }

// settle skips versions shadowed within their stripe and, if asked,
// deletions that no reader needs.
func (d *Dedup) settle() bool {
	for {
		k, trailer := d.src.InternalKey()
		seq, kind := base.SplitTrailer(trailer)
		stripe := d.stripe(seq)
		if d.started && bytes.Equal(k, d.prev) {
			if stripe == d.prevStripe {
				if !d.src.Next() {
					return false
				}
				continue
			}
		} else {
			d.prev = append(d.prev[:0], k...)
			d.started = true
			d.passedKey = false
		}
		d.prevStripe = stripe
		f := d.rangeDels.At(k)
		if (d.dropTombstones && stripe == 0 && kind == base.KindDelete) ||
			coveredInStripe(f, d.snapshots, seq, stripe) {
			if !d.src.Next() {
				return false
			}
			continue
		}
		if !d.passedKey && kind != base.KindDelete && f != nil && len(f.Seqs) > 0 && f.Seqs[0] > seq {
			// The newest version passed on, and the newest tombstone
			// over it, which the latest state sees, is newer: kept for a
			// snapshot only.
			d.rangeCovered++
		}
		d.passedKey = true
		return true
	}
}

// InternalKey returns the current user key and trailer.
func (d *Dedup) InternalKey() ([]byte, uint64) { return d.src.InternalKey() }

// Value returns the current value.
func (d *Dedup) Value() []byte { return d.src.Value() }

// RawValue passes on the source's RawValue (base.RawValuer); ok is false
// for a source that has none.
func (d *Dedup) RawValue() (rec []byte, n int, ok bool) {
	if rv, is := d.src.(base.RawValuer); is {
		return rv.RawValue()
	}
	return nil, 0, false
}

// Error returns the source's error.
func (d *Dedup) Error() error { return d.src.Error() }

var _ base.ForwardIterator = (*Dedup)(nil)
