//go:build windows

package flock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// TryLock takes an exclusive (or shared) LockFileEx lock without waiting,
// or returns ErrLocked if another holder has a conflicting one. Such a
// lock belongs to the file handle, so a second lock in the same process
// fails as a second process does, and Windows drops it when the handle is
// closed or the process dies: as with flock, a crash leaves no stale lock.
//
// Windows locks are byte ranges and do not merge on one handle, so the
// lock is on one byte, offset 2⁶⁴-2: the byte before the one bbolt locks
// (2⁶⁴-1), so that the manifest can be locked here before bbolt takes its
// own lock on the same handle. That byte also lies inside the whole-file
// range [0, 2⁶⁴-1) that earlier versions locked, so they and this one
// still exclude each other.
func TryLock(f *os.File, shared bool) error {
	var flags uint32 = windows.LOCKFILE_FAIL_IMMEDIATELY
	if !shared {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	const m1 = 1<<32 - 1
	err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, &windows.Overlapped{
		Offset:     m1 - 1,
		OffsetHigh: m1,
	})
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return ErrLocked
	}
	return err
}
