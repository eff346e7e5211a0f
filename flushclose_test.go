package bloomkv

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/vfs"
)

// createGateFS passes everything to vfs.Default but, while armed, holds every
// creation of a WAL until released: a test can stop a rotation, or the
// making of a spare WAL, at that point.
type createGateFS struct {
	vfs.FS
	mu      sync.Mutex
	gate    chan struct{} // nil: not armed
	entered chan struct{} // receives once per held creation
}

func (g *createGateFS) BootID() [16]byte { return vfs.BootID(g.FS) }

func (g *createGateFS) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.entered = make(chan struct{}), make(chan struct{}, 16)
}

func (g *createGateFS) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gate)
	g.gate = nil
}

func (g *createGateFS) Create(name string) (vfs.File, error) {
	g.mu.Lock()
	gate, entered := g.gate, g.entered
	g.mu.Unlock()
	if gate != nil && strings.HasSuffix(name, ".wal") {
		entered <- struct{}{}
		<-gate
	}
	return g.FS.Create(name)
}

// TestFlushRacingClose: a Flush that has checked the DB is open, and
// rotates the memtable while Close begins, returns ErrClosed once Close
// has stopped the background flushes, rather than wait forever for a
// flush that will never run; and nothing written is lost.
func TestFlushRacingClose(t *testing.T) {
	dir := t.TempDir()
	g := &createGateFS{FS: vfs.Default}
	o := smallOptions()
	o.FS = g
	db := mustOpen(t, dir, o)
	// No WAL is made ahead until the first rotation, so Flush's rotation
	// creates the next WAL itself, after it checked that the DB is open:
	// held there while Close begins.
	mustDo(t, db.Put([]byte("k"), []byte("v")))
	g.arm()
	flushed := make(chan error, 1)
	go func() { flushed <- db.Flush() }()
	<-g.entered
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	for !db.isClosed.Load() {
		time.Sleep(time.Millisecond)
	}
	g.open()
	select {
	case err := <-flushed:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Flush racing Close = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Flush racing Close is blocked 10 s after Close began")
	}
	mustDo(t, <-closed)

	o.FS = nil
	db = mustOpen(t, filepath.Clean(dir), o)
	defer db.Close()
	if _, err := db.Get([]byte("k")); err != nil {
		t.Errorf("Get after reopen: %v", err)
	}
}

// TestFlushWritesTierZero: a flushed segment is recorded in tier 0, where
// the size-tiered policy, which takes a segment's tier from its
// SegmentMeta, merges DefaultFanIn flushes into one of tier 1. A flush
// recorded a tier up would count as a merge's output: its segments would
// wait for peers one tier too high, and the tier count, from which the
// stall threshold is computed, would be one too many.
func TestFlushWritesTierZero(t *testing.T) {
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	tiers := func() []uint32 {
		db.mu.Lock()
		defer db.mu.Unlock()
		var ts []uint32
		for _, s := range db.segments {
			ts = append(ts, s.meta.Tier)
		}
		return ts
	}
	for round := range 4 {
		for i := range 20 {
			mustDo(t, db.Put(faultKey(100*round+i), faultValue(i)))
		}
		mustDo(t, db.Flush())
	}
	if ts := tiers(); len(ts) != 4 || ts[0] != 0 || ts[1] != 0 || ts[2] != 0 || ts[3] != 0 {
		t.Fatalf("tiers of 4 flushed segments: %v, want [0 0 0 0]", ts)
	}
	mustDo(t, db.Compact())
	if ts := tiers(); len(ts) != 1 || ts[0] != 1 {
		t.Fatalf("tiers after merging 4 flushed segments: %v, want [1]", ts)
	}
}
