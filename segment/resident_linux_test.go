package segment

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestPagesResident: mincore's answers for a mapped file's pages: all
// resident after they are read, none after the mapping's page-table
// entries are dropped and the file is evicted, and a range is resident
// only when every page of it is (a page read with pread, not through the
// mapping, counts: it is in the page cache).
func TestPagesResident(t *testing.T) {
	ps := int(pageSize)
	path := filepath.Join(t.TempDir(), "f")
	data := make([]byte, 8*ps)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	sum := 0
	for i := 0; i < len(m); i += ps {
		sum += int(m[i])
	}
	if !pagesResident(m, 0, uint64(len(m))) || !pagesResident(m, 100, 5000) {
		t.Fatal("pages just read through the mapping are not resident")
	}
	// Evict: drop this process's mappings of the pages (the kernel keeps
	// mapped pages), write the file back, then drop it from the cache.
	if err := unix.Madvise(m, unix.MADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	// Asked without pagesResident, which is what is tested.
	vec := make([]byte, len(m)/ps)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for i, v := range vec {
		if v&1 != 0 {
			t.Skipf("page %d still resident after eviction (a file system whose pages are its storage, such as tmpfs)", i)
		}
	}
	if pagesResident(m, 0, 1) || pagesResident(m, uint64(len(m)-1), 1) {
		t.Error("evicted pages reported resident")
	}
	buf := make([]byte, 10)
	if _, err := f.ReadAt(buf, int64(3*ps+5)); err != nil {
		t.Fatal(err)
	}
	if !pagesResident(m, uint64(3*ps), uint64(ps)) || !pagesResident(m, uint64(3*ps+100), 200) {
		t.Error("a page read with pread is not reported resident")
	}
	if pagesResident(m, uint64(3*ps-1), 2) || pagesResident(m, uint64(3*ps+100), uint64(ps)) || pagesResident(m, 0, uint64(len(m))) {
		t.Error("a range with a page that is not cached is reported resident")
	}
	// A range longer than one mincore call's vector.
	for i := 0; i < len(m); i += ps {
		sum += int(m[i])
	}
	if !pagesResident(m, 0, uint64(len(m))) {
		t.Error("whole file not resident after reading it again")
	}
	if sum != 0 { // each page starts with byte(i) == 0; using sum keeps the loads
		t.Errorf("pages start with %d, want 0", sum)
	}
}

// BenchmarkPagesResident is the question a point read asks the page cache
// (mincore on a block's two pages), for a resident block.
func BenchmarkPagesResident(b *testing.B) {
	m, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(m)
	for i := range m {
		m[i] = 1
	}
	b.ResetTimer()
	for i := range b.N {
		if !pagesResident(m, uint64(i%200)*4096+1000, 4101) {
			b.Fatal("not resident")
		}
	}
}
