package base

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Files in a store directory. Numbers come from one counter kept in the
// manifest, so a WAL and a segment never share one. The names are defined
// here, not in the root package, so that tools (cmd/bloomkv) and the store
// name files alike.
const (
	ManifestName    = "MANIFEST"            // the manifest (a bbolt database)
	ManifestTmpName = ManifestName + ".tmp" // manifest.Create builds the manifest under this name
	LockName        = "LOCK"                // the file the directory lock is taken on
	WALExt          = ".wal"                // extension of write-ahead logs
	SegmentExt      = ".seg"                // extension of segment files
)

// WALFileName returns the file name of the WAL numbered num.
func WALFileName(num uint64) string { return fmt.Sprintf("%06d%s", num, WALExt) }

// SegmentFileName returns the file name of the segment numbered num.
func SegmentFileName(num uint64) string { return fmt.Sprintf("%06d%s", num, SegmentExt) }

// ParseFileName returns the number and extension of a WAL or segment file
// name, ok=false for any other name.
func ParseFileName(name string) (num uint64, ext string, ok bool) {
	ext = filepath.Ext(name)
	if ext != WALExt && ext != SegmentExt {
		return 0, "", false
	}
	num, err := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 64)
	return num, ext, err == nil
}
