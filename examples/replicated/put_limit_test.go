package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv"
	"github.com/bloomkv/bloomkv/contrib/raftstore"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// testRaft starts a single-node cluster in dir, in this process (raft on
// the in-memory transport, fsynced raftstore, the state machine), and
// waits until it leads. The raft store is closed when the test ends; raft
// is the caller's to shut down.
func testRaft(t *testing.T, dir string) (*raft.Raft, *fsm, *raft.FileSnapshotStore) {
	t.Helper()
	sm := testFSM(t, filepath.Join(dir, "fsm"), 1000)
	store, err := raftstore.New(raftstore.Options{Path: filepath.Join(dir, "raft")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
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
			r.Shutdown().Error()
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r, sm, snaps
}

// testNode is testRaft's node, with its HTTP routes and read barrier.
func testNode(t *testing.T) *node {
	t.Helper()
	r, sm, _ := testRaft(t, t.TempDir())
	t.Cleanup(func() { r.Shutdown().Error() })
	return &node{id: "node1", httpAddr: "127.0.0.1:0", raft: r, fsm: sm, logger: slog.New(slog.DiscardHandler),
		reads: &readBarrier{raft: r, timeout: applyTimeout}}
}

// TestPutTooLargeForTheLog: a value bloomkv would hold but whose command
// does not fit in one raft log entry of the raftstore is refused with 413
// before it reaches raft. Handed to raft, the leader's own append fails,
// which makes it step down and answer 504: a client retrying as told would
// depose leader after leader.
func TestPutTooLargeForTheLog(t *testing.T) {
	n := testNode(t)
	h := n.routes()
	do := func(method, path string, body []byte) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, bytes.NewReader(body)))
		return w
	}
	if w := do(http.MethodPut, "/keys/big", make([]byte, bloomkv.MaxValueSize)); w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("PUT of %d bytes: %d %s, want 413", bloomkv.MaxValueSize, w.Code, w.Body)
	}
	if st := n.raft.State(); st != raft.Leader {
		t.Fatalf("after the refused PUT the node is %s", st)
	}
	// The largest value that fits is stored and read back.
	v := bytes.Repeat([]byte{'x'}, raftstore.MaxLogData-len(encodeCommand(opPut, nil, []byte("big"), nil)))
	if w := do(http.MethodPut, "/keys/big", v); w.Code != http.StatusNoContent {
		t.Fatalf("PUT of %d bytes: %d %s, want 204", len(v), w.Code, w.Body)
	}
	if w := do(http.MethodGet, "/keys/big", nil); w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), v) {
		t.Fatalf("GET: %d, %d bytes", w.Code, w.Body.Len())
	}
}

// TestStaleParameter: ?stale and ?stale=true read this node's state with
// no round trip; ?stale=false is a linearizable read (it commits a read
// barrier, one raft log entry), not a stale one; any other value is
// refused with 400 rather than guessed.
func TestStaleParameter(t *testing.T) {
	n := testNode(t)
	h := n.routes()
	for _, tc := range []struct {
		query   string
		code    int
		barrier bool
	}{
		{"", http.StatusNotFound, true},
		{"?stale", http.StatusNotFound, false},
		{"?stale=true", http.StatusNotFound, false},
		{"?stale=1", http.StatusNotFound, false},
		{"?stale=false", http.StatusNotFound, true},
		{"?stale=0", http.StatusNotFound, true},
		{"?stale=maybe", http.StatusBadRequest, false},
	} {
		before := n.raft.LastIndex()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/keys/absent"+tc.query, nil))
		if w.Code != tc.code {
			t.Errorf("GET %s: %d %s, want %d", tc.query, w.Code, w.Body, tc.code)
		}
		if barrier := n.raft.LastIndex() > before; barrier != tc.barrier {
			t.Errorf("GET %s: read barrier %v, want %v", tc.query, barrier, tc.barrier)
		}
	}
}
