package bloomkv

import (
	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/vfs"
)

// adviseRandom tells the kernel that a segment read with pread is read at
// random (POSIX_FADV_RANDOM), so a cold point read brings in its block's
// pages and not a read-ahead window around them, as MADV_RANDOM does for a
// mapped segment. Iterators do their own read-ahead. Advice only: errors
// change nothing.
func adviseRandom(f vfs.File) {
	if fd, ok := vfs.Fd(f); ok {
		_ = unix.Fadvise(int(fd), 0, 0, unix.FADV_RANDOM)
	}
}
