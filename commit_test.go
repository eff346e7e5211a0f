package bloomkv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// gateFS is the operating system's file system, but a WAL's Sync, while
// the gate is armed, announces itself on entered and then blocks until
// release: so a test can hold one group's fsync and watch what the next
// group does meanwhile.
type gateFS struct {
	vfs.FS
	osBootID
	mapped  bool // WALs are mapped (vfs.Mapper), else written with write(2)
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	done    chan struct{} // closed when the test ends: no Sync blocks any more
}

func newGateFS(mapped bool) *gateFS {
	return &gateFS{FS: vfs.Default, mapped: mapped, entered: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
}

// openGated opens a store with Sync on a gateFS, closed when t ends: the
// gate's done channel first, so that a failed test leaves no Sync
// blocked, then the store.
func openGated(t *testing.T, mapped bool) (*DB, *gateFS) {
	fs := newGateFS(mapped)
	o := smallOptions()
	o.FS, o.Sync, o.MemtableSize = fs, true, 1<<20
	db := mustOpen(t, t.TempDir(), o)
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() { close(fs.done) })
	return db, fs
}

func (g *gateFS) Create(name string) (vfs.File, error) {
	f, err := g.FS.Create(name)
	if err != nil || !strings.HasSuffix(name, base.WALExt) {
		return f, err
	}
	gf := &gateFile{File: f, fs: g}
	if g.mapped {
		return &gateMappedFile{gf}, nil
	}
	return gf, nil
}

type gateFile struct {
	vfs.File
	fs *gateFS
}

func (f *gateFile) Sync() error {
	if f.fs.armed.Load() {
		select {
		case f.fs.entered <- struct{}{}:
			select {
			case <-f.fs.release:
			case <-f.fs.done:
			}
		case <-f.fs.done:
		}
	}
	return f.File.Sync()
}

func (f *gateFile) WriteAt(b []byte, off int64) (int, error) {
	return f.File.(*os.File).WriteAt(b, off)
}

// gateMappedFile lets the WAL be mapped: its writes bypass the wrapper,
// its Syncs do not.
type gateMappedFile struct{ *gateFile }

func (f *gateMappedFile) MapFd() (uintptr, bool) { return vfs.MapFd(f.File) }

// TestPipelinedCommit pins the pipeline: while group k's fsync is in
// flight, group k+1 is written to the WAL (its bytes counted in
// Stats.WALBytes), yet neither is acknowledged nor visible; when k's fsync
// ends, k is visible, and k+1 only after an fsync of its own, which starts
// once the wait for k's writer (who does not write again) ends.
func TestPipelinedCommit(t *testing.T) {
	for _, mapped := range []bool{false, true} {
		name := "write"
		if mapped {
			name = "mapped"
		}
		t.Run(name, func(t *testing.T) {
			db, fs := openGated(t, mapped)
			mustDo(t, db.Put([]byte("k0"), []byte("v0")))
			fs.armed.Store(true)

			put := func(key string) chan error {
				c := make(chan error, 1)
				go func() { c <- db.Put([]byte(key), []byte("v")) }()
				return c
			}
			waitEntered := func(what string) {
				t.Helper()
				select {
				case <-fs.entered:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: no fsync started", what)
				}
			}
			visible := func(key string) bool {
				t.Helper()
				_, err := db.Get([]byte(key))
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				return err == nil
			}
			pending := func(c chan error) bool {
				select {
				case err := <-c:
					if err != nil {
						t.Fatal(err)
					}
					return false
				default:
					return true
				}
			}

			before := db.Stats().WALBytes
			a := put("k1")
			waitEntered("group k")
			afterA := db.Stats().WALBytes
			if afterA <= before {
				t.Fatalf("group k's fsync began before its write (WAL bytes %d, then %d)", before, afterA)
			}
			b := put("k2")
			deadline := time.Now().Add(10 * time.Second)
			for db.Stats().WALBytes == afterA {
				if time.Now().After(deadline) {
					t.Fatal("group k+1 was not written while group k's fsync was in flight")
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // room for a wrong acknowledgement
			if !pending(a) || !pending(b) {
				t.Fatal("a writer was acknowledged before any fsync covering it ended")
			}
			if visible("k1") || visible("k2") {
				t.Fatal("a write became visible before it was durable")
			}

			fs.release <- struct{}{} // group k's fsync ends (it is blocked: entered)
			waitEntered("group k+1") // k+1's starts after the wait for k1's writer
			// Group k is published now. Its writer may still be busy
			// with k+1's fsync (the sync role's next turn), so its call
			// need not have returned.
			if !visible("k1") {
				t.Fatal("group k not visible after its fsync")
			}
			time.Sleep(20 * time.Millisecond)
			if !pending(b) || visible("k2") {
				t.Fatal("group k+1 acknowledged or visible before its own fsync ended")
			}
			fs.armed.Store(false)
			fs.release <- struct{}{} // group k+1's
			for _, c := range []chan error{a, b} {
				select {
				case err := <-c:
					mustDo(t, err)
				case <-time.After(10 * time.Second):
					t.Fatal("a write not acknowledged after its fsync")
				}
			}
			if !visible("k2") {
				t.Fatal("group k+1 acknowledged but not visible")
			}
		})
	}
}

// TestCommitWaitsForWriters pins the wait before an fsync
// (takeSyncLocked): a group queued while the last fsync ran waits for the
// writers that fsync acknowledged to write again, and the next fsync
// covers both; a wait for a writer who does not come back ends at its
// deadline; DB.Sync, a transaction's commit and Close do not wait for it;
// with the wait turned off (a negative share) none is made. The sync
// role's counts (syncCounts) record each wait, its time, and those that
// ran out.
func TestCommitWaitsForWriters(t *testing.T) {
	for _, end := range []string{"returns", "deadline", "off", "Sync", "txn", "Close"} {
		t.Run(end, func(t *testing.T) {
			db, fs := openGated(t, true)
			db.commit.pmu.Lock()
			db.commit.waitFor = 30 * time.Second // past every wait below: only what the test does ends a wait
			switch end {
			case "deadline":
				db.commit.waitFor = time.Second
			case "off":
				db.commit.share = -1
			}
			db.commit.pmu.Unlock()
			counts := db.commit.syncCounts()
			mustDo(t, db.Put([]byte("k0"), []byte("v0")))
			fs.armed.Store(true)

			async := func(fn func() error) chan error {
				c := make(chan error, 1)
				go func() { c <- fn() }()
				return c
			}
			put := func(key string) chan error {
				return async(func() error { return db.Put([]byte(key), []byte("v")) })
			}
			// entered reports whether an fsync starts within d: 10 s where
			// one must, 20 ms (room for a wrong one) where none may.
			entered := func(d time.Duration) bool {
				select {
				case <-fs.entered:
					return true
				case <-time.After(d):
					return false
				}
			}
			wait := func(c chan error, what string) {
				t.Helper()
				select {
				case err := <-c:
					mustDo(t, err)
				case <-time.After(10 * time.Second):
					t.Fatalf("%s not acknowledged", what)
				}
			}

			a := put("a1")
			if !entered(10 * time.Second) {
				t.Fatal("no fsync for a1")
			}
			// b1 is written while a1's fsync is in flight.
			before := db.Stats().WALBytes
			b := put("b1")
			for db.Stats().WALBytes == before {
				time.Sleep(time.Millisecond)
			}
			fs.release <- struct{}{}
			if end == "off" {
				// b1's fsync follows a1's at once, run by the holder of the
				// sync role (a1's writer, whose Put returns after it).
				if !entered(10 * time.Second) {
					t.Fatal("b1's fsync waited for a1's writer with the wait turned off")
				}
				fs.release <- struct{}{}
				wait(a, "a1")
				wait(b, "b1")
				if c := db.commit.syncCounts(); c.waits != counts.waits || c.timeouts != counts.timeouts {
					t.Fatalf("waits %d -> %d, timeouts %d -> %d with the wait turned off",
						counts.waits, c.waits, counts.timeouts, c.timeouts)
				}
				return
			}
			wait(a, "a1")
			// a1's writer is acknowledged; b1's fsync waits for it.
			if entered(20 * time.Millisecond) {
				t.Fatal("b1's fsync began before a1's writer wrote again")
			}
			switch end {
			case "returns":
				a = put("a2")
				if !entered(10 * time.Second) {
					t.Fatal("no fsync once a1's writer wrote again")
				}
				fs.release <- struct{}{}
				// Both in that one fsync: another would block in the gate.
				wait(b, "b1")
				wait(a, "a2")
				if c := db.commit.syncCounts(); c.waits == counts.waits || c.timeouts != counts.timeouts {
					t.Fatalf("waits %d -> %d, timeouts %d -> %d: want a wait counted, none run out",
						counts.waits, c.waits, counts.timeouts, c.timeouts)
				}
			case "deadline":
				if !entered(10 * time.Second) {
					t.Fatal("no fsync after the wait's deadline")
				}
				fs.release <- struct{}{}
				wait(b, "b1")
				c := db.commit.syncCounts()
				if c.timeouts != counts.timeouts+1 || c.waitTime-counts.waitTime < time.Second {
					t.Fatalf("timeouts %d -> %d, wait time %v -> %v: want one wait run out after its 1 s",
						counts.timeouts, c.timeouts, counts.waitTime, c.waitTime)
				}
			case "Sync":
				fs.armed.Store(false)
				wait(async(db.Sync), "DB.Sync")
				wait(b, "b1")
			case "txn":
				fs.armed.Store(false)
				txn := db.NewTransaction(true)
				mustDo(t, txn.Put([]byte("t"), []byte("v")))
				wait(async(txn.Commit), "the transaction")
				wait(b, "b1")
			case "Close":
				fs.armed.Store(false)
				wait(async(db.Close), "Close")
				wait(b, "b1")
			}
		})
	}
}

// copyStoreFiles copies the files of the store in dir to a new directory,
// as a crash of the process would leave them: the page cache holds every
// write made so far, mapped or not. No manifest commit may be running.
func copyStoreFiles(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	mustDo(t, err)
	for _, e := range entries {
		if e.Name() == base.LockName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		mustDo(t, err)
		mustDo(t, os.WriteFile(filepath.Join(out, e.Name()), b, 0o644))
	}
	return out
}

// TestRotationCrashBeforeSwap checks recovery from what a crash in the
// middle of a rotation leaves, with and without the new WAL: the old WAL
// synced, and a new WAL under a reserved file number holding only its
// first mark (vouching that the old one was synced to its end, though its
// mapped tail was never trimmed), or no new file at all (the number was
// handed out and never used). Every write is recovered either way, and
// the store stays writable.
func TestRotationCrashBeforeSwap(t *testing.T) {
	for _, created := range []bool{true, false} {
		t.Run(fmt.Sprintf("created=%v", created), func(t *testing.T) {
			dir := t.TempDir()
			o := smallOptions()
			o.MemtableSize = 1 << 20
			db := mustOpen(t, dir, o)
			defer db.Close()
			const n = 200
			for i := range n {
				mustDo(t, db.Put(faultKey(i), faultValue(i)))
			}
			var crashed string
			db.commit.exclusive(db, func() {
				// rotate's steps up to the swap, then the crash.
				db.commit.acquireSync()
				defer db.commit.releaseSync(db)
				mustDo(t, db.commit.syncHeld(db, db.logw))
				num, err := db.manifest.NewFileNum()
				mustDo(t, err)
				if !created {
					crashed = copyStoreFiles(t, dir)
					return
				}
				w, err := db.createWAL(num, true)
				mustDo(t, err)
				crashed = copyStoreFiles(t, dir)
				mustDo(t, w.Close())
				db.removeFile(base.WALFileName(num))
			})
			db2 := mustOpen(t, crashed, o)
			defer db2.Close()
			for i := range n {
				v, err := db2.Get(faultKey(i))
				if err != nil || !bytes.Equal(v, faultValue(i)) {
					t.Fatalf("key %d after the crash: %q, %v", i, v, err)
				}
			}
			mustDo(t, db2.Put([]byte("after"), []byte("v")))
		})
	}
}

// TestSyncedWriteVisibleWhenAcknowledged pins that a synced write is
// acknowledged only once it is in the memtable as well as durable: a
// group's fsync may start before its leader has applied it (leadSynced),
// and with an instant fsync, as here, it ends well before the inserts of
// a big group do. Writers in a loop, as many as the group commit gathers
// into one group, each read their key back the moment Put returns; under
// -race an acknowledgement that came early would also show as the
// writer's batch reused while the leader still applies it.
func TestSyncedWriteVisibleWhenAcknowledged(t *testing.T) {
	fs := &syncCountFS{FS: vfs.Default, noop: true}
	o := smallOptions()
	o.Sync, o.FS = true, fs
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	writers, puts := 32, 300
	if testing.Short() {
		puts = 100
	}
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			errs <- func() error {
				for i := range puts {
					k := fmt.Appendf(nil, "w%02d/%05d", w, i)
					v := fmt.Appendf(nil, "value %d of writer %d", i, w)
					if err := db.Put(k, v); err != nil {
						return err
					}
					got, err := db.Get(k)
					if err != nil || !bytes.Equal(got, v) {
						return fmt.Errorf("Get(%s) right after its Put returned = %q, %v; want %q", k, got, err, v)
					}
				}
				return nil
			}()
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if fs.syncs.Load() == 0 {
		t.Fatal("no WAL fsync: the test does not exercise synced writes")
	}
}

// TestSyncedWritesFailWithFsync pins the other side: once fsyncs fail,
// synced writes fail with ErrReadOnly, and a group whose fsync failed
// while its leader still applied it (leadSynced: with an instant fsync,
// always) is failed by the leader once applied, not before: an early
// acknowledgement shows under -race as the writer's batch reused while
// it is applied, or as a lost group. Fsyncs succeed (instantly) until the
// writers have made some progress, then fail; a few stores, so that the
// failure finds groups in different states.
func TestSyncedWritesFailWithFsync(t *testing.T) {
	for range 5 {
		fs := &syncCountFS{FS: vfs.Default, noop: true}
		o := smallOptions()
		o.Sync, o.FS = true, fs
		db := mustOpen(t, t.TempDir(), o)
		writers := 32
		var puts atomic.Int64
		errs := make(chan error, writers)
		for w := range writers {
			go func() {
				errs <- func() error {
					for i := 0; ; i++ {
						k := fmt.Appendf(nil, "w%02d/%05d", w, i)
						err := db.Put(k, k)
						if puts.Add(1) == 300 {
							fs.fail.Store(true)
						}
						switch {
						case errors.Is(err, ErrReadOnly):
							return nil
						case err != nil:
							return fmt.Errorf("Put(%s) after an fsync failed = %v; want ErrReadOnly", k, err)
						case i > 10000:
							return fmt.Errorf("Put(%s): no failure after %d puts", k, i)
						}
					}
				}()
			}()
		}
		for range writers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
	}
}

// TestExclusiveNotStarvedByWriters: on one CPU, under a steady stream of
// writes from a few goroutines, the calls that need the commit queue to
// themselves (Flush, Sync, Checkpoint: exclusive) still get it. A writer
// acknowledged before such a caller was woken runs first, finds no
// leader and used to take leadership, every time: Checkpoint waited for
// minutes (TestCheckpointUnderLoad at -cpu 1 timed out).
func TestExclusiveNotStarvedByWriters(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	o := smallOptions()
	o.MemtableSize = 8 << 10
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	startWriters(t, &wg, stop, 3, func(w, i int) error {
		err := db.Put(fmt.Appendf(nil, "%d/%06d", w, i), []byte("v"))
		if err == nil {
			writes.Add(1)
		}
		return err
	})
	done := make(chan error, 1)
	go func() {
		for i := range 30 {
			var err error
			switch i % 3 {
			case 0:
				err = db.Flush()
			case 1:
				err = db.Sync()
			default:
				err = db.Checkpoint(filepath.Join(t.TempDir(), "cp"))
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var err error
	select {
	case err = <-done:
		close(stop)
	case <-time.After(60 * time.Second):
		t.Errorf("30 Flush, Sync and Checkpoint calls did not finish in 60 s beside %d writes", writes.Load())
		close(stop) // the writers stop, and the calls can finish
		err = <-done
	}
	wg.Wait()
	mustDo(t, err)
}
