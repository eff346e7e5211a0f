//go:build !linux

package bloomkv

import "github.com/bloomkv/bloomkv/vfs"

// writeBehind is Linux-only (sync_file_range); elsewhere a segment's
// bytes go to the device at its fsync or when the kernel chooses.
func writeBehind(f vfs.File) vfs.File { return f }
