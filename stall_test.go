package bloomkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// holdMergeFS is the operating system's file system, except that the Sync
// of the first segment file more than twice the size of the first one
// synced (a merge's output: every flush of the test is about the same
// size) blocks until release is closed.
type holdMergeFS struct {
	vfs.FS
	osBootID
	mu        sync.Mutex
	flushSize int64
	held      bool
	entered   chan struct{} // closed when the held Sync starts
	release   chan struct{}
}

func (h *holdMergeFS) Create(name string) (vfs.File, error) {
	f, err := h.FS.Create(name)
	if err != nil || filepath.Ext(name) != base.SegmentExt {
		return f, err
	}
	return &holdMergeFile{File: f, fs: h}, nil
}

type holdMergeFile struct {
	vfs.File
	fs *holdMergeFS
}

func (f *holdMergeFile) Sync() error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	h := f.fs
	h.mu.Lock()
	hold := false
	switch {
	case h.flushSize == 0:
		h.flushSize = st.Size()
	case !h.held && st.Size() > 2*h.flushSize:
		h.held, hold = true, true
	}
	h.mu.Unlock()
	if hold {
		close(h.entered)
		<-h.release
	}
	return f.File.Sync()
}

// TestUrgentMergesBesideHeldMerge holds the first merge, with one
// compaction allowed, while flushes go on. Waiting for it, the segments
// would reach the stall threshold and writers would stop until it ended;
// instead, past the urgent threshold, merges of the newer segments run
// beside it, the writes finish, and every key reads back once the held
// merge is let go.
func TestUrgentMergesBesideHeldMerge(t *testing.T) {
	h := &holdMergeFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
	o := smallOptions()
	o.FS, o.DisableCompression, o.CompactionConcurrency = h, true, 1
	o.MemtableSize = 1 << 20 // the test flushes by hand, in equal parts
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	var once sync.Once
	let := func() { once.Do(func() { close(h.release) }) }
	defer let()

	const perFlush, flushes = 100, 48
	done := make(chan error, 1)
	go func() {
		for i := range perFlush * flushes {
			if err := db.Put(faultKey(i), faultValue(i)); err != nil {
				done <- err
				return
			}
			if i%perFlush == perFlush-1 {
				if err := db.Flush(); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	select {
	case <-h.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no merge started")
	}
	select {
	case err := <-done:
		mustDo(t, err)
	case <-time.After(30 * time.Second):
		db.mu.Lock()
		segs, stallAt := len(db.segments), db.stallAt
		db.mu.Unlock()
		t.Fatalf("writes stopped while a merge was held: %d segments, stall threshold %d", segs, stallAt)
	}
	// (Writers may still wait now and then where merges are slower than
	// flushes, as under the race detector; what they must not do is wait
	// for the held merge.)
	if st := db.Stats(); st.Compactions == 0 {
		t.Errorf("%d flushes while a merge was held, and no other merge", flushes)
	}
	let()
	mustDo(t, db.WaitForCompactions(context.Background()))
	for i := range perFlush * flushes {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("Get(%s) = %q, %v; want its value", faultKey(i), v, err)
		}
	}
}

// openThreeSegments opens a store of small memtables, no background
// compaction, holding keys 0 to 299 (faultKey, faultValue) in three
// flushed segments of 100; the test's cleanup closes it.
func openThreeSegments(t *testing.T) *DB {
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	t.Cleanup(func() { db.Close() })
	for i := range 300 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
		if i%100 == 99 {
			mustDo(t, db.Flush())
		}
	}
	return db
}

// TestMergePausesForStalledWriters: while a writer waits for a flush to
// free a memtable, a merge pauses (the flush, not the merge, stands
// between the writers and progress), and goes on once no writer waits.
// The waiting writer is simulated by its count, for a real one would need
// a flush held at the moment a merge runs.
func TestMergePausesForStalledWriters(t *testing.T) {
	db := openThreeSegments(t)
	db.flushWaiters.Add(1)
	compacted := make(chan error, 1)
	go func() { compacted <- db.Compact() }()
	select {
	case err := <-compacted:
		t.Fatalf("Compact returned (%v) while a writer waited for a flush", err)
	case <-time.After(200 * time.Millisecond):
	}
	db.mu.Lock()
	db.flushWaiters.Add(-1)
	db.cond.Broadcast()
	db.mu.Unlock()
	select {
	case err := <-compacted:
		mustDo(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Compact did not go on once no writer waited")
	}
	if st := db.Stats(); st.Segments != 1 {
		t.Fatalf("%d segments after Compact, want 1", st.Segments)
	}
	for i := range 300 {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("Get(%s) = %q, %v; want its value", faultKey(i), v, err)
		}
	}
}

// holdFlushFS is the operating system's file system, except that the Sync
// of every segment file blocks until release is closed: no flush ends.
type holdFlushFS struct {
	vfs.FS
	osBootID
	release chan struct{}
}

func (h *holdFlushFS) Create(name string) (vfs.File, error) {
	f, err := h.FS.Create(name)
	if err != nil || filepath.Ext(name) != base.SegmentExt {
		return f, err
	}
	return &holdFlushFile{File: f, release: h.release}, nil
}

type holdFlushFile struct {
	vfs.File
	release chan struct{}
}

func (f *holdFlushFile) Sync() error {
	<-f.release
	return f.File.Sync()
}

// openHeldFlushes opens a store of small memtables (smallOptions) whose
// flushes all block until release is called. The test's cleanup releases
// them, if the test did not, and closes the store.
func openHeldFlushes(t *testing.T) (db *DB, release func()) {
	fs := &holdFlushFS{FS: vfs.Default, release: make(chan struct{})}
	o := smallOptions()
	o.FS = fs
	db = mustOpen(t, t.TempDir(), o)
	var once sync.Once
	release = func() { once.Do(func() { close(fs.release) }) }
	t.Cleanup(func() {
		release()
		db.Close()
	})
	return db, release
}

// stillWaiting fails the test if the call whose result c carries returns
// within 100 ms: it must wait for something the test still holds.
func stillWaiting(t *testing.T, c <-chan error, what string) {
	t.Helper()
	select {
	case err := <-c:
		t.Fatalf("%s returned (%v) while it should wait", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

// returnsWithin fails the test unless the call whose result c carries
// returns, without error, within d: what it waited for was let go.
func returnsWithin(t *testing.T, c <-chan error, d time.Duration, what string) {
	t.Helper()
	select {
	case err := <-c:
		mustDo(t, err)
	case <-time.After(d):
		t.Fatalf("%s did not return within %v of being let go", what, d)
	}
}

// TestStallTime holds every flush, so that a writer stalls once maxFrozen
// memtables wait (small memtables: not fewer), and checks that Stats times the stall: the writer's
// wait, held for at least hold, shows in WriteStallTime, FlushStallTime
// and LongestWriteStall, and nothing is counted before it.
func TestStallTime(t *testing.T) {
	const hold = 100 * time.Millisecond
	db, release := openHeldFlushes(t)
	if st := db.Stats(); st.WriteStalls != 0 || st.WriteStallTime != 0 || st.FlushStallTime != 0 || st.LongestWriteStall != 0 {
		t.Fatalf("stall stats before any write: %d stalls, %v, %v, %v", st.WriteStalls, st.WriteStallTime, st.FlushStallTime, st.LongestWriteStall)
	}
	done := make(chan error, 1)
	go func() {
		for i := range 2000 {
			if err := db.Put(faultKey(i), faultValue(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	deadline := time.Now().Add(30 * time.Second)
	for db.Stats().WriteStalls == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the writer never stalled with every flush held")
		}
		time.Sleep(time.Millisecond)
	}
	if st := db.Stats(); st.WriteStallTime != 0 {
		t.Fatalf("WriteStallTime %v while the only stall still waits, want it counted when it ends", st.WriteStallTime)
	}
	db.mu.Lock()
	frozen := len(db.imm)
	db.mu.Unlock()
	if frozen != maxFrozen {
		t.Fatalf("the writer stalled with %d memtables waiting for flush, want %d", frozen, maxFrozen)
	}
	time.Sleep(hold)
	release()
	returnsWithin(t, done, 30*time.Second, "the stalled writer")
	st := db.Stats()
	if st.LongestWriteStall < hold || st.FlushStallTime < st.LongestWriteStall || st.WriteStallTime < st.FlushStallTime {
		t.Fatalf("after a stall held %v: longest %v, flush stalls %v, all stalls %v; want hold <= longest <= flush <= all",
			hold, st.LongestWriteStall, st.FlushStallTime, st.WriteStallTime)
	}
	t.Logf("%d stalls: %v in all, %v for flushes, longest %v", st.WriteStalls, st.WriteStallTime, st.FlushStallTime, st.LongestWriteStall)
}

// TestFrozenLimit checks how many full memtables may wait for flush at
// each memtable size: maxFrozen up to frozenBytes/maxFrozen, fewer above,
// never fewer than minFrozen.
func TestFrozenLimit(t *testing.T) {
	for _, c := range []struct{ size, want int }{
		{4 << 10, maxFrozen},
		{4 << 20, maxFrozen},
		{8 << 20, maxFrozen},
		{10 << 20, 3},
		{16 << 20, 2},
		{64 << 20, minFrozen},
		{maxMemtableSize, minFrozen},
	} {
		if got := frozenLimit(c.size); got != c.want {
			t.Errorf("frozenLimit(%d) = %d, want %d", c.size, got, c.want)
		}
	}
}

// TestMemtableAdmitsWhatFits checks that a group goes into a memtable
// that holds writes only if what the memtable will charge for it fits: a
// batch of tiny operations whose encoded bytes fit in the room left, but
// whose entries (a node each) do not, rotates the memtable first. Admitted
// by its encoded size, a batch of 10,000 three-byte keys took a 64 KiB
// memtable holding one write to 16 times its size.
func TestMemtableAdmitsWhatFits(t *testing.T) {
	o := smallOptions()
	o.MemtableSize = 64 << 10
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	mustDo(t, db.Put([]byte("first"), []byte("v")))
	b := NewBatch()
	for i := range 10_000 {
		mustDo(t, b.Put(fmt.Appendf(nil, "%03x", i%4096), nil))
	}
	if b.Size() >= o.MemtableSize {
		t.Fatalf("batch of %d encoded bytes: the test needs it below MemtableSize", b.Size())
	}
	db.mu.Lock()
	first := db.mem
	db.mu.Unlock()
	mustDo(t, db.Write(b))
	if size := first.ApproximateSize(); size > o.MemtableSize {
		t.Fatalf("the memtable that held one write now holds %d bytes, %.1f times MemtableSize", size, float64(size)/float64(o.MemtableSize))
	}
}

// TestStallForCompaction: once the segments reach the stall threshold
// while a compaction runs, a writer waits for it (every Get would probe
// more and more segments otherwise), from the first compaction and at the
// threshold itself, and goes on, its write intact, once the compaction
// ends; with the count below the threshold, or no compaction running, no
// writer waits. The running compaction is simulated by its count, for a
// real one would have to be held at the moment the threshold is reached.
func TestStallForCompaction(t *testing.T) {
	db := openThreeSegments(t)
	put := func(i int) chan error {
		c := make(chan error, 1)
		go func() { c <- db.Put(faultKey(i), faultValue(i)) }()
		return c
	}
	set := func(compacting, stallAt int) {
		db.mu.Lock()
		db.compacting, db.stallAt = compacting, stallAt
		db.cond.Broadcast()
		db.mu.Unlock()
	}
	db.mu.Lock()
	segs, stallAt := len(db.segments), db.stallAt
	db.mu.Unlock()
	if segs == 0 {
		t.Fatal("no segment after 3 flushes")
	}
	defer set(0, stallAt)

	// Below the threshold, or with no compaction running: no wait.
	for _, c := range []struct{ compacting, stallAt int }{{1, segs + 1}, {0, segs}} {
		set(c.compacting, c.stallAt)
		select {
		case err := <-put(1000):
			mustDo(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("a write waited with %d compactions running, %d segments, threshold %d", c.compacting, segs, c.stallAt)
		}
	}
	stalls := db.Stats().WriteStalls

	// At the threshold with one compaction running: the writer waits.
	set(1, segs)
	done := put(1001)
	stillWaiting(t, done, fmt.Sprintf("a write with %d segments at the stall threshold and a compaction running", segs))
	if v, err := db.Get(faultKey(1001)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of the stalled write = %q, %v; want ErrNotFound before it is written", v, err)
	}
	if got := db.Stats().WriteStalls; got == stalls {
		t.Fatal("the stalled write is not counted in WriteStalls")
	}
	set(0, stallAt) // the compaction ends
	returnsWithin(t, done, 10*time.Second, "the write stalled for the compaction")
	for _, i := range []int{0, 299, 1000, 1001} {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("Get(%s) = %q, %v; want its value", faultKey(i), v, err)
		}
	}
}

// TestFlushWaitsForFrozenRoom: a Flush while db.frozenLimit memtables
// already wait for theirs waits for room before it freezes the memtable,
// as a writer does: the limit bounds the memory the frozen memtables hold,
// and a Flush that froze one more beside them would pass it. Once the
// flushes go on, the Flush freezes and flushes the memtable, and returns
// with every write in a segment.
func TestFlushWaitsForFrozenRoom(t *testing.T) {
	db, release := openHeldFlushes(t)
	frozen := func() int {
		db.mu.Lock()
		defer db.mu.Unlock()
		return len(db.imm)
	}
	n := 0
	for ; frozen() < db.frozenLimit; n++ {
		if n == 10_000 {
			t.Fatalf("%d memtables frozen after %d writes with every flush held, want %d", frozen(), n, db.frozenLimit)
		}
		mustDo(t, db.Put(faultKey(n), faultValue(n)))
	}
	flushed := make(chan error, 1)
	go func() { flushed <- db.Flush() }()
	stillWaiting(t, flushed, "a Flush with every flush held")
	if got := frozen(); got != db.frozenLimit {
		t.Fatalf("%d memtables wait for flush while a Flush waits for room, want the limit, %d", got, db.frozenLimit)
	}
	release()
	returnsWithin(t, flushed, 30*time.Second, "the Flush")
	db.mu.Lock()
	left, empty := len(db.imm), db.mem.Empty()
	db.mu.Unlock()
	if left != 0 || !empty {
		t.Fatalf("after Flush: %d memtables wait for flush, memtable empty %v; want every write in a segment", left, empty)
	}
	checkFaultKeys(t, db, n)
}

// TestFlushWaitsForFrozenMemtables: a Flush that finds the memtable empty
// still waits for the memtables frozen before it, which hold writes
// acknowledged before the call: it returns only once they are in
// segments, even if only one waits.
func TestFlushWaitsForFrozenMemtables(t *testing.T) {
	db, release := openHeldFlushes(t)
	for i := range 10 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	flush := func() chan error {
		c := make(chan error, 1)
		go func() { c <- db.Flush() }()
		return c
	}
	first := flush() // freezes the memtable, whose flush is held
	deadline := time.Now().Add(10 * time.Second)
	for {
		db.mu.Lock()
		frozen, empty := len(db.imm), db.mem.Empty()
		db.mu.Unlock()
		if frozen == 1 && empty {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d memtables frozen, memtable empty %v: want the first Flush to freeze the one memtable", frozen, empty)
		}
		time.Sleep(time.Millisecond)
	}
	second := flush()
	for _, c := range []chan error{first, second} {
		stillWaiting(t, c, "a Flush while the frozen memtable's flush was held")
	}
	release()
	for _, c := range []chan error{first, second} {
		returnsWithin(t, c, 30*time.Second, "a Flush")
	}
	db.mu.Lock()
	left := len(db.imm)
	db.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d memtables wait for flush after both Flushes returned", left)
	}
}
