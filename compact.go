package bloomkv

import (
	"fmt"
	"time"

	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/manifest"
)

// Compact flushes the memtable and merges every segment into one, dropping
// deleted keys and overwritten versions. Reads and writes go on meanwhile;
// the input files are removed once the last reader using them is done.
func (db *DB) Compact() error {
	if err := db.Flush(); err != nil {
		return err
	}
	db.compactMu.Lock()
	defer db.compactMu.Unlock()

	db.mu.Lock()
	if err := db.writableLocked(); err != nil {
		db.mu.Unlock()
		return err
	}
	inputs := append([]*segHandle(nil), db.segments...)
	for _, s := range inputs {
		s.refs.Add(1) // keep them open while merging
	}
	db.mu.Unlock()
	defer func() {
		for _, s := range inputs {
			s.unref()
		}
	}()
	if len(inputs) <= 1 && (len(inputs) == 0 || inputs[0].meta.Tombstones == 0) {
		return nil // nothing to merge, nothing to drop
	}
	return db.compactSegments(inputs)
}

// compactSegments merges inputs (which include the oldest segment, so
// tombstones can go) into one segment and swaps it in.
func (db *DB) compactSegments(inputs []*segHandle) error {
	start := time.Now()
	srcs := make([]compaction.Iterator, len(inputs))
	for i, s := range inputs {
		it := s.reader.NewIter(false)
		defer it.Close()
		srcs[i] = it
	}
	out, err := db.writeSegment(compaction.NewDedup(compaction.NewMerge(srcs...), true))
	if err != nil {
		db.fail(fmt.Errorf("compaction: %w", err))
		return err
	}
	edit := manifest.Edit{}
	if out != nil {
		edit.Add = []manifest.SegmentMeta{out.meta}
	}
	for _, s := range inputs {
		edit.Remove = append(edit.Remove, s.meta.FileNum)
	}
	if err := db.manifest.Apply(edit); err != nil {
		if out != nil {
			out.obsolete.Store(true)
			out.unref()
		}
		db.fail(fmt.Errorf("compaction manifest commit: %w", err))
		return err
	}
	db.installCompaction(inputs, out)
	db.stats.compactions.Add(1)
	db.logger.Info("compacted", "inputs", len(inputs), "output", segName(out), "took", time.Since(start))
	return nil
}

// installCompaction replaces inputs by out in the live set. Segments
// flushed while the merge ran are newer than all inputs and stay in front.
func (db *DB) installCompaction(inputs []*segHandle, out *segHandle) {
	gone := make(map[*segHandle]bool, len(inputs))
	for _, s := range inputs {
		gone[s] = true
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	var live []*segHandle
	for _, s := range db.segments {
		if !gone[s] {
			live = append(live, s)
		}
	}
	if out != nil {
		live = append(live, out)
	}
	db.segments = live
	db.publishLocked()
	for _, s := range inputs {
		s.obsolete.Store(true)
		s.unref() // the DB's reference
	}
	db.cond.Broadcast()
}
