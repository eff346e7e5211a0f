package manifest

import (
	"errors"
	"os"
	"time"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/bloomkv/bloomkv/internal/flock"
)

// lockRetry is how often lockAsBolt retries, as bbolt's own lock does.
const lockRetry = 50 * time.Millisecond

// lockAsBolt takes the lock bbolt.Open is about to take (exclusive for a
// writer, shared for a reader) on the same open file, with the lock the
// store's LOCK file uses (internal/flock). On Unix flock locks belong to
// the open file description, so bbolt's own flock on this file then
// succeeds at once; on Windows the lock is on the byte before the one
// bbolt locks, so bbolt's own attempt does not collide with it. Either way
// it is released when bbolt closes the file. Taking it first lets
// openChecked read the file while no other bbolt writer can be halfway
// through a commit. It fails with bbolt's ErrTimeout, which openError
// reports as ErrLocked.
func lockAsBolt(f *os.File, exclusive bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := flock.TryLock(f, !exclusive)
		if !errors.Is(err, flock.ErrLocked) {
			return err
		}
		if time.Now().After(deadline) {
			return berrors.ErrTimeout
		}
		time.Sleep(lockRetry)
	}
}
