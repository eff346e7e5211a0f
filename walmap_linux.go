//go:build linux

package bloomkv

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/wal"
)

// mapWAL makes w append to its file f through a shared mapping of a
// preallocated region (wal.Mapping): a group commit then costs a memory
// copy instead of a write(2), and an acknowledged write is in the page
// cache, so it survives a crash of the process as before. It does nothing,
// and w keeps writing with write(2), where that cannot be done safely: on a
// file that is neither the operating system's nor a wrapper's that can see
// writes to a mapping (vfs.MapFd: a fault injector could not), with
// DisableMmap, or where the file cannot be
// preallocated — fallocate is what makes a page fault unable to find the
// device full, which on a mapping would be SIGBUS instead of an error.
func (db *DB) mapWAL(f vfs.File, w *wal.Writer) {
	if db.opts.DisableMmap {
		return
	}
	wa, ok := f.(io.WriterAt)
	if !ok {
		return
	}
	fd, ok := vfs.MapFd(f)
	if !ok {
		return
	}
	// Room for a full memtable's records with their headers and marks.
	page := int64(os.Getpagesize())
	size := (int64(db.opts.MemtableSize)*5/4 + 64<<10 + page - 1) &^ (page - 1)
	if err := unix.Fallocate(int(fd), 0, 0, size); err != nil {
		return
	}
	m, err := unix.Mmap(int(fd), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Ftruncate(int(fd), w.Size())
		return
	}
	w.UseMapping(wal.Mapping{
		Bytes:   m,
		WriteAt: wa.WriteAt,
		// Zeros written ahead make a store's page faults cheap, but an
		// fsync then also writes the zeroed pages: not for a log whose
		// every write is fsynced.
		ZeroAhead: !db.opts.Sync,
		Release: func(size int64) error {
			// Trimmed to the records, so a closed log has no zero tail.
			err := unix.Munmap(m)
			if st, serr := f.Stat(); serr == nil && st.Size() > size {
				err = unix.Ftruncate(int(fd), size)
			}
			return err
		},
	})
}
