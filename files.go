package bloomkv

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// Files in a store directory. Numbers come from one counter kept in the
// manifest, so a WAL and a segment never share one.
const (
	manifestName    = "MANIFEST"
	manifestTmpName = manifestName + ".tmp" // manifest.Create builds the manifest under this name
	lockName        = "LOCK"
	walExt          = ".wal"
	segExt          = ".seg"
)

func walName(num uint64) string     { return fmt.Sprintf("%06d%s", num, walExt) }
func segFileName(num uint64) string { return fmt.Sprintf("%06d%s", num, segExt) }

func (db *DB) path(name string) string { return pathIn(db.dir, name) }

func pathIn(dir, name string) string { return filepath.Join(dir, name) }

// parseFileName returns the number and extension of a WAL or segment file
// name, ok=false for any other name.
func parseFileName(name string) (num uint64, ext string, ok bool) {
	ext = filepath.Ext(name)
	if ext != walExt && ext != segExt {
		return 0, "", false
	}
	num, err := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 64)
	return num, ext, err == nil
}

// removeFile deletes a file of the store that is no longer needed; a
// failure only leaves garbage that the next Open removes.
func (db *DB) removeFile(name string) {
	if err := db.fs.Remove(db.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		db.logger.Warn("removing file", "file", name, "err", err)
	}
}
