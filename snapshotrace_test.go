package bloomkv

import (
	"bytes"
	"errors"
	"testing"
)

// TestSnapshotReadRacingClose closes a snapshot, and compacts away the
// version only it could see, between a read's check that the snapshot is
// open and the read itself: the read must return that version or
// ErrSnapshotReleased, never what the store holds after the compaction.
func TestSnapshotReadRacingClose(t *testing.T) {
	for _, read := range []string{"Get", "NewIterator"} {
		t.Run(read, func(t *testing.T) {
			o := smallOptions()
			o.DisableAutoCompaction = true
			db := mustOpen(t, t.TempDir(), o)
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
		})
	}
}
