//go:build linux

package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

const dropCacheSupported = true

// dropCache evicts every file under dir from the OS page cache, so that
// the next reads of them go to the device. Dirty pages cannot be dropped,
// so each file is written back first (fdatasync) — a no-op for the
// segments, which are synced when written.
func dropCache(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("drop cache: %w", err)
		}
		defer f.Close()
		fd := int(f.Fd())
		if err := unix.Fdatasync(fd); err != nil {
			return fmt.Errorf("drop cache: fdatasync %s: %w", path, err)
		}
		if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
			return fmt.Errorf("drop cache: fadvise %s: %w", path, err)
		}
		return nil
	})
}
