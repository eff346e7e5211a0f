package bloomkv

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// lockDir takes the exclusive lock on the directory's LOCK file (vfs.Lock:
// a flock, LockFileEx on Windows, released when the process dies, so a
// crash leaves no stale lock; a second Open in the same process fails as a
// second process does).
func lockDir(fsys vfs.FS, dir string) (io.Closer, error) {
	l, err := fsys.Lock(filepath.Join(dir, base.LockName))
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("bloomkv: lock %s: %w", dir, err)
	}
	return l, nil
}

// lockDirShared takes a shared lock on the LOCK file for a read-only open:
// readers share it, a writer's exclusive lock excludes them. A store
// without a LOCK file (a copy, a read-only snapshot) is opened without a
// lock, since nothing may be created.
func lockDirShared(fsys vfs.FS, dir string) (io.Closer, error) {
	l, err := fsys.LockShared(filepath.Join(dir, base.LockName))
	switch {
	case errors.Is(err, vfs.ErrLocked):
		return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	case errors.Is(err, fs.ErrNotExist):
		return nopCloser{}, nil
	case err != nil:
		return nil, fmt.Errorf("bloomkv: lock %s: %w", dir, err)
	}
	return l, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
