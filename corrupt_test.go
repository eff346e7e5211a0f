package bloomkv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/wal"
)

// Corruption, byte by byte. Every region of a segment (data blocks and
// their trailers, index, filter, properties, footer) and of a WAL is
// covered by a checksum or a structural check, so flipping any byte must
// be detected: Open fails, or the reads that touch the damage fail, with
// ErrCorrupt naming the file and an offset inside it — and no read ever
// returns a wrong value or a false "not found".

const corruptKeys = 400

func corruptValue(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 20+i%13) }

// corruptStore writes corruptKeys keys, compacts them into one segment,
// closes the store and returns the segment's path and bytes.
func corruptStore(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	o := smallOptions()
	o.BlockSize = 256 // many blocks: many regions
	db := mustOpen(t, dir, o)
	for i := range corruptKeys {
		mustDo(t, db.Put(fmt.Appendf(nil, "key%05d", i), corruptValue(i)))
	}
	mustDo(t, db.Compact())
	mustDo(t, db.Close())
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segExt))
	if len(segs) != 1 {
		t.Fatalf("want one segment after Compact, have %v", segs)
	}
	data, err := os.ReadFile(segs[0])
	mustDo(t, err)
	return segs[0], data
}

// checkCorruptErr checks that err reports damage in file, at an offset
// inside it when it names one.
func checkCorruptErr(t *testing.T, err error, file string, size int, what string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: %v, want ErrCorrupt", what, err)
	}
	var ce *base.CorruptError
	if errors.As(err, &ce) {
		if ce.File != filepath.Base(file) || ce.Offset < -1 || ce.Offset >= int64(size) {
			t.Fatalf("%s: %v names %s at %d; want %s, an offset below %d", what, err, ce.File, ce.Offset, filepath.Base(file), size)
		}
	} else if !bytes.Contains([]byte(err.Error()), []byte(filepath.Base(file))) {
		t.Fatalf("%s: %v does not name %s", what, err, filepath.Base(file))
	}
}

func TestCorruptSegmentEveryRegion(t *testing.T) {
	dir := t.TempDir()
	path, data := corruptStore(t, dir)
	stride := 13
	if testing.Short() {
		stride = 41
	}
	var offsets []int
	for off := 0; off < len(data); off += stride {
		offsets = append(offsets, off)
	}
	for off := max(0, len(data)-80); off < len(data); off++ { // the footer, byte by byte
		offsets = append(offsets, off)
	}
	detected := 0
	for _, off := range offsets {
		bad := bytes.Clone(data)
		bad[off] ^= 0x21
		withCopy(t, dir, filepath.Base(path), bad, func(dir, path string) {
			if readAllAfterDamage(t, dir, path, len(data), fmt.Sprintf("flip at %d", off)) {
				detected++
			}
		})
	}
	if detected != len(offsets) {
		t.Fatalf("%d of %d flips went unnoticed", len(offsets)-detected, len(offsets))
	}
	t.Logf("%d-byte segment: %d flips, every one reported as ErrCorrupt naming the file", len(data), len(offsets))
}

// readAllAfterDamage opens the store and reads every key and a full scan.
// It fails the test on a wrong value, a false "not found" or an error that
// is not corruption of file; it reports whether the damage was noticed.
func readAllAfterDamage(t *testing.T, dir, file string, size int, what string) bool {
	t.Helper()
	db, err := Open(dir, smallOptions())
	if err != nil {
		checkCorruptErr(t, err, file, size, what+": Open")
		return true
	}
	defer db.Close()
	noticed := false
	for i := range corruptKeys {
		v, err := db.Get(fmt.Appendf(nil, "key%05d", i))
		if err != nil {
			checkCorruptErr(t, err, file, size, fmt.Sprintf("%s: Get key %d", what, i))
			noticed = true
		} else if !bytes.Equal(v, corruptValue(i)) {
			t.Fatalf("%s: key %d reads a wrong value %q", what, i, v)
		}
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	i := 0
	for k, v := range it.All() {
		if want := fmt.Sprintf("key%05d", i); string(k) != want || !bytes.Equal(v, corruptValue(i)) {
			t.Fatalf("%s: scan at %q=%q, want %s", what, k, v, want)
		}
		i++
	}
	if err := it.Close(); err != nil {
		checkCorruptErr(t, err, file, size, what+": scan")
		noticed = true
	} else if i != corruptKeys {
		t.Fatalf("%s: scan saw %d keys and no error", what, i)
	}
	return noticed
}

func TestCorruptSegmentTruncated(t *testing.T) {
	dir := t.TempDir()
	path, data := corruptStore(t, dir)
	for _, n := range []int{0, 1, len(data) / 3, len(data) - 40, len(data) - 1} {
		withCopy(t, dir, filepath.Base(path), data[:n], func(dir, path string) {
			_, err := Open(dir, smallOptions())
			checkCorruptErr(t, err, path, len(data), fmt.Sprintf("truncated to %d bytes", n))
		})
	}
}

// TestCorruptWAL damages a WAL that holds several batches. Damage before
// the last record is corruption, reported with the WAL's name and an
// offset at or before the damage; damage in the last record is reported
// or, where it is indistinguishable from a torn write, cut off with every
// earlier record recovered; a truncation anywhere is a torn tail.
func TestCorruptWAL(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, smallOptions())
	const batches = 20
	for i := range batches {
		b := NewBatch()
		for j := range 3 {
			b.Put(fmt.Appendf(nil, "b%02d-%d", i, j), corruptValue(i*3+j))
		}
		mustDo(t, db.Write(b))
	}
	mustDo(t, db.Close())
	wal := filepath.Join(dir, newestWAL(t, dir))
	data, err := os.ReadFile(wal)
	mustDo(t, err)
	lastRecord := lastRecordOffset(t, data)

	present := func(db *DB, upTo int) {
		t.Helper()
		for i := range upTo {
			for j := range 3 {
				v, err := db.Get(fmt.Appendf(nil, "b%02d-%d", i, j))
				if err != nil || !bytes.Equal(v, corruptValue(i*3+j)) {
					t.Fatalf("batch %d lost: %q, %v", i, v, err)
				}
			}
		}
	}
	walFile := filepath.Base(wal)
	for off := 0; off < len(data); off += 5 {
		bad := bytes.Clone(data)
		bad[off] ^= 0x10
		withCopy(t, dir, walFile, bad, func(dir, wal string) {
			db, err := Open(dir, smallOptions())
			switch {
			case off < lastRecord:
				checkCorruptErr(t, err, wal, len(data), fmt.Sprintf("WAL flip at %d", off))
				var ce *base.CorruptError
				if errors.As(err, &ce) && ce.Offset > int64(off) {
					t.Fatalf("WAL flip at %d reported at offset %d, after the damage", off, ce.Offset)
				}
			case err != nil:
				// Damage in the last record is either reported or, when it
				// looks like a torn write, cut off; never silently skipped
				// over earlier records.
				checkCorruptErr(t, err, wal, len(data), fmt.Sprintf("WAL flip at %d (last record)", off))
			default:
				present(db, batches-1)
				db.Close()
			}
		})
	}
	for _, n := range []int{len(data) - 1, lastRecord + 3, lastRecord, lastRecord - 1} {
		withCopy(t, dir, walFile, data[:n], func(dir, wal string) {
			db, err := Open(dir, smallOptions())
			if n < lastRecord { // inside the second-to-last record: it goes too
				if err != nil {
					t.Fatalf("WAL truncated to %d: %v", n, err)
				}
				present(db, batches-2)
				db.Close()
				return
			}
			if err != nil {
				t.Fatalf("WAL truncated to %d: %v", n, err)
			}
			present(db, batches-1)
			db.Close()
		})
	}
}

// lastRecordOffset returns where the WAL's last record starts, read with
// the WAL reader.
func lastRecordOffset(t *testing.T, data []byte) int {
	t.Helper()
	r := wal.NewReader(bytes.NewReader(data), "wal")
	last := -1
	for {
		off := r.Offset()
		if _, err := r.Next(); err != nil {
			break
		}
		last = int(off)
	}
	if last <= 0 {
		t.Fatal("no records in the WAL")
	}
	return last
}

// withCopy runs fn on a fresh copy of the store in dir, whose file name
// (base) gets contents data: Open changes a store (it flushes WALs and
// removes files), so each trial starts from the same bytes.
func withCopy(t *testing.T, dir, base string, data []byte, fn func(dir, path string)) {
	t.Helper()
	cp := t.TempDir()
	entries, err := os.ReadDir(dir)
	mustDo(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		mustDo(t, err)
		if e.Name() == base {
			b = data
		}
		mustDo(t, os.WriteFile(filepath.Join(cp, e.Name()), b, 0o644))
	}
	fn(cp, filepath.Join(cp, base))
}
