//go:build !linux

package bloomkv

import (
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/wal"
)

// mapWAL is Linux-only (fallocate); elsewhere the WAL is written with
// write(2).
func (db *DB) mapWAL(f vfs.File, w *wal.Writer) {}
