//go:build unix

package bloomkv

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/vfs"
)

// mapSegment maps a segment file read-only. Segments are immutable and
// never truncated while open, so the mapping stays valid until unmapped.
// The trade-off (as in bbolt and Badger): a device error while reading a
// mapped page kills the process with SIGBUS instead of returning an error;
// Options.DisableMmap trades the speed back for error returns.
//
// A file with no descriptor (from a file system that is not the
// operating system's) is not mapped: nil, and reads go through ReadAt.
func mapSegment(f vfs.File, size int64) ([]byte, error) {
	fd, ok := vfs.Fd(f)
	if !ok {
		return nil, nil
	}
	if size <= 0 || size != int64(int(size)) {
		return nil, fmt.Errorf("cannot map %d bytes", size)
	}
	b, err := unix.Mmap(int(fd), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return b, nil
}

func unmapSegment(b []byte) error { return unix.Munmap(b) }
