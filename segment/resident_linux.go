package segment

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// pagesResident reports whether the page cache holds every page of
// m[off, off+n), m being a file mapping, so that reading them cannot fault
// on the device (mincore: for a shared file mapping it reports the file's
// pages in the page cache, mapped into this process or not). It is not
// exact for a file the process neither owns nor may write (the kernel
// then reports only pages this process maps): such pages look missing,
// and are read with pread, from the page cache, without device I/O. An
// error, which a live mapping should never give, counts as resident: the
// mapping is read as it would be without the question.
func pagesResident(m []byte, off, n uint64) bool {
	start := off &^ (pageSize - 1) // mincore wants a page-aligned address
	end := min(off+n, uint64(len(m)))
	var vec [16]byte
	for start < end {
		chunk := min(end-start, uint64(len(vec))*pageSize)
		pages := (chunk + pageSize - 1) / pageSize
		// Raw: mincore neither blocks nor sleeps on I/O, and a Get should
		// not pay the scheduler's bookkeeping of a blocking system call.
		if _, _, e := unix.RawSyscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[start])), uintptr(chunk),
			uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			return true
		}
		for _, p := range vec[:pages] {
			if p&1 == 0 {
				return false
			}
		}
		start += chunk
	}
	return true
}
