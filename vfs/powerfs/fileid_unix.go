//go:build unix

package powerfs

import (
	"os"
	"syscall"
)

// fileID returns the device and inode numbers of info's file: names with
// the same ID are hard links to one file.
func fileID(info os.FileInfo) ([2]uint64, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}, false
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)}, true
}
