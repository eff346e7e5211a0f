package bloomkv

import (
	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/vfs"
)

// writeBehind wraps a new segment file so that each write is followed by
// a request to start writing those bytes to the device
// (sync_file_range(SYNC_FILE_RANGE_WRITE): it waits for nothing but a
// place in the device's queue), as Pebble's BytesPerSync and RocksDB's
// bytes_per_sync do. Without it a merge's output gathers as dirty pages
// until its fsync, and on ext4 an fsync of any other file (a flush's
// segment, the manifest, a synced WAL) commits the journal and waits for
// the dirty data of files whose blocks it allocated: a flush that a
// stalled writer waited for took 50-75 ms beside a merge instead of 12-16.
// The file's own fsync then finds little left to write. A hint only:
// nothing about durability changes, and errors are ignored (the fsync
// reports a failed write). Files without a descriptor are left alone.
func writeBehind(f vfs.File) vfs.File {
	fd, ok := vfs.Fd(f)
	if !ok {
		return f
	}
	return &behindFile{File: f, fd: int(fd)}
}

type behindFile struct {
	vfs.File
	fd  int
	off int64 // the file offset the next Write starts at
}

func (f *behindFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	if n > 0 {
		_ = unix.SyncFileRange(f.fd, f.off, int64(n), unix.SYNC_FILE_RANGE_WRITE)
		f.off += int64(n)
	}
	return n, err
}

// Unwrap returns the file underneath, for vfs.Fd.
func (f *behindFile) Unwrap() vfs.File { return f.File }
