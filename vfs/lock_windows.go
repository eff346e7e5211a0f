//go:build windows

package vfs

import (
	"errors"
	"math"
	"os"

	"golang.org/x/sys/windows"
)

// lockFile takes an exclusive (or shared) LockFileEx lock on the whole
// file without waiting, or returns ErrLocked if another holder has a
// conflicting one. Such a lock belongs to the file handle, so a second
// Lock in the same process fails as a second process does, and Windows
// drops it when the handle is closed or the process dies: as with flock,
// a crash leaves no stale lock.
func lockFile(f *os.File, shared bool) error {
	var flags uint32 = windows.LOCKFILE_FAIL_IMMEDIATELY
	if !shared {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, math.MaxUint32, math.MaxUint32, new(windows.Overlapped))
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return ErrLocked
	}
	return err
}

// syncDir does nothing: Windows cannot flush a directory handle
// (FlushFileBuffers needs write access to a file), and NTFS journals
// its metadata, so a rename or creation is not left behind by a later
// flush of the file it names.
func syncDir(*os.File) error { return nil }
