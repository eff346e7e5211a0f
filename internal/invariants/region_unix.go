//go:build unix

package invariants

import (
	"sync"

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

func newRegion(n int) region {
	page := unix.Getpagesize()
	size := (n + page - 1) / page * page
	arena.Lock()
	if len(arena.mem)-arena.next < size {
		// A new arena; the old one stays reserved, its regions live or
		// protected, so that none of its addresses is reused.
		mem, err := unix.Mmap(-1, 0, max(arenaSize, size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			arena.Unlock()
			panic("invariants: reserving an arena: " + err.Error())
		}
		arena.mem, arena.next = mem, 0
	}
	data := arena.mem[arena.next : arena.next+size : arena.next+size]
	arena.next += size
	arena.Unlock()
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

// mappingQuarantine is how many retired file mappings stay protected
// before the oldest is unmapped: fewer than the regions, since each holds
// a whole segment (and, once its file is deleted, the file's blocks on
// disk), but enough that a mapping released too early is still protected
// when a test's next reads reach it.
const mappingQuarantine = 256

var retiredMappings struct {
	sync.Mutex
	ring [mappingQuarantine][]byte
	next int
}

// UnmapFile ends a file mapping, as munmap does. In an invariants build it
// protects the mapping's pages instead (PROT_NONE), and unmaps them only
// after mappingQuarantine more mappings have ended: a read of a segment
// after its last reference was released, by a reader that did not hold
// one (a premature release, which leases do not see: they guard only
// what is handed out), then faults at the read, where the address would
// otherwise still read the file's bytes until the unmap, and afterwards
// whatever the kernel mapped there next.
func UnmapFile(b []byte) error {
	if !Enabled {
		return unix.Munmap(b)
	}
	if err := unix.Mprotect(b, unix.PROT_NONE); err != nil {
		return err
	}
	retiredMappings.Lock()
	old := retiredMappings.ring[retiredMappings.next]
	retiredMappings.ring[retiredMappings.next] = b
	retiredMappings.next = (retiredMappings.next + 1) % mappingQuarantine
	retiredMappings.Unlock()
	if old != nil {
		return unix.Munmap(old)
	}
	return nil
}
