package bloomkv

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestSnapshotReadRacingClose closes a snapshot, and compacts away the
// version only it could see, between a read's check that the snapshot is
// open and the read itself: the read must return that version or
// ErrSnapshotReleased, never what the store holds after the compaction.
// A read refused that way lets go of the read state it pinned before it
// found the snapshot closed: a state left pinned is never freed, so the
// segments it holds stay open, and on disk, for the life of the DB, and
// the next compaction's inputs are never removed.
func TestSnapshotReadRacingClose(t *testing.T) {
	for _, read := range []string{"Get", "NewIterator"} {
		t.Run(read, func(t *testing.T) {
			o := smallOptions()
			o.DisableAutoCompaction = true
			dir := t.TempDir()
			db := mustOpen(t, dir, o)
			defer db.Close()
			k := []byte("k")
			mustDo(t, db.Put(k, []byte("old")))
			snap, err := db.NewSnapshot()
			mustDo(t, err)
			mustDo(t, db.Put(k, []byte("new")))
			testHookSnapshotChecked = func() {
				testHookSnapshotChecked = nil
				mustDo(t, snap.Close())
				mustDo(t, db.Compact()) // drops "old": no snapshot needs it now
			}
			defer func() { testHookSnapshotChecked = nil }()
			var v []byte
			if read == "Get" {
				v, err = snap.Get(k)
			} else {
				var it *Iterator
				if it, err = snap.NewIterator(nil); err == nil {
					if it.First() && bytes.Equal(it.Key(), k) {
						v = bytes.Clone(it.Value())
					}
					err = errors.Join(it.Error(), it.Close())
				}
			}
			if !errors.Is(err, ErrSnapshotReleased) && (err != nil || string(v) != "old") {
				t.Fatalf("snapshot %s racing its Close and a compaction = %q, %v; want \"old\" or ErrSnapshotReleased", read, v, err)
			}
			// The segment the read's state held is replaced; Compact
			// returns once the files no reader holds are removed.
			mustDo(t, db.Put(k, []byte("newer")))
			mustDo(t, db.Compact())
			if segs, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt)); len(segs) != 1 {
				t.Fatalf("%d segment files after the read and a compaction into one, want 1: the read kept its state pinned: %v", len(segs), segs)
			}
		})
	}
}
