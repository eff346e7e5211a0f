//go:build !unix

package vfs

import "os"

// openNonblock is 0 where there are no named pipes in the file system's
// namespace to block an open (Windows).
const openNonblock = 0

func clearNonblock(*os.File) error { return nil }
