//go:build unix

package flock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// TryLock takes an exclusive (or shared) flock on f without waiting, or
// returns ErrLocked if another holder has a conflicting one. flock locks
// belong to the open file description, so a second lock in the same
// process fails as a second process does (and bbolt's own flock on the
// very descriptor it was handed succeeds at once), and the kernel drops
// the lock when the descriptor is closed or the process dies: a crash
// never leaves a stale lock.
func TryLock(f *os.File, shared bool) error {
	how := unix.LOCK_EX
	if shared {
		how = unix.LOCK_SH
	}
	err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
