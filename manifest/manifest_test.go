package manifest

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

func ptr(v uint64) *uint64 { return &v }

func seg(fn, minSeq, maxSeq uint64) base.SegmentMeta {
	return base.SegmentMeta{
		FileNum: fn, Size: int64(fn) * 100, Entries: 10, Tombstones: 1, MinSeq: minSeq, MaxSeq: maxSeq,
		Smallest: []byte("a"), Largest: []byte("z"), FilterLayout: 1, FilterK: 7, FilterBits: 96,
	}
}

func createTemp(t testing.TB) (*Manifest, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "MANIFEST")
	m, err := Create(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, path
}

// reopen closes m and opens path again.
func reopen(t *testing.T, m *Manifest, path string) *Manifest {
	t.Helper()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := Open(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func mustApply(t *testing.T, m *Manifest, e Edit) {
	t.Helper()
	if err := m.Apply(e); err != nil {
		t.Fatalf("Apply(%+v): %v", e, err)
	}
}

// sameState compares states treating nil and empty slices alike.
func sameState(a, b State) bool {
	if len(a.Segments) != len(b.Segments) {
		return false
	}
	for i := range a.Segments {
		if !sameMeta(a.Segments[i], b.Segments[i]) {
			return false
		}
	}
	return a.NextFileNum == b.NextFileNum && a.FlushedSeq == b.FlushedSeq && a.LogNum == b.LogNum &&
		a.PrefixExtractor == b.PrefixExtractor
}

func TestCreateApplyReopen(t *testing.T) {
	m, path := createTemp(t)
	if got, want := m.State(), (State{NextFileNum: 1}); !sameState(got, want) {
		t.Fatalf("new manifest: got %+v, want %+v", got, want)
	}
	fn1, fn2, wal := mustNum(t, m), mustNum(t, m), mustNum(t, m)
	mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(fn1, 1, 100)}, FlushedSeq: ptr(100), LogNum: ptr(wal)})
	mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(fn2, 101, 200)}, FlushedSeq: ptr(200)})
	want := State{
		Segments:    []base.SegmentMeta{seg(fn2, 101, 200), seg(fn1, 1, 100)},
		NextFileNum: wal + 1 + reserveAhead, FlushedSeq: 200, LogNum: wal,
	}
	if got := m.State(); !sameState(got, want) {
		t.Fatalf("after edits: got %+v, want %+v", got, want)
	}
	m = reopen(t, m, path)
	if got := m.State(); !sameState(got, want) {
		t.Fatalf("after reopen: got %+v, want %+v", got, want)
	}
	if n := mustNum(t, m); n != wal+1 {
		t.Fatalf("NewFileNum after reopen = %d, want %d", n, wal+1)
	}
}

func mustNum(t testing.TB, m *Manifest) uint64 {
	t.Helper()
	n, err := m.NewFileNum()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAddAndRemoveInOneEdit(t *testing.T) {
	m, path := createTemp(t)
	mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(1, 1, 10), seg(2, 11, 20), seg(3, 21, 30)}, NextFileNum: ptr(4)})
	// A compaction: inputs 1 and 2 become output 4 at a higher tier.
	out := seg(4, 1, 20)
	out.Tier = 1
	mustApply(t, m, Edit{Add: []base.SegmentMeta{out}, Remove: []uint64{1, 2}})
	want := State{Segments: []base.SegmentMeta{seg(3, 21, 30), out}, NextFileNum: 1 + reserveAhead}
	if got := m.State(); !sameState(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := reopen(t, m, path).State(); !sameState(got, want) {
		t.Fatalf("after reopen: got %+v, want %+v", got, want)
	}
}

func TestSegmentOrder(t *testing.T) {
	m, _ := createTemp(t)
	mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(5, 1, 50), seg(9, 1, 50), seg(2, 60, 70), seg(7, 1, 10)}})
	var got []uint64
	for _, s := range m.State().Segments {
		got = append(got, s.FileNum)
	}
	if want := []uint64{2, 9, 5, 7}; !reflect.DeepEqual(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

func TestInvalidEditsChangeNothing(t *testing.T) {
	bad := seg(20, 5, 1) // MinSeq > MaxSeq
	long := seg(21, 1, 2)
	long.Largest = bytes.Repeat([]byte("z"), maxKeyLen+1)
	tests := []struct {
		name string
		e    Edit
	}{
		{"remove unknown", Edit{Remove: []uint64{99}}},
		{"remove twice", Edit{Remove: []uint64{1, 1}}},
		{"add live", Edit{Add: []base.SegmentMeta{seg(1, 1, 10)}}},
		{"add twice", Edit{Add: []base.SegmentMeta{seg(7, 1, 2), seg(7, 3, 4)}}},
		{"re-add removed", Edit{Remove: []uint64{1}, Add: []base.SegmentMeta{seg(1, 1, 10)}}},
		{"remove added", Edit{Add: []base.SegmentMeta{seg(7, 1, 2)}, Remove: []uint64{7}}},
		{"invalid segment", Edit{Add: []base.SegmentMeta{bad}}},
		{"file number 0", Edit{Add: []base.SegmentMeta{seg(0, 1, 2)}}},
		{"key too long", Edit{Add: []base.SegmentMeta{long}}},
		{"next file num backwards", Edit{NextFileNum: ptr(2)}},
		{"flushed seq backwards", Edit{FlushedSeq: ptr(9)}},
		{"flushed seq over 56 bits", Edit{FlushedSeq: ptr(base.MaxSeq + 1)}},
		{"log num backwards", Edit{LogNum: ptr(2)}},
		{"valid part with invalid part", Edit{Add: []base.SegmentMeta{seg(8, 30, 40)}, FlushedSeq: ptr(40), Remove: []uint64{99}}},
	}
	m, path := createTemp(t)
	mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(1, 1, 10), seg(2, 11, 20)}, NextFileNum: ptr(5), FlushedSeq: ptr(20), LogNum: ptr(3)})
	want := m.State()
	for _, tt := range tests {
		if err := m.Apply(tt.e); !errors.Is(err, ErrInvalidEdit) {
			t.Errorf("%s: got %v, want ErrInvalidEdit", tt.name, err)
		}
		if got := m.State(); !sameState(got, want) {
			t.Fatalf("%s: state changed to %+v", tt.name, got)
		}
	}
	if got := reopen(t, m, path).State(); !sameState(got, want) {
		t.Fatalf("after reopen: got %+v, want %+v", got, want)
	}
}

func TestCountersMayStayEqual(t *testing.T) {
	m, _ := createTemp(t)
	mustApply(t, m, Edit{FlushedSeq: ptr(7), LogNum: ptr(2)})
	n := m.State().NextFileNum
	mustApply(t, m, Edit{NextFileNum: ptr(n), FlushedSeq: ptr(7), LogNum: ptr(2)})
	if got, want := m.State(), (State{NextFileNum: n, FlushedSeq: 7, LogNum: 2}); !sameState(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestNewFileNum(t *testing.T) {
	const reserveAhead = 1000 // FORMAT.md: every commit reserves this many numbers
	m, path := createTemp(t)
	// A new manifest has no range reserved: the first number commits one,
	// so it is durable before any file bears it.
	if a, b := mustNum(t, m), mustNum(t, m); a != 1 || b != 2 {
		t.Fatalf("NewFileNum = %d, %d; want 1, 2", a, b)
	}
	if got, want := m.State().NextFileNum, uint64(1+reserveAhead); got != want {
		t.Fatalf("NextFileNum after the first number = %d, want %d", got, want)
	}
	// Every commit keeps a range ahead of the counter.
	mustApply(t, m, Edit{})
	if got, want := m.State().NextFileNum, uint64(3+reserveAhead); got != want {
		t.Fatalf("NextFileNum after Apply = %d, want %d", got, want)
	}
	// Numbers are handed out below NextFileNum only: using up the range
	// commits a new one.
	m.SkipTo(3 + reserveAhead)
	if n := mustNum(t, m); n != 3+reserveAhead {
		t.Fatalf("NewFileNum at the end of the range = %d", n)
	}
	if got, want := m.State().NextFileNum, uint64(3+2*reserveAhead); got != want {
		t.Fatalf("NextFileNum after the range ran out = %d, want %d", got, want)
	}
	m = reopen(t, m, path)
	if got := m.State().NextFileNum; got != 3+2*reserveAhead {
		t.Fatalf("NextFileNum after reopen = %d: the new range was not committed", got)
	}
	// An added segment's number is never handed out again.
	mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(10, 1, 2)}})
	m = reopen(t, m, path)
	if n := mustNum(t, m); n != 11 {
		t.Fatalf("NewFileNum after reopen with segment 10 live = %d, want 11", n)
	}
	// SkipTo never moves the counter back.
	m.SkipTo(5)
	if n := mustNum(t, m); n != 12 {
		t.Fatalf("NewFileNum after SkipTo(5) = %d, want 12", n)
	}
}

func TestStateIsACopy(t *testing.T) {
	m, _ := createTemp(t)
	add := []base.SegmentMeta{seg(1, 1, 10), seg(2, 11, 20)}
	mustApply(t, m, Edit{Add: add})
	want := m.State()
	// Neither the caller's edit nor a returned State aliases the manifest.
	add[0].Smallest[0] = 'X'
	add[1].FileNum = 77
	st := m.State()
	st.Segments[0].Tier = 9
	st.Segments[1] = seg(3, 1, 2)
	if got := m.State(); !sameState(got, want) || string(got.Segments[1].Smallest) != "a" {
		t.Fatalf("state changed through a copy: %+v", got)
	}
}

func TestCreateExisting(t *testing.T) {
	_, path := createTemp(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(vfs.Default, path); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing manifest: got %v, want fs.ErrExist", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("failed Create modified the existing file")
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}

func TestCreateRemovesStaleTemp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "MANIFEST")
	if err := os.WriteFile(path+".tmp", []byte("half-made manifest from a crash"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Create(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}

// TestCreateHoldsNoTemp: when Create returns, no file handle of the
// process is on the temporary name. Windows refuses to remove a file that
// a handle holds open, so a Create that removed MANIFEST.tmp while bbolt
// still had it open failed there on every new store. The check reads
// /proc/self/fd, where a handle on a removed name reads "... (deleted)".
func TestCreateHoldsNoTemp(t *testing.T) {
	if runtime.GOOS != "linux" {
		// Elsewhere a Windows test binary under Wine sees the Linux
		// host's /proc, whose paths are not the ones the test used.
		t.Skip("lists open files in /proc/self/fd (Linux); on Windows every Create of a store fails without the fix")
	}
	_, path := createTemp(t)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	onPath := false
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // closed since the listing (the listing's own fd)
		}
		if strings.HasPrefix(target, path+".tmp") {
			t.Fatalf("fd %s is still open on %s after Create", fd.Name(), target)
		}
		onPath = onPath || target == path
	}
	if !onPath {
		t.Fatalf("no fd open on %s after Create: the manifest is not held", path)
	}
}

func TestOpenMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "MANIFEST")
	if _, err := Open(vfs.Default, path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open created the file: %v", err)
	}
}

// TestOpenLocked relies on bbolt's flock being per open file description:
// a second Open in the same process conflicts just as another process would.
func TestOpenLocked(t *testing.T) {
	m, path := createTemp(t)
	start := time.Now()
	if _, err := Open(vfs.Default, path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: got %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second Open took %v; the lock timeout is %v", d, lockTimeout)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := Open(vfs.Default, path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	m2.Close()
}

func TestApplyAfterClose(t *testing.T) {
	m, _ := createTemp(t)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(Edit{FlushedSeq: ptr(1)}); err == nil {
		t.Fatal("Apply after Close succeeded")
	}
}

// wantCorrupt checks that err is a *base.CorruptError naming file.
func wantCorrupt(t *testing.T, err error, file string) {
	t.Helper()
	var ce *base.CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a *base.CorruptError", err)
	}
	if ce.File != file {
		t.Fatalf("CorruptError names %q, want %q (%v)", ce.File, file, err)
	}
}

func TestOpenNotBbolt(t *testing.T) {
	tests := []struct {
		name    string
		content []byte
	}{
		{"empty", nil},
		{"short text", []byte("hello, not a database")},
		{"zeros", make([]byte, 16<<10)},
		{"pattern", bytes.Repeat([]byte("bloomkv!"), 2<<10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "MANIFEST")
			if err := os.WriteFile(path, tt.content, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(vfs.Default, path)
			wantCorrupt(t, err, "MANIFEST")
			if after, _ := os.ReadFile(path); !bytes.Equal(after, tt.content) {
				t.Fatal("Open modified the file")
			}
		})
	}
}

// TestOpenForeignLayout opens bbolt databases that are not (or no longer)
// valid manifests.
func TestOpenForeignLayout(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(tx *bolt.Tx) error
	}{
		{"no buckets", func(tx *bolt.Tx) error {
			return errors.Join(tx.DeleteBucket([]byte(metaBucket)), tx.DeleteBucket([]byte(segmentsBucket)))
		}},
		{"no segments bucket", func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte(segmentsBucket)) }},
		{"format version 3", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(metaBucket)).Put([]byte(keyFormatVersion), u64(3))
		}},
		{"missing counters", func(tx *bolt.Tx) error { return tx.Bucket([]byte(metaBucket)).Delete([]byte(keyCounters)) }},
		{"short counters", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(metaBucket)).Put([]byte(keyCounters), []byte{1})
		}},
		{"flipped bit in a counter", func(tx *bolt.Tx) error {
			meta := tx.Bucket([]byte(metaBucket))
			v := bytes.Clone(meta.Get([]byte(keyCounters)))
			v[2] ^= 0x01
			return meta.Put([]byte(keyCounters), v)
		}},
		{"log num not below next file num", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(metaBucket)).Put([]byte(keyCounters), encodeCounters(counters{NextFileNum: 5, LogNum: 5}))
		}},
		{"next file num beyond the maximum", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(metaBucket)).Put([]byte(keyCounters), encodeCounters(counters{NextFileNum: MaxFileNum + 1}))
		}},
		{"legacy format, missing log num", func(tx *bolt.Tx) error {
			meta := tx.Bucket([]byte(metaBucket))
			return errors.Join(meta.Put([]byte(keyFormatVersion), u64(legacyFormatVersion)),
				meta.Put([]byte(keyNextFileNum), u64(5)), meta.Put([]byte(keyFlushedSeq), u64(0)))
		}},
		{"damaged segment", func(tx *bolt.Tx) error {
			v := encodeSegmentMeta(seg(1, 1, 10))
			v[3] ^= 0x10
			return tx.Bucket([]byte(segmentsBucket)).Put(u64(1), v)
		}},
		{"segment under wrong key", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(segmentsBucket)).Put(u64(2), encodeSegmentMeta(seg(1, 1, 10)))
		}},
		{"segment key not 8 bytes", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(segmentsBucket)).Put([]byte{1}, encodeSegmentMeta(seg(1, 1, 10)))
		}},
		{"nested bucket in segments", func(tx *bolt.Tx) error {
			_, err := tx.Bucket([]byte(segmentsBucket)).CreateBucket(u64(3))
			return err
		}},
		{"segment not below next file num", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(segmentsBucket)).Put(u64(5000), encodeSegmentMeta(seg(5000, 1, 10)))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, path := createTemp(t)
			mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(1, 1, 10)}, NextFileNum: ptr(5)})
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := bolt.Open(path, 0o644, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(db.Update(tt.mutate), db.Close()); err != nil {
				t.Fatal(err)
			}
			_, err = Open(vfs.Default, path)
			wantCorrupt(t, err, "MANIFEST")
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	m, _ := createTemp(t)
	const workers, perWorker = 4, 20
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range perWorker {
				fn := mustNum(t, m)
				mu.Lock()
				dup := seen[fn]
				seen[fn] = true
				mu.Unlock()
				if dup {
					t.Errorf("file number %d handed out twice", fn)
				}
				if err := m.Apply(Edit{Add: []base.SegmentMeta{seg(fn, fn, fn)}}); err != nil {
					t.Error(err)
				}
				_ = m.State()
			}
		})
	}
	wg.Wait()
	st := m.State()
	if len(st.Segments) != workers*perWorker || st.NextFileNum != workers*perWorker+1+reserveAhead {
		t.Fatalf("got %d segments, next file num %d", len(st.Segments), st.NextFileNum)
	}
}

// BenchmarkApplyFlush measures the edit a memtable flush commits: one new
// segment, FlushedSeq and LogNum advanced. To keep the live set at a steady
// 16 segments, each edit also drops the oldest, as compaction eventually
// would. It is bound by bbolt's two fsyncs per commit.
func BenchmarkApplyFlush(b *testing.B) {
	m, _ := createTemp(b)
	const live = 16
	var seq uint64
	flush := func(remove []uint64) {
		fn := mustNum(b, m)
		s := seg(fn, seq+1, seq+1000)
		seq += 1000
		if err := m.Apply(Edit{Add: []base.SegmentMeta{s}, Remove: remove, FlushedSeq: ptr(seq), LogNum: ptr(fn)}); err != nil {
			b.Fatal(err)
		}
	}
	for range live {
		flush(nil)
	}
	b.ReportAllocs()
	for b.Loop() {
		segs := m.State().Segments
		flush([]uint64{segs[len(segs)-1].FileNum})
	}
}

func TestReadState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "MANIFEST")
	m, err := Create(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(Edit{Add: []base.SegmentMeta{seg(5, 1, 9)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadState(vfs.Default, path); !errors.Is(err, ErrLocked) {
		t.Fatalf("ReadState of an open manifest: %v, want ErrLocked", err)
	}
	m.Close()
	before, _ := os.ReadFile(path)
	st, err := ReadState(vfs.Default, path)
	if err != nil || len(st.Segments) != 1 || st.Segments[0].FileNum != 5 {
		t.Fatalf("ReadState = %+v, %v", st, err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("ReadState changed the file")
	}
	if _, err := ReadState(vfs.Default, path+"x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadState of a missing file: %v", err)
	}
}

// TestLegacyFormatUpgrade opens a format-1 manifest (three unprotected
// counter keys): it reads as Legacy, and the first Apply rewrites it as
// format 2 with the counters checksummed.
func TestLegacyFormatUpgrade(t *testing.T) {
	m, path := createTemp(t)
	mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(3, 1, 10)}})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(metaBucket))
		return errors.Join(meta.Delete([]byte(keyCounters)),
			meta.Put([]byte(keyFormatVersion), u64(legacyFormatVersion)),
			meta.Put([]byte(keyNextFileNum), u64(4)),
			meta.Put([]byte(keyFlushedSeq), u64(10)),
			meta.Put([]byte(keyLogNum), u64(2)))
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	m, err = Open(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	st := m.State()
	if !st.Legacy || st.NextFileNum != 4 || st.FlushedSeq != 10 || st.LogNum != 2 || len(st.Segments) != 1 {
		t.Fatalf("legacy state read as %+v", st)
	}
	mustApply(t, m, Edit{})
	m = reopen(t, m, path)
	st = m.State()
	if st.Legacy || st.FlushedSeq != 10 || st.LogNum != 2 || st.NextFileNum < 4 || len(st.Segments) != 1 {
		t.Fatalf("after the upgrade: %+v", st)
	}
	if err := m.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte(metaBucket)).Get([]byte(keyFlushedSeq)); v != nil {
			return errors.New("format-1 counter key left behind")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
