package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/vfs"
)

// bareBolt returns the file bbolt writes for a new, empty database: two
// meta pages, a freelist page and an empty root leaf, nothing more.
func bareBolt(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestCheckAcceptsBoundaryFiles pins the edges of what FORMAT.md allows
// Check to accept: page sizes of exactly 1 KiB and 64 KiB, a file of
// exactly four pages, and a freelist page that stores its count in its
// first slot (the 0xFFFF escape bbolt uses for long freelists).
func TestCheckAcceptsBoundaryFiles(t *testing.T) {
	tests := []struct {
		name string
		data func(t *testing.T) []byte
	}{
		{"page size 1 KiB", func(t *testing.T) []byte { return buildSmallPages(t, 1<<10, smallEdits()) }},
		{"page size 64 KiB", func(t *testing.T) []byte { return buildSmallPages(t, 64<<10, smallEdits()) }},
		{"four pages", func(t *testing.T) []byte {
			d := bareBolt(t)
			if ps := os.Getpagesize(); len(d) != 4*ps {
				t.Fatalf("bare bbolt file of %d bytes, want 4 pages of %d", len(d), ps)
			}
			return d
		}},
		{"freelist count escape", func(t *testing.T) []byte {
			d := bareBolt(t)
			ps := os.Getpagesize()
			fl := int(readMeta(d, 0).freelist) * ps // both metas name the same freelist
			if ne.Uint16(d[fl+8:]) != freelistPage || ne.Uint16(d[fl+10:]) != 0 {
				t.Fatal("the bare file has no empty freelist page")
			}
			ne.PutUint16(d[fl+10:], 0xFFFF)        // count in the first slot...
			ne.PutUint64(d[fl+pageHeaderSize:], 0) // ...which says none
			return d
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.data(t)
			res, err := Check("MANIFEST", d)
			if err != nil {
				t.Fatalf("Check rejected a file bbolt reads: %v", err)
			}
			exerciseBolt(t, d, res)
		})
	}
}

// TestReadersShareTheLock checks that read-only opens take a shared lock:
// any number of readers may hold the manifest at once, while a writer is
// kept out.
func TestReadersShareTheLock(t *testing.T) {
	m, path := createTemp(t)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	r1, err := OpenReadOnly(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := OpenReadOnly(vfs.Default, path)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	defer r2.Close()
	if _, err := ReadState(vfs.Default, path); err != nil {
		t.Fatalf("ReadState beside two readers: %v", err)
	}
	if _, err := Open(vfs.Default, path); !errors.Is(err, ErrLocked) {
		t.Fatalf("writer beside readers: got %v, want ErrLocked", err)
	}
}

// TestCheckFreelistCount checks that a freelist page claiming more ids
// than its slots hold is reported at its count field, never read past the
// page, with the count stored directly or, after the 0xFFFF escape, in the
// first slot (which then holds no id).
func TestCheckFreelistCount(t *testing.T) {
	ps := os.Getpagesize()
	slots := (ps - pageHeaderSize) / 8
	tests := []struct {
		name   string
		count  uint16
		escape uint64 // the first slot, when count is 0xFFFF
		ok     bool
	}{
		{"empty", 0, 0, true},
		{"one more than the slots", uint16(slots + 1), 0, false},
		{"escaped, empty", 0xFFFF, 0, true},
		{"escaped, all slots", 0xFFFF, uint64(slots), false},
		{"escaped, huge", 0xFFFF, 1 << 62, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := bareBolt(t)
			fl := int(readMeta(d, 0).freelist) * ps
			ne.PutUint16(d[fl+10:], tt.count)
			ne.PutUint64(d[fl+pageHeaderSize:], tt.escape)
			_, err := Check("MANIFEST", d)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if ce := wantCheckCorrupt(t, err, "Check"); ce.Offset != int64(fl+10) {
				t.Fatalf("offset %d, want %d (the count): %v", ce.Offset, fl+10, err)
			}
		})
	}
}
