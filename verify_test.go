package bloomkv

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/vfs"
)

// verifiedStore makes a closed store with two live segments and a WAL
// holding writes not yet flushed, and returns its directory and the name
// of its oldest live segment.
func verifiedStore(t *testing.T) (dir, seg string) {
	t.Helper()
	dir = t.TempDir()
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	for i := range 3000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "key%05d", i), faultValue(i)))
	}
	mustDo(t, db.Compact())
	for i := range 200 {
		mustDo(t, db.Put(fmt.Appendf(nil, "new%05d", i), []byte("v")))
	}
	rep, err := db.Verify(context.Background())
	if err != nil || !rep.OK() || rep.Segments == 0 {
		t.Fatalf("Verify of a healthy open store: %v, %v", rep, err)
	}
	rs := db.acquire()
	seg = rs.segments[len(rs.segments)-1].name
	rs.release()
	mustDo(t, db.Close())
	return dir, seg
}

func dirHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		fmt.Fprintf(h, "%s %d\n", e.Name(), len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestVerifyDirHealthy(t *testing.T) {
	dir, _ := verifiedStore(t)
	before := dirHash(t, dir)
	rep, err := VerifyDir(context.Background(), nil, dir)
	if err != nil || !rep.OK() {
		t.Fatalf("VerifyDir of a healthy store: %v, %v", rep, err)
	}
	if rep.Segments == 0 || rep.Blocks == 0 || rep.WALs == 0 || rep.WALRecords == 0 {
		t.Fatalf("report counts nothing: %+v", rep)
	}
	if dirHash(t, dir) != before {
		t.Fatal("VerifyDir changed the directory")
	}
}

// TestVerifyDirDamage damages a store in each way and checks the report
// names the file (and the offset where there is one) — without changing
// anything.
func TestVerifyDirDamage(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, dir, seg string) string // returns the file the problem must name
		offset  int64                                      // expected offset, -2 for "any"
		problem bool                                       // false: a note, the store stays OK
	}{
		{"data block byte", func(t *testing.T, dir, seg string) string {
			flipByte(t, filepath.Join(dir, seg), 20)
			return seg
		}, 0, true},
		{"footer byte", func(t *testing.T, dir, seg string) string {
			flipByte(t, filepath.Join(dir, seg), -3)
			return seg
		}, -2, true},
		{"truncated segment", func(t *testing.T, dir, seg string) string {
			p := filepath.Join(dir, seg)
			st, _ := os.Stat(p)
			mustDo(t, os.Truncate(p, st.Size()/2))
			return seg
		}, -1, true},
		{"missing segment", func(t *testing.T, dir, seg string) string {
			mustDo(t, os.Remove(filepath.Join(dir, seg)))
			return seg
		}, -1, true},
		{"WAL damaged before its tail", func(t *testing.T, dir, seg string) string {
			wal := newestWAL(t, dir)
			flipByte(t, filepath.Join(dir, wal), 40)
			return wal
		}, -2, true},
		{"WAL torn tail", func(t *testing.T, dir, seg string) string {
			wal := newestWAL(t, dir)
			p := filepath.Join(dir, wal)
			st, _ := os.Stat(p)
			mustDo(t, os.Truncate(p, st.Size()-3))
			return wal
		}, -1, false},
		{"orphan segment", func(t *testing.T, dir, seg string) string {
			mustDo(t, os.WriteFile(filepath.Join(dir, "999999.seg"), []byte("junk"), 0o644))
			return "999999.seg"
		}, -1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, seg := verifiedStore(t)
			file := tc.damage(t, dir, seg)
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
				if p.File == file && (tc.offset == -2 || p.Offset == tc.offset) {
					return
				}
			}
			t.Fatalf("no finding for %s at offset %d in:\n%s", file, tc.offset, rep)
		})
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x5a
	mustDo(t, os.WriteFile(path, b, 0o644))
}

func newestWAL(t *testing.T, dir string) string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	last := ""
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), walExt) {
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
	d2, _ := verifiedStore(t)
	if _, err := VerifyDir(ctx, nil, d2); !errors.Is(err, context.Canceled) {
		t.Fatalf("VerifyDir with a canceled context: %v", err)
	}
	if _, err := VerifyDir(context.Background(), vfs.Default, t.TempDir()); !errors.Is(err, ErrNotStore) {
		t.Fatalf("VerifyDir of an empty directory: %v, want ErrNotStore", err)
	}
}

// TestVerifyOpenStoreSeesDiskDamage: the DB's own reader has the file
// mapped and its blocks checked once; Verify reads the file afresh and so
// finds damage that happened since.
func TestVerifyOpenStoreSeesDiskDamage(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, smallOptions())
	defer db.Close()
	for i := range 2000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "key%05d", i), faultValue(i)))
	}
	mustDo(t, db.Compact())
	rs := db.acquire()
	seg := rs.segments[0].name
	rs.release()
	f, err := os.OpenFile(filepath.Join(dir, seg), os.O_RDWR, 0)
	mustDo(t, err)
	b := make([]byte, 1)
	f.ReadAt(b, 100)
	b[0] ^= 0xff
	f.WriteAt(b, 100)
	f.Close()
	rep, err := db.Verify(context.Background())
	if err != nil || rep.OK() || rep.Problems[0].File != seg {
		t.Fatalf("Verify after on-disk damage: %v, %v", rep, err)
	}
}
