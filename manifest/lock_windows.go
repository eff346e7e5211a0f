//go:build windows

package manifest

import (
	"errors"
	"os"
	"time"

	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/windows"
)

// lockRetry is how often lockAsBolt retries, as bbolt's own lock does.
const lockRetry = 50 * time.Millisecond

// lockAsBolt takes a LockFileEx lock (exclusive for a writer, shared for a
// reader) on the manifest file before bbolt.Open takes its own, so that
// openChecked reads the file while no other bloomkv writer can be halfway
// through a commit. Unlike flock, Windows locks do not merge on one
// handle: an exclusive lock on the byte bbolt locks (offset 2⁶⁴-1) would
// make bbolt's own attempt fail. So this lock is on the byte before it;
// every bloomkv process opens the manifest through openChecked and takes
// it, and it is released when bbolt closes the file. It fails with
// bbolt's ErrTimeout, which openError reports as ErrLocked.
func lockAsBolt(f *os.File, exclusive bool, timeout time.Duration) error {
	var flags uint32 = windows.LOCKFILE_FAIL_IMMEDIATELY
	if exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	deadline := time.Now().Add(timeout)
	for {
		const m1 = 1<<32 - 1
		err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, &windows.Overlapped{
			Offset:     m1 - 1,
			OffsetHigh: m1,
		})
		if !errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return err
		}
		if time.Now().After(deadline) {
			return berrors.ErrTimeout
		}
		time.Sleep(lockRetry)
	}
}
