//go:build unix

package invariants

import (
	"math"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A region is memory of its own, outside the Go heap, mapped for one
// guarded slice: expiring it protects its pages so that any later access
// faults, and gives their memory back (MADV_DONTNEED).
//
// Regions are carved from arenas: large address ranges reserved with no
// access and never unmapped, handed out in order and never twice. So a
// stale slice points at protected pages for the life of the process, not
// at a newer region the kernel placed at the same address (which is what
// unmapping expired regions allowed: once unmapped, the next mmap reused
// the address, and a stale read returned another slice's bytes, no
// fault). An expired region costs address space only (a reservation with
// no access is not charged as committed memory), and an arena of 64 GiB
// holds 16 million one-page regions.
type region struct {
	data []byte // the region's pages; the guarded slice is a prefix
}

// arenaSize is the address space reserved at a time: 64 GiB on a 64-bit
// platform, 16 MiB on a 32-bit one.
const arenaSize = 1 << (24 + 12*(^uint(0)>>63))

var arena struct {
	sync.Mutex
	mem  []byte // the current arena, reserved PROT_NONE
	next int    // the offset of its first page not yet handed out
}

// reserve hands out the next n bytes of address space, rounded up to
// whole pages, from the current arena (a new one when it is used up):
// reserved with no access, never handed out again. It fails as mmap
// would for n bytes: where n is not positive, or more than the address
// space holds.
func reserve(n int) ([]byte, error) {
	page := unix.Getpagesize()
	if n <= 0 || n > math.MaxInt-page {
		return nil, unix.EINVAL
	}
	size := (n + page - 1) / page * page
	arena.Lock()
	defer arena.Unlock()
	if len(arena.mem)-arena.next < size {
		// A new arena; the old one stays reserved, its regions live or
		// protected, so that none of its addresses is reused.
		mem, err := unix.Mmap(-1, 0, max(arenaSize, size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			return nil, err
		}
		arena.mem, arena.next = mem, 0
	}
	b := arena.mem[arena.next : arena.next+size : arena.next+size]
	arena.next += size
	return b, nil
}

func newRegion(n int) region {
	data, err := reserve(n)
	if err != nil {
		panic("invariants: reserving a region: " + err.Error())
	}
	if err := unix.Mprotect(data, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		panic("invariants: mprotect: " + err.Error())
	}
	return region{data: data}
}

func (r region) expire() {
	if err := unix.Mprotect(r.data, unix.PROT_NONE); err != nil {
		panic("invariants: mprotect: " + err.Error())
	}
	// The pages' memory goes back to the kernel; the protected addresses
	// stay reserved.
	if err := unix.Madvise(r.data, unix.MADV_DONTNEED); err != nil {
		panic("invariants: madvise: " + err.Error())
	}
}

// MapFile maps size bytes of the file fd read-only and shared, as mmap
// does. In an invariants build the mapping is placed in reserved address
// space (reserve), so that UnmapFile can keep its addresses from reuse.
func MapFile(fd, size int) ([]byte, error) {
	if !Enabled {
		return unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	}
	at, err := reserve(size)
	if err != nil {
		return nil, err
	}
	p, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&at[0]), uintptr(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), size), nil
}

// UnmapFile ends a mapping MapFile made, as munmap does. In an invariants
// build it replaces the mapping by a reservation with no access, which
// lets the file go (its blocks are freed once it is deleted) and keeps
// the addresses from any later mapping: a read of a segment after its
// last reference was released, by a reader that did not hold one (a
// premature release, which leases do not see: they guard only what is
// handed out), faults for the life of the process, where after a plain
// munmap the kernel would soon place another mapping at the same
// addresses and the read would return its bytes.
func UnmapFile(b []byte) error {
	if !Enabled {
		return unix.Munmap(b)
	}
	page := unix.Getpagesize()
	size := (len(b) + page - 1) / page * page
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&b[0]), uintptr(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_FIXED)
	return err
}
