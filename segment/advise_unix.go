//go:build unix

package segment

import (
	"os"

	"golang.org/x/sys/unix"
)

var pageSize = uint64(os.Getpagesize())

// adviseWillNeed asks the kernel to read [off, off+n) of the mapping m
// ahead, asynchronously. Advice is a hint: an error changes nothing.
func adviseWillNeed(m []byte, off, n uint64) {
	start := off &^ (pageSize - 1) // madvise wants a page-aligned address
	end := min(off+n, uint64(len(m)))
	if start < end {
		_ = unix.Madvise(m[start:end], unix.MADV_WILLNEED)
	}
}
