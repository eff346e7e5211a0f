package bloomkv

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/errorfs"
)

// evictSegments drops the store's segments from the page cache while they
// stay mapped: this process's page-table entries first (the kernel keeps
// pages a process maps), then the file's clean pages. It reports whether
// no page of them is left resident (not so on a file system whose pages
// are its storage, such as tmpfs).
func evictSegments(t *testing.T, db *DB) bool {
	t.Helper()
	rs := db.acquire()
	defer rs.release()
	if len(rs.segments) == 0 {
		t.Fatal("no segments")
	}
	for _, s := range rs.segments {
		fd, ok := vfs.Fd(s.file)
		if s.mapped == nil || !ok {
			t.Fatalf("segment %s is not mapped", s.name)
		}
		mustDo(t, unix.Madvise(s.mapped, unix.MADV_DONTNEED))
		mustDo(t, s.file.Sync())
		mustDo(t, unix.Fadvise(int(fd), 0, 0, unix.FADV_DONTNEED))
	}
	return residentSegmentPages(t, db) == 0
}

// residentSegmentPages counts the pages of the store's segments in the
// page cache (mincore on their mappings).
func residentSegmentPages(t *testing.T, db *DB) int {
	t.Helper()
	rs := db.acquire()
	defer rs.release()
	n := 0
	for _, s := range rs.segments {
		vec := make([]byte, (len(s.mapped)+unix.Getpagesize()-1)/unix.Getpagesize())
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&s.mapped[0])), uintptr(len(s.mapped)),
			uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatalf("mincore: %v", e)
		}
		for _, v := range vec {
			n += int(v & 1)
		}
	}
	return n
}

// openEvicted opens a store with o, closed when t ends, writes n keys
// (faultKey, faultValue), compacts them into one segment and evicts its
// pages from the page cache, or skips t where eviction does not work.
func openEvicted(t *testing.T, o *Options, n int) *DB {
	db := mustOpen(t, t.TempDir(), o)
	t.Cleanup(func() { db.Close() })
	for i := range n {
		mustDo(t, db.Put(faultKey(i), faultValue(i)))
	}
	mustDo(t, db.Compact())
	if !evictSegments(t, db) {
		t.Skip("segment pages stay resident after eviction here")
	}
	return db
}

// TestColdGetReadsOnlyItsBlock: a Get of an evicted segment brings its
// block's pages into the page cache and nothing around them: neither the
// mapping's fault read-around nor the file's read-ahead (the segment's
// descriptor is advised FADV_RANDOM, as its mapping MADV_RANDOM).
func TestColdGetReadsOnlyItsBlock(t *testing.T) {
	o := smallOptions() // 512-byte blocks: one or two pages each
	o.BlockCacheSize = 1
	db := openEvicted(t, o, 3000)
	for _, i := range []int{1500, 10, 2900} {
		before := residentSegmentPages(t, db)
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("Get(%d) = %q, %v", i, v, err)
		}
		if n := residentSegmentPages(t, db) - before; n < 1 || n > 2 {
			t.Fatalf("a cold Get brought %d pages into the page cache, want its block's 1 or 2", n)
		}
	}
}

// TestColdGetReadsWithPread: a Get of a block whose pages the page cache
// has lost reads it with pread through the store's file system, not
// through the mapping: the file system sees the read (errorfs would not
// see a fault on the mapping), an injected read error reaches the caller
// as an error naming the segment, and once the device recovers every Get
// returns its value.
func TestColdGetReadsWithPread(t *testing.T) {
	fs := errorfs.New(vfs.Default)
	o := smallOptions()
	o.FS = fs
	o.BlockCacheSize = 1 // nothing cached: a compressed block is read too
	db := openEvicted(t, o, 600)
	fs.SetFault(errorfs.Fault{Ops: vfs.OpRead, Name: "*.seg", Sticky: true})
	_, err := db.Get(faultKey(5))
	if !errors.Is(err, syscall.EIO) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), ".seg") {
		t.Fatalf("cold Get on a failing device: %v, want EIO naming the segment", err)
	}
	if fs.Fired() == 0 {
		t.Fatal("the cold Get did not read through the file system")
	}
	fs.Clear()
	cold := db.counters.ColdReads.Load()
	for i := range 600 {
		if v, err := db.Get(faultKey(i)); err != nil || !bytes.Equal(v, faultValue(i)) {
			t.Fatalf("Get(%d) once the device recovered: %q, %v", i, v, err)
		}
	}
	if db.counters.ColdReads.Load() == cold {
		t.Fatal("no Get of the evicted segment was a cold read")
	}
}
