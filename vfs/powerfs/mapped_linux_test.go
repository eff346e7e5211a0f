package powerfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/vfs"
)

// mappedHistory writes a three-page file through a shared mapping, as the
// store writes its WAL: page 0 synced as "a", then pages 0-2 overwritten
// with "A", "b" and "c" unsynced, the power cut, page 2 written again
// ("Z") after the cut, and the power restored with mode and seed. It
// returns the restored content.
func mappedHistory(t *testing.T, mode Writeback, seed uint64) []byte {
	t.Helper()
	dir := t.TempDir()
	name := filepath.Join(dir, "000001.wal")
	p := New(vfs.Default, &Options{SkipRealSync: true})
	f, err := p.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	fd, ok := vfs.MapFd(f)
	if !ok {
		t.Fatal("no descriptor to map through powerfs over the OS")
	}
	if err := unix.Ftruncate(int(fd), 3*pageSize); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(fd), 0, 3*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	fill := func(pg int, c byte) { copy(m[pg*pageSize:(pg+1)*pageSize], bytes.Repeat([]byte{c}, pageSize)) }
	fill(0, 'a')
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := p.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	fill(0, 'A')
	fill(1, 'b')
	fill(2, 'c')
	p.Cut()
	fill(2, 'Z') // after the cut: cannot be on the disk
	unix.Munmap(m)
	f.Close()
	if p.Mapped() != 1 {
		t.Fatalf("Mapped() = %d, want 1", p.Mapped())
	}
	st, err := p.Restore(mode, seed)
	if err != nil {
		t.Fatal(err)
	}
	if st.Kept+st.Lost != 3*pageSize {
		t.Fatalf("kept %d + lost %d bytes, want the 3 changed pages", st.Kept, st.Lost)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMappedWriteback: writes through a mapping are seen, as the content
// at the last Sync and at the cut; each mode keeps of the pages that
// changed none, a prefix or a subset, each page whole as of the cut or as
// of the sync; nothing written after the cut survives.
func TestMappedWriteback(t *testing.T) {
	page := func(b []byte, i int) string {
		if len(b) < (i+1)*pageSize {
			return "short"
		}
		pg := b[i*pageSize : (i+1)*pageSize]
		if !bytes.Equal(pg, bytes.Repeat(pg[:1], pageSize)) {
			return "torn"
		}
		if pg[0] == 0 {
			return "0"
		}
		return string(pg[:1])
	}
	if b := mappedHistory(t, WritebackNone, 1); len(b) != 3*pageSize || page(b, 0)+page(b, 1)+page(b, 2) != "a00" {
		t.Fatalf("WritebackNone: %d bytes, pages %s%s%s; want the synced content a00", len(b), page(b, 0), page(b, 1), page(b, 2))
	}
	for _, mode := range []Writeback{WritebackPrefix, WritebackSubset} {
		seen := map[string]bool{}
		for seed := range uint64(24) {
			b := mappedHistory(t, mode, seed)
			got := page(b, 0) + page(b, 1) + page(b, 2)
			seen[got] = true
			prefixes := map[string]bool{"a00": true, "A00": true, "Ab0": true, "Abc": true}
			switch {
			case len(got) != 3:
				t.Fatalf("%v seed %d: pages %q", mode, seed, got)
			case mode == WritebackPrefix && !prefixes[got]:
				t.Fatalf("%v seed %d: pages %s, not a prefix of the changes", mode, seed, got)
			case (got[0] != 'a' && got[0] != 'A') || (got[1] != '0' && got[1] != 'b') || (got[2] != '0' && got[2] != 'c'):
				t.Fatalf("%v seed %d: pages %s; each must be as synced or as at the cut", mode, seed, got)
			}
		}
		if len(seen) < 3 {
			t.Errorf("%v: only %d outcomes in 24 seeds: %v", mode, len(seen), seen)
		}
	}
}
