// Package manifest records which segment files are live, plus the counters
// that tie them to the WAL, in a bbolt database.
//
// Every change is an Edit applied in one bbolt read-write transaction, and
// bbolt fsyncs on commit, so a crash leaves either the old or the new set of
// segments: a flush that adds a segment and advances FlushedSeq, or a
// compaction that swaps inputs for outputs, is never half done. The current
// State is also kept in memory, so reading it costs no I/O.
//
// # File numbers
//
// Segment and WAL files are named by numbers from NewFileNum, which hands
// out only numbers below the committed NextFileNum: every Apply reserves a
// range ahead of the in-memory counter, and NewFileNum commits a new range
// when one runs out. So a number is durable in the manifest before any file
// bears it, and a file numbered at or above NextFileNum cannot be the
// store's — it is a foreign file, or the manifest is older than the files
// (bbolt fell back to an older meta page), and the DB refuses to open
// rather than delete it. After a reopen the DB skips (SkipTo) every number
// a file in the directory bears.
//
// The on-disk layout is specified in FORMAT.md.
package manifest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// ErrLocked is matched (errors.Is) by the error Open returns when another
// process, or another Open in this one, has the manifest open.
var ErrLocked = errors.New("manifest: locked by another opener")

// ErrReadOnly is returned by Apply (and so NewFileNum) on a manifest
// opened with OpenReadOnly.
var ErrReadOnly = errors.New("manifest: opened read-only")

// lockTimeout is how long Open waits for bbolt's file lock. A live DB holds
// the lock for as long as it is open, so waiting longer rarely helps; a
// short wait only smooths over a previous owner that is just closing.
const lockTimeout = 100 * time.Millisecond

// Manifest is an open manifest file. Its methods are safe for concurrent
// use; Apply calls are serialized.
type Manifest struct {
	fs   vfs.FS // for fault injection: bbolt does the file I/O itself
	db   *bolt.DB
	name string // base name, for errors

	applyMu  sync.Mutex // serializes Apply, so state changes only inside it
	readOnly bool       // opened by OpenReadOnly: Apply fails

	mu      sync.Mutex // guards the fields below
	state   State      // as committed; Segments is replaced, never modified
	counter uint64     // next number NewFileNum hands out; >= state.NextFileNum
}

// newManifest wraps an open bbolt database. The counter starts just past
// the numbers the state names; the DB raises it past the files it finds
// (SkipTo).
func newManifest(fsys vfs.FS, db *bolt.DB, path string, st State) *Manifest {
	counter := max(st.LogNum+1, firstFileNum)
	for _, s := range st.Segments {
		counter = max(counter, s.FileNum+1)
	}
	return &Manifest{fs: fsys, db: db, name: filepath.Base(path), state: st, counter: counter}
}

// boltOptions returns the options every open uses. openFile lets Create
// insist on a new file and Open on an existing one (bbolt would otherwise
// create a missing file). The freelist is not synced: the database is tiny,
// so rebuilding it at open is cheap, and it saves a page write per commit.
func boltOptions(openFile func(string, int, os.FileMode) (*os.File, error)) *bolt.Options {
	return &bolt.Options{
		Timeout:        lockTimeout,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		OpenFile:       openFile,
	}
}

// Create makes a new, empty manifest at path in fsys; it fails (matching
// fs.ErrExist) if path exists.
//
// The database is built under path+".tmp" and linked into place only once
// initialized, so a crash during Create never leaves a half-made manifest
// at path. A stale temporary file from such a crash is removed.
//
// The temporary database is closed before its name is removed, and path is
// then opened as Open does: Windows refuses to remove a file another handle
// holds open (bbolt opens it without FILE_SHARE_DELETE), so removing the
// temporary name while bbolt still held it failed every Create there. The
// price is a moment between the link and the open in which another process
// could open path first; Create then fails with ErrLocked, and the store
// excludes that anyway with its directory lock, taken before Create.
func Create(fsys vfs.FS, path string) (*Manifest, error) {
	return create(fsys, path, func(tx *bolt.Tx) error { return initialize(tx, State{NextFileNum: firstFileNum}) })
}

// CreateWith is Create for a manifest that starts with the state e makes
// of an empty one: e is written in the temporary database's first
// transaction, so the manifest appears at path complete or not at all. A
// checkpoint's copy is made so: created empty and then filled, a copy
// killed between the two held a MANIFEST that named none of its files,
// which Open takes for a manifest older than the files (ErrCorrupt).
func CreateWith(fsys vfs.FS, path string, e Edit) (*Manifest, error) {
	empty := State{NextFileNum: firstFileNum}
	st, err := empty.apply(e, firstFileNum) // as Apply to an empty manifest
	if err != nil {
		return nil, fmt.Errorf("manifest: create: %w", err)
	}
	return create(fsys, path, func(tx *bolt.Tx) error {
		if err := initialize(tx, empty); err != nil {
			return err
		}
		return writeEdit(tx, e, st)
	})
}

// create builds the manifest at path under its temporary name with
// init, and links it into place (see Create).
func create(fsys vfs.FS, path string, init func(*bolt.Tx) error) (*Manifest, error) {
	tmp := path + ".tmp"
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("manifest: create: %w", err)
	}
	db, err := bolt.Open(tmp, 0o644, boltOptions(func(name string, flag int, perm os.FileMode) (*os.File, error) {
		if err := vfs.Bypass(fsys, vfs.OpCreate, name); err != nil {
			return nil, err
		}
		return os.OpenFile(name, flag|os.O_EXCL, perm)
	}))
	if err != nil {
		return nil, fmt.Errorf("manifest: create: %w", err)
	}
	err = db.Update(init)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Link(tmp, path) // unlike rename, fails if path exists
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		return nil, fmt.Errorf("manifest: create: %w", err)
	}
	if err := errors.Join(fsys.Remove(tmp), fsys.SyncDir(filepath.Dir(path))); err != nil {
		return nil, fmt.Errorf("manifest: create: %w", err)
	}
	return Open(fsys, path)
}

// IsCreateLeftover reports whether the file at path can only be what an
// interrupted Create leaves at its temporary name: an empty file, or a
// bbolt file (bbolt's meta magic in the first page) that is not a manifest
// holding segments. Create only ever writes an empty manifest there, so
// anything else — a user's file that happens to bear the name, or what a
// CreateWith of a checkpoint left — is not the store's to remove.
func IsCreateLeftover(fsys vfs.FS, path string) bool {
	f, err := fsys.Open(path)
	if err != nil {
		return false
	}
	var head [20]byte
	n, _ := io.ReadFull(f, head[:])
	_ = f.Close()
	switch {
	case n == 0:
		return true
	case n < len(head) || binary.LittleEndian.Uint32(head[pageHeaderSize:]) != boltMagic: // the first meta page's magic
		return false
	}
	st, err := ReadState(fsys, path)
	return err != nil || len(st.Segments) == 0
}

// Open opens the existing manifest at path in fsys. It returns an error matching
// ErrLocked if the manifest is open elsewhere, and a *base.CorruptError
// naming the file if path is not a bbolt database (an empty file included),
// is a bbolt database without this package's layout, or holds a record that
// fails to decode. Open does not write to the file.
func Open(fsys vfs.FS, path string) (*Manifest, error) {
	db, err := bolt.Open(path, 0o644, boltOptions(func(name string, flag int, perm os.FileMode) (*os.File, error) {
		if err := vfs.Bypass(fsys, vfs.OpOpen, name); err != nil {
			return nil, err
		}
		return openChecked(name, flag, perm) // validates before bbolt maps the file: check.go
	}))
	if err != nil {
		return nil, openError(path, err)
	}
	var st State
	if err := db.View(func(tx *bolt.Tx) (err error) {
		st, err = load(tx, filepath.Base(path))
		return err
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("manifest: open: %w", err)
	}
	return newManifest(fsys, db, path, st), nil
}

// ReadState reads the committed state of the manifest at path without
// writing anything (see OpenReadOnly). It is for tools that inspect a
// store that is not open (bloomkv verify).
func ReadState(fsys vfs.FS, path string) (State, error) {
	m, err := OpenReadOnly(fsys, path)
	if err != nil {
		return State{}, err
	}
	defer m.Close()
	return m.State(), nil
}

// OpenReadOnly opens the manifest at path for reading only: bbolt opens it
// read-only, under a shared lock held until Close, so it fails with
// ErrLocked while a writer has it open (and a writer fails while it is
// open). Apply returns ErrReadOnly.
func OpenReadOnly(fsys vfs.FS, path string) (*Manifest, error) {
	opts := boltOptions(func(name string, flag int, perm os.FileMode) (*os.File, error) {
		if err := vfs.Bypass(fsys, vfs.OpOpen, name); err != nil {
			return nil, err
		}
		return openChecked(name, flag, perm) // validates before bbolt maps the file: check.go
	})
	opts.ReadOnly = true
	db, err := bolt.Open(path, 0o444, opts)
	if err != nil {
		return nil, openError(path, err)
	}
	var st State
	err = db.View(func(tx *bolt.Tx) (err error) {
		st, err = load(tx, filepath.Base(path))
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("manifest: read: %w", err)
	}
	m := newManifest(fsys, db, path, st)
	m.readOnly = true
	return m, nil
}

// openExisting opens a file for bbolt without creating it. It rejects an
// empty file, which bbolt would otherwise initialize as a new database:
// Open must not write to a file it reports as damaged.
func openExisting(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := vfs.OpenRegular(name, flag&^os.O_CREATE, perm)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() == 0 {
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		return nil, base.Corruptf(filepath.Base(name), -1, "empty file")
	}
	return f, nil
}

// openError translates bbolt's open errors into this package's.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("manifest: open %s: %w", path, ErrLocked)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum):
		err = base.Corruptf(filepath.Base(path), -1, "not a bbolt database: %v", err)
	}
	return fmt.Errorf("manifest: open: %w", err)
}

// State returns a copy of the committed state.
func (m *Manifest) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.clone()
}

// NewFileNum hands out the next file number, always one below the
// committed NextFileNum: when the reserved range is used up it first
// commits a new one (see the package comment), and that commit's error is
// returned.
func (m *Manifest) NewFileNum() (uint64, error) {
	for {
		m.mu.Lock()
		if m.counter < m.state.NextFileNum {
			n := m.counter
			m.counter++
			m.mu.Unlock()
			return n, nil
		}
		m.mu.Unlock()
		if err := m.Apply(Edit{}); err != nil {
			return 0, err
		}
	}
}

// SkipTo makes NewFileNum hand out only numbers at or above n. The DB calls
// it at open with one past the largest number in the directory, so no new
// file collides with a leftover one.
func (m *Manifest) SkipTo(n uint64) {
	m.mu.Lock()
	m.counter = max(m.counter, n)
	m.mu.Unlock()
}

// Apply validates e against the current state and commits it in one bbolt
// transaction, durable when Apply returns. An invalid edit (removing a
// segment that is not live, adding a file number that is or was live, an
// invalid SegmentMeta, a counter going backwards) returns an error matching
// ErrInvalidEdit and changes nothing. The committed NextFileNum also covers
// every number NewFileNum has handed out and every added file number.
//
// If the commit itself fails, the in-memory state stays at the old set, but
// what reached the disk is unknown until the manifest is reopened; callers
// should treat such an error as fatal.
func (m *Manifest) Apply(e Edit) error {
	if m.readOnly {
		return fmt.Errorf("manifest: apply to %s: %w", m.name, ErrReadOnly)
	}
	m.applyMu.Lock()
	defer m.applyMu.Unlock()

	m.mu.Lock()
	cur, counter := m.state, m.counter
	m.mu.Unlock()

	next, err := cur.apply(e, counter)
	if err != nil {
		return err
	}
	err = vfs.Bypass(m.fs, vfs.OpCommit, m.name) // bbolt writes its file itself: the seam's one hook
	if err == nil {
		err = m.db.Update(func(tx *bolt.Tx) error { return writeEdit(tx, e, next) })
	}
	if err != nil {
		return fmt.Errorf("manifest: apply to %s: %w", m.name, err)
	}

	m.mu.Lock()
	m.state = next
	m.mu.Unlock()
	return nil
}

// Close releases the file and its lock. Further Applies fail.
func (m *Manifest) Close() error {
	if err := m.db.Close(); err != nil {
		return fmt.Errorf("manifest: close %s: %w", m.name, err)
	}
	return nil
}
