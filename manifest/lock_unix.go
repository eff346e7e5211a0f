//go:build unix

package manifest

import (
	"errors"
	"os"
	"time"

	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// lockRetry is how often lockAsBolt retries, as bbolt's own flock does.
const lockRetry = 50 * time.Millisecond

// lockAsBolt takes the flock bbolt.Open is about to take (exclusive for a
// writer, shared for a reader), on the same open file. flock locks belong
// to the open file description, so bbolt's own flock on this file then
// succeeds at once, and the lock is released when bbolt closes the file.
// Taking it first lets openChecked read the file while no other bbolt
// writer can be halfway through a commit. It fails with bbolt's
// ErrTimeout, which openError reports as ErrLocked.
func lockAsBolt(f *os.File, exclusive bool, timeout time.Duration) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return berrors.ErrTimeout
		}
		time.Sleep(lockRetry)
	}
}
