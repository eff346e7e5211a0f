package bloomkv

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/bloomkv/bloomkv/vfs"
)

// lockDir takes the exclusive lock on the directory's LOCK file (vfs.Lock:
// a flock, released when the process dies, so a crash leaves no stale
// lock; a second Open in the same process fails as a second process does).
func lockDir(fsys vfs.FS, dir string) (io.Closer, error) {
	l, err := fsys.Lock(filepath.Join(dir, lockName))
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("bloomkv: lock %s: %w", dir, err)
	}
	return l, nil
}
