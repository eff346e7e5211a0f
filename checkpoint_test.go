package bloomkv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/errorfs"
)

// TestCheckpointUnderLoad takes checkpoints while writers, flushes and
// compactions run. Each writer puts its keys w/0, w/1, ... in order, every
// third write as a two-key batch with a mirror key. Every checkpoint must
// open, pass VerifyDir, and hold for each writer exactly a prefix of its
// acknowledged writes (no gap), with batches whole.
func TestCheckpointUnderLoad(t *testing.T) {
	const writers = 3
	src := t.TempDir()
	o := smallOptions()
	o.MemtableSize = 8 << 10
	o.CompactionConcurrency = 2
	db := mustOpen(t, src, o)
	var acked [writers]atomic.Int64 // writes acknowledged per writer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	startWriters(t, &wg, stop, writers, func(w, i int) error {
		key := fmt.Appendf(nil, "%d/%06d", w, i)
		var err error
		if i%3 == 0 {
			b := NewBatch()
			b.Put(key, []byte(strconv.Itoa(i)))
			b.Put(fmt.Appendf(nil, "m%d/%06d", w, i), []byte(strconv.Itoa(i)))
			err = db.Write(b)
		} else {
			err = db.Put(key, []byte(strconv.Itoa(i)))
		}
		if err == nil {
			acked[w].Store(int64(i + 1))
		}
		return err
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.Flush(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	rounds := 6
	if testing.Short() {
		rounds = 3
	}
	var dirs []string
	var floors [][writers]int64
	total := func() (n int64) {
		for w := range writers {
			n += acked[w].Load()
		}
		return n
	}
	for r := range rounds {
		// Some writes between checkpoints: a checkpoint takes the commit
		// queue ahead of queued writers, so back to back they would see
		// almost none.
		for start, deadline := total(), time.Now().Add(30*time.Second); total() < start+300; {
			if time.Now().After(deadline) {
				t.Fatalf("writers stalled: %d writes acknowledged", total())
			}
			time.Sleep(100 * time.Microsecond)
		}
		var floor [writers]int64 // acknowledged before the checkpoint began
		for w := range writers {
			floor[w] = acked[w].Load()
		}
		dir := filepath.Join(t.TempDir(), fmt.Sprint("cp", r))
		mustDo(t, db.Checkpoint(dir))
		dirs, floors = append(dirs, dir), append(floors, floor)
	}
	close(stop)
	wg.Wait()
	mustDo(t, db.Close())
	for r, dir := range dirs {
		checkCheckpoint(t, dir, floors[r])
	}
}

// checkCheckpoint opens a checkpoint and checks the prefix property.
func checkCheckpoint(t *testing.T, dir string, floor [3]int64) {
	t.Helper()
	rep, err := VerifyDir(context.Background(), nil, dir)
	if err != nil || !rep.OK() {
		t.Fatalf("%s: VerifyDir: %v\n%v", dir, err, rep)
	}
	cp := mustOpen(t, dir, smallOptions())
	defer cp.Close()
	for w := range 3 {
		n := int64(0)
		for ; ; n++ {
			v, err := cp.Get(fmt.Appendf(nil, "%d/%06d", w, n))
			if errors.Is(err, ErrNotFound) {
				break
			}
			if err != nil || string(v) != strconv.Itoa(int(n)) {
				t.Fatalf("%s: writer %d key %d: %q, %v", dir, w, n, v, err)
			}
			if n%3 == 0 { // the batch's mirror key is there too
				if _, err := cp.Get(fmt.Appendf(nil, "m%d/%06d", w, n)); err != nil {
					t.Fatalf("%s: writer %d batch %d torn: %v", dir, w, n, err)
				}
			}
		}
		if n < floor[w] {
			t.Fatalf("%s: writer %d has %d writes, but %d were acknowledged before the checkpoint", dir, w, n, floor[w])
		}
		for k := n + 1; k < n+50; k++ { // nothing after the gap
			if _, err := cp.Get(fmt.Appendf(nil, "%d/%06d", w, k)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: writer %d: key %d present after missing key %d", dir, w, k, n)
			}
		}
		if _, err := cp.Get(fmt.Appendf(nil, "m%d/%06d", w, (n+2)/3*3)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: writer %d: a batch's mirror key beyond the prefix", dir, w)
		}
	}
}

// TestCheckpointRefusesNonEmpty: a checkpoint into a directory holding
// anything is refused and touches nothing; after Close, ErrClosed.
func TestCheckpointRefusesNonEmpty(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	dst := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(dst, "keep"), []byte("mine"), 0o644))
	before := dirHash(t, dst)
	if err := db.Checkpoint(dst); !errors.Is(err, ErrCheckpointExists) {
		t.Fatalf("Checkpoint into a non-empty dir = %v", err)
	}
	if dirHash(t, dst) != before {
		t.Fatal("the refused checkpoint changed the directory")
	}
	empty := t.TempDir()
	mustDo(t, db.Checkpoint(empty))
	mustDo(t, db.Close())
	closedDst := filepath.Join(t.TempDir(), "x")
	if err := db.Checkpoint(closedDst); !errors.Is(err, ErrClosed) {
		t.Fatalf("Checkpoint after Close = %v", err)
	}
	if _, err := os.Stat(closedDst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Checkpoint after Close made its directory: %v", err)
	}
	cp := mustOpen(t, empty, nil)
	defer cp.Close()
	if v, err := cp.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("checkpoint of an unflushed write: %q, %v", v, err)
	}
}

// TestCheckpointReadOnly checkpoints a store opened read-only, as
// bloomkv checkpoint does, and leaves the source unchanged.
func TestCheckpointReadOnly(t *testing.T) {
	src := brickStore(t, 400)
	db := mustOpen(t, src, smallOptions())
	for i := 400; i < 450; i++ {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	mustDo(t, db.Close())
	before := dirHash(t, src)
	ro, err := Open(src, readOnly(nil))
	mustDo(t, err)
	dst := filepath.Join(t.TempDir(), "cp")
	mustDo(t, ro.Checkpoint(dst))
	mustDo(t, ro.Close())
	if dirHash(t, src) != before {
		t.Fatal("checkpointing a read-only store changed it")
	}
	checkAll(t, dst, 450)
}

// startWriters starts n goroutines in wg, each calling write(w, i) for
// its number w and i = 0, 1, ... until stop is closed or write fails (a
// test error).
func startWriters(t *testing.T, wg *sync.WaitGroup, stop <-chan struct{}, n int, write func(w, i int) error) {
	for w := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := write(w, i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
}

// TestCheckpointReadOnlyNoWAL checkpoints, read-only, a store that holds
// only its manifest — what a crash leaves between the manifest's creation
// and the commit naming the first WAL — which has no WAL to copy. The
// checkpoint must be a store that opens (empty), not a panic.
func TestCheckpointReadOnlyNoWAL(t *testing.T) {
	src := t.TempDir()
	m, err := manifest.Create(vfs.Default, filepath.Join(src, base.ManifestName))
	mustDo(t, err)
	mustDo(t, m.Close())
	ro, err := Open(src, readOnly(nil))
	mustDo(t, err)
	defer ro.Close()
	dst := filepath.Join(t.TempDir(), "cp")
	mustDo(t, ro.Checkpoint(dst))
	cp := mustOpen(t, dst, smallOptions())
	defer cp.Close()
	if _, err := cp.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get in the checkpoint of an empty store: %v", err)
	}
}

// TestCheckpointThroughSymlink: a Checkpoint into the store's own
// directory is refused however the destination reaches it: through a
// symbolic link to the directory, to its parent, or with the store itself
// opened through a link. Compared by name only, each of these was taken
// for a directory beside the store and, for a subdirectory, a copy of the
// store was written inside it.
func TestCheckpointThroughSymlink(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "store")
	db := mustOpen(t, dir, smallOptions())
	defer db.Close()
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	storeLink, parentLink := filepath.Join(root, "store-link"), filepath.Join(t.TempDir(), "parent-link")
	if err := os.Symlink(dir, storeLink); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	mustDo(t, os.Symlink(root, parentLink))
	before := dirHash(t, dir)
	refused := func(db *DB, dst string) {
		t.Helper()
		if err := db.Checkpoint(dst); !errors.Is(err, os.ErrInvalid) {
			t.Errorf("Checkpoint(%s) = %v, want a refusal matching fs.ErrInvalid", dst, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "cp")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Checkpoint(%s) made a directory inside the store: %v", dst, err)
		}
		if dirHash(t, dir) != before {
			t.Fatalf("Checkpoint(%s) changed the store's directory", dst)
		}
	}
	refused(db, storeLink)
	refused(db, filepath.Join(storeLink, "cp"))
	refused(db, filepath.Join(parentLink, "store", "cp"))
	// A name that climbs out of a link with "..": the file system goes to
	// the parent of the link's target, the store, where cleaning the name
	// would have gone to the directory holding the link.
	mustDo(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	subLink := filepath.Join(t.TempDir(), "sub-link")
	mustDo(t, os.Symlink(filepath.Join(dir, "sub"), subLink))
	before = dirHash(t, dir)
	refused(db, subLink+string(filepath.Separator)+".."+string(filepath.Separator)+"cp")
	refused(db, subLink+string(filepath.Separator)+"..")
	mustDo(t, os.Remove(filepath.Join(dir, "sub")))
	before = dirHash(t, dir)
	mustDo(t, db.Checkpoint(filepath.Join(parentLink, "beside"))) // beside it: fine
	mustDo(t, db.Close())

	viaLink := mustOpen(t, storeLink, smallOptions())
	defer viaLink.Close()
	before = dirHash(t, dir)
	refused(viaLink, filepath.Join(dir, "cp"))
	refused(viaLink, dir)
}

// TestCheckpointFailureLeavesNoCopy: a Checkpoint that fails at any step
// of writing the copy (a segment's link and copy, a WAL's copy, the
// manifest's creation or commit, the final syncs) removes what it wrote,
// and the directory if it made it, so that the same Checkpoint succeeds
// once the fault is gone; a partial copy would refuse it
// (ErrCheckpointExists).
func TestCheckpointFailureLeavesNoCopy(t *testing.T) {
	efs := errorfs.New(vfs.Default)
	o := smallOptions()
	o.FS, o.DisableAutoCompaction = efs, true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for i := range 400 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
		if i == 300 {
			mustDo(t, db.Flush()) // segments, and writes only in the WAL
		}
	}
	root := t.TempDir()
	failed := 0
	for _, name := range []string{"*.seg", "*.wal", "MANIFEST", filepath.Base(root) + "-*"} {
		for _, op := range []vfs.Op{vfs.OpLink, vfs.OpCreate, vfs.OpWrite, vfs.OpSync, vfs.OpCommit, vfs.OpSyncDir} {
			for _, existing := range []bool{false, true} {
				dst := filepath.Join(root, fmt.Sprintf("%s-%v-%s", filepath.Base(root), existing, op))
				if existing {
					mustDo(t, os.Mkdir(dst, 0o755))
				}
				ops := op
				if name == "*.seg" {
					ops |= vfs.OpLink // a failed link falls back to a copy: fail both
				}
				efs.SetFault(errorfs.Fault{Ops: ops, Name: name, Sticky: true})
				err := db.Checkpoint(dst)
				fired := efs.Fired() > 0
				efs.Clear()
				if !fired || err == nil {
					if err != nil {
						t.Fatalf("%s on %s: Checkpoint = %v without the fault", op, name, err)
					}
					mustDo(t, os.RemoveAll(dst)) // a fault it rode out (a link falls back to a copy)
					continue
				}
				failed++
				entries, statErr := os.ReadDir(dst)
				switch {
				case !existing && !errors.Is(statErr, os.ErrNotExist):
					t.Fatalf("%s on %s: the failed Checkpoint (%v) left the directory it made: %v %v", op, name, err, entries, statErr)
				case existing && (statErr != nil || len(entries) > 0):
					t.Fatalf("%s on %s: the failed Checkpoint (%v) left %v in the empty directory it was given (%v)", op, name, err, entries, statErr)
				}
				mustDo(t, db.Checkpoint(dst))
				cp := mustOpen(t, dst, smallOptions())
				checkFaultKeys(t, cp, 400)
				mustDo(t, cp.Close())
				mustDo(t, os.RemoveAll(dst))
			}
		}
	}
	if failed < 16 {
		t.Fatalf("only %d faults failed a Checkpoint: the test no longer reaches its steps", failed)
	}
	t.Logf("%d failed Checkpoints cleaned up", failed)
}

// killImageFS passes everything to the FS it wraps and, while armed,
// copies the directory dir as it is before each operation on it or a
// file in it — bbolt's creations and commits included, which it
// announces through Bypass by base name — to a new directory under
// images: what a kill at that moment would leave of dir.
type killImageFS struct {
	vfs.FS
	t           testing.TB
	dir, images string
	armed       atomic.Bool
	n           int
}

func (f *killImageFS) image(name string) {
	if !f.armed.Load() || name != f.dir && filepath.Dir(name) != f.dir && filepath.Dir(name) != "." {
		return
	}
	f.n++
	dst := filepath.Join(f.images, strconv.Itoa(f.n))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		f.t.Fatal(err)
	}
	entries, _ := os.ReadDir(f.dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(f.dir, e.Name()))
		if err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *killImageFS) Create(name string) (vfs.File, error) { f.image(name); return f.FS.Create(name) }
func (f *killImageFS) Remove(name string) error             { f.image(name); return f.FS.Remove(name) }
func (f *killImageFS) Rename(o, n string) error             { f.image(n); return f.FS.Rename(o, n) }
func (f *killImageFS) Link(o, n string) error               { f.image(n); return f.FS.Link(o, n) }
func (f *killImageFS) MkdirAll(dir string) error            { f.image(dir); return f.FS.MkdirAll(dir) }
func (f *killImageFS) SyncDir(dir string) error             { f.image(dir); return f.FS.SyncDir(dir) }
func (f *killImageFS) Bypass(op vfs.Op, name string) error {
	f.image(name)
	return vfs.Bypass(f.FS, op, name)
}

// TestCheckpointKilledAtEveryStep takes what a kill would leave of a
// checkpoint before each of its steps and opens it: Open must refuse it
// with ErrNotStore, or open a store holding every write. A checkpoint
// that made its manifest empty and then filled it left, killed between
// the two, a MANIFEST that Open took for one older than the files:
// ErrCorrupt, for a copy nothing had damaged.
func TestCheckpointKilledAtEveryStep(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "cp")
	kfs := &killImageFS{FS: vfs.Default, t: t, dir: dst, images: t.TempDir()}
	o := smallOptions()
	o.FS = kfs
	db := mustOpen(t, src, o)
	defer db.Close()
	const n = 600
	for i := range n {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "v%d", i)))
		if i == n-100 {
			mustDo(t, db.Flush()) // segments and a WAL to copy
		}
	}
	mustDo(t, db.WaitForCompactions(context.Background()))
	kfs.armed.Store(true)
	mustDo(t, db.Checkpoint(dst))
	kfs.armed.Store(false)
	if kfs.n < 5 {
		t.Fatalf("%d images of the checkpoint's steps: the FS saw too few", kfs.n)
	}
	opened := 0
	for i := 1; i <= kfs.n; i++ {
		img := filepath.Join(kfs.images, strconv.Itoa(i))
		if entries, _ := os.ReadDir(img); len(entries) == 0 {
			continue // nothing written yet
		}
		cp, err := Open(img, smallOptions())
		if errors.Is(err, ErrNotStore) {
			continue
		}
		if err != nil {
			t.Fatalf("killed before step %d of %d: Open: %v; want ErrNotStore, or a store holding every write", i, kfs.n, err)
		}
		for k := range n {
			if _, err := cp.Get(fmt.Appendf(nil, "k%04d", k)); err != nil {
				t.Fatalf("killed before step %d of %d: the checkpoint opens without k%04d: %v", i, kfs.n, k, err)
			}
		}
		mustDo(t, cp.Close())
		opened++
	}
	t.Logf("%d steps, %d images opened complete", kfs.n, opened)
}
