//go:build unix

package invariants

import (
	"sync"

	"golang.org/x/sys/unix"
)

// A region is memory of its own, outside the Go heap, mapped for one
// guarded slice: expiring it protects its pages so that any later access
// faults. The pages are unmapped only after quarantine more regions have
// expired since, so that a stale slice keeps pointing at protected pages
// (not at a newer mapping the kernel placed at the same address) for as
// long as a test could plausibly use it.
type region struct {
	data []byte
}

const quarantine = 1024

var expired struct {
	sync.Mutex
	ring [quarantine][]byte
	next int
}

func newRegion(n int) region {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		panic("invariants: mmap: " + err.Error())
	}
	return region{data: b}
}

func (r region) expire() {
	if err := unix.Mprotect(r.data, unix.PROT_NONE); err != nil {
		panic("invariants: mprotect: " + err.Error())
	}
	expired.Lock()
	old := expired.ring[expired.next]
	expired.ring[expired.next] = r.data
	expired.next = (expired.next + 1) % quarantine
	expired.Unlock()
	if old != nil {
		unix.Munmap(old)
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
