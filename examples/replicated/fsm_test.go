package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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

func testFSM(t *testing.T, dir string, window uint64) *fsm {
	t.Helper()
	f, err := openFSM(dir, window, func(err error) { t.Errorf("fatal: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// dump returns the clients' keys (not the service's own records).
func dump(t *testing.T, f *fsm) map[string]string {
	m := map[string]string{}
	err := f.read(func(db *bloomkv.DB) error {
		it, err := db.NewIterator(&bloomkv.IterOptions{LowerBound: []byte{metaPrefix[0] + 1}})
		if err != nil {
			return err
		}
		defer it.Close()
		for k, v := range it.All() {
			m[string(k)] = string(v)
		}
		return it.Error()
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// snapshotStream returns the stream a snapshot of f persists.
func snapshotStream(t *testing.T, f *fsm) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	return s.Bytes()
}

// applyAt applies a command as log entry idx.
func applyAt(f *fsm, idx uint64, op byte, id, key, value string) any {
	var idb []byte
	if id != "" {
		idb = []byte(id)
	}
	return f.Apply(&raft.Log{Index: idx, Data: encodeCommand(op, idb, []byte(key), []byte(value))})
}

// TestSnapshotRestore: a snapshot taken, then writes applied, persists the
// state as of the snapshot; Restore into a state machine with other keys
// gives exactly that state and its applied index, in a new generation
// directory (the old one removed); a truncated or corrupted stream fails
// and leaves the state as it was.
func TestSnapshotRestore(t *testing.T) {
	src := testFSM(t, t.TempDir(), 1000)
	idx := uint64(0)
	for i := range 25_000 {
		idx++
		applyAt(src, idx, opPut, "", fmt.Sprintf("k%05d", i), fmt.Sprintf("v%d", i))
	}
	idx++
	applyAt(src, idx, opPut, "", "empty", "")
	idx++
	applyAt(src, idx, opDelete, "", "k00007", "")
	want := dump(t, src)
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	applyAt(src, idx+1, opPut, "", "after", "x")
	var s sink
	if err := snap.Persist(&s); err != nil || !s.closed {
		t.Fatalf("Persist: %v, closed %v", err, s.closed)
	}
	snap.Release()
	if _, err := os.Stat(snap.(*fsmSnapshot).dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Release left the checkpoint: %v", err)
	}

	dir := t.TempDir()
	dst := testFSM(t, dir, 1000)
	for i := range 3000 {
		applyAt(dst, uint64(i+1), opPut, "", fmt.Sprintf("old%05d", i), "x")
	}
	applyAt(dst, 3001, opPut, "", "k00001", "stale")
	before := dump(t, dst)
	bad := bytes.Clone(s.Bytes())
	bad[len(bad)-10] ^= 1 // in the last file's content: its CRC-32C must catch it
	for name, stream := range map[string][]byte{"truncated": s.Bytes()[:s.Len()-1], "corrupted": bad} {
		err := dst.Restore(io.NopCloser(bytes.NewReader(stream)))
		if err == nil {
			t.Fatalf("a %s stream restored", name)
		}
		if name == "corrupted" && !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("a corrupted stream: %v, want a checksum mismatch", err)
		}
		if got := dump(t, dst); len(got) != len(before) || got["k00001"] != "stale" || dst.applied.Load() != 3001 {
			t.Fatalf("a failed restore (%s) changed the state: %d keys, applied %d", name, len(got), dst.applied.Load())
		}
	}
	if err := dst.Restore(io.NopCloser(bytes.NewReader(s.Bytes()))); err != nil {
		t.Fatal(err)
	}
	got := dump(t, dst)
	if len(got) != len(want) || got["k00001"] != "v1" || got["empty"] != "" || dst.applied.Load() != idx {
		t.Fatalf("restored %d keys at index %d, want %d at %d", len(got), dst.applied.Load(), len(want), idx)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q", k, got[k], v)
		}
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "CURRENT g000002" {
		t.Fatalf("state directory holds %v, want CURRENT and g000002", names)
	}
	// Reopened, the state machine is the restored one.
	dst.Close()
	re := testFSM(t, dir, 1000)
	if got := dump(t, re); len(got) != len(want) || re.applied.Load() != idx {
		t.Fatalf("reopened: %d keys at %d", len(got), re.applied.Load())
	}
}

// TestApplyResumes: the DB records the applied index with each entry, so
// a reopened state machine skips entries it holds (raft replays the log
// after its last snapshot) instead of applying them again over newer
// state.
func TestApplyResumes(t *testing.T) {
	dir := t.TempDir()
	f := testFSM(t, dir, 1000)
	applyAt(f, 1, opPut, "", "a", "1")
	applyAt(f, 2, opPut, "", "a", "2")
	applyAt(f, 3, opDelete, "", "b", "")
	f.Close()
	f = testFSM(t, dir, 1000)
	if f.applied.Load() != 3 {
		t.Fatalf("reopened at %d, want 3", f.applied.Load())
	}
	applyAt(f, 2, opPut, "", "a", "1") // replayed: skipped
	applyAt(f, 3, opPut, "", "b", "x")
	if got := dump(t, f); len(got) != 1 || got["a"] != "2" {
		t.Fatalf("after a replay: %v, want a=2", got)
	}
	applyAt(f, 4, opPut, "", "c", "y")
	if got := dump(t, f); got["c"] != "y" || f.applied.Load() != 4 {
		t.Fatalf("entry 4 not applied: %v at %d", got, f.applied.Load())
	}
}

// TestDedup: a write whose Idempotency-Key was applied within the window is
// not applied again and reports the first index; beyond the window the key
// is forgotten (pruned), and the table stays bounded.
func TestDedup(t *testing.T) {
	f := testFSM(t, t.TempDir(), 10)
	if r := applyAt(f, 1, opPutID, "req-1", "k", "first"); r != (applied{index: 1}) {
		t.Fatalf("first: %v", r)
	}
	applyAt(f, 2, opPut, "", "k", "other")
	if r := applyAt(f, 3, opPutID, "req-1", "k", "first"); r != (applied{index: 1, duplicate: true}) {
		t.Fatalf("retry: %v", r)
	}
	if got := dump(t, f)["k"]; got != "other" {
		t.Fatalf("the retry was applied again: k = %q", got)
	}
	if r := applyAt(f, 4, opDeleteID, "req-2", "k", ""); r != (applied{index: 4}) {
		t.Fatalf("delete: %v", r)
	}
	for i := uint64(5); i < 40; i++ {
		applyAt(f, i, opPutID, fmt.Sprintf("fill-%d", i), "f", "v")
	}
	if r := applyAt(f, 40, opPutID, "req-1", "k", "again"); r != (applied{index: 40}) {
		t.Fatalf("req-1 after the window: %v", r)
	}
	n := 0
	f.read(func(db *bloomkv.DB) error {
		it, _ := db.NewIterator(&bloomkv.IterOptions{Prefix: reqPrefix})
		defer it.Close()
		for range it.All() {
			n++
		}
		return nil
	})
	if n > 12 {
		t.Fatalf("%d request IDs remembered with a window of 10", n)
	}
}

// TestOpenCleansUp: a generation directory or checkpoint left by a crash
// in Restore or Snapshot is removed on open; CURRENT decides.
func TestOpenCleansUp(t *testing.T) {
	dir := t.TempDir()
	f := testFSM(t, dir, 10)
	applyAt(f, 1, opPut, "", "a", "1")
	f.Close()
	for _, d := range []string{"g000002", "checkpoint-1"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
		os.WriteFile(filepath.Join(dir, d, "junk"), []byte("x"), 0o644)
	}
	f = testFSM(t, dir, 10)
	if got := dump(t, f); got["a"] != "1" {
		t.Fatalf("state lost: %v", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("left %d entries in the state directory", len(entries))
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []struct {
		op             byte
		id, key, value string
	}{{opPut, "", "a", "b"}, {opPut, "", "key", ""}, {opDelete, "", "k", ""},
		{opPutID, "r1", "k", "v"}, {opDeleteID, "r2", "k", ""}} {
		var id []byte
		if c.id != "" {
			id = []byte(c.id)
		}
		got, err := decodeCommand(encodeCommand(c.op, id, []byte(c.key), []byte(c.value)))
		if err != nil || got.op != c.op || string(got.id) != c.id || string(got.key) != c.key || string(got.value) != c.value {
			t.Fatalf("%+v: %+v %v", c, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {opPut}, {opPut, 5, 'a'}, {opPutID, 1}, {9, 1, 'a'}} {
		if _, err := decodeCommand(bad); err == nil {
			t.Fatalf("%x decoded", bad)
		}
	}
}

// TestRestoreSwapIsAtomic: readers running while Restore replaces the
// state see the old state or the new one, whole: never a missing key.
func TestRestoreSwapIsAtomic(t *testing.T) {
	streams := make([][]byte, 2)
	for i := range streams {
		src := testFSM(t, t.TempDir(), 1000)
		for k := range 2000 {
			applyAt(src, uint64(k+1), opPut, "", fmt.Sprintf("k%04d", k), fmt.Sprintf("v%d-%d", i, k))
		}
		streams[i] = snapshotStream(t, src)
	}
	f := testFSM(t, t.TempDir(), 1000)
	if err := f.Restore(io.NopCloser(bytes.NewReader(streams[0]))); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for r := range 4 {
		go func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				k := fmt.Sprintf("k%04d", (n*7+r*500)%2000)
				if _, err := f.get([]byte(k)); err != nil {
					errs <- fmt.Errorf("%s during a restore: %w", k, err)
					return
				}
			}
		}()
	}
	for i := range 6 {
		if err := f.Restore(io.NopCloser(bytes.NewReader(streams[(i+1)%2]))); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := f.get([]byte("k0001")); string(v) != "v0-1" {
		t.Fatalf("after the last restore k0001 = %q", v)
	}
}

// TestRestoreFailingCurrentKeepsState: a Restore whose switch of CURRENT
// fails leaves the state machine serving the state it had, at its applied
// index, as any failed Restore does; the next Restore builds a generation
// of a name CURRENT never held, and a reopened state machine serves what
// CURRENT names.
func TestRestoreFailingCurrentKeepsState(t *testing.T) {
	src := testFSM(t, t.TempDir(), 1000)
	applyAt(src, 1, opPut, "", "snap", "s")
	stream := snapshotStream(t, src)

	dir := t.TempDir()
	dst := testFSM(t, dir, 1000)
	applyAt(dst, 1, opPut, "", "old", "o")
	applyAt(dst, 2, opPut, "", "old2", "o")
	// A directory where CURRENT.tmp is written: writing CURRENT fails.
	block := filepath.Join(dir, "CURRENT.tmp")
	if err := os.MkdirAll(filepath.Join(block, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(io.NopCloser(bytes.NewReader(stream))); err == nil {
		t.Fatal("Restore succeeded with CURRENT unwritable")
	}
	if got := dump(t, dst); len(got) != 2 || got["old"] != "o" || dst.applied.Load() != 2 {
		t.Fatalf("after a failed Restore: %v at index %d, want the old state at 2", got, dst.applied.Load())
	}
	applyAt(dst, 3, opPut, "", "old3", "o")
	if got := dump(t, dst); got["old3"] != "o" {
		t.Fatalf("a write after a failed Restore is not served: %v", got)
	}

	if err := os.RemoveAll(block); err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, dst); len(got) != 1 || got["snap"] != "s" || dst.applied.Load() != 1 {
		t.Fatalf("restored: %v at index %d", got, dst.applied.Load())
	}
	dst.Close()
	re := testFSM(t, dir, 1000)
	if got := dump(t, re); len(got) != 1 || got["snap"] != "s" {
		t.Fatalf("reopened: %v", got)
	}
}
