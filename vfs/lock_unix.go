//go:build unix

package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive (or shared) flock without waiting, or
// returns ErrLocked if another holder has a conflicting one. flock locks
// belong to the open file description, so a second Lock in the same
// process fails as a second process does, and the kernel drops the lock
// when the process dies: a crash never leaves a stale lock.
func lockFile(f *os.File, shared bool) error {
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

// syncDir fsyncs the directory d, making the creations, renames and
// removals in it durable.
func syncDir(d *os.File) error { return d.Sync() }
