//go:build !unix

package powerfs

import "os"

// fileID is unknown here (a FileInfo from os.ReadDir carries no file
// index on Windows): the FS then takes hard links found on the disk
// as separate files. Links made through the FS are still tracked.
func fileID(os.FileInfo) ([2]uint64, bool) { return [2]uint64{}, false }
