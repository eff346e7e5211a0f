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
