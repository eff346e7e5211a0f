package bloomkv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/errorfs"
)

// retryModel is what the acknowledged writes of a retry test left: key
// to value, checked against a store after the fault and after reopening.
type retryModel struct {
	mu    sync.Mutex
	m     map[string]string
	maybe map[string]string // writes that failed: they may be there or not
}

func (rm *retryModel) put(t *testing.T, db *DB, i int) error {
	t.Helper()
	k, v := faultKey(i), faultValue(i)
	err := db.Put(k, v)
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if err == nil {
		rm.m[string(k)] = string(v)
	} else {
		if rm.maybe == nil {
			rm.maybe = map[string]string{}
		}
		rm.maybe[string(k)] = string(v)
	}
	return err
}

func (rm *retryModel) check(t *testing.T, db *DB, what string) {
	t.Helper()
	rm.mu.Lock()
	defer rm.mu.Unlock()
	for k, want := range rm.m {
		v, err := db.Get([]byte(k))
		if err != nil || string(v) != want {
			t.Fatalf("%s: acknowledged %s reads %.20q, %v", what, k, v, err)
		}
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	n := 0
	for k, v := range it.All() {
		if want, ok := rm.m[string(k)]; ok && want == string(v) {
			n++
		} else if want, ok := rm.maybe[string(k)]; !ok || want != string(v) {
			t.Fatalf("%s: scan finds %s=%.20q, never written", what, k, v)
		}
	}
	mustDo(t, it.Close())
	if n != len(rm.m) {
		t.Fatalf("%s: scan finds %d acknowledged keys of %d", what, n, len(rm.m))
	}
}

// retryOptions are the options of the retry tests' stores: small
// memtables on fs, background compaction as autoCompact says.
func retryOptions(fs vfs.FS, autoCompact bool) *Options {
	o := smallOptions()
	o.FS = fs
	o.DisableAutoCompaction = !autoCompact
	return o
}

// openRetryStore opens a store in dir on a fault-injecting file system
// (retryOptions), its backoff bounded by lo and hi, and acknowledges n
// writes (faultKey 0 to n-1) into a new model.
func openRetryStore(t *testing.T, dir string, autoCompact bool, lo, hi time.Duration, n int) (*DB, *errorfs.FS, *retryModel) {
	t.Helper()
	fs := errorfs.New(vfs.Default)
	db := mustOpen(t, dir, retryOptions(fs, autoCompact))
	setRetryDelays(db, lo, hi)
	rm := &retryModel{m: map[string]string{}}
	for i := range n {
		mustDo(t, rm.put(t, db, i))
	}
	return db, fs, rm
}

// setRetryDelays bounds db's backoff.
func setRetryDelays(db *DB, lo, hi time.Duration) {
	db.mu.Lock()
	db.retryMin, db.retryMax = lo, hi
	db.mu.Unlock()
}

// waitRetries waits until db has retried at least n background failures.
func waitRetries(t *testing.T, db *DB, n uint64) Stats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := db.Stats()
		if st.RetriedFailures >= n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d background failures retried in 20 s, want %d", st.RetriedFailures, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// succeedsOnceCleared calls fn until it succeeds, a few times at most:
// the fault is cleared, but an attempt that was under way may still fail
// once, and Flush and WaitForCompactions return the failure of an attempt
// that ends while they wait.
func succeedsOnceCleared(t *testing.T, what string, fn func() error) {
	t.Helper()
	var err error
	for range 5 {
		if err = fn(); err == nil {
			return
		}
	}
	t.Fatalf("%s once the fault cleared: %v", what, err)
}

// mustBeRetryable checks err is the fault's errno, not a read-only store.
func mustBeRetryable(t *testing.T, what string, err, want error) {
	t.Helper()
	if err == nil || !errors.Is(err, want) || errors.Is(err, ErrReadOnly) {
		t.Fatalf("%s = %v, want an error matching %v and not ErrReadOnly", what, err, want)
	}
}

// noLeftovers checks that every segment file in dir is live in db.
func noLeftovers(t *testing.T, db *DB, dir string) {
	t.Helper()
	names, err := vfs.Default.List(dir)
	mustDo(t, err)
	db.mu.Lock()
	live := map[string]bool{}
	for _, s := range db.segments {
		live[s.name] = true
	}
	db.mu.Unlock()
	for _, n := range names {
		if strings.HasSuffix(n, base.SegmentExt) && !live[n] {
			t.Fatalf("segment file %s left behind (live: %v)", n, live)
		}
	}
}

// verifyClean runs VerifyDir on the closed store: no problem and no note
// (a partial segment left behind would be a note).
func verifyClean(t *testing.T, dir string) {
	t.Helper()
	rep, err := VerifyDir(context.Background(), nil, dir)
	mustDo(t, err)
	if len(rep.Problems) > 0 || len(rep.Notes) > 0 {
		t.Fatalf("VerifyDir: problems %v, notes %v", rep.Problems, rep.Notes)
	}
}

// reopenAndCheck closes db, checks the directory, reopens on a healthy
// file system and checks the model there.
func reopenAndCheck(t *testing.T, db *DB, dir string, rm *retryModel) {
	t.Helper()
	mustDo(t, db.Close())
	verifyClean(t, dir)
	db = mustOpen(t, dir, retryOptions(vfs.Default, false)) // no merge beside noLeftovers
	defer db.Close()
	rm.check(t, db, "after reopen")
	noLeftovers(t, db, dir)
}

// retrySteps are the steps of writing a new segment that a fault can hit,
// with the errors that say a resource ran out.
var retrySteps = []struct {
	name  string
	fault errorfs.Fault
}{
	{"create", errorfs.Fault{Ops: vfs.OpCreate}},
	{"write", errorfs.Fault{Ops: vfs.OpWrite}},
	{"write-short", errorfs.Fault{Ops: vfs.OpWrite, Short: true}},
	{"sync", errorfs.Fault{Ops: vfs.OpSync}},
}

var retryErrnos = []error{syscall.ENOSPC, syscall.EMFILE}

// TestRetryFlush: a flush that runs out of space or file descriptors
// while creating, writing or syncing its segment does not make the store
// read-only. Flush returns the error; writes go on; the background
// retries with backoff; once the fault clears Flush succeeds, nothing
// acknowledged is lost, and no partial segment is left.
func TestRetryFlush(t *testing.T) {
	for _, errno := range retryErrnos {
		for _, step := range retrySteps {
			t.Run(fmt.Sprintf("%s-%v", step.name, errno), func(t *testing.T) {
				dir := t.TempDir()
				db, fs, rm := openRetryStore(t, dir, false, time.Millisecond, 4*time.Millisecond, 50)
				mustDo(t, db.Flush()) // one healthy segment
				for i := 50; i < 100; i++ {
					mustDo(t, rm.put(t, db, i))
				}
				f := step.fault
				f.Name, f.Sticky, f.Err = "*"+base.SegmentExt, true, errno
				fs.SetFault(f)
				mustBeRetryable(t, "Flush", db.Flush(), errno)
				waitRetries(t, db, 3)
				// Writes and reads go on meanwhile (a memtable's worth).
				for i := 100; i < 120; i++ {
					mustDo(t, rm.put(t, db, i))
				}
				rm.check(t, db, "during the fault")
				mustBeRetryable(t, "WaitForCompactions", db.WaitForCompactions(context.Background()), errno)
				mustBeRetryable(t, "Flush", db.Flush(), errno)
				st := db.Stats()
				if !strings.Contains(st.LastRetriedFailure, errno.Error()) {
					t.Fatalf("Stats.LastRetriedFailure = %q, want %v", st.LastRetriedFailure, errno)
				}
				fs.Clear()
				succeedsOnceCleared(t, "Flush", db.Flush)
				for i := 120; i < 200; i++ {
					mustDo(t, rm.put(t, db, i))
				}
				mustDo(t, db.Flush())
				mustDo(t, db.WaitForCompactions(context.Background()))
				rm.check(t, db, "after the fault")
				noLeftovers(t, db, dir)
				reopenAndCheck(t, db, dir, rm)
			})
		}
	}
}

// TestRetryFlushMapFailure: a new segment the system refuses to map is
// read with pread (mapOrRead): no failure, nothing to retry.
func TestRetryFlushMapFailure(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.New(vfs.Default)
	db := mustOpen(t, dir, retryOptions(fs, false))
	rm := &retryModel{m: map[string]string{}}
	fs.SetFault(errorfs.Fault{Ops: vfs.OpMap, Sticky: true, Err: syscall.ENOMEM})
	for i := range 100 {
		mustDo(t, rm.put(t, db, i))
	}
	mustDo(t, db.Flush())
	if n := db.Stats().RetriedFailures; n != 0 {
		t.Fatalf("%d failures retried, want none", n)
	}
	fs.Clear()
	rm.check(t, db, "unmapped")
	reopenAndCheck(t, db, dir, rm)
}

// TestRetryCompaction: a merge, explicit or in the background, that runs
// out of space or descriptors writing its output leaves its inputs live
// and the store writable; Compact returns the error; the background
// retries; once the fault clears the merge is done and nothing is lost.
func TestRetryCompaction(t *testing.T) {
	for _, errno := range retryErrnos {
		for _, step := range retrySteps {
			t.Run(fmt.Sprintf("%s-%v", step.name, errno), func(t *testing.T) {
				dir := t.TempDir()
				fs := errorfs.New(vfs.Default)
				db := mustOpen(t, dir, retryOptions(fs, false))
				setRetryDelays(db, time.Millisecond, 4*time.Millisecond)
				rm := &retryModel{m: map[string]string{}}
				for i := range 200 {
					mustDo(t, rm.put(t, db, i))
					if i%25 == 24 {
						mustDo(t, db.Flush())
					}
				}
				segs := db.Stats().Segments
				f := step.fault
				f.Name, f.Sticky, f.Err = "*"+base.SegmentExt, true, errno
				fs.SetFault(f)

				// Explicit: the error, not read-only, inputs untouched.
				mustBeRetryable(t, "Compact", db.Compact(), errno)
				if n := db.Stats().Segments; n != segs {
					t.Fatalf("%d segments after the failed Compact, %d before", n, segs)
				}
				rm.check(t, db, "after the failed Compact")

				// Background: turned on now, it meets the fault and retries.
				db.mu.Lock()
				db.opts.DisableAutoCompaction = false
				db.scheduleCompactionLocked()
				db.mu.Unlock()
				waitRetries(t, db, 3)
				mustBeRetryable(t, "WaitForCompactions", db.WaitForCompactions(context.Background()), errno)
				for i := 200; i < 220; i++ {
					mustDo(t, rm.put(t, db, i)) // into the memtable: no flush
				}
				rm.check(t, db, "during the fault")

				fs.Clear()
				succeedsOnceCleared(t, "WaitForCompactions", func() error { return db.WaitForCompactions(context.Background()) })
				if n := db.Stats().Segments; n >= segs {
					t.Fatalf("%d segments after the retried merges, %d before", n, segs)
				}
				mustDo(t, db.Compact())
				rm.check(t, db, "after the fault")
				noLeftovers(t, db, dir)
				reopenAndCheck(t, db, dir, rm)
			})
		}
	}
}

// TestRetryPersistentFault: while the disk stays full, writes fill the
// memtables up to the frozen-memtable limit and then stall, never
// acknowledged beyond it; Close ends the retry loop at once, though its
// backoff is a minute, and closes cleanly; every acknowledged write is
// there after reopening, from the WALs.
func TestRetryPersistentFault(t *testing.T) {
	dir := t.TempDir()
	db, fs, rm := openRetryStore(t, dir, true, time.Minute, time.Minute, 100)
	mustDo(t, db.Flush())
	fs.SetFault(errorfs.Fault{Ops: vfs.OpCreate, Name: "*" + base.SegmentExt, Sticky: true, Err: syscall.ENOSPC})

	var stalled error
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		for i := 100; ; i++ {
			if err := rm.put(t, db, i); err != nil {
				stalled = err
				return
			}
		}
	}()
	// The writer stalls: the frozen memtables fill and stay.
	deadline := time.Now().Add(20 * time.Second)
	for {
		db.mu.Lock()
		full := len(db.imm) >= db.frozenLimit && db.flushWaiters.Load() > 0
		db.mu.Unlock()
		if full {
			break
		}
		select {
		case <-writer:
			t.Fatalf("the writer stopped: %v", stalled)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("writes never stalled on a full disk")
		}
		time.Sleep(time.Millisecond)
	}
	if st := db.Stats(); st.RetriedFailures == 0 || st.Memtables > db.frozenLimit+1 {
		t.Fatalf("retried %d, memtables %d (limit %d frozen)", st.RetriedFailures, st.Memtables, db.frozenLimit)
	}
	start := time.Now()
	mustDo(t, db.Close())
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v: it waited for the retry's backoff", d)
	}
	<-writer
	if !errors.Is(stalled, ErrClosed) {
		t.Fatalf("the stalled write returned %v, want ErrClosed", stalled)
	}
	fs.Clear()
	db = mustOpen(t, dir, retryOptions(vfs.Default, false))
	rm.check(t, db, "after reopen")
	mustDo(t, db.Flush())
	noLeftovers(t, db, dir)
	mustDo(t, db.Close())
	verifyClean(t, dir)
}

// TestRetryStickyStaysSticky: what may have broken a durability promise
// still makes the store read-only: EIO at each step of a segment, a
// directory sync that fails even for want of space, a manifest commit
// and a WAL sync.
func TestRetryStickyStaysSticky(t *testing.T) {
	seg := "*" + base.SegmentExt
	cases := []struct {
		name  string
		fault errorfs.Fault
	}{
		{"segment-create-EIO", errorfs.Fault{Ops: vfs.OpCreate, Name: seg, Err: syscall.EIO}},
		{"segment-write-EIO", errorfs.Fault{Ops: vfs.OpWrite, Name: seg, Err: syscall.EIO}},
		{"segment-write-short-EIO", errorfs.Fault{Ops: vfs.OpWrite, Name: seg, Err: syscall.EIO, Short: true}},
		{"segment-sync-EIO", errorfs.Fault{Ops: vfs.OpSync, Name: seg, Err: syscall.EIO}},
		{"syncdir-ENOSPC", errorfs.Fault{Ops: vfs.OpSyncDir, Err: syscall.ENOSPC}},
		{"manifest-commit-ENOSPC", errorfs.Fault{Ops: vfs.OpCommit, Err: syscall.ENOSPC}},
		{"wal-sync-ENOSPC", errorfs.Fault{Ops: vfs.OpSync, Name: "*" + base.WALExt, Err: syscall.ENOSPC}},
		{"wal-write-ENOSPC", errorfs.Fault{Ops: vfs.OpWrite, Name: "*" + base.WALExt, Err: syscall.ENOSPC}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := errorfs.New(vfs.Default)
			o := retryOptions(fs, false)
			o.Sync = true // every Put syncs the WAL
			db := mustOpen(t, dir, o)
			setRetryDelays(db, time.Millisecond, 4*time.Millisecond)
			rm := &retryModel{m: map[string]string{}}
			for i := range 50 {
				mustDo(t, rm.put(t, db, i))
			}
			fs.SetFault(tc.fault)
			var err error
			for i := 50; i < 100 && err == nil; i++ {
				err = rm.put(t, db, i)
			}
			if err == nil {
				err = db.Flush()
			}
			if err == nil || !errors.Is(err, tc.fault.Err) {
				t.Fatalf("the failing operation returned %v, want %v", err, tc.fault.Err)
			}
			if perr := db.Put([]byte("later"), []byte("x")); !errors.Is(perr, ErrReadOnly) || !errors.Is(perr, tc.fault.Err) {
				t.Fatalf("a write after the failure = %v, want ErrReadOnly wrapping %v", perr, tc.fault.Err)
			}
			if n := db.Stats().RetriedFailures; n != 0 {
				t.Fatalf("%d failures retried, want none", n)
			}
			fs.Clear()
			if err := db.Close(); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("Close = %v, want ErrReadOnly", err)
			}
			db = mustOpen(t, dir, smallOptions())
			defer db.Close()
			rm.check(t, db, "after reopen")
		})
	}
}

// segDirSyncFS fails, with the error set, each directory sync that
// writeSegment makes, and no other (a spare WAL's creation syncs the
// directory too, at moments a count of operations cannot tell apart).
type segDirSyncFS struct {
	vfs.FS
	err atomic.Pointer[error]
}

func (fs *segDirSyncFS) SyncDir(dir string) error {
	if p := fs.err.Load(); p != nil && strings.Contains(string(debug.Stack()), ").writeSegment(") {
		return &os.PathError{Op: "syncdir", Path: dir, Err: *p}
	}
	return fs.FS.SyncDir(dir)
}

// TestRetrySegmentDirSync: a failed sync of the directory after a new
// segment is sticky even for want of space (it covers other files'
// entries, which a failed sync may have dropped); running out of
// descriptors to open the directory, when no sync was made, is retried.
func TestRetrySegmentDirSync(t *testing.T) {
	for _, tc := range []struct {
		err    error
		sticky bool
	}{
		{syscall.ENOSPC, true},
		{syscall.EIO, true},
		{syscall.EMFILE, false},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			dir := t.TempDir()
			fs := &segDirSyncFS{FS: vfs.Default}
			db := mustOpen(t, dir, retryOptions(fs, false))
			setRetryDelays(db, time.Millisecond, 4*time.Millisecond)
			rm := &retryModel{m: map[string]string{}}
			for i := range 50 {
				mustDo(t, rm.put(t, db, i))
			}
			fs.err.Store(&tc.err)
			err := db.Flush()
			if !errors.Is(err, tc.err) || errors.Is(err, ErrReadOnly) != tc.sticky {
				t.Fatalf("Flush = %v, want %v, read-only %v", err, tc.err, tc.sticky)
			}
			perr := rm.put(t, db, 50)
			if tc.sticky {
				if !errors.Is(perr, ErrReadOnly) {
					t.Fatalf("Put after the failure = %v, want ErrReadOnly", perr)
				}
				fs.err.Store(nil)
				if err := db.Close(); !errors.Is(err, ErrReadOnly) {
					t.Fatalf("Close = %v, want ErrReadOnly", err)
				}
				db = mustOpen(t, dir, retryOptions(vfs.Default, false))
				defer db.Close()
				rm.check(t, db, "after reopen")
				return
			}
			mustDo(t, perr)
			waitRetries(t, db, 2)
			fs.err.Store(nil)
			succeedsOnceCleared(t, "Flush", db.Flush)
			noLeftovers(t, db, dir)
			reopenAndCheck(t, db, dir, rm)
		})
	}
}

// TestRetryClassification: only writeSegment's mark makes a failure
// retryable, and only errors that say a resource ran out get it.
func TestRetryClassification(t *testing.T) {
	wrap := func(err error) error { return &pathErr{err} }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{wrap(syscall.ENOSPC), true},
		{wrap(syscall.EDQUOT), true},
		{wrap(syscall.EMFILE), true},
		{wrap(syscall.ENFILE), true},
		{wrap(syscall.ENOMEM), true},
		{wrap(syscall.EIO), false},
		{errors.New("short write"), false},
		{fmt.Errorf("x: %w", base.Corruptf("f", 0, "bad")), false},
	} {
		if got := isRetryable(markRetryable(tc.err)); got != tc.want {
			t.Errorf("%v: retryable %v, want %v", tc.err, got, tc.want)
		}
		if isRetryable(tc.err) {
			t.Errorf("%v retryable without the mark", tc.err)
		}
	}
}

type pathErr struct{ err error }

func (e *pathErr) Error() string { return filepath.Join("op", e.err.Error()) }
func (e *pathErr) Unwrap() error { return e.err }

// TestRetryWALCreation: a WAL creation that runs out of space or file
// descriptors (a spare made ahead, or the rotation's own) does not make
// the store read-only: the writes that need the new WAL fail with the
// errno, reads and the writes that fit go on, and once the fault clears
// the next write that needs room rotates. EIO at the same step is still
// sticky.
func TestRetryWALCreation(t *testing.T) {
	for _, errno := range []error{syscall.ENOSPC, syscall.EMFILE, syscall.EIO} {
		t.Run(fmt.Sprint(errno), func(t *testing.T) {
			dir := t.TempDir()
			// A failed WAL creation is tried again by a write that needs
			// room only after the backoff, at most maxWALRetryDelay.
			db, fs, rm := openRetryStore(t, dir, false, time.Hour, time.Hour, 50)
			mustDo(t, db.Flush())
			fs.SetFault(errorfs.Fault{Ops: vfs.OpCreate, Name: "*" + base.WALExt, Sticky: true, Err: errno})
			// Each Flush rotates: the spares made ahead go first, then a
			// rotation must create its WAL.
			var err error
			next := 50
			for range 20 {
				if err = rm.put(t, db, next); err == nil {
					next++
					err = db.Flush()
				}
				if err != nil {
					break
				}
			}
			if errno == syscall.EIO {
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("the write or flush that met EIO creating a WAL: %v", err)
				}
				if perr := db.Put([]byte("later"), nil); !errors.Is(perr, ErrReadOnly) {
					t.Fatalf("a write after EIO creating a WAL = %v, want ErrReadOnly", perr)
				}
				fs.Clear()
				if err := db.Close(); !errors.Is(err, ErrReadOnly) {
					t.Fatalf("Close = %v, want ErrReadOnly", err)
				}
				db = mustOpen(t, dir, smallOptions())
				defer db.Close()
				rm.check(t, db, "after reopen")
				return
			}
			mustBeRetryable(t, "the write or flush that needed a WAL", err, errno)
			if n := db.Stats().RetriedFailures; n == 0 {
				t.Fatal("the failed WAL creation is not counted as retried")
			}
			rm.check(t, db, "during the fault") // reads go on
			// The writes that need no new WAL still succeed; those that
			// do (the memtable full) fail with the errno, never
			// ErrReadOnly, and most of them at once: a write loop does
			// not try a creation per write.
			fired, start, fails := fs.Fired(), time.Now(), 0
			for ; fails < 1000 && next < 100_000; next++ {
				if err := rm.put(t, db, next); err != nil {
					mustBeRetryable(t, "Put during the fault", err, errno)
					fails++
				}
			}
			if fails < 1000 {
				t.Fatalf("%d of the writes failed with the memtable full, want 1000", fails)
			}
			if tried, most := fs.Fired()-fired, 2+int(time.Since(start)/maxWALRetryDelay); tried > most {
				t.Fatalf("1,000 writes that needed a WAL tried %d creations, want at most %d", tried, most)
			}
			fired = fs.Fired()
			mustBeRetryable(t, "Flush during the fault", db.Flush(), errno)
			if fs.Fired() == fired {
				t.Fatal("Flush during the fault did not try to create a WAL")
			}
			// Past the backoff a write that needs room tries to create a
			// WAL itself, and fails the same way.
			time.Sleep(maxWALRetryDelay)
			fired = fs.Fired()
			if err := rm.put(t, db, next); err == nil {
				t.Fatal("a write that needs a new WAL succeeded during the fault")
			} else {
				mustBeRetryable(t, "Put after the backoff", err, errno)
			}
			next++
			if fs.Fired() == fired {
				t.Fatal("a write that needs room after the backoff did not try to create a WAL")
			}
			fs.Clear()
			// An explicit Flush tries at once, whatever the backoff.
			succeedsOnceCleared(t, "Flush", db.Flush)
			for i := next; i < next+100; i++ {
				mustDo(t, rm.put(t, db, i))
			}
			mustDo(t, db.Flush())
			rm.check(t, db, "after the fault")
			reopenAndCheck(t, db, dir, rm)
		})
	}
}

// TestFlushTriesNowDuringStreak: a Flush while the flushes fail for want
// of a resource asks for an attempt at once rather than waiting out the
// backoff (an hour here), and the background makes no other attempt
// before the backoff ends: a Flush returns its attempt's failure while the
// fault lasts, and once the fault clears it flushes every memtable
// waiting, the one frozen by an earlier Flush included, before it
// returns nil.
func TestFlushTriesNowDuringStreak(t *testing.T) {
	dir := t.TempDir()
	db, fs, rm := openRetryStore(t, dir, false, time.Hour, time.Hour, 50)
	fs.SetFault(errorfs.Fault{Ops: vfs.OpCreate, Name: "*" + base.SegmentExt, Sticky: true, Err: syscall.ENOSPC})
	flush := func(what string) error {
		t.Helper()
		c := make(chan error, 1)
		go func() { c <- db.Flush() }()
		select {
		case err := <-c:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s waited for the backoff instead of trying now", what)
			return nil
		}
	}
	mustBeRetryable(t, "Flush", flush("the first Flush"), syscall.ENOSPC)
	// The memtable is frozen and waits for its flush; the active one is
	// empty. The backoff runs for an hour: no attempt is made meanwhile
	// (a loop of attempts on a full disk would spin), but the one each
	// Flush asks for. (The first Flush may have asked for one after the
	// background's first attempt, if that failed before the Flush waited.)
	failed := db.Stats().RetriedFailures
	if failed != 1 && failed != 2 {
		t.Fatalf("%d failed flushes after the first Flush, want 1 or 2", failed)
	}
	time.Sleep(100 * time.Millisecond)
	if n := db.Stats().RetriedFailures; n != failed {
		t.Fatalf("%d failed flushes within the hour's backoff, then %d", failed, n)
	}
	mustBeRetryable(t, "Flush during the streak", flush("a Flush during the streak"), syscall.ENOSPC)
	time.Sleep(100 * time.Millisecond)
	if n := db.Stats().RetriedFailures; n != failed+1 {
		t.Fatalf("%d failed flushes, then %d after a Flush asked for one attempt, want one more", failed, n)
	}
	fs.Clear()
	mustDo(t, flush("a Flush once the fault cleared"))
	db.mu.Lock()
	left := len(db.imm)
	db.mu.Unlock()
	if left != 0 {
		t.Fatalf("Flush returned nil with %d memtables still waiting for their flush", left)
	}
	rm.check(t, db, "after the fault")
	reopenAndCheck(t, db, dir, rm)
}

// TestRetryBackoff pins the backoff of a failure streak (retryState): the
// first failure waits retryMin, each further one twice as long up to
// retryMax, and a success ends the streak, so that the next failure waits
// retryMin again; Flush-style callers see a failure only if one came
// after they began (failedSince). A WAL creation is not tried again, by a
// write, before the backoff has passed, or maxWALRetryDelay if that is
// shorter (tooSoonLocked). Each failure counts in RetriedFailures.
func TestRetryBackoff(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	setRetryDelays(db, 10*time.Millisecond, 100*time.Millisecond)
	r := &retryState{what: "test", then: retryingThen}
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := r.tooSoonLocked(); err != nil {
		t.Fatalf("tooSoonLocked before any failure = %v", err)
	}
	before := db.retried
	var delays []time.Duration
	for range 6 {
		db.retryFailedLocked(r, syscall.ENOSPC)
		delays = append(delays, r.delay)
	}
	want := []time.Duration{10, 20, 40, 80, 100, 100}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if fmt.Sprint(delays) != fmt.Sprint(want) {
		t.Fatalf("backoffs of 6 failures in a row: %v, want %v", delays, want)
	}
	if n := db.retried - before; n != 6 || r.fails != 6 || !errors.Is(db.lastRetried, syscall.ENOSPC) {
		t.Fatalf("6 failures counted %d times, %d in the streak, last %v", n, r.fails, db.lastRetried)
	}
	if err := r.failedSince(r.fails); err != nil {
		t.Fatalf("failedSince(now) = %v, want nil: no failure since", err)
	}
	if err := r.failedSince(r.fails - 1); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("failedSince(before the last failure) = %v, want it", err)
	}
	// The last failure was just now: too soon for a WAL creation, until
	// the backoff has passed.
	if err := r.tooSoonLocked(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("tooSoonLocked just after a failure = %v, want it", err)
	}
	r.at = time.Now().Add(-r.delay - time.Millisecond)
	if err := r.tooSoonLocked(); err != nil {
		t.Fatalf("tooSoonLocked after the backoff = %v, want nil", err)
	}
	// A backoff longer than maxWALRetryDelay: a creation is tried again
	// after maxWALRetryDelay all the same.
	r.delay = time.Hour
	r.at = time.Now().Add(-maxWALRetryDelay + 100*time.Millisecond)
	if err := r.tooSoonLocked(); err == nil {
		t.Fatal("tooSoonLocked before maxWALRetryDelay passed = nil, want the failure")
	}
	r.at = time.Now().Add(-maxWALRetryDelay - time.Millisecond)
	if err := r.tooSoonLocked(); err != nil {
		t.Fatalf("tooSoonLocked after maxWALRetryDelay = %v, want nil", err)
	}
	db.retrySucceededLocked(r)
	if r.err != nil || r.failedSince(0) != nil || r.tooSoonLocked() != nil {
		t.Fatalf("after a success: err %v, failedSince(0) %v, tooSoonLocked %v; want the streak over", r.err, r.failedSince(0), r.tooSoonLocked())
	}
	db.retryFailedLocked(r, syscall.EMFILE)
	if r.delay != 10*time.Millisecond {
		t.Fatalf("backoff of the first failure of a new streak: %v, want retryMin", r.delay)
	}
}

// TestKickOutsideStreakIsDropped: WaitForCompactions asks the flushes and
// merges to retry now (kickLocked) whether or not they fail; asked while
// no streak is on, the request is dropped, not left for a later streak,
// whose first failure would then be retried at once instead of after its
// backoff (an hour here).
func TestKickOutsideStreakIsDropped(t *testing.T) {
	fs := errorfs.New(vfs.Default)
	db := mustOpen(t, t.TempDir(), retryOptions(fs, false))
	defer db.Close()
	setRetryDelays(db, time.Hour, time.Hour)
	// A merge running (simulated by its count) keeps WaitForCompactions
	// waiting, after it has asked for retries; cancelled, it returns.
	db.mu.Lock()
	db.compacting++
	db.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := db.WaitForCompactions(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForCompactions with a merge running and a cancelled context = %v", err)
	}
	db.mu.Lock()
	db.compacting--
	db.mu.Unlock()
	fs.SetFault(errorfs.Fault{Ops: vfs.OpCreate, Name: "*" + base.SegmentExt, Sticky: true, Err: syscall.ENOSPC})
	for i := 0; db.Stats().RetriedFailures == 0; i++ {
		if i == 100_000 {
			t.Fatal("no background flush failed")
		}
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	time.Sleep(100 * time.Millisecond)
	if n := db.Stats().RetriedFailures; n != 1 {
		t.Fatalf("%d failed flushes within the first hour's backoff, want 1", n)
	}
	fs.Clear()
}
