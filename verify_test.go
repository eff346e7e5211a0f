package bloomkv

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/vfs"
)

// fillForVerify writes through flushes and a compaction, then more
// flushed segments and writes left in the WAL, so that a store has
// several live segments of both tiers and unflushed data.
func fillForVerify(t *testing.T, db *DB) {
	t.Helper()
	for i := range 3000 {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
		if i%1000 == 999 {
			mustDo(t, db.Flush())
		}
	}
	mustDo(t, db.Compact())
	for i := range 600 {
		if i%3 == 0 {
			mustDo(t, db.Delete(faultKey(i)))
		} else {
			mustDo(t, db.Put(fmt.Appendf(nil, "new%05d", i), []byte("v")))
		}
	}
	mustDo(t, db.Flush())
	for i := range 50 { // not enough to fill the memtable: they stay in the WAL
		mustDo(t, db.Put(fmt.Appendf(nil, "wal%05d", i), []byte("v")))
	}
}

// verifiedStore makes a closed, healthy store (checked by Verify while
// open) and returns its directory and the name of its oldest live segment.
func verifiedStore(t *testing.T) (dir, seg string) {
	t.Helper()
	dir = t.TempDir()
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	fillForVerify(t, db)
	rep, err := db.Verify(context.Background())
	if err != nil || !rep.OK() || rep.Segments < 2 {
		t.Fatalf("Verify of a healthy open store: %v, %v", rep, err)
	}
	rs := db.acquire()
	seg = rs.segments[len(rs.segments)-1].name
	rs.release()
	mustDo(t, db.Close())
	return dir, seg
}

// dirHash hashes the names and contents of the files in dir.
func dirHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			fmt.Fprintf(h, "%s/\n", e.Name()) // named, not entered
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		mustDo(t, err)
		fmt.Fprintf(h, "%s %d\n", e.Name(), len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestVerifyHealthy checks a store after puts, deletes, flushes and a
// compaction, with filters folded by a budget: open (Verify), then closed
// (VerifyDir, which must change nothing), and that the counts add up.
func TestVerifyHealthy(t *testing.T) {
	dir := t.TempDir()
	o := smallOptions()
	o.FilterBudget = 1 // fold every filter as far as it goes
	// Uniform filters, folded: FilterOptimal would give no segment a
	// filter at all under a 1-byte budget.
	o.FilterAllocation = FilterUniform
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	// Enough keys that fillForVerify's compaction makes a filter of more
	// than 64 blocks, which bloom sizes to be halvable (GeometryFor); the
	// small flushed segments' filters may have an odd block count.
	for i := range 4000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "pre%05d", i), []byte("v")))
	}
	fillForVerify(t, db)
	rs := db.acquire()
	var entries, size int64
	folded := false
	for _, s := range rs.segments {
		entries += int64(s.meta.Entries)
		size += s.meta.Size
		folded = folded || s.reader.ResidentFilter().Geometry().Bits < s.reader.Filter().Geometry().Bits
	}
	rs.release()
	if !folded {
		t.Fatal("no resident filter was folded: the budget check is not exercised")
	}
	rep, err := db.Verify(context.Background())
	if err != nil || !rep.OK() {
		t.Fatalf("Verify of a healthy open store: %v, %v", rep, err)
	}
	if rep.Entries != entries || rep.Bytes != size || rep.Blocks == 0 || rep.WALs == 0 {
		t.Fatalf("Verify counts %+v; the segments hold %d entries in %d bytes", rep, entries, size)
	}
	mustDo(t, db.Close())
	before := dirHash(t, dir)
	rep, err = VerifyDir(context.Background(), nil, dir)
	if err != nil || !rep.OK() || len(rep.Notes) != 0 {
		t.Fatalf("VerifyDir of a healthy store: %v, %v", rep, err)
	}
	if rep.Entries != entries || rep.WALs == 0 || rep.WALRecords == 0 {
		t.Fatalf("VerifyDir counts %+v; the segments hold %d entries", rep, entries)
	}
	if dirHash(t, dir) != before {
		t.Fatal("VerifyDir changed the directory")
	}
}

// segmentFooter returns the offsets of a segment's filter and index
// blocks and of its footer (segment/FORMAT.md).
func segmentFooter(t *testing.T, path string) (filter, index, footer int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	mustDo(t, err)
	ft := b[len(b)-64:]
	return int64(binary.LittleEndian.Uint64(ft[0:])), int64(binary.LittleEndian.Uint64(ft[32:])), int64(len(b) - 64)
}

const anyOffset = -2

// TestVerifyDirDamage damages a store in each way and checks that the
// report names the file (and the offset where there is one) — without
// changing anything.
func TestVerifyDirDamage(t *testing.T) {
	tests := []struct {
		name string
		// damage returns the file and offset the finding must name
		damage  func(t *testing.T, dir, seg string) (string, int64)
		problem bool // false: a note, and the store stays OK
	}{
		{"data block byte", func(t *testing.T, dir, seg string) (string, int64) {
			flipByte(t, filepath.Join(dir, seg), 20)
			return seg, 0 // the first block's checksum
		}, true},
		{"index byte", func(t *testing.T, dir, seg string) (string, int64) {
			_, index, _ := segmentFooter(t, filepath.Join(dir, seg))
			flipByte(t, filepath.Join(dir, seg), index+3)
			return seg, index
		}, true},
		{"filter byte", func(t *testing.T, dir, seg string) (string, int64) {
			filter, _, _ := segmentFooter(t, filepath.Join(dir, seg))
			if filter == 0 {
				t.Fatal("segment has no filter")
			}
			flipByte(t, filepath.Join(dir, seg), filter+10)
			return seg, filter
		}, true},
		{"footer byte", func(t *testing.T, dir, seg string) (string, int64) {
			_, _, footer := segmentFooter(t, filepath.Join(dir, seg))
			flipByte(t, filepath.Join(dir, seg), -3)
			return seg, footer
		}, true},
		{"truncated segment", func(t *testing.T, dir, seg string) (string, int64) {
			p := filepath.Join(dir, seg)
			st, err := os.Stat(p)
			mustDo(t, err)
			mustDo(t, os.Truncate(p, st.Size()/2))
			return seg, st.Size() / 2
		}, true},
		{"missing segment", func(t *testing.T, dir, seg string) (string, int64) {
			mustDo(t, os.Remove(filepath.Join(dir, seg)))
			return seg, -1
		}, true},
		{"WAL damaged before its tail", func(t *testing.T, dir, seg string) (string, int64) {
			wal := newestWAL(t, dir)
			flipByte(t, filepath.Join(dir, wal), 40)
			return wal, anyOffset
		}, true},
		{"missing WAL", func(t *testing.T, dir, seg string) (string, int64) {
			wal := newestWAL(t, dir)
			mustDo(t, os.Remove(filepath.Join(dir, wal)))
			return wal, -1
		}, true},
		{"WAL torn tail", func(t *testing.T, dir, seg string) (string, int64) {
			wal := newestWAL(t, dir)
			p := filepath.Join(dir, wal)
			st, err := os.Stat(p)
			mustDo(t, err)
			mustDo(t, os.Truncate(p, st.Size()-3))
			return wal, -1
		}, false},
		{"orphan segment", func(t *testing.T, dir, seg string) (string, int64) {
			// Numbered below the manifest's next file number, as the output
			// of an interrupted flush is.
			name := base.SegmentFileName(readManifestState(t, dir).NextFileNum - 1)
			mustDo(t, os.WriteFile(filepath.Join(dir, name), []byte("junk"), 0o644))
			return name, -1
		}, false},
		{"foreign file", func(t *testing.T, dir, seg string) (string, int64) {
			mustDo(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644))
			return "notes.txt", -1
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, seg := verifiedStore(t)
			file, off := tc.damage(t, dir, seg)
			before := dirHash(t, dir)
			rep, err := VerifyDir(context.Background(), nil, dir)
			if err != nil {
				t.Fatal(err)
			}
			if dirHash(t, dir) != before {
				t.Fatal("VerifyDir changed the directory")
			}
			found := rep.Problems
			if !tc.problem {
				found = rep.Notes
				if !rep.OK() {
					t.Fatalf("harmless finding reported as a problem:\n%s", rep)
				}
			}
			for _, p := range found {
				if p.File == file && (off == anyOffset || p.Offset == off) {
					return
				}
			}
			t.Fatalf("no finding for %s at offset %d in:\n%s", file, off, rep)
		})
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	mustDo(t, err)
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x5a
	mustDo(t, os.WriteFile(path, b, 0o644))
}

func newestWAL(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	mustDo(t, err)
	last := ""
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), base.WALExt) {
			last = e.Name()
		}
	}
	if last == "" {
		t.Fatal("no WAL")
	}
	return last
}

func TestVerifyDirRefuses(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	if _, err := VerifyDir(context.Background(), nil, dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("VerifyDir of an open store: %v, want ErrLocked", err)
	}
	mustDo(t, db.Close())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := VerifyDir(ctx, nil, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("VerifyDir with a canceled context: %v", err)
	}
	if _, err := VerifyDir(context.Background(), nil, t.TempDir()); !errors.Is(err, ErrNotStore) {
		t.Fatalf("VerifyDir of an empty directory: %v, want ErrNotStore", err)
	}
}

// TestVerifyDirWithoutLock: a store whose LOCK file is gone is checked
// without making one.
func TestVerifyDirWithoutLock(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	mustDo(t, db.Put([]byte("k"), []byte("v")))
	mustDo(t, db.Close())
	mustDo(t, os.Remove(filepath.Join(dir, base.LockName)))
	before := dirHash(t, dir)
	if rep, err := VerifyDir(context.Background(), nil, dir); err != nil || !rep.OK() {
		t.Fatalf("VerifyDir: %v, %v", rep, err)
	}
	if dirHash(t, dir) != before {
		t.Fatal("VerifyDir changed the directory")
	}
}

// countdownCtx is canceled once Err has been asked n times: it stops a
// check part-way through.
type countdownCtx struct {
	context.Context
	n atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// TestVerifyStopsBetweenBlocks: cancellation is seen inside a segment,
// not only between segments.
func TestVerifyStopsBetweenBlocks(t *testing.T) {
	dir, _ := verifiedStore(t)
	full, err := VerifyDir(context.Background(), nil, dir)
	if err != nil || !full.OK() {
		t.Fatalf("VerifyDir: %v, %v", full, err)
	}
	ctx := &countdownCtx{Context: context.Background()}
	ctx.n.Store(5)
	rep, err := VerifyDir(ctx, nil, dir)
	if !errors.Is(err, context.Canceled) || rep == nil {
		t.Fatalf("VerifyDir with a context canceled part-way: %v, %v", rep, err)
	}
	if rep.Blocks == 0 || rep.Blocks >= full.Blocks || !rep.OK() {
		t.Fatalf("stopped after %d of %d blocks, report %v", rep.Blocks, full.Blocks, rep)
	}
}

// TestVerifyOpenStore: Verify reads the files afresh, so it finds damage
// that happened on disk since the DB opened them; it finds a live file
// gone from the directory, notes a stray one, and honours ctx.
func TestVerifyOpenStore(t *testing.T) {
	dir := t.TempDir()
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	defer db.Close()
	fillForVerify(t, db)
	rs := db.acquire()
	oldest, newest := rs.segments[len(rs.segments)-1].name, rs.segments[0].name
	rs.release()

	f, err := os.OpenFile(filepath.Join(dir, oldest), os.O_RDWR, 0)
	mustDo(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, 100)
	mustDo(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, 100)
	mustDo(t, err)
	mustDo(t, f.Close())
	// The DB keeps the newest segment open. Unix removes the name under it;
	// Windows refuses to remove a file that a handle holds open, so there
	// a store's live segments cannot be deleted under it at all.
	removed := true
	if err := os.Remove(filepath.Join(dir, newest)); err != nil {
		if runtime.GOOS != "windows" {
			t.Fatal(err)
		}
		t.Logf("Windows refuses to remove an open segment, as promised: %v", err)
		removed = false
	}
	mustDo(t, os.WriteFile(filepath.Join(dir, "stray.txt"), nil, 0o644))

	rep, err := db.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{oldest: false}
	if removed {
		want[newest] = false
	}
	for _, p := range rep.Problems {
		if _, ok := want[p.File]; ok {
			want[p.File] = true
		}
	}
	stray := false
	for _, n := range rep.Notes {
		stray = stray || n.File == "stray.txt"
	}
	if !want[oldest] || removed && !want[newest] || !stray {
		t.Fatalf("Verify after damage, a removal and a stray file:\n%s", rep)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.Verify(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Verify with a canceled context: %v", err)
	}
}

func TestVerifyClosedDB(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	mustDo(t, db.Close())
	if _, err := db.Verify(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Verify after Close: %v, want ErrClosed", err)
	}
}

// TestVerifyResidentFilterMiss: a resident filter that says "no" for a
// stored key is reported (it would make Get miss data).
func TestVerifyResidentFilterMiss(t *testing.T) {
	dir, seg := verifiedStore(t)
	f, err := os.Open(filepath.Join(dir, seg))
	mustDo(t, err)
	defer f.Close()
	st, err := f.Stat()
	mustDo(t, err)
	r, err := segment.Open(f, st.Size(), segment.ReaderOptions{Name: seg})
	mustDo(t, err)
	empty, err := bloom.NewGeometry(r.Filter().Geometry())
	mustDo(t, err)
	for _, tc := range []struct {
		filter *bloom.Filter
		ok     bool
	}{{r.Filter(), true}, {empty, false}} {
		rep := &VerifyReport{}
		mustDo(t, checkResidentFilter(context.Background(), r, tc.filter, seg, rep))
		if rep.OK() != tc.ok || (!tc.ok && rep.Problems[0].File != seg) {
			t.Fatalf("resident filter check, want ok=%v:\n%s", tc.ok, rep)
		}
	}
}

func readManifestState(t *testing.T, dir string) manifest.State {
	t.Helper()
	st, err := manifest.ReadState(vfs.Default, filepath.Join(dir, base.ManifestName))
	mustDo(t, err)
	return st
}
