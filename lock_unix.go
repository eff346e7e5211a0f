//go:build unix

package bloomkv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive flock on the directory's LOCK file. flock
// locks belong to the open file description, so a second Open in the same
// process fails as a second process does; the kernel drops the lock when
// the process dies, so a crash never leaves a stale lock behind.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bloomkv: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("bloomkv: lock %s: %w", dir, err)
	}
	return f, nil
}

func unlockDir(f *os.File) error {
	return f.Close() // closing the descriptor releases the flock
}
