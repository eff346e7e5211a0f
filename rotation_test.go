package bloomkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/wal"
)

// holdFS is the operating system's file system, except that the Sync of
// one WAL (held, by base name), and with segs that of every segment,
// blocks until release is closed, and that a WAL is read before it is
// removed, recording whether it ended in a seal.
type holdFS struct {
	vfs.FS
	osBootID
	mu   sync.Mutex
	segs bool
	held string
	// afterSeal holds the held WAL's Syncs only once a seal mark was
	// written to it (through Write: DisableMmap), so that a test sees
	// the store as a crash during a seal's last fsync leaves it.
	afterSeal bool
	entered   chan struct{} // closed when the held WAL's Sync starts
	release   chan struct{}
	sealed    map[string]bool // WAL name -> ended in a seal when removed
}

func (h *holdFS) Create(name string) (vfs.File, error) {
	f, err := h.FS.Create(name)
	if err == nil && h.segs && filepath.Ext(name) == base.SegmentExt {
		return &armFile{File: f, release: h.release}, nil
	}
	if err != nil || filepath.Ext(name) != base.WALExt {
		return f, err
	}
	hf := &holdFile{File: f, fs: h, name: filepath.Base(name)}
	if _, ok := vfs.MapFd(f); ok {
		return &holdMappedFile{hf}, nil
	}
	return hf, nil
}

func (h *holdFS) Remove(name string) error {
	if filepath.Ext(name) == base.WALExt {
		res, err := wal.Recover(h.FS, name, wal.RecoverOptions{}, func([]byte, int64) error { return nil })
		h.mu.Lock()
		h.sealed[filepath.Base(name)] = err == nil && res.Sealed
		h.mu.Unlock()
	}
	return h.FS.Remove(name)
}

// holdActive holds the Sync of db's active WAL, and returns its name.
func (h *holdFS) holdActive(db *DB) string {
	db.mu.Lock()
	name := base.WALFileName(db.logNum)
	db.mu.Unlock()
	h.mu.Lock()
	h.held = name
	h.mu.Unlock()
	return name
}

type holdFile struct {
	vfs.File
	fs     *holdFS
	name   string
	sealed atomic.Bool // a seal mark was written through Write
}

func (f *holdFile) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	if err == nil && isSealMark(b) {
		f.sealed.Store(true)
	}
	return n, err
}

func (f *holdFile) Sync() error {
	f.fs.mu.Lock()
	held := f.fs.held == f.name && (!f.fs.afterSeal || f.sealed.Load())
	f.fs.mu.Unlock()
	if held {
		select {
		case <-f.fs.entered:
		default:
			close(f.fs.entered)
		}
		<-f.fs.release
	}
	return f.File.Sync()
}

// holdMappedFile lets the WAL be mapped: its writes bypass the wrapper,
// its Syncs do not.
type holdMappedFile struct{ *holdFile }

func (f *holdMappedFile) MapFd() (uintptr, bool) { return vfs.MapFd(f.File) }

// TestRotationDoesNotWaitForOldWALSync holds the fsync of the WAL a
// rotation replaces, and the flushes (so that the WAL stays live), and
// checks what must and must not wait for it: the writer that rotated, the
// writes after it, and the next rotation do not (their bytes are in the
// kernel, which is all an unsynced write promises), nor is the WAL
// fsynced while nothing asks for it; a synced write to the new WAL waits
// for it, for recovery after a power cut trusts the new WAL only if the
// old one was sealed. Once the fsync is let go, the old WAL is sealed
// before it is removed.
func TestRotationDoesNotWaitForOldWALSync(t *testing.T) {
	for _, mmap := range []bool{true, false} {
		t.Run(map[bool]string{true: "mapped", false: "write"}[mmap], func(t *testing.T) {
			h := &holdFS{FS: vfs.Default, segs: true, entered: make(chan struct{}), release: make(chan struct{}), sealed: map[string]bool{}}
			o := smallOptions()
			o.FS, o.MemtableSize, o.DisableMmap = h, 64<<10, !mmap
			db := mustOpen(t, t.TempDir(), o)
			defer db.Close()
			var once sync.Once
			let := func() { once.Do(func() { close(h.release) }) }
			defer let() // before Close: a failed test leaves no fsync held

			first := h.holdActive(db)

			// Fill past two memtables, and then a little more: each
			// rotation queues the WAL it replaced for sealLoop, and
			// neither waits for it. (A third would wait for a flush:
			// maxFrozen.)
			logNum := func() uint64 {
				db.mu.Lock()
				defer db.mu.Unlock()
				return db.logNum
			}
			wrote := make(chan int, 1)
			go func() {
				n, after, last, rotations := 0, -1, logNum(), 0
				for ; after < 0 || n < after+200; n++ {
					if err := db.Put(faultKey(n), faultValue(n)); err != nil {
						t.Error(err)
						break
					}
					if l := logNum(); l != last {
						last, rotations = l, rotations+1
						if rotations == 2 {
							after = n
						}
					}
				}
				wrote <- n
			}()
			var n int
			select {
			case n = <-wrote:
			case <-time.After(30 * time.Second):
				t.Fatal("unsynced Puts waited for the fsync of the WAL their rotation replaced")
			}
			select {
			case <-h.entered:
				t.Fatal("the replaced WAL was fsynced while nothing asked for it")
			default:
			}
			for i := range n {
				if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
					t.Fatalf("Get(%s) = %q, %v; want its value", faultKey(i), v, err)
				}
			}

			// A synced write must wait for the old WAL's seal.
			synced := make(chan error, 1)
			go func() { synced <- db.Sync() }()
			select {
			case err := <-synced:
				t.Fatalf("Sync returned (%v) while the replaced WAL's fsync was held", err)
			case <-time.After(100 * time.Millisecond):
			}
			select {
			case <-h.entered:
			case <-time.After(30 * time.Second):
				t.Fatal("Sync did not fsync the replaced WAL")
			}
			let()
			if err := <-synced; err != nil {
				t.Fatal(err)
			}
			mustDo(t, db.Flush())
			h.mu.Lock()
			sealed, removed := h.sealed[first]
			h.mu.Unlock()
			if !removed || !sealed {
				t.Fatalf("replaced WAL %s: removed %v, sealed when removed %v; want both", first, removed, sealed)
			}
		})
	}
}

// TestObsoleteWALNotSynced: a WAL whose memtable is flushed before any
// goroutine needs it sealed is closed without an fsync and removed: with
// writes that are not synced, its bytes need never reach the device.
func TestObsoleteWALNotSynced(t *testing.T) {
	h := &holdFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{}), sealed: map[string]bool{}}
	o := smallOptions()
	o.FS = h
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	defer close(h.release) // before Close: a failed test leaves no fsync held
	first := h.holdActive(db)
	for i := range 100 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	flushed := make(chan error, 1)
	go func() { flushed <- db.Flush() }()
	select {
	case err := <-flushed:
		mustDo(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Flush waited for the fsync of the WAL it made obsolete")
	}
	h.mu.Lock()
	sealed, removed := h.sealed[first]
	h.mu.Unlock()
	if !removed || sealed {
		t.Fatalf("flushed WAL %s: removed %v, sealed %v; want removed unsealed", first, removed, sealed)
	}
	for i := range 100 {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("Get(%s) = %q, %v; want its value", faultKey(i), v, err)
		}
	}
}

// TestSpareWAL: a rotation leaves the next WAL created ahead (makeSpare,
// in a goroutine of its own), the
// next rotation starts it instead of creating one, and Close removes the
// spare it leaves, so that a closed store holds one WAL.
func TestSpareWAL(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	mustDo(t, db.Flush())
	spare, spareNum, active := waitSpare(t, db)
	if spare == nil || spareNum <= active {
		t.Fatalf("after a rotation: spare %v numbered %d, active WAL %d; want a spare numbered above it", spare != nil, spareNum, active)
	}
	// Made one at a time, spareWALs of them, numbered in order above the
	// active WAL.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		db.mu.Lock()
		nums := []uint64{db.logNum}
		for _, s := range db.spares {
			nums = append(nums, s.num)
		}
		making := db.spareMade != nil
		db.mu.Unlock()
		if len(nums) == 1+spareWALs && !making {
			if !slices.IsSorted(nums) || len(slices.Compact(slices.Clone(nums))) != len(nums) {
				t.Fatalf("active WAL and spares numbered %v, want rising", nums)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("active WAL and spares %v (making: %v), want %d spares", nums, making, spareWALs)
		}
	}
	mustDo(t, db.Put([]byte("b"), []byte("2")))
	mustDo(t, db.Flush())
	db.mu.Lock()
	active = db.logNum
	db.mu.Unlock()
	if active != spareNum {
		t.Fatalf("the rotation started WAL %d, not the spare %d", active, spareNum)
	}
	if spare, _, _ = waitSpare(t, db); spare == nil {
		t.Fatal("no spare after the second rotation")
	}
	mustDo(t, db.Close())
	wals, err := filepath.Glob(filepath.Join(dir, "*"+base.WALExt))
	if err != nil {
		t.Fatal(err)
	}
	if len(wals) != 1 || filepath.Base(wals[0]) != base.WALFileName(active) {
		t.Fatalf("closed store holds WALs %v, want only %s", wals, base.WALFileName(active))
	}
	db = mustOpen(t, dir, nil)
	defer db.Close()
	for k, v := range map[string]string{"a": "1", "b": "2"} {
		if got, err := db.Get([]byte(k)); err != nil || string(got) != v {
			t.Fatalf("Get(%s) after reopen = %q, %v", k, got, err)
		}
	}
}

// waitSpare waits up to 10 s for makeSpare to have made a spare WAL, and
// returns the first (nil if none), its number and the active WAL's.
func waitSpare(t *testing.T, db *DB) (*wal.Writer, uint64, uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		db.mu.Lock()
		var spare spareWAL
		if len(db.spares) > 0 {
			spare = db.spares[0]
		}
		active := db.logNum
		db.mu.Unlock()
		if spare.w != nil || time.Now().After(deadline) {
			return spare.w, spare.num, active
		}
	}
}

// TestReplayEndsAtUnsealedWAL: of two WALs, the older one holding a and
// the newer b, Open replays the newer only if the older is known whole:
// sealed, or written under this boot. An older WAL that is neither may
// have lost its last writes to a power cut while the newer one's reached
// the disk (a rotation fsyncs the old WAL beside the writes to the new),
// so the store's history ends with it: a is recovered, b is not, and
// VerifyDir says so.
func TestReplayEndsAtUnsealedWAL(t *testing.T) {
	thisBoot := vfs.BootID(vfs.Default)
	otherBoot := [16]byte{'o', 't', 'h', 'e', 'r'}
	for _, tc := range []struct {
		name  string
		seal  bool
		boot  [16]byte
		wantB bool
	}{
		{"unsealed, another boot", false, otherBoot, false},
		{"sealed, another boot", true, otherBoot, true},
		{"unsealed, this boot", false, thisBoot, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.boot == ([16]byte{}) {
				t.Skip("the boot ID is unknown on this system")
			}
			dir := t.TempDir()
			db := mustOpen(t, dir, nil)
			db.mu.Lock()
			first := db.logNum
			db.mu.Unlock()
			mustDo(t, db.Close())
			writeWAL := func(num uint64, boot [16]byte, seq uint64, key, value string, seal bool) {
				t.Helper()
				path := filepath.Join(dir, base.WALFileName(num))
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
				f, err := vfs.Default.Create(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				w, err := wal.NewMarkedWriter(f, base.WALFileName(num), wal.Mark{BootID: boot})
				if err != nil {
					t.Fatal(err)
				}
				rec := batch.AppendOp(nil, base.KindPut, []byte(key), []byte(value))
				batch.SetHeader(rec, seq, 1)
				if _, err := w.WriteRecords(rec); err != nil {
					t.Fatal(err)
				}
				if seal {
					mustDo(t, w.Seal())
				}
			}
			writeWAL(first, tc.boot, 1, "a", "1", tc.seal)
			writeWAL(first+1, otherBoot, 2, "b", "2", false)

			rep, err := VerifyDir(context.Background(), vfs.Default, dir)
			if err != nil {
				t.Fatal(err)
			}
			noted := strings.Contains(fmt.Sprint(rep.Notes), "ignores the 1 later WALs")
			if noted == tc.wantB || len(rep.Problems) > 0 {
				t.Errorf("VerifyDir notes %v, problems %v; want a note that later WALs are ignored: %v", rep.Notes, rep.Problems, !tc.wantB)
			}

			db = mustOpen(t, dir, nil)
			defer db.Close()
			if v, err := db.Get([]byte("a")); err != nil || string(v) != "1" {
				t.Fatalf("Get(a) = %q, %v; want 1", v, err)
			}
			v, err := db.Get([]byte("b"))
			switch {
			case tc.wantB && (err != nil || string(v) != "2"):
				t.Fatalf("Get(b) = %q, %v; want 2 (the older WAL is whole)", v, err)
			case !tc.wantB && !errors.Is(err, ErrNotFound):
				t.Fatalf("Get(b) = %q, %v; want ErrNotFound (the history ends with the older WAL)", v, err)
			}
		})
	}
}

// armFS is the operating system's file system, except that once armed,
// the Sync of the next WAL file created blocks until release is closed.
type armFS struct {
	vfs.FS
	osBootID
	mu      sync.Mutex
	armed   bool
	held    string        // base name of the WAL whose Sync is held
	release chan struct{} // closed to let it go
}

func (a *armFS) Create(name string) (vfs.File, error) {
	f, err := a.FS.Create(name)
	if err != nil || filepath.Ext(name) != base.WALExt {
		return f, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.armed {
		return f, nil
	}
	a.armed, a.held = false, filepath.Base(name)
	return &armFile{File: f, release: a.release}, nil
}

type armFile struct {
	vfs.File
	release chan struct{}
	err     error // if set, what Sync returns once released, without syncing
}

func (f *armFile) Sync() error {
	<-f.release
	if f.err != nil {
		return f.err
	}
	return f.File.Sync()
}

// TestRotationWaitsForSpareInFlight: a rotation that finds the next spare
// WAL still being made waits for it instead of creating a WAL beside it.
// A WAL created beside it would be numbered above the spare, which would
// then be below the active WAL and have to be removed; and a removal is
// not durable without a directory fsync, so after a power cut the empty,
// unsealed spare could come back between two live WALs and end the
// store's history there, losing the synced writes after it.
func TestRotationWaitsForSpareInFlight(t *testing.T) {
	a := &armFS{FS: vfs.Default, release: make(chan struct{})}
	o := smallOptions()
	o.FS = a
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	var once sync.Once
	let := func() { once.Do(func() { close(a.release) }) }
	defer let()

	mustDo(t, db.Put([]byte("a"), []byte("1")))
	mustDo(t, db.Flush())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		db.mu.Lock()
		ready := len(db.spares)
		db.mu.Unlock()
		if ready == spareWALs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spares after the first rotation, want %d", ready, spareWALs)
		}
	}
	a.mu.Lock()
	a.armed = true // the spare made by the next rotation is held
	a.mu.Unlock()
	for i := range spareWALs { // start the spares made ahead
		mustDo(t, db.Put(fmt.Appendf(nil, "b%d", i), []byte("2")))
		mustDo(t, db.Flush())
	}

	mustDo(t, db.Put([]byte("c"), []byte("3")))
	flushed := make(chan error, 1)
	go func() { flushed <- db.Flush() }()
	select {
	case err := <-flushed:
		t.Fatalf("the rotation returned (%v) while the next spare was being made", err)
	case <-time.After(200 * time.Millisecond):
	}
	let()
	mustDo(t, <-flushed)
	a.mu.Lock()
	held := a.held
	a.mu.Unlock()
	db.mu.Lock()
	active := base.WALFileName(db.logNum)
	db.mu.Unlock()
	if held == "" || active != held {
		t.Fatalf("active WAL %s after the rotation, want the spare it waited for, %q", active, held)
	}
	for k, v := range map[string]string{"a": "1", "b0": "2", "c": "3"} {
		if got, err := db.Get([]byte(k)); err != nil || string(got) != v {
			t.Fatalf("Get(%s) = %q, %v", k, got, err)
		}
	}
}

// noBootFS is the OS file system without a boot ID: recovery treats every
// WAL as written under another boot, as after a power cut.
type noBootFS struct{ vfs.FS }

// sealFailFS holds segment fsyncs until release is closed, so that a WAL
// a rotation replaced stays live and is sealed rather than dropped, and
// fails every write to the WAL named failW once that is set.
type sealFailFS struct {
	vfs.FS
	osBootID
	release chan struct{}
	mu      sync.Mutex
	failW   string
	// failSeals fails every write of a seal mark, to any WAL, and
	// failPrevSealed every write of a prev-sealed mark.
	failSeals, failPrevSealed bool
	// failSegs fails the segment fsyncs held, once released: the flush
	// fails, and the WAL it would have made obsolete stays live.
	failSegs bool
}

// isSealMark reports whether b is one WAL mark record with the seal flag
// (wal/FORMAT.md: a 9-byte header of type 2, a 25-byte payload whose last
// byte holds the flags, bit 1 the seal), as the writer writes it alone.
func isSealMark(b []byte) bool {
	return len(b) == 9+25 && b[8] == 2 && b[len(b)-1]&2 != 0
}

// isPrevSealedMark is isSealMark for the mark with the prev-sealed flag
// (bit 2), which the writer also writes alone.
func isPrevSealedMark(b []byte) bool {
	return len(b) == 9+25 && b[8] == 2 && b[len(b)-1]&4 != 0
}

func (s *sealFailFS) Create(name string) (vfs.File, error) {
	f, err := s.FS.Create(name)
	if err != nil {
		return f, err
	}
	switch filepath.Ext(name) {
	case base.SegmentExt:
		var err error
		if s.failSegs {
			err = errors.New("injected segment sync failure")
		}
		return &armFile{File: f, release: s.release, err: err}, nil
	case base.WALExt:
		return &sealFailFile{File: f, fs: s, name: filepath.Base(name)}, nil
	}
	return f, nil
}

type sealFailFile struct {
	vfs.File
	fs   *sealFailFS
	name string
}

func (f *sealFailFile) Write(b []byte) (int, error) {
	f.fs.mu.Lock()
	fail := f.fs.failW == f.name || f.fs.failSeals && isSealMark(b) || f.fs.failPrevSealed && isPrevSealedMark(b)
	f.fs.mu.Unlock()
	if fail {
		return 0, errors.New("injected write failure")
	}
	return f.File.Write(b)
}

// TestSealFailureFailsLaterSyncedWrites: the seal of a WAL a rotation
// replaced fails after its fsync succeeded (the seal mark's write fails).
// A synced write already queued in the next WAL must then fail, not be
// acknowledged: recovery after a power loss stops at the older WAL,
// marked and unsealed, and replays nothing after it, so an acknowledged
// write there would be lost. Whatever WriteSync returns, a store reopened
// as after a reboot must hold the write if it was acknowledged.
func TestSealFailureFailsLaterSyncedWrites(t *testing.T) {
	s := &sealFailFS{FS: vfs.Default, release: make(chan struct{})}
	db, dir, _ := openSealFail(t, s, s)
	logNum := func() uint64 { return activeLogNum(db) }
	first := logNum()
	for i := 0; logNum() == first; i++ {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	s.mu.Lock()
	s.failW = base.WALFileName(first)
	s.mu.Unlock()

	b := NewBatch()
	mustDo(t, b.Put([]byte("synced"), []byte("1")))
	err := db.WriteSync(b)
	if err == nil {
		// Acknowledged: it must survive a power cut now.
		o2 := smallOptions()
		o2.FS = noBootFS{vfs.Default}
		db2 := mustOpen(t, copyStoreFiles(t, dir), o2)
		defer db2.Close()
		if v, gerr := db2.Get([]byte("synced")); gerr != nil {
			t.Fatalf("WriteSync returned nil, but after a reboot Get(synced) = %q, %v: an acknowledged synced write is lost", v, gerr)
		}
		return
	}
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WriteSync after the failed seal: %v, want ErrReadOnly", err)
	}
	if err := db.Put([]byte("after"), []byte("x")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put after the failed seal: %v, want ErrReadOnly", err)
	}
}

// openSealFail opens a store on fsys, which is s or s without its boot
// ID, with small memtables and no mapping (so that every WAL write goes
// through s). The store is closed when the test ends, after release,
// which lets s's held segment fsyncs go (and which a test may call first).
func openSealFail(t *testing.T, s *sealFailFS, fsys vfs.FS) (db *DB, dir string, release func()) {
	t.Helper()
	o := smallOptions()
	o.FS, o.DisableMmap = fsys, true
	dir = t.TempDir()
	db = mustOpen(t, dir, o)
	var once sync.Once
	release = func() { once.Do(func() { close(s.release) }) }
	t.Cleanup(func() { release(); db.Close() })
	return db, dir, release
}

// activeLogNum returns the number of db's active WAL.
func activeLogNum(db *DB) uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.logNum
}

// holdSegmentsFS is the OS file system, with or without its boot ID,
// holding every segment creation until release is closed: a flush cannot
// then make a rotated WAL obsolete before a test's crash.
type holdSegmentsFS struct {
	vfs.FS
	boot    bool
	release chan struct{}
}

func (f *holdSegmentsFS) BootID() [16]byte {
	if !f.boot {
		return [16]byte{}
	}
	return vfs.BootID(vfs.Default)
}

func (f *holdSegmentsFS) Create(name string) (vfs.File, error) {
	if filepath.Ext(name) == base.SegmentExt {
		<-f.release
	}
	return f.FS.Create(name)
}

// TestProcessCrashWithoutBootID kills the process (copies the store as a
// kill leaves it) after a rotation, while the old WAL's flush cannot
// finish, with writes acknowledged in the new WAL; without Options.Sync.
// Recovery must find every acknowledged write. Where the machine's boot
// is unknown (darwin, windows, a file system that does not name it),
// recovery cannot tell this from a power cut and stops at an unsealed
// WAL that has a successor; the rotation then seals the old WAL before
// the new one takes writes. Before it did, every write in the new WAL
// was lost here.
func TestProcessCrashWithoutBootID(t *testing.T) {
	for _, boot := range []bool{true, false} {
		t.Run(fmt.Sprintf("bootID=%v", boot), func(t *testing.T) {
			db, dir, release := openHoldingSegments(t, boot)
			rotated := func() bool { db.mu.Lock(); defer db.mu.Unlock(); return len(db.imm) > 0 }
			val := make([]byte, 1000)
			n := 0
			for ; !rotated(); n++ {
				mustDo(t, db.Put(fmt.Appendf(nil, "key-%05d", n), val))
			}
			for range 20 { // acknowledged in the new WAL
				mustDo(t, db.Put(fmt.Appendf(nil, "key-%05d", n), val))
				n++
			}
			crashed := copyStoreFiles(t, dir)
			release()

			db2 := mustOpen(t, crashed, &Options{FS: &holdSegmentsFS{FS: vfs.Default, boot: boot, release: closedChan()}, MemtableSize: 64 << 10})
			defer db2.Close()
			var missing []int
			for i := range n {
				if _, err := db2.Get(fmt.Appendf(nil, "key-%05d", i)); errors.Is(err, ErrNotFound) {
					missing = append(missing, i)
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if len(missing) > 0 {
				t.Fatalf("after a process crash, %d of %d acknowledged writes are missing (first %d, last %d)",
					len(missing), n, missing[0], missing[len(missing)-1])
			}
		})
	}
}

// TestDamagedLengthInPreallocatedWAL: on Linux a WAL is written through a
// mapping of a preallocated file and trimmed to its records only when it
// is closed, and a WAL a rotation replaced stays open until its memtable's
// flush commits. A bit flipped in the length of its first batch, in the
// image a kill of the process leaves, makes the record claim every record
// after it and run into the zero tail: recovery read that as a torn tail,
// dropped the rest of the WAL and replayed the newer one, and the store
// opened with the later writes present and the earlier ones missing,
// under the same boot, where the page cache held every byte. Open must
// report ErrCorrupt naming the WAL and the damaged record, and leave the
// file alone. Without a boot ID the rotation sealed the WAL, and the seal
// inside the claimed bytes claims them synced.
func TestDamagedLengthInPreallocatedWAL(t *testing.T) {
	for _, boot := range []bool{true, false} {
		t.Run(fmt.Sprintf("bootID=%v", boot), func(t *testing.T) {
			db, dir, release := openHoldingSegments(t, boot)
			replaced := func() uint64 {
				db.mu.Lock()
				defer db.mu.Unlock()
				if len(db.imm) == 0 {
					return 0
				}
				return db.imm[0].logNum
			}
			val := make([]byte, 1000)
			n := 0
			for ; replaced() == 0; n++ {
				mustDo(t, db.Put(fmt.Appendf(nil, "key-%05d", n), val))
			}
			for range 20 { // in the new WAL
				mustDo(t, db.Put(fmt.Appendf(nil, "key-%05d", n), val))
				n++
			}
			name := base.WALFileName(replaced())
			crashed := copyStoreFiles(t, dir)
			release()

			path := filepath.Join(crashed, name)
			data, err := os.ReadFile(path)
			mustDo(t, err)
			starts, end := walRecordStarts(t, data)
			victim := starts[0]
			claimed := victim + walRecordHeaderLen + int(binary.LittleEndian.Uint32(data[victim+4:])|1<<16)
			if claimed <= end {
				t.Fatalf("the damaged length claims %d bytes, within the WAL's records (%d): not the case under test", claimed, end)
			}
			if len(data) < claimed {
				// Written with write(2) (no mapping on this platform):
				// the zero tail a preallocated file has.
				data = append(data, make([]byte, claimed+4096-len(data))...)
			}
			data[victim+6] ^= 1 // length bit 16: 64 KiB more
			mustDo(t, os.WriteFile(path, data, 0o644))

			db2, err := Open(crashed, &Options{FS: &holdSegmentsFS{FS: vfs.Default, boot: boot, release: closedChan()}, MemtableSize: 64 << 10})
			if err == nil {
				db2.Close()
				t.Fatalf("Open of a store whose replaced WAL has a damaged length (%s at %d) succeeded", name, victim)
			}
			wantCorrupt(t, err, name, victim, victim, "Open")
			wantUnchanged(t, crashed, name, data)
		})
	}
}

// openHoldingSegments opens a store in a new directory on a
// holdSegmentsFS, with or without the boot ID, and 64 KiB memtables.
// release lets its segment creations go (once is enough); the store is
// closed, after a release, when the test ends.
func openHoldingSegments(t *testing.T, boot bool) (db *DB, dir string, release func()) {
	t.Helper()
	dir = t.TempDir()
	fsys := &holdSegmentsFS{FS: vfs.Default, boot: boot, release: make(chan struct{})}
	db = mustOpen(t, dir, &Options{FS: fsys, MemtableSize: 64 << 10})
	var once sync.Once
	release = func() { once.Do(func() { close(fsys.release) }) }
	t.Cleanup(func() { release(); db.Close() })
	return db, dir, release
}

// closedChan returns a closed channel: a holdSegmentsFS that holds nothing.
func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// osBootID gives a test's wrapper of the operating system's file system
// the system's boot ID. vfs.BootID finds one only on a file system with
// the method, and without it the store takes the path of a platform that
// has none (rotate seals the old WAL before the new one takes writes).
type osBootID struct{}

func (osBootID) BootID() [16]byte { return vfs.BootID(vfs.Default) }

// TestSealFailureAtRotationWithoutBootID: where the boot is unknown a
// rotation seals the old WAL before the new one takes writes (sealNow).
// If that seal fails, the write that rotated fails with ErrReadOnly, the
// store closes, and a reopen finds every write acknowledged before.
func TestSealFailureAtRotationWithoutBootID(t *testing.T) {
	s := &sealFailFS{FS: vfs.Default, release: closedChan()}
	o := smallOptions()
	o.FS, o.DisableMmap = noBootFS{s}, true
	dir := t.TempDir()
	db := mustOpen(t, dir, o)
	s.mu.Lock()
	s.failSeals = true // the old WAL's seal mark will not be written
	s.mu.Unlock()
	var acked int
	var err error
	for acked = 0; acked < 100_000; acked++ {
		if err = db.Put(faultKey(acked), faultValue(acked)); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("after %d Puts: %v, want ErrReadOnly once the rotation's seal failed", acked, err)
	}
	db.Close() // its own seal of the WAL fails too
	s.mu.Lock()
	s.failSeals = false
	s.mu.Unlock()
	db2 := mustOpen(t, dir, smallOptions())
	defer db2.Close()
	for i := range acked {
		if v, err := db2.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("acknowledged Put %d of %d: Get = %q, %v", i, acked, v, err)
		}
	}
}
