package bloomkv

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// walGateFS is the operating system's file system (with its boot ID),
// except that the Sync of the WAL named gate, once set, blocks until
// release is closed.
type walGateFS struct {
	vfs.FS
	osBootID
	mu      sync.Mutex
	gate    string
	entered chan struct{}
	release chan struct{}
}

func (g *walGateFS) Create(name string) (vfs.File, error) {
	f, err := g.FS.Create(name)
	if err != nil {
		return f, err
	}
	return &walGateFile{File: f, fs: g, name: filepath.Base(name)}, nil
}

type walGateFile struct {
	vfs.File
	fs   *walGateFS
	name string
	once sync.Once
}

func (f *walGateFile) Sync() error {
	f.fs.mu.Lock()
	gated := f.fs.gate == f.name
	f.fs.mu.Unlock()
	if gated {
		f.once.Do(func() { close(f.fs.entered) })
		<-f.fs.release
	}
	return f.File.Sync()
}

// TestFlushWaitsForUnpublishedWrites freezes and flushes a memtable that
// holds a write whose group waits for its fsync: in the WAL and the
// memtable, not yet visible. A flush keeps only the versions some reader
// may see, taking the newest for the latest reader's; run before the
// write is published, it kept the unpublished version and dropped the one
// readers see (or the deletion that hides an older segment's version), so
// that until the fsync ended (and for good, had it failed) Gets, and a
// snapshot taken meanwhile, saw a wrong value. Each case reads the key
// while the fsync is held and the flush runs, then lets the fsync go.
func TestFlushWaitsForUnpublishedWrites(t *testing.T) {
	k := []byte("k")
	cases := []struct {
		name  string
		sync  bool
		setup func(t *testing.T, db *DB) // before the fsync is held
		write func(db *DB) error         // the write whose fsync is held
		want  string                     // what readers see meanwhile ("": not found)
	}{
		{"overwrite", true, func(t *testing.T, db *DB) { mustDo(t, db.Put(k, []byte("v1"))) },
			func(db *DB) error { return db.Put(k, []byte("v2")) }, "v1"},
		{"over-deletion", true, func(t *testing.T, db *DB) {
			mustDo(t, db.Put(k, []byte("v0")))
			mustDo(t, db.Flush()) // v0 in an older segment
			mustDo(t, db.Delete(k))
		}, func(db *DB) error { return db.Put(k, []byte("v3")) }, ""},
		{"write-sync", false, func(t *testing.T, db *DB) { mustDo(t, db.Put(k, []byte("v1"))) },
			func(db *DB) error {
				b := NewBatch()
				if err := b.Put(k, []byte("v2")); err != nil {
					return err
				}
				return db.WriteSync(b)
			}, "v1"},
		{"range-deletion", true, func(t *testing.T, db *DB) {
			mustDo(t, db.Put(k, []byte("v0")))
			mustDo(t, db.Flush())
		}, func(db *DB) error { return db.DeleteRange([]byte("a"), []byte("z")) }, "v0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := &walGateFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
			o := smallOptions()
			o.FS, o.Sync, o.MemtableSize = fs, c.sync, 1<<20
			db := mustOpen(t, t.TempDir(), o)
			var once sync.Once
			release := func() { once.Do(func() { close(fs.release) }) }
			defer func() { release(); db.Close() }()
			c.setup(t, db)
			db.mu.Lock()
			fs.mu.Lock()
			fs.gate = base.WALFileName(db.logNum)
			fs.mu.Unlock()
			db.mu.Unlock()
			written := make(chan error, 1)
			go func() { written <- c.write(db) }()
			select {
			case <-fs.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the write's fsync never began")
			}
			read := func() string {
				v, err := db.Get(k)
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				return fmt.Sprintf("%q", v)
			}
			want := fmt.Sprintf("%q", c.want)
			if got := read(); got != want {
				t.Fatalf("before the flush: Get(k) = %s, want %s", got, want)
			}
			flushed := make(chan error, 1)
			go func() { flushed <- db.Flush() }()
			var bad string
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && bad == ""; time.Sleep(time.Millisecond) {
				if got := read(); got != want {
					bad = got
				}
			}
			snap, err := db.NewSnapshot() // before the write is visible
			mustDo(t, err)
			defer snap.Close()
			release()
			mustDo(t, <-written)
			mustDo(t, <-flushed)
			if bad != "" {
				t.Fatalf("while the write waited for its fsync: Get(k) = %s, want %s", bad, want)
			}
			v, err := snap.Get(k)
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%q", v); got != want {
				t.Errorf("a snapshot taken before the write was visible: Get(k) = %s, want %s", got, want)
			}
		})
	}
}
