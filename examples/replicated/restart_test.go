package main

import (
	"log/slog"
	"testing"
	"time"
)

// TestRestartAfterBarrierSnapshot: raft counts barrier entries (one per
// round of linearizable reads) in a snapshot's index, but the state machine
// never sees them, so after a stretch of reads the latest snapshot's index
// is above the index the DB records although the DB holds exactly the
// snapshot's state. A node restarted then must start, with its state and
// without going back in time.
func TestRestartAfterBarrierSnapshot(t *testing.T) {
	dir := t.TempDir()
	r, sm, snaps := testRaft(t, dir)
	for _, k := range []string{"a", "b", "c"} {
		if err := r.Apply(encodeCommand(opPut, nil, []byte(k), []byte("v"+k)), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // reads only: barrier entries
		if err := r.Barrier(5 * time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("snapshots: %v, %v", list, err)
	}
	applied := sm.applied.Load()
	if list[0].Index <= applied {
		t.Fatalf("snapshot at %d, DB at %d: the barriers are not in the snapshot's index", list[0].Index, applied)
	}

	// The restart: what run does before raft starts.
	if err := catchUpFromSnapshot(sm, snaps, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("restart with the DB at %d and the snapshot at %d: %v", applied, list[0].Index, err)
	}
	if got := sm.applied.Load(); got != applied {
		t.Fatalf("restart moved the DB from index %d to %d", applied, got)
	}
	if got := dump(t, sm); len(got) != 3 || got["c"] != "vc" {
		t.Fatalf("after the restart: %v", got)
	}
}
