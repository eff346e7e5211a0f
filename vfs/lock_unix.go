//go:build unix

package vfs

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive (or shared) flock without waiting. flock
// locks belong to the open file description, so a second Lock in the same
// process fails as a second process does, and the kernel drops the lock
// when the process dies: a crash never leaves a stale lock.
func lockFile(f *os.File, shared bool) error {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	return syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
}
