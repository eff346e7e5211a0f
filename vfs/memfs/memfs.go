// Package memfs is an in-memory vfs.FS for tests, so that code whose
// files need not be real (the WAL's, a fault-injection model's) runs
// without touching the disk. It keeps, beside every file's content, the
// content as of its last Sync, and beside every directory's entries, the
// entries as of its last SyncDir; CrashClone returns the file system a
// power cut would leave, in the manner of Pebble's crashable MemFS. It is
// for tests only: no production code imports it.
//
// Its files have no descriptor (vfs.Fd reports none), so the store reads
// segments on it with ReadAt instead of mapping them, and writes its WAL
// with Write. The bbolt manifest needs real files: a whole store cannot
// live on a memfs.FS.
package memfs

import (
	"encoding/binary"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bloomkv/bloomkv/vfs"
)

// FS is an in-memory file system. Names are cleaned and taken from the
// root ("a/b" is "/a/b"). Every method is safe for concurrent use.
type FS struct {
	mu    sync.Mutex
	root  *node
	boots uint64 // crash clones made on the way to this FS, for BootID
}

// node is a file or a directory; directory entries point at nodes, and
// hard links share one.
type node struct {
	dir bool
	// A file's content now, and as of its last Sync.
	data, synced []byte
	// A directory's entries now, and as of its last SyncDir.
	entries, syncedEntries map[string]*node
	modTime                time.Time
	// Locks held: exclusive, or a count of shared holders.
	locked bool
	shared int
}

func newDir() *node {
	return &node{dir: true, entries: map[string]*node{}, syncedEntries: map[string]*node{}, modTime: time.Now()}
}

// New returns an empty file system, holding only the root directory.
func New() *FS { return &FS{root: newDir()} }

// CrashClone returns the file system a power cut at this moment would
// leave: each directory with the entries of its last SyncDir, each file
// with its content as of its last Sync. A name created, renamed or
// removed since its directory's last sync is undone; a write not synced
// is lost. Directories made by MkdirAll count as synced. Hard links stay
// shared. f is unchanged; the clone reports a new BootID, as a machine
// does after a power cut.
func (f *FS) CrashClone() *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[*node]*node{}
	var clone func(n *node) *node
	clone = func(n *node) *node {
		if c := seen[n]; c != nil {
			return c
		}
		c := &node{dir: n.dir, modTime: n.modTime}
		seen[n] = c
		if !n.dir {
			c.data, c.synced = slices.Clone(n.synced), slices.Clone(n.synced)
			return c
		}
		c.entries = make(map[string]*node, len(n.syncedEntries))
		c.syncedEntries = make(map[string]*node, len(n.syncedEntries))
		for name, child := range n.syncedEntries {
			cc := clone(child)
			c.entries[name], c.syncedEntries[name] = cc, cc
		}
		return c
	}
	return &FS{root: clone(f.root), boots: f.boots + 1}
}

// BootID implements vfs.BootIDer: a crash clone is a new boot, so that
// WAL recovery treats damage past the last sync as a power cut's.
func (f *FS) BootID() [16]byte {
	var id [16]byte
	copy(id[:], "memfs boot #")
	binary.LittleEndian.PutUint32(id[12:], uint32(f.boots)+1)
	return id
}

// split returns the components of name's path from the root.
func split(name string) []string {
	p := filepath.ToSlash(filepath.Clean(name))
	p = strings.TrimPrefix(p, filepath.ToSlash(filepath.VolumeName(name)))
	var parts []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	return parts
}

func pathErr(op, name string, err error) error { return &os.PathError{Op: op, Path: name, Err: err} }

// lookupLocked returns the node at name, or nil.
func (f *FS) lookupLocked(name string) *node {
	n := f.root
	for _, c := range split(name) {
		if !n.dir {
			return nil
		}
		if n = n.entries[c]; n == nil {
			return nil
		}
	}
	return n
}

// parentLocked returns the directory that holds name, and name's base. It
// fails with ErrNotExist if there is none (or name is the root).
func (f *FS) parentLocked(op, name string) (*node, string, error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, "", pathErr(op, name, syscall.EINVAL)
	}
	d := f.root
	for _, c := range parts[:len(parts)-1] {
		if d = d.entries[c]; d == nil {
			return nil, "", pathErr(op, name, fs.ErrNotExist)
		}
		if !d.dir {
			return nil, "", pathErr(op, name, syscall.ENOTDIR)
		}
	}
	return d, parts[len(parts)-1], nil
}

// Create implements vfs.FS: a new, empty file; ErrExist if name exists.
func (f *FS) Create(name string) (vfs.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, base, err := f.parentLocked("open", name)
	if err != nil {
		return nil, err
	}
	if d.entries[base] != nil {
		return nil, pathErr("open", name, fs.ErrExist)
	}
	n := &node{modTime: time.Now()}
	d.entries[base] = n
	d.modTime = n.modTime
	return &file{fs: f, n: n, name: name, write: true}, nil
}

// Open implements vfs.FS.
func (f *FS) Open(name string) (vfs.File, error) { return f.open(name, false) }

// OpenReadWrite implements vfs.FS.
func (f *FS) OpenReadWrite(name string) (vfs.File, error) { return f.open(name, true) }

func (f *FS) open(name string, write bool) (vfs.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupLocked(name)
	switch {
	case n == nil:
		return nil, pathErr("open", name, fs.ErrNotExist)
	case n.dir && write:
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	return &file{fs: f, n: n, name: name, write: write}, nil
}

// Remove implements vfs.FS: a file, or an empty directory.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, base, err := f.parentLocked("remove", name)
	if err != nil {
		return err
	}
	n := d.entries[base]
	switch {
	case n == nil:
		return pathErr("remove", name, fs.ErrNotExist)
	case n.dir && len(n.entries) > 0:
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(d.entries, base)
	d.modTime = time.Now()
	return nil
}

// Rename implements vfs.FS: newname, if it exists, is replaced.
func (f *FS) Rename(oldname, newname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	od, obase, err := f.parentLocked("rename", oldname)
	if err != nil {
		return err
	}
	nd, nbase, err := f.parentLocked("rename", newname)
	if err != nil {
		return err
	}
	n := od.entries[obase]
	if n == nil {
		return pathErr("rename", oldname, fs.ErrNotExist)
	}
	if old := nd.entries[nbase]; old != nil && old != n {
		if old.dir != n.dir || old.dir && len(old.entries) > 0 {
			return pathErr("rename", newname, syscall.EEXIST)
		}
	}
	if nd.entries[nbase] == n {
		return nil // two names of one file: POSIX does nothing
	}
	delete(od.entries, obase)
	nd.entries[nbase] = n
	od.modTime, nd.modTime = time.Now(), time.Now()
	return nil
}

// Link implements vfs.FS: newname becomes a second name of the file
// oldname; ErrExist if newname exists.
func (f *FS) Link(oldname, newname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupLocked(oldname)
	if n == nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if n.dir {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EPERM}
	}
	d, base, err := f.parentLocked("link", newname)
	if err != nil {
		return err
	}
	if d.entries[base] != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrExist}
	}
	d.entries[base] = n
	d.modTime = time.Now()
	return nil
}

// List implements vfs.FS.
func (f *FS) List(dir string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupLocked(dir)
	switch {
	case n == nil:
		return nil, pathErr("open", dir, fs.ErrNotExist)
	case !n.dir:
		return nil, pathErr("readdirent", dir, syscall.ENOTDIR)
	}
	names := make([]string, 0, len(n.entries))
	for name := range n.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// MkdirAll implements vfs.FS. The directories it makes count as synced
// (CrashClone keeps them), as vfs/powerfs takes them too.
func (f *FS) MkdirAll(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.root
	for _, c := range split(dir) {
		next := n.entries[c]
		if next == nil {
			next = newDir()
			n.entries[c], n.syncedEntries[c] = next, next
		} else if !next.dir {
			return pathErr("mkdir", dir, syscall.ENOTDIR)
		}
		n = next
	}
	return nil
}

// SyncDir implements vfs.FS: dir's current entries become the ones
// CrashClone keeps.
func (f *FS) SyncDir(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupLocked(dir)
	switch {
	case n == nil:
		return pathErr("open", dir, fs.ErrNotExist)
	case !n.dir:
		return pathErr("sync", dir, syscall.ENOTDIR)
	}
	n.syncedEntries = make(map[string]*node, len(n.entries))
	for name, c := range n.entries {
		n.syncedEntries[name] = c
	}
	return nil
}

// Lock implements vfs.FS: the file is created if missing; ErrLocked while
// any other lock, exclusive or shared, is held on it.
func (f *FS) Lock(name string) (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupLocked(name)
	if n == nil {
		d, base, err := f.parentLocked("open", name)
		if err != nil {
			return nil, err
		}
		n = &node{modTime: time.Now()}
		d.entries[base] = n
	}
	if n.locked || n.shared > 0 {
		return nil, vfs.ErrLocked
	}
	n.locked = true
	return &lock{fs: f, n: n}, nil
}

// LockShared implements vfs.FS: the file must exist; ErrLocked while an
// exclusive lock is held on it.
func (f *FS) LockShared(name string) (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupLocked(name)
	switch {
	case n == nil:
		return nil, pathErr("open", name, fs.ErrNotExist)
	case n.locked:
		return nil, vfs.ErrLocked
	}
	n.shared++
	return &lock{fs: f, n: n, shared: true}, nil
}

// lock is a held lock; closing it releases it, once.
type lock struct {
	fs       *FS
	n        *node
	shared   bool
	released bool
}

func (l *lock) Close() error {
	l.fs.mu.Lock()
	defer l.fs.mu.Unlock()
	if l.released {
		return os.ErrClosed
	}
	l.released = true
	if l.shared {
		l.n.shared--
	} else {
		l.n.locked = false
	}
	return nil
}

// Stat implements vfs.FS.
func (f *FS) Stat(name string) (os.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupLocked(name)
	if n == nil {
		return nil, pathErr("stat", name, fs.ErrNotExist)
	}
	return n.infoLocked(name), nil
}

func (n *node) infoLocked(name string) os.FileInfo {
	base := "/"
	if parts := split(name); len(parts) > 0 {
		base = parts[len(parts)-1]
	}
	return fileInfo{name: base, size: int64(len(n.data)), dir: n.dir, modTime: n.modTime}
}

// file is an open file of an FS. It has no descriptor.
type file struct {
	fs     *FS
	n      *node
	name   string
	write  bool
	pos    int64
	closed bool
}

// check fails if f is closed, or (for a write) opened read-only, or a
// directory.
func (f *file) check(op string, write bool) error {
	switch {
	case f.closed:
		return pathErr(op, f.name, os.ErrClosed)
	case f.n.dir && op != "stat" && op != "sync":
		return pathErr(op, f.name, syscall.EISDIR)
	case write && !f.write:
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

func (f *file) Read(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if f.pos >= int64(len(f.n.data)) {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(b, f.n.data[f.pos:])
	f.pos += int64(n)
	return n, nil
}

func (f *file) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(b, f.n.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) Write(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	f.writeAtLocked(b, f.pos)
	f.pos += int64(len(b))
	return len(b), nil
}

// WriteAt writes b at off, leaving the position alone, as os.File's does.
func (f *file) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL)
	}
	f.writeAtLocked(b, off)
	return len(b), nil
}

func (f *file) writeAtLocked(b []byte, off int64) {
	if end := off + int64(len(b)); end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[off:], b)
	f.n.modTime = time.Now()
}

// Sync makes the file's content the one CrashClone keeps.
func (f *file) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("sync", false); err != nil {
		return err
	}
	if !f.n.dir {
		f.n.synced = slices.Clone(f.n.data)
	}
	return nil
}

func (f *file) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("stat", false); err != nil {
		return nil, err
	}
	return f.n.infoLocked(f.name), nil
}

func (f *file) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size:size] // a later append must not reuse the cut bytes' array under a clone
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	f.n.modTime = time.Now()
	return nil
}

func (f *file) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	return nil
}

// fileInfo is what Stat returns.
type fileInfo struct {
	name    string
	size    int64
	dir     bool
	modTime time.Time
}

func (i fileInfo) Name() string { return i.name }
func (i fileInfo) Size() int64  { return i.size }
func (i fileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (i fileInfo) ModTime() time.Time { return i.modTime }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }

var (
	_ vfs.FS       = (*FS)(nil)
	_ vfs.BootIDer = (*FS)(nil)
	_ io.WriterAt  = (*file)(nil)
)
