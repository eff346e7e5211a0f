//go:build !linux

package bloomkv

import "github.com/bloomkv/bloomkv/vfs"

// adviseRandom is Linux-only (posix_fadvise); elsewhere the kernel's
// default read-ahead applies to pread.
func adviseRandom(vfs.File) {}
