package bloomkv

import (
	"errors"
	"io/fs"
	"path/filepath"
)

func (db *DB) path(name string) string { return pathIn(db.dir, name) }

func pathIn(dir, name string) string { return filepath.Join(dir, name) }

// removeFile deletes a file of the store that is no longer needed; a
// failure only leaves garbage that the next Open removes.
func (db *DB) removeFile(name string) {
	if err := db.fs.Remove(db.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		db.logger.Warn("removing file", "file", name, "err", err)
	}
}
