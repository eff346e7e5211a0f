// Package vfs is the file system seam of bloomkv: every file the store
// touches is created, opened, synced, renamed and removed through an FS.
// Default is the operating system's file system. Test doubles live in
// their own packages, which no production code imports: vfs/errorfs
// fails any step (ENOSPC, EIO, short writes), vfs/powerfs simulates power
// cuts over real files, and vfs/memfs keeps files in memory, with a crash
// clone that drops what was not synced.
//
// Three things do not go through an FS's methods: reads of mapped segment
// files (Fd; use Options.DisableMmap to fault reads, or refuse the
// mapping in Bypass with OpMap), writes to the
// mapped WAL (MapFd: only files that can see them are mapped), and the bbolt
// manifest's own I/O, which calls Bypass before each step so that a
// wrapping FS can fail or record it.
package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/bloomkv/bloomkv/internal/flock"
)

// File is an open file.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer
	Sync() error
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
}

// FS is a file system. Names are paths as the os package takes them.
type FS interface {
	// Create makes a new file for reading and writing; it fails if name
	// exists.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing (WAL
	// recovery truncates a torn tail).
	OpenReadWrite(name string) (File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	// Link makes newname a hard link to oldname; it fails if newname
	// exists (unlike Rename, which replaces it).
	Link(oldname, newname string) error
	// List returns the names of the entries of dir, sorted.
	List(dir string) ([]string, error)
	MkdirAll(dir string) error
	// SyncDir makes creations, renames and removals in dir durable.
	SyncDir(dir string) error
	// Lock takes an exclusive lock on the file name (created if missing)
	// without waiting: ErrLocked if another holder has it. Closing the
	// result releases it; so does the death of the process.
	Lock(name string) (io.Closer, error)
	// LockShared takes a shared lock on the existing file name without
	// waiting and without creating it: any number of shared holders, but
	// ErrLocked while an exclusive holder (Lock) has it, and Lock fails
	// while a shared holder has it. Read-only opens use it.
	LockShared(name string) (io.Closer, error)
	Stat(name string) (os.FileInfo, error)
}

// ErrLocked is returned by Lock when the file is locked by someone else.
var ErrLocked = errors.New("vfs: file is locked")

// ErrNotRegular is returned, in an *fs.PathError, by Default's Open,
// OpenReadWrite, Lock and LockShared for a name that is not a regular file
// or a symbolic link to one: a directory, a named pipe, a socket, a device.
// Every file of a store is a regular file, and the others are hostile to
// a reader: opening a named pipe waits for a writer that may never come,
// and reading /dev/zero never ends.
var ErrNotRegular = errors.New("vfs: not a regular file")

// OpenRegular is os.OpenFile for a file that must be regular: it opens
// name without waiting (a named pipe would block the open until the other
// end is opened) and returns an error matching ErrNotRegular, with the
// file closed, if it is anything else. The manifest package gives it to
// bbolt, which opens the MANIFEST itself.
func OpenRegular(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag|openNonblock, perm)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = &fs.PathError{Op: "open", Path: name, Err: ErrNotRegular}
	}
	if err == nil {
		err = clearNonblock(f)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
}
func (osFS) Open(name string) (File, error) { return OpenRegular(name, os.O_RDONLY, 0) }
func (osFS) OpenReadWrite(name string) (File, error) {
	return OpenRegular(name, os.O_RDWR, 0)
}
func (osFS) Remove(name string) error              { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error  { return os.Rename(oldname, newname) }
func (osFS) Link(oldname, newname string) error    { return os.Link(oldname, newname) }
func (osFS) MkdirAll(dir string) error             { return os.MkdirAll(dir, 0o755) }
func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

func (osFS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, err
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(syncDir(d), d.Close())
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := OpenRegular(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return flockOrClose(f, name, false)
}

func (osFS) LockShared(name string) (io.Closer, error) {
	f, err := OpenRegular(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	return flockOrClose(f, name, true)
}

// flockOrClose locks f, or closes it and says why not.
func flockOrClose(f *os.File, name string, shared bool) (io.Closer, error) {
	if err := flock.TryLock(f, shared); err != nil {
		f.Close()
		if errors.Is(err, flock.ErrLocked) {
			return nil, ErrLocked
		}
		return nil, &os.PathError{Op: "lock", Path: name, Err: err}
	}
	return f, nil // closing the descriptor releases the lock
}

// Fd returns the descriptor of f, for mapping it into memory, or false if
// f is not backed by an operating system file.
func Fd(f File) (uintptr, bool) {
	for {
		switch x := f.(type) {
		case interface{ Fd() uintptr }:
			return x.Fd(), true
		case interface{ Unwrap() File }:
			f = x.Unwrap()
		default:
			return 0, false
		}
	}
}

// Mapper is implemented by a file of a wrapping FS that can see writes
// made through a shared, writable mapping of it, which bypass its Write
// method (vfs/powerfs does, by comparing the file's content with its
// content at the last Sync). MapFd returns the descriptor to map, or
// false, and from then on the wrapper expects the file to change behind
// its back.
type Mapper interface {
	MapFd() (uintptr, bool)
}

// MapFd returns the descriptor of f for a shared, writable mapping: f's
// own if f is an operating system file, what f's MapFd returns if f is a
// Mapper, and false otherwise — a wrapper that sees only calls, such as a
// fault injector, would miss every write made through the mapping, so
// such a file must be written with Write.
func MapFd(f File) (uintptr, bool) {
	switch x := f.(type) {
	case Mapper:
		return x.MapFd()
	case *os.File:
		return x.Fd(), true
	}
	return 0, false
}
