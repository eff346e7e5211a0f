//go:build unix

package bloomkv

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/internal/invariants"
	"github.com/bloomkv/bloomkv/vfs"
)

// mapSegment maps a segment file read-only, advised for random access
// (the mapping and the file's own reads). Segments are immutable and
// never truncated while open, so the mapping stays valid until unmapped.
// The trade-off (as in bbolt and Badger): a device error while reading a
// mapped page kills the process with SIGBUS instead of returning an error;
// Options.DisableMmap trades the speed back for error returns. On Linux a
// Get reads a block the page cache is found to lack with pread instead
// (segment.ReaderOptions.Mapped), and a failing device is then an error;
// but it asks only on a block's first read and now and then afterwards,
// so a block evicted since, and iterators, can still fault.
//
// A file with no descriptor (from a file system that is not the
// operating system's) is not mapped: nil, and reads go through ReadAt.
// So is one whose mapping fails: DB.mapOrRead reads it with pread then.
func mapSegment(f vfs.File, size int64) ([]byte, error) {
	fd, ok := vfs.Fd(f)
	if !ok {
		return nil, nil
	}
	if size <= 0 || size != int64(int(size)) {
		return nil, fmt.Errorf("cannot map %d bytes", size)
	}
	b, err := invariants.MapFile(int(fd), int(size))
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	// Point reads touch one block: without this advice a fault on a cold
	// page makes the kernel read ~128 KiB around it (read_ahead_kb), so
	// the reads the filters avoid would still cost the device 30 times a
	// block when one is needed. Iterators ask for read-ahead themselves
	// (segment: MADV_WILLNEED on a growing window once they run
	// sequentially), as they do with pread.
	if err := unix.Madvise(b, unix.MADV_RANDOM); err != nil {
		unmapSegment(b)
		return nil, fmt.Errorf("madvise: %w", err)
	}
	// A point read of a block the page cache has lost reads it with
	// pread on f (segment.Reader: one request instead of a fault per
	// page): the same advice for that path, so the kernel reads the
	// block's pages and no read-ahead window around them.
	adviseRandom(f)
	return b, nil
}

// unmapSegment ends a segment's mapping once no reader holds the segment.
// In an invariants build its addresses stay reserved with no access for
// the life of the process (invariants.MapFile, UnmapFile), so that a read
// after a premature release faults.
func unmapSegment(b []byte) error { return invariants.UnmapFile(b) }
