package bloomkv

// Tests for "never bricked, never silently damaged": every legal input, every
// damaged file and every failed Open ends in all the data or a clear error,
// with nothing in the directory changed. Each test names the way a store
// used to be lost or bricked.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/errorfs"
	"github.com/bloomkv/bloomkv/vfs/powerfs"
	"github.com/bloomkv/bloomkv/wal"
)

// brickStore writes keys 0..n-1 over several flushes and closes the store.
// The last write is a flush, so the newest manifest commit retired a WAL.
func brickStore(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	for i := range n {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
		if i%(n/4) == n/4-1 {
			mustDo(t, db.Flush())
		}
	}
	mustDo(t, db.Close())
	return dir
}

// checkAll reopens dir and requires every key 0..n-1 with its value.
func checkAll(t *testing.T, dir string, n int) {
	t.Helper()
	db := mustOpen(t, dir, smallOptions())
	defer db.Close()
	for i := range n {
		v, err := db.Get(faultKey(i))
		if err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("key %d: %q, %v", i, v, err)
		}
	}
}

// openMustFail opens dir expecting an error matching want, and requires the
// directory to be byte for byte as it was.
func openMustFail(t *testing.T, dir string, o *Options, want error) error {
	t.Helper()
	before := dirHash(t, dir)
	db, err := Open(dir, o)
	if err == nil {
		db.Close()
		t.Fatalf("Open succeeded, want %v", want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("Open = %v, want %v", err, want)
	}
	if after := dirHash(t, dir); after != before {
		t.Fatalf("the failed Open (%v) changed the directory", err)
	}
	return err
}

// wantCorruptFile requires a *base.CorruptError naming file.
func wantCorruptFile(t *testing.T, err error, file string) {
	t.Helper()
	var ce *base.CorruptError
	if !errors.As(err, &ce) || ce.File != file {
		t.Fatalf("got %v, want a CorruptError naming %s", err, file)
	}
}

// TestLargestLegalInputs: whatever Put accepts can be flushed, compacted,
// recovered and read back — the largest key with the largest value, and the
// largest batch — with Sync on and off, through mapped and pread segments.
func TestLargestLegalInputs(t *testing.T) {
	// What is checked stays the largest input, through every stage; what
	// the test itself holds is small: the expected values are kept as the
	// byte each repeats, not as 32 MiB copies, and a memory limit makes
	// the collector return the stages' garbage before the next one starts.
	if raceEnabled {
		// It proves sizes, not concurrency (one goroutine writes), and the
		// race detector's shadow of ~1 GiB of live data took the run to
		// 3.3 GB and 94 s; .ci/run runs it without -race (1.1 GB, 14 s).
		t.Skip("run without -race: go test -run TestLargestLegalInputs .")
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 30))
	bigKey := func(c byte) []byte { return bytes.Repeat([]byte{c}, MaxKeySize) }
	bigValue := func(c byte) []byte { return bytes.Repeat([]byte{c}, MaxValueSize) }
	isValue := func(v []byte, c byte, n int) bool {
		return len(v) == n && bytes.Count(v, []byte{c}) == n
	}
	type value struct {
		fill byte
		size int
	}
	t.Run("transaction past MaxBatchSize", func(t *testing.T) {
		// Each write fits, together they do not: Commit refuses the
		// batch they would make, writes none of them, and the store goes
		// on taking writes.
		db := mustOpen(t, t.TempDir(), nil)
		defer db.Close()
		txn := db.NewTransaction(true)
		defer txn.Discard()
		v := bigValue('T')
		n := 0
		for size := batch.HeaderLen; size <= MaxBatchSize; n++ {
			mustDo(t, txn.Put(bigKey(byte('a'+n)), v))
			size += batch.OpSize(base.KindPut, MaxKeySize, MaxValueSize)
		}
		v = nil
		if err := txn.Commit(); !errors.Is(err, ErrBatchTooLarge) {
			t.Fatalf("Commit of %d largest entries: %v, want ErrBatchTooLarge", n, err)
		}
		txn = nil
		for i := range n {
			if _, err := db.Get(bigKey(byte('a' + i))); !errors.Is(err, ErrNotFound) {
				t.Fatalf("key %d of the refused transaction: %v, want ErrNotFound", i, err)
			}
		}
		mustDo(t, db.Put([]byte("after"), []byte("v")))
	})
	for _, tc := range []struct{ sync, mmap bool }{{false, true}, {true, false}} {
		t.Run(fmt.Sprintf("sync=%v,mmap=%v", tc.sync, tc.mmap), func(t *testing.T) {
			dir := t.TempDir()
			o := DefaultOptions()
			o.Sync, o.DisableMmap = tc.sync, !tc.mmap
			db := mustOpen(t, dir, o)
			want := map[string]value{}
			// The largest entry, flushed and compacted with a small one.
			mustDo(t, db.Put(bigKey('a'), bigValue('A')))
			want[string(bigKey('a'))] = value{'A', MaxValueSize}
			mustDo(t, db.Put([]byte("small"), []byte("v")))
			want["small"] = value{'v', 1}
			mustDo(t, db.Flush())
			// A batch of exactly MaxBatchSize, left in the WAL for
			// recovery: largest entries while they fit, then one whose
			// value fills the rest to the last byte.
			b := NewBatch()
			c := byte('b')
			for ; b.Size()+batch.OpSize(base.KindPut, MaxKeySize, MaxValueSize) <= MaxBatchSize; c++ {
				mustDo(t, b.Put(bigKey(c), bigValue(c-'a'+'A')))
				want[string(bigKey(c))] = value{c - 'a' + 'A', MaxValueSize}
			}
			if b.Len() < 7 {
				t.Fatalf("batch holds %d entries", b.Len())
			}
			fill := MaxBatchSize - b.Size() // less the operation's framing:
			for batch.OpSize(base.KindPut, MaxKeySize, fill) > MaxBatchSize-b.Size() {
				fill--
			}
			if fill >= MaxValueSize {
				t.Fatalf("the rest of the batch (%d bytes) takes more than one value", fill)
			}
			// One byte more than fits is refused, and leaves the batch as
			// it was (the sticky error is cleared here only to go on).
			size := b.Size()
			if err := b.Put(bigKey(c), bigValue(c - 'a' + 'A')[:fill+1]); !errors.Is(err, ErrBatchTooLarge) {
				t.Fatalf("a batch one byte past MaxBatchSize: %v, want ErrBatchTooLarge", err)
			}
			if b.Size() != size {
				t.Fatalf("the refused operation grew the batch from %d to %d bytes", size, b.Size())
			}
			b.err = nil
			mustDo(t, b.Put(bigKey(c), bigValue(c - 'a' + 'A')[:fill]))
			want[string(bigKey(c))] = value{c - 'a' + 'A', fill}
			if b.Size() != MaxBatchSize {
				t.Fatalf("batch of %d bytes, want exactly MaxBatchSize (%d)", b.Size(), MaxBatchSize)
			}
			mustDo(t, db.Write(b))
			// Full to the last byte: any further operation is refused, by
			// the call that adds it and by Write, which writes nothing.
			if err := b.Delete([]byte("over")); !errors.Is(err, ErrBatchTooLarge) {
				t.Fatalf("an operation past a full batch: %v, want ErrBatchTooLarge", err)
			}
			if err := db.Write(b); !errors.Is(err, ErrBatchTooLarge) {
				t.Fatalf("Write of a batch past MaxBatchSize: %v, want ErrBatchTooLarge", err)
			}
			b = nil
			// Too large by one byte: refused before anything is written.
			if err := db.Put([]byte("k"), make([]byte, MaxValueSize+1)); !errors.Is(err, ErrValueTooLarge) {
				t.Fatalf("oversized value: %v", err)
			}
			mustDo(t, db.Close())

			db = mustOpen(t, dir, o) // replays the batch and flushes it
			mustDo(t, db.Compact())
			mustDo(t, db.Close())
			db = mustOpen(t, dir, o)
			defer db.Close()
			for k, v := range want {
				got, err := db.Get([]byte(k))
				if err != nil || !isValue(got, v.fill, v.size) {
					t.Fatalf("key %q...: %d bytes, %v", k[:4], len(got), err)
				}
			}
			n := 0
			it, err := db.NewIterator(nil)
			mustDo(t, err)
			defer it.Close()
			for k, v := range it.All() {
				if w, ok := want[string(k)]; !ok || !isValue(v, w.fill, w.size) {
					t.Fatalf("scan: key %q... has %d bytes", k[:4], len(v))
				}
				n++
			}
			if n != len(want) {
				t.Fatalf("scan saw %d keys, want %d", n, len(want))
			}
			rep, err := db.Verify(context.Background())
			if err != nil || !rep.OK() {
				t.Fatalf("Verify: %v\n%v", err, rep)
			}
		})
	}
}

// TestOversizedEntryInWAL, on replay: a WAL record whose checksum is valid
// but which holds what Put would refuse is corruption (it could never be
// flushed), reported with file and offset, and the failed Open changes
// nothing.
func TestOversizedEntryInWAL(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key, value int
	}{
		{"key", MaxKeySize + 1, 1},
		{"value", 1, MaxValueSize + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := mustOpen(t, dir, smallOptions())
			mustDo(t, db.Put([]byte("a"), []byte("1")))
			// Append a hostile but well-framed batch through the WAL
			// writer, as a foreign program (or an older build) could.
			rec := append(make([]byte, batch.HeaderLen), byte(base.KindPut))
			rec = binary.AppendUvarint(rec, uint64(tc.key))
			rec = append(rec, bytes.Repeat([]byte("k"), tc.key)...)
			rec = binary.AppendUvarint(rec, uint64(tc.value))
			rec = append(rec, make([]byte, tc.value)...)
			b := &Batch{data: rec, count: 1}
			db.commit.exclusive(db, func() {
				_, err := db.logw.WriteRecords(b.setSeq(db.lastSeq + 1))
				mustDo(t, err)
			})
			name := base.WALFileName(db.logNum)
			mustDo(t, db.Close())
			err := openMustFail(t, dir, smallOptions(), ErrCorrupt)
			wantCorruptFile(t, err, name)
			rep, err := VerifyDir(context.Background(), nil, dir)
			if err != nil || rep.OK() {
				t.Fatalf("VerifyDir did not see the oversized entry: %v\n%v", err, rep)
			}
		})
	}
}

// boltMetas returns the offsets of MANIFEST's two bbolt meta pages, newest
// first (by transaction id).
func boltMetas(t *testing.T, path string) (newest, older int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	mustDo(t, err)
	pageSize := int64(binary.LittleEndian.Uint32(b[24:]))
	// Meta: 16-byte page header, then magic, version, page size, flags,
	// root (16), freelist, pgid, txid.
	txid := func(page int64) uint64 { return binary.LittleEndian.Uint64(b[page+16+48:]) }
	if txid(0) > txid(pageSize) {
		return 0, pageSize
	}
	return pageSize, 0
}

// TestManifestMetaPageRot: a bit flipped anywhere in the newest bbolt meta
// page makes bbolt fall back to the previous commit. Open must then either
// hold every acknowledged write or refuse with ErrCorrupt, changing nothing
// — never open in the past and delete the newest segment.
func TestManifestMetaPageRot(t *testing.T) {
	const n = 400
	dir := brickStore(t, n)
	path := filepath.Join(dir, base.ManifestName)
	pristine, err := os.ReadFile(path)
	mustDo(t, err)
	newest, _ := boltMetas(t, path)
	refused := 0
	for off := newest + 16; off < newest+16+64; off++ {
		mustDo(t, os.WriteFile(path, pristine, 0o644))
		flipByte(t, path, off)
		before := dirHash(t, dir)
		db, err := Open(dir, smallOptions())
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip at %d: Open = %v, want ErrCorrupt", off, err)
			}
			if dirHash(t, dir) != before {
				t.Fatalf("flip at %d: the failed Open changed the directory", off)
			}
			refused++
			continue
		}
		for i := range n {
			if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
				t.Fatalf("flip at %d: Open succeeded but key %d is %q, %v", off, i, v, err)
			}
		}
		mustDo(t, db.Close())
		t.Fatalf("flip at %d: Open succeeded; the store now differs from the pristine copy, stop here", off)
	}
	t.Logf("%d of 64 meta-page flips refused with ErrCorrupt, none opened in the past", refused)
}

// TestManifestCounterRot: the manifest's counters carry a checksum; a
// flipped bit in the flushed sequence or the log number is reported, never
// obeyed (obeying would skip acknowledged WAL writes or delete the live
// WAL).
func TestManifestCounterRot(t *testing.T) {
	for _, at := range []int{1, 2, 3, 5} { // bytes inside the counters record
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			dir := brickStore(t, 400)
			db := mustOpen(t, dir, smallOptions())
			for i := 400; i < 500; i++ { // unflushed: in the WAL only
				mustDo(t, db.Put(faultKey(i), faultValue(i)))
			}
			mustDo(t, db.Close())
			rewriteCounters(t, filepath.Join(dir, base.ManifestName), func(v []byte) { v[at] ^= 0x04 })
			err := openMustFail(t, dir, smallOptions(), ErrCorrupt)
			wantCorruptFile(t, err, base.ManifestName)
		})
	}
}

// rewriteCounters changes the raw counters record inside MANIFEST with
// bbolt, as a flipped bit on disk would.
func rewriteCounters(t *testing.T, path string, mutate func([]byte)) {
	t.Helper()
	db, err := bolt.Open(path, 0o644, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	mustDo(t, err)
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		v := bytes.Clone(meta.Get([]byte("counters")))
		if v == nil {
			return errors.New("no counters record")
		}
		mutate(v)
		return meta.Put([]byte("counters"), v)
	})
	mustDo(t, errors.Join(err, db.Close()))
}

// TestManifestOlderThanFiles: files the manifest cannot explain mean the
// manifest is older than the files: a missing live segment, a missing WAL
// at the log number.
func TestManifestOlderThanFiles(t *testing.T) {
	t.Run("live segment missing", func(t *testing.T) {
		dir := brickStore(t, 400)
		segs, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt))
		mustDo(t, os.Remove(segs[0]))
		err := openMustFail(t, dir, smallOptions(), ErrCorrupt)
		wantCorruptFile(t, err, filepath.Base(segs[0]))
	})
	t.Run("log WAL missing", func(t *testing.T) {
		dir := brickStore(t, 400)
		wal := newestWAL(t, dir)
		mustDo(t, os.Remove(filepath.Join(dir, wal)))
		err := openMustFail(t, dir, smallOptions(), ErrCorrupt)
		wantCorruptFile(t, err, wal)
		rep, err := VerifyDir(context.Background(), nil, dir)
		if err != nil || rep.OK() {
			t.Fatalf("VerifyDir: %v\n%v", err, rep)
		}
	})
}

// TestJunkFileName: a file named like the store's but numbered beyond any
// number the manifest issued is not the store's: Open refuses it with an
// error naming it and changes nothing (it used to raise the counter to
// 2^64-1 and brick the store). Removing the file makes the store open with
// all its data.
func TestJunkFileName(t *testing.T) {
	for _, name := range []string{"18446744073709551614.seg", "99999999.wal", "000000.seg"} {
		t.Run(name, func(t *testing.T) {
			dir := brickStore(t, 400)
			junk := filepath.Join(dir, name)
			mustDo(t, os.WriteFile(junk, []byte("x\n"), 0o644))
			err := openMustFail(t, dir, smallOptions(), ErrCorrupt)
			wantCorruptFile(t, err, name)
			rep, err := VerifyDir(context.Background(), nil, dir)
			if err != nil || rep.OK() {
				t.Fatalf("VerifyDir: %v\n%v", err, rep)
			}
			mustDo(t, os.Remove(junk))
			checkAll(t, dir, 400)
		})
	}
}

// TestFailedOpenChangesNothing: a failing Open changes nothing.
func TestFailedOpenChangesNothing(t *testing.T) {
	t.Run("damaged WAL with orphan segments", func(t *testing.T) {
		dir := brickStore(t, 400)
		db := mustOpen(t, dir, smallOptions())
		for i := 400; i < 500; i++ {
			mustDo(t, db.Put(faultKey(i), faultValue(i)))
		}
		wal := base.WALFileName(db.logNum)
		mustDo(t, db.Close())
		// An orphan: a segment an interrupted flush left, numbered below
		// the counter.
		segs, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt))
		orphan := filepath.Join(dir, base.SegmentFileName(db.logNum+5))
		if _, err := os.Stat(orphan); err == nil {
			t.Fatalf("%s exists", orphan)
		}
		data, err := os.ReadFile(segs[0])
		mustDo(t, err)
		mustDo(t, os.WriteFile(orphan, data, 0o644))
		flipByte(t, filepath.Join(dir, wal), 40) // inside the first record
		openMustFail(t, dir, smallOptions(), ErrCorrupt)
	})
	t.Run("creates fail", func(t *testing.T) {
		dir := brickStore(t, 400)
		db := mustOpen(t, dir, smallOptions())
		for i := 400; i < 500; i++ {
			mustDo(t, db.Put(faultKey(i), faultValue(i)))
		}
		mustDo(t, db.Close())
		for _, pattern := range []string{"*.seg", "*.wal"} {
			ffs := errorfs.New(vfs.Default)
			ffs.SetFault(errorfs.Fault{Ops: vfs.OpCreate, Name: pattern, Sticky: true, Err: syscall.EROFS})
			o := smallOptions()
			o.FS = ffs
			openMustFail(t, dir, o, syscall.EROFS)
		}
		checkAll(t, dir, 500)
	})
	t.Run("foreign directory", func(t *testing.T) {
		dir := t.TempDir()
		mustDo(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
		openMustFail(t, dir, nil, ErrNotStore)
	})
	t.Run("a user's MANIFEST.tmp", func(t *testing.T) {
		dir := t.TempDir()
		mustDo(t, os.WriteFile(filepath.Join(dir, base.ManifestTmpName), []byte("my draft"), 0o644))
		openMustFail(t, dir, nil, ErrNotStore)
	})
	t.Run("an interrupted creation's MANIFEST.tmp", func(t *testing.T) {
		dir := t.TempDir()
		mustDo(t, os.WriteFile(filepath.Join(dir, base.ManifestTmpName), nil, 0o644))
		db := mustOpen(t, dir, nil)
		mustDo(t, db.Close())
		if _, err := os.Stat(filepath.Join(dir, base.ManifestTmpName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("leftover not removed: %v", err)
		}
	})
}

// TestFailedFlushSurfaces: after a failed flush nothing waits forever:
// WaitForCompactions, Flush and Close return the store's error.
func TestFailedFlushSurfaces(t *testing.T) {
	ffs := errorfs.New(vfs.Default)
	o := smallOptions()
	o.FS = ffs
	db := mustOpen(t, t.TempDir(), o)
	ffs.SetFault(errorfs.Fault{Ops: vfs.OpCreate, Name: "*.seg", Sticky: true, Err: syscall.EIO})
	for i := 0; i < 2000; i++ {
		if err := db.Put(faultKey(i), faultValue(i)); err != nil {
			if !errors.Is(err, ErrReadOnly) {
				t.Fatalf("Put: %v", err)
			}
			break
		}
	}
	done := make(chan error, 1)
	go func() { done <- db.WaitForCompactions(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrReadOnly) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("WaitForCompactions = %v, want ErrReadOnly wrapping EIO", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitForCompactions still waiting 10 s after the flush failed")
	}
	if err := db.Flush(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Flush = %v, want ErrReadOnly", err)
	}
	if err := db.Close(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Close = %v, want ErrReadOnly", err)
	}
}

// TestOptionsValidated: options out of range are refused at Open, naming
// the option, before anything is created; every call after Close returns
// ErrClosed.
func TestOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Options)
	}{
		{"BitsPerKey +Inf", func(o *Options) { o.BitsPerKey = math.Inf(1) }},
		{"BitsPerKey NaN", func(o *Options) { o.BitsPerKey = math.NaN() }},
		{"BitsPerKey negative", func(o *Options) { o.BitsPerKey = -1 }},
		{"BitsPerKey 65", func(o *Options) { o.BitsPerKey = 65 }},
		{"BitsPerKey 0.5", func(o *Options) { o.BitsPerKey = 0.5 }}, // bloom would make it 1
		{"BitsPerKey -Inf with DisableFilters", func(o *Options) { o.BitsPerKey, o.DisableFilters = math.Inf(-1), true }},
		{"MemtableSize negative", func(o *Options) { o.MemtableSize = -1 }},
		{"MemtableSize 2 GiB", func(o *Options) { o.MemtableSize = 2 << 30 }},
		{"BlockSize negative", func(o *Options) { o.BlockSize = -4096 }},
		{"BlockSize 16 MiB", func(o *Options) { o.BlockSize = 16 << 20 }},
		{"BlockCacheSize negative", func(o *Options) { o.BlockCacheSize = -1 }},
		{"FilterBudget negative", func(o *Options) { o.FilterBudget = -1 }},
		{"CompactionFanIn 1", func(o *Options) { o.CompactionFanIn = 1 }},
		{"CompactionFanIn 65", func(o *Options) { o.CompactionFanIn = 65 }},
		{"CompactionConcurrency negative", func(o *Options) { o.CompactionConcurrency = -2 }},
		{"CompactionConcurrency 65", func(o *Options) { o.CompactionConcurrency = 65 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			o := DefaultOptions()
			tc.set(o)
			_, err := Open(dir, o)
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Open = %v, want ErrInvalidOptions", err)
			}
			if name := strings.Fields(tc.name)[0]; !strings.Contains(err.Error(), name+" = ") {
				t.Fatalf("Open = %v, want it to name %s", err, name)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Open with invalid options created the directory: %v", err)
			}
		})
	}
	db := mustOpen(t, t.TempDir(), nil)
	mustDo(t, db.Close())
	if err := db.Write(NewBatch()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write of an empty batch after Close = %v, want ErrClosed", err)
	}
}

// DB.Sync fsyncs the WAL (once), reports a failed fsync as ErrReadOnly (the
// kernel may have dropped the pages, so the writes cannot be promised), and
// returns ErrClosed after Close.
func TestSync(t *testing.T) {
	ffs := errorfs.New(vfs.Default)
	o := smallOptions()
	o.FS = ffs
	db := mustOpen(t, t.TempDir(), o)
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	before := ffs.Count(vfs.OpSync)
	mustDo(t, db.Sync())
	if n := ffs.Count(vfs.OpSync) - before; n != 1 {
		t.Fatalf("Sync issued %d fsyncs, want 1", n)
	}
	ffs.SetFault(errorfs.Fault{Ops: vfs.OpSync, Name: "*.wal"})
	if err := db.Sync(); !errors.Is(err, ErrReadOnly) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync with a failing fsync = %v, want ErrReadOnly wrapping EIO", err)
	}
	if err := db.Put([]byte("b"), []byte("2")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put after a failed Sync = %v", err)
	}
	db.Close()
	if err := db.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close = %v, want ErrClosed", err)
	}
}

// TestWriteSyncSurvivesPowerCut: without Options.Sync, a WriteSync makes
// its batch and every write before it survive a power cut that loses every
// unsynced byte; writes after it may be lost. Write issues no fsync,
// WriteSync exactly one.
func TestWriteSyncSurvivesPowerCut(t *testing.T) {
	dir := t.TempDir()
	p := powerfs.New(vfs.Default, &powerfs.Options{SkipRealSync: true})
	counts := errorfs.New(p)
	o := smallOptions()
	o.FS = counts
	db := mustOpen(t, dir, o)
	for i := range 50 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	before := counts.Count(vfs.OpSync)
	b := NewBatch()
	b.Put(faultKey(50), faultValue(50))
	b.Put(faultKey(51), faultValue(51))
	mustDo(t, db.WriteSync(b))
	if n := counts.Count(vfs.OpSync) - before; n != 1 {
		t.Fatalf("WriteSync issued %d fsyncs, want 1", n)
	}
	before = counts.Count(vfs.OpSync)
	mustDo(t, db.Put(faultKey(52), faultValue(52)))
	if n := counts.Count(vfs.OpSync) - before; n != 0 {
		t.Fatalf("Put without Options.Sync issued %d fsyncs", n)
	}
	p.Cut()
	db.Close()
	if _, err := p.Restore(powerfs.WritebackNone, 1); err != nil {
		t.Fatal(err)
	}
	o.FS = p // rebooted
	checkWriteSyncCut(t, dir, o)
}

// TestWriteSyncSurvivesPowerCutMapped is TestWriteSyncSurvivesPowerCut
// on the default WAL path, a shared mapping on Linux (the fsync count
// needs a fault injector's wrapper, which cannot be mapped, so it is
// checked there only): a WriteSync makes everything before it survive a
// cut that keeps no unsynced byte, and the write after it is lost.
func TestWriteSyncSurvivesPowerCutMapped(t *testing.T) {
	dir := t.TempDir()
	p := powerfs.New(vfs.Default, &powerfs.Options{SkipRealSync: true})
	o := smallOptions()
	o.FS = p
	db := mustOpen(t, dir, o)
	for i := range 50 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	b := NewBatch()
	b.Put(faultKey(50), faultValue(50))
	b.Put(faultKey(51), faultValue(51))
	mustDo(t, db.WriteSync(b))
	mustDo(t, db.Put(faultKey(52), faultValue(52)))
	if runtime.GOOS == "linux" && p.Mapped() == 0 {
		t.Fatal("the WAL was not mapped")
	}
	p.Cut()
	db.Close()
	if _, err := p.Restore(powerfs.WritebackNone, 1); err != nil {
		t.Fatal(err)
	}
	checkWriteSyncCut(t, dir, o) // rebooted
}

// checkWriteSyncCut reopens the store after the power cut of the WriteSync
// tests: keys 0-51 (Puts, then the WriteSync's batch) survived it, and key
// 52, written after the WriteSync without a sync, did not.
func checkWriteSyncCut(t *testing.T, dir string, o *Options) {
	t.Helper()
	db := mustOpen(t, dir, o)
	defer db.Close()
	for i := range 52 {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("key %d after the power cut: %q, %v", i, v, err)
		}
	}
	if _, err := db.Get(faultKey(52)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the unsynced write after WriteSync survived a cut that kept no unsynced byte: %v", err)
	}
}

// TestDamagedManifestNoCrash: a damaged MANIFEST never reaches bbolt code
// that faults or panics: truncated to 8 KiB (bbolt used to SIGBUS on its
// mapping), or with a page header flipped, Open and VerifyDir return
// ErrCorrupt and change nothing. (manifest.TestBitFlipSweep flips every
// byte in subprocesses.)
func TestDamagedManifestNoCrash(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"truncated to 8 KiB", func(b []byte) []byte { return b[:8192] }},
		{"truncated mid-page", func(b []byte) []byte { return b[:len(b)-100] }},
		{"root page flags", func(b []byte) []byte { b[rootPage(b)+8] ^= 0xff; return b }},
		{"root page count", func(b []byte) []byte { b[rootPage(b)+10] ^= 0x40; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := brickStore(t, 400)
			path := filepath.Join(dir, base.ManifestName)
			b, err := os.ReadFile(path)
			mustDo(t, err)
			mustDo(t, os.WriteFile(path, tc.damage(b), 0o644))
			err = openMustFail(t, dir, smallOptions(), ErrCorrupt)
			wantCorruptFile(t, err, base.ManifestName)
			if rep, err := VerifyDir(context.Background(), nil, dir); err != nil || rep.OK() {
				t.Fatalf("VerifyDir: %v\n%v", err, rep)
			}
		})
	}
}

// rootPage returns the offset of the root page of the newest bbolt meta's
// tree in a MANIFEST's bytes.
func rootPage(b []byte) int {
	ps := int(binary.LittleEndian.Uint32(b[24:]))
	meta := 0
	if binary.LittleEndian.Uint64(b[ps+16+48:]) > binary.LittleEndian.Uint64(b[16+48:]) {
		meta = ps
	}
	// Meta: page header (16), magic, version, page size, flags (16), then
	// the root bucket's page id.
	return int(binary.LittleEndian.Uint64(b[meta+32:])) * ps
}

// TestWALBeyondItsMapping: the WAL appends through a preallocated mapping
// (Linux); a group larger than what is left of it goes through pwrite, and
// so does everything after. Every write reads back after a reopen, and the
// closed WAL has no zero tail.
func TestWALBeyondItsMapping(t *testing.T) {
	dir := t.TempDir()
	o := smallOptions()
	o.MemtableSize = 16 << 10 // a mapping of about 84 KiB
	db := mustOpen(t, dir, o)
	put := func(i int) { mustDo(t, db.Put(faultKey(i), faultValue(i))) }
	for i := range 20 {
		put(i)
	}
	if runtime.GOOS == "linux" { // the mapped path is in use: the file is preallocated
		st, err := os.Stat(filepath.Join(dir, base.WALFileName(db.logNum)))
		mustDo(t, err)
		if st.Size() <= db.logw.Size() {
			t.Fatalf("WAL is %d bytes for %d written: not preallocated and mapped", st.Size(), db.logw.Size())
		}
	}
	b := NewBatch()
	big := bytes.Repeat([]byte("v"), 256<<10)
	b.Put([]byte("big1"), big)
	b.Put([]byte("big2"), big)
	mustDo(t, db.Write(b))
	for i := 20; i < 40; i++ {
		put(i)
	}
	mustDo(t, db.Close())
	for _, name := range globNames(t, dir, "*"+base.WALExt) {
		rep := &VerifyReport{}
		f, err := os.Open(filepath.Join(dir, name))
		mustDo(t, err)
		_, tail, err := scanWAL(context.Background(), f, name, false, wal.RecoverOptions{}, rep)
		mustDo(t, err)
		f.Close()
		rep.noteTail(name, tail)
		if len(rep.Problems) > 0 || len(rep.Notes) > 0 {
			t.Fatalf("%s after Close: %v", name, rep)
		}
	}
	db = mustOpen(t, dir, o)
	defer db.Close()
	for i := range 40 {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("key %d: %q, %v", i, v, err)
		}
	}
	for _, k := range []string{"big1", "big2"} {
		if v, err := db.Get([]byte(k)); err != nil || !bytes.Equal(v, big) {
			t.Fatalf("%s: %d bytes, %v", k, len(v), err)
		}
	}
}

func globNames(t *testing.T, dir, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, pattern))
	mustDo(t, err)
	for i, p := range paths {
		paths[i] = filepath.Base(p)
	}
	return paths
}

// TestCorruptErrorExported: a caller finds the file and offset of damage
// with errors.As and the root package's CorruptError.
func TestCorruptErrorExported(t *testing.T) {
	dir := brickStore(t, 400)
	mustDo(t, os.WriteFile(filepath.Join(dir, "99999999.wal"), []byte("x"), 0o644))
	_, err := Open(dir, smallOptions())
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != "99999999.wal" {
		t.Fatalf("errors.As(%v) found %+v", err, ce)
	}
}

// TestFailedCreateNeverBricks fails an Open that creates a store (in a
// missing directory and in an empty one) at each of its file operations:
// each kind of operation failing once in turn, and the disk failing every
// operation from each step on. The Open reports the failure, and what it
// leaves (a LOCK file, an empty MANIFEST or one at its temporary name, an
// empty WAL) is never taken for a foreign directory or damage: the next
// Open on a healthy file system makes or opens an empty store that takes
// writes and reopens with them.
func TestFailedCreateNeverBricks(t *testing.T) {
	create := func(fs *errorfs.FS) (string, error) {
		dir := filepath.Join(t.TempDir(), "store")
		db, err := Open(dir, &Options{FS: fs})
		if err == nil {
			err = db.Close()
		}
		return dir, err
	}
	var faults []errorfs.Fault
	for _, op := range []vfs.Op{vfs.OpMkdir, vfs.OpCreate, vfs.OpWrite, vfs.OpSync, vfs.OpSyncDir,
		vfs.OpLink, vfs.OpRemove, vfs.OpCommit, vfs.OpAny} {
		fs := errorfs.New(vfs.Default)
		_, err := create(fs)
		mustDo(t, err)
		n := fs.Count(op)
		if n == 0 {
			t.Fatalf("creating a store performs no %v", op)
		}
		for k := 1; k <= n; k++ {
			faults = append(faults, errorfs.Fault{Ops: op, Nth: k, Sticky: op == vfs.OpAny, Err: syscall.EIO})
		}
	}
	failed := 0
	for _, f := range faults {
		for _, missing := range []bool{true, false} {
			what := fmt.Sprintf("%+v (directory missing: %v)", f, missing)
			fs := errorfs.New(vfs.Default)
			fs.SetFault(f)
			dir := filepath.Join(t.TempDir(), "store")
			if !missing {
				mustDo(t, os.Mkdir(dir, 0o755))
			}
			db, err := Open(dir, &Options{FS: fs})
			if err == nil {
				err = db.Close()
			}
			if fs.Fired() == 0 && err != nil {
				t.Fatalf("%s: Open failed with no fault fired: %v", what, err)
			}
			if fs.Fired() > 0 {
				if err == nil {
					t.Fatalf("%s: the failure fired, yet Open and Close succeeded", what)
				}
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("%s: Open = %v, want the injected EIO", what, err)
				}
				failed++
			}
			db, err = Open(dir, nil)
			if err != nil {
				t.Fatalf("%s: Open after the failed creation: %v", what, err)
			}
			if _, err := db.Get([]byte("k")); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: the store a failed creation left holds k: %v", what, err)
			}
			mustDo(t, db.Put([]byte("k"), []byte("v")))
			mustDo(t, db.Close())
			db = mustOpen(t, dir, nil)
			if v, err := db.Get([]byte("k")); err != nil || string(v) != "v" {
				t.Fatalf("%s: after reopening, k = %q, %v", what, v, err)
			}
			mustDo(t, db.Close())
		}
	}
	t.Logf("%d failed creations, each reopened", failed)
}

// flushHoldFS is a power-cut file system whose segment fsyncs wait for
// release: no flush completes, so the memtables of the WALs rotations
// replaced stay unflushed, and those WALs are all that holds their writes.
type flushHoldFS struct {
	*powerfs.FS
	release chan struct{}
}

func (h *flushHoldFS) Create(name string) (vfs.File, error) {
	f, err := h.FS.Create(name)
	if err == nil && filepath.Ext(name) == base.SegmentExt {
		return &armFile{File: f, release: h.release}, nil
	}
	return f, err
}

// TestSyncSurvivesPowerCut: without Options.Sync, DB.Sync makes every
// write acknowledged before it survive a power cut that keeps no unsynced
// byte, also the writes in the WALs rotations replaced while no flush
// could take their memtables to a segment: Sync must seal those WALs
// first, not only fsync the active one. The write after Sync is lost.
// On the default WAL path (on Linux a shared mapping) and on write(2).
func TestSyncSurvivesPowerCut(t *testing.T) {
	for _, mmap := range []bool{true, false} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			dir := t.TempDir()
			p := powerfs.New(vfs.Default, &powerfs.Options{SkipRealSync: true})
			h := &flushHoldFS{FS: p, release: make(chan struct{})}
			o := smallOptions()
			o.FS, o.DisableMmap = h, !mmap
			db := mustOpen(t, dir, o)
			n, rotations := 0, 0
			for last := db.logNum; rotations < 2; n++ {
				mustDo(t, db.Put(faultKey(n), faultValue(n)))
				db.mu.Lock()
				if db.logNum != last {
					last, rotations = db.logNum, rotations+1
				}
				db.mu.Unlock()
			}
			mustDo(t, db.Sync())
			mustDo(t, db.Put(faultKey(n), faultValue(n))) // after the Sync: lost
			if mmap && runtime.GOOS == "linux" && p.Mapped() == 0 {
				t.Fatal("the WAL was not mapped")
			}
			p.Cut()
			close(h.release) // the held flushes now fail: the power is off
			db.Close()
			if _, err := p.Restore(powerfs.WritebackNone, 1); err != nil {
				t.Fatal(err)
			}
			o.FS = p // rebooted
			db = mustOpen(t, dir, o)
			defer db.Close()
			for i := range n {
				if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
					t.Fatalf("key %d of %d, acknowledged before Sync, after the power cut: %q, %v", i, n, v, err)
				}
			}
			if _, err := db.Get(faultKey(n)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("the write after Sync survived a cut that kept no unsynced byte: %v", err)
			}
		})
	}
}

// TestUpdateSyncSurvivesPowerCut: without Options.Sync, a transaction
// committed by UpdateWith with Sync is durable when UpdateWith returns, as
// a WriteSync batch is: it, and every write before it, survive a power
// cut that keeps no unsynced byte, and the write after it is lost. A
// plain Update is not synced.
func TestUpdateSyncSurvivesPowerCut(t *testing.T) {
	for _, mmap := range []bool{true, false} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			dir := t.TempDir()
			p := powerfs.New(vfs.Default, &powerfs.Options{SkipRealSync: true})
			o := smallOptions()
			o.FS, o.DisableMmap = p, !mmap
			db := mustOpen(t, dir, o)
			for i := range 50 {
				mustDo(t, db.Put(faultKey(i), faultValue(i)))
			}
			mustDo(t, db.UpdateWith(&UpdateOptions{Sync: true}, func(txn *Txn) error {
				if _, err := txn.Get(faultKey(0)); err != nil { // a read: the commit is checked
					return err
				}
				if err := txn.Put(faultKey(50), faultValue(50)); err != nil {
					return err
				}
				return txn.Put(faultKey(51), faultValue(51))
			}))
			mustDo(t, db.Update(func(txn *Txn) error { return txn.Put(faultKey(52), faultValue(52)) }))
			p.Cut()
			db.Close()
			if _, err := p.Restore(powerfs.WritebackNone, 1); err != nil {
				t.Fatal(err)
			}
			checkWriteSyncCut(t, dir, o) // rebooted: 0-51 there, 52 lost
		})
	}
}

// TestLargestRangeDeletions: range deletions whose bounds are the largest
// legal keys, in one batch, through every stage a point write goes
// through: the memtable, the WAL and its replay, the flush of the replayed
// writes, a compaction that keeps the tombstones for a snapshot and one
// that drops them, and reopens, each read back by Get, a scan and
// Verify. Every decoder on the way must take what DeleteRange accepts.
func TestLargestRangeDeletions(t *testing.T) {
	// key(c, last) is a key of MaxKeySize bytes: c repeated, then last.
	key := func(c, last byte) []byte {
		k := bytes.Repeat([]byte{c}, MaxKeySize)
		k[len(k)-1] = last
		return k
	}
	const first, end = 'a', 'h'
	for _, mmap := range []bool{true, false} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			dir := t.TempDir()
			o := DefaultOptions()
			o.DisableMmap = !mmap
			db := mustOpen(t, dir, o)
			for c := byte(first); c < end; c++ {
				mustDo(t, db.Put(key(c, 'm'), []byte("deleted")))
				mustDo(t, db.Put(key(c, 'z'), []byte("kept")))
			}
			mustDo(t, db.Flush())
			b := NewBatch()
			for c := byte(first); c < end; c++ { // [c…ca, c…cn): each holds c…cm
				mustDo(t, b.DeleteRange(key(c, 'a'), key(c, 'n')))
			}
			mustDo(t, db.Write(b))
			check := func(stage string) {
				t.Helper()
				for c := byte(first); c < end; c++ {
					if _, err := db.Get(key(c, 'm')); !errors.Is(err, ErrNotFound) {
						t.Fatalf("%s: a key a range deletion covers: %v, want ErrNotFound", stage, err)
					}
					if v, err := db.Get(key(c, 'z')); err != nil || string(v) != "kept" {
						t.Fatalf("%s: a key past the range deletion: %q, %v", stage, v, err)
					}
				}
				it, err := db.NewIterator(nil)
				mustDo(t, err)
				n := 0
				for k, v := range it.All() {
					if k[len(k)-1] != 'z' || string(v) != "kept" {
						t.Fatalf("%s: the scan shows key …%q = %q", stage, k[len(k)-1:], v)
					}
					n++
				}
				mustDo(t, it.Close())
				if n != end-first {
					t.Fatalf("%s: the scan saw %d keys, want %d", stage, n, end-first)
				}
				rep, err := db.Verify(context.Background())
				if err != nil || !rep.OK() {
					t.Fatalf("%s: Verify: %v\n%v", stage, err, rep)
				}
			}
			check("in the memtable")
			mustDo(t, db.Close())
			db = mustOpen(t, dir, o) // replays the WAL and flushes it
			check("replayed and flushed")
			snap, err := db.NewSnapshot()
			mustDo(t, err)
			mustDo(t, db.Compact()) // the snapshot keeps the covered versions and the tombstones
			check("compacted under a snapshot")
			mustDo(t, snap.Close())
			mustDo(t, db.Close())
			db = mustOpen(t, dir, o)
			check("reopened")
			mustDo(t, db.Compact())
			check("compacted")
			mustDo(t, db.Close())
			if rep, err := VerifyDir(context.Background(), nil, dir); err != nil || !rep.OK() {
				t.Fatalf("VerifyDir: %v\n%v", err, rep)
			}
		})
	}
}
