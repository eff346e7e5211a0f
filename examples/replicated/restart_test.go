package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/contrib/raftstore"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestRestartAfterBarrierSnapshot: raft counts barrier entries (one per
// round of linearizable reads) in a snapshot's index, but the state machine
// never sees them, so after a stretch of reads the latest snapshot's index
// is above the index the DB records although the DB holds exactly the
// snapshot's state. A node restarted then must start, with its state and
// without going back in time.
func TestRestartAfterBarrierSnapshot(t *testing.T) {
	dir := t.TempDir()
	sm := testFSM(t, filepath.Join(dir, "fsm"), 1000)
	store, err := raftstore.New(raftstore.Options{Path: filepath.Join(dir, "raft")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	conf := raft.DefaultConfig()
	conf.LocalID = "node1"
	conf.NoSnapshotRestoreOnStart = true
	conf.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	_, trans := raft.NewInmemTransport("node1")
	cfg := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: trans.LocalAddr()}}}
	if err := raft.BootstrapCluster(conf, store, store, snaps, trans, cfg); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(conf, sm, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
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
