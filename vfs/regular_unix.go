//go:build unix

package vfs

import (
	"os"
	"syscall"
)

// openNonblock makes the open of a named pipe return at once instead of
// waiting for the other end; OpenRegular then refuses the pipe.
const openNonblock = syscall.O_NONBLOCK

// clearNonblock puts f, a regular file opened with openNonblock, back in
// blocking mode, so that its descriptor is as os.OpenFile would have left
// it.
func clearNonblock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}
