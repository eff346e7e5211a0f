package bloomkv

import (
	"fmt"

	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/memtable"
)

// shapeEdit is one change of the store's shape: what the manifest records
// (Edit) and what the live state in memory becomes with it.
type shapeEdit struct {
	manifest.Edit
	// added is the open segment that Edit.Add describes (nil if none). It
	// takes the place of the newest segment removed, so the live list
	// stays newest first; with nothing removed (a flush, recovery) it
	// goes to the front.
	added *segHandle
	// removed are the live segments Edit.Remove names: a merge's inputs,
	// or segments newer range tombstones delete entirely. They leave the
	// live list, marked obsolete: each file goes with its last reader.
	removed []*segHandle
	// flushed is the frozen memtable a flush's segment replaces; it leaves
	// db.imm in the same step, so no reader sees the writes twice or not
	// at all.
	flushed *frozen
	// mem is the memtable recovery starts with (empty after Open, the
	// replayed one read-only), installed with the recovered segments.
	mem *memtable.Memtable
}

// logAndApply is the one place where the store's shape changes, as
// golang/leveldb's versionSet.logAndApply: every flush, merge, delete-only
// compaction and recovery builds a shapeEdit and hands it here. It commits
// the edit to the manifest — the durable record, and I/O, so db.mu must
// not be held — and then, under db.mu, installs it (installLocked).
//
// If the commit fails, whether it reached the disk is unknown: the added
// segment's file stays (the next Open removes it if the commit did not
// land), its handle is released, and nothing changes in memory.
func (db *DB) logAndApply(e shapeEdit) error {
	own, newer := db.coverageFor(&e)
	if err := db.manifest.Apply(e.Edit); err != nil {
		if e.added != nil {
			e.added.unref()
		}
		return fmt.Errorf("manifest: %w", err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if e.added != nil {
		db.installCoverageLocked(e.added, own, newer)
	}
	db.installLocked(e)
	return nil
}

// installLocked puts a committed (or, at recovery, recovered) edit into
// the live state: the segment list, the frozen memtables, then what
// follows any change of them (segmentsChangedLocked: the filter budget,
// the stall threshold, and the new read state, published last so that
// readers see the change whole). db.mu must be held.
func (db *DB) installLocked(e shapeEdit) {
	gone := make(map[*segHandle]bool, len(e.removed))
	for _, s := range e.removed {
		gone[s] = true
	}
	live := make([]*segHandle, 0, len(db.segments)+1)
	placed := e.added == nil
	if !placed && len(e.removed) == 0 {
		live, placed = append(live, e.added), true
	}
	for _, s := range db.segments {
		switch {
		case !gone[s]:
			live = append(live, s)
		case !placed:
			live, placed = append(live, e.added), true
		}
	}
	db.segments = live
	if e.flushed != nil {
		if len(db.imm) == 0 || db.imm[0] != e.flushed {
			panic("bloomkv: a flush installed out of order")
		}
		// Cleared first: the array outlives the reslice, and its first
		// slot would keep the flushed memtable, every byte of it, alive
		// until a rotation outgrew the array.
		db.imm[0] = nil
		db.imm = db.imm[1:]
	}
	if e.mem != nil {
		db.mem = e.mem
	}
	for _, s := range e.removed {
		s.obsolete.Store(true)
	}
	db.pruneCoverageLocked()
	db.segmentsChangedLocked()
	for _, s := range e.removed {
		s.unref() // the DB's reference
	}
}
