package main

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/bloomkv/bloomkv"
	"github.com/hashicorp/raft"
)

// sink is a raft.SnapshotSink over a buffer.
type sink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Close() error  { s.closed = true; return nil }
func (s *sink) Cancel() error { s.cancelled = true; return nil }

func openFSM(t *testing.T) *fsm {
	db, err := bloomkv.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &fsm{db: db}
}

func dump(t *testing.T, db *bloomkv.DB) map[string]string {
	it, err := db.NewIterator(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	m := map[string]string{}
	for k, v := range it.All() {
		m[string(k)] = string(v)
	}
	return m
}

// TestSnapshotRestore: a snapshot taken, then writes applied, persists the
// state as of the snapshot; Restore into a DB with other keys gives
// exactly that state; a truncated stream fails.
func TestSnapshotRestore(t *testing.T) {
	src := openFSM(t)
	for i := range 25_000 { // more than one clear batch
		src.Apply(&raft.Log{Data: encodeCommand(opPut, fmt.Appendf(nil, "k%05d", i), fmt.Appendf(nil, "v%d", i))})
	}
	src.Apply(&raft.Log{Data: encodeCommand(opPut, []byte("empty"), nil)})
	src.Apply(&raft.Log{Data: encodeCommand(opDelete, []byte("k00007"), nil)})
	want := dump(t, src.db)
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	src.Apply(&raft.Log{Data: encodeCommand(opPut, []byte("after"), []byte("x"))})
	var s sink
	if err := snap.Persist(&s); err != nil || !s.closed {
		t.Fatalf("Persist: %v, closed %v", err, s.closed)
	}
	snap.Release()

	dst := openFSM(t)
	for i := range 30_000 {
		dst.db.Put(fmt.Appendf(nil, "old%05d", i), []byte("x"))
	}
	dst.db.Put([]byte("k00001"), []byte("stale"))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(s.Bytes()))); err != nil {
		t.Fatal(err)
	}
	got := dump(t, dst.db)
	if len(got) != len(want) || got["k00001"] != "v1" || got["empty"] != "" {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q", k, got[k], v)
		}
	}
	if err := dst.Restore(io.NopCloser(bytes.NewReader(s.Bytes()[:s.Len()-1]))); err == nil {
		t.Fatal("a stream without its end mark restored")
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []struct {
		op         byte
		key, value string
	}{{opPut, "a", "b"}, {opPut, "key", ""}, {opDelete, "k", ""}} {
		op, k, v, err := decodeCommand(encodeCommand(c.op, []byte(c.key), []byte(c.value)))
		if err != nil || op != c.op || string(k) != c.key || string(v) != c.value {
			t.Fatalf("%+v: %d %q %q %v", c, op, k, v, err)
		}
	}
	for _, bad := range [][]byte{nil, {opPut}, {opPut, 5, 'a'}} {
		if _, _, _, err := decodeCommand(bad); err == nil {
			t.Fatalf("%x decoded", bad)
		}
	}
}
