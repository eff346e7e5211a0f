package bloomkv

import (
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/bloomkv/bloomkv/internal/base"
)

// Forwarders to the file names of internal/base, so that this commit
// moves them without touching their callers; the next one removes these.
const (
	manifestName    = base.ManifestName
	manifestTmpName = base.ManifestTmpName
	lockName        = base.LockName
	walExt          = base.WALExt
	segExt          = base.SegmentExt
)

func walName(num uint64) string     { return base.WALFileName(num) }
func segFileName(num uint64) string { return base.SegmentFileName(num) }

func (db *DB) path(name string) string { return pathIn(db.dir, name) }

func pathIn(dir, name string) string { return filepath.Join(dir, name) }

func parseFileName(name string) (uint64, string, bool) { return base.ParseFileName(name) }

// removeFile deletes a file of the store that is no longer needed; a
// failure only leaves garbage that the next Open removes.
func (db *DB) removeFile(name string) {
	if err := db.fs.Remove(db.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		db.logger.Warn("removing file", "file", name, "err", err)
	}
}
