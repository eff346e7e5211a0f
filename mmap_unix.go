//go:build unix

package bloomkv

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapSegment maps a segment file read-only. Segments are immutable and
// never truncated while open, so the mapping stays valid until unmapped.
// The trade-off (as in bbolt and Badger): a device error while reading a
// mapped page kills the process with SIGBUS instead of returning an error;
// Options.DisableMmap trades the speed back for error returns.
func mapSegment(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || size != int64(int(size)) {
		return nil, fmt.Errorf("cannot map %d bytes", size)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	return b, nil
}

func unmapSegment(b []byte) error { return unix.Munmap(b) }
