//go:build unix

package vfs

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock without waiting. flock locks belong to
// the open file description, so a second Lock in the same process fails
// as a second process does, and the kernel drops the lock when the
// process dies: a crash never leaves a stale lock.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
