// Package errorfs is a test double for vfs.FS that injects errors: it
// passes every operation to another FS, counts them, and fails the ones
// its Fault selects (ENOSPC, EIO, short writes), so that tests can check
// that the store reports the error, stops accepting writes it cannot make
// durable, and loses nothing it had acknowledged. It is for tests only:
// no production code imports it.
package errorfs

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/bloomkv/bloomkv/vfs"
)

// Fault describes the failure an FS injects.
type Fault struct {
	// Ops are the operations the fault applies to (vfs.OpAny for all).
	Ops vfs.Op
	// Name, if set, is a filepath.Match pattern a file's base name must
	// match ("*.wal", "MANIFEST"): the new name for Rename and Link, the
	// directory's for List, MkdirAll and SyncDir.
	Name string
	// Nth fails the Nth matching operation from when the fault was set,
	// counting from 1; 0 means the first.
	Nth int
	// Sticky fails every matching operation after the Nth too: a disk
	// that has filled up or gone away.
	Sticky bool
	// Err is the error returned; default syscall.EIO. It is wrapped in an
	// *os.PathError naming the operation and file, so errors.Is(err,
	// syscall.ENOSPC) works as with real errors.
	Err error
	// Short makes a failing write write the first half of its buffer
	// before failing, as a full disk does.
	Short bool
}

// FS is a vfs.FS that passes everything to another FS, counting
// operations, and fails the ones its Fault selects. Its zero Fault fails
// nothing. It is safe for concurrent use.
//
// The usual test runs a workload once to count its operations (Count),
// then again for each k in 1..n with Fault{Ops: op, Nth: k}, checking
// that each failure is reported and nothing acknowledged is lost. When
// the workload runs goroutines (background flushes), the kth operation
// need not be the same one in every run; the loop still fails each step
// of some interleaving, and Fired tells whether the fault was reached.
type FS struct {
	fs vfs.FS

	mu      sync.Mutex
	fault   Fault
	armed   bool
	matched int // matching operations since the fault was set
	fired   int
	counts  map[vfs.Op]int
}

// New wraps fs.
func New(fs vfs.FS) *FS { return &FS{fs: fs, counts: make(map[vfs.Op]int)} }

// SetFault arms f; the count for Nth starts now.
func (f *FS) SetFault(fault Fault) {
	if fault.Err == nil {
		fault.Err = syscall.EIO
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault, f.armed, f.matched, f.fired = fault, true, 0, 0
}

// Clear disarms f: nothing fails any more.
func (f *FS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
}

// Fired reports how many operations the current fault has failed.
func (f *FS) Fired() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// Count returns how many operations of the kinds in ops were performed
// (attempted) through f so far, whatever the file.
func (f *FS) Count(ops vfs.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for op, c := range f.counts {
		if op&ops != 0 {
			n += c
		}
	}
	return n
}

// Inject counts op on name and returns the injected error, if the fault
// selects this operation.
func (f *FS) Inject(op vfs.Op, name string) error {
	_, err := f.inject(op, name)
	return err
}

// inject also reports whether a failing write should be short.
func (f *FS) inject(op vfs.Op, name string) (short bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[op]++
	if !f.armed || f.fault.Ops&op == 0 {
		return false, nil
	}
	if f.fault.Name != "" {
		if ok, _ := filepath.Match(f.fault.Name, filepath.Base(name)); !ok {
			return false, nil
		}
	}
	f.matched++
	nth := max(f.fault.Nth, 1)
	if f.matched < nth || f.matched > nth && !f.fault.Sticky {
		return false, nil
	}
	f.fired++
	return f.fault.Short, &os.PathError{Op: "injected " + op.String(), Path: name, Err: f.fault.Err}
}

// Bypass implements vfs.Bypasser: code that does its own I/O on a file
// (the manifest's bbolt) is failed as the fault says, as if it went
// through f.
func (f *FS) Bypass(op vfs.Op, name string) error { return f.Inject(op, name) }

// Create implements vfs.FS, failing as the fault says.
func (f *FS) Create(name string) (vfs.File, error) {
	if err := f.Inject(vfs.OpCreate, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.Create(name))(name)
}

// Open implements vfs.FS, failing as the fault says.
func (f *FS) Open(name string) (vfs.File, error) {
	if err := f.Inject(vfs.OpOpen, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.Open(name))(name)
}

// OpenReadWrite implements vfs.FS, failing as the fault says.
func (f *FS) OpenReadWrite(name string) (vfs.File, error) {
	if err := f.Inject(vfs.OpOpen, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.OpenReadWrite(name))(name)
}

func (f *FS) wrap(file vfs.File, err error) func(string) (vfs.File, error) {
	return func(name string) (vfs.File, error) {
		if err != nil {
			return nil, err
		}
		return &faultyFile{File: file, fs: f, name: name}, nil
	}
}

// Remove implements vfs.FS, failing as the fault says.
func (f *FS) Remove(name string) error {
	if err := f.Inject(vfs.OpRemove, name); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

// Rename implements vfs.FS, failing as the fault says.
func (f *FS) Rename(oldname, newname string) error {
	if err := f.Inject(vfs.OpRename, newname); err != nil {
		return err
	}
	return f.fs.Rename(oldname, newname)
}

// Link implements vfs.FS, failing as the fault says.
func (f *FS) Link(oldname, newname string) error {
	if err := f.Inject(vfs.OpLink, newname); err != nil {
		return err
	}
	return f.fs.Link(oldname, newname)
}

// List implements vfs.FS, failing as the fault says.
func (f *FS) List(dir string) ([]string, error) {
	if err := f.Inject(vfs.OpList, dir); err != nil {
		return nil, err
	}
	return f.fs.List(dir)
}

// MkdirAll implements vfs.FS, failing as the fault says.
func (f *FS) MkdirAll(dir string) error {
	if err := f.Inject(vfs.OpMkdir, dir); err != nil {
		return err
	}
	return f.fs.MkdirAll(dir)
}

// SyncDir implements vfs.FS, failing as the fault says.
func (f *FS) SyncDir(dir string) error {
	if err := f.Inject(vfs.OpSyncDir, dir); err != nil {
		return err
	}
	return f.fs.SyncDir(dir)
}

// Lock implements vfs.FS, failing as the fault says.
func (f *FS) Lock(name string) (io.Closer, error) {
	if err := f.Inject(vfs.OpLock, name); err != nil {
		return nil, err
	}
	return f.fs.Lock(name)
}

// LockShared implements vfs.FS, failing as the fault says (as vfs.OpLock).
func (f *FS) LockShared(name string) (io.Closer, error) {
	if err := f.Inject(vfs.OpLock, name); err != nil {
		return nil, err
	}
	return f.fs.LockShared(name)
}

// Stat implements vfs.FS, failing as the fault says.
func (f *FS) Stat(name string) (os.FileInfo, error) {
	if err := f.Inject(vfs.OpStat, name); err != nil {
		return nil, err
	}
	return f.fs.Stat(name)
}

// faultyFile is a File of an FS.
type faultyFile struct {
	vfs.File
	fs   *FS
	name string
}

func (f *faultyFile) Read(p []byte) (int, error) {
	if err := f.fs.Inject(vfs.OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.Inject(vfs.OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultyFile) Write(p []byte) (int, error) {
	short, err := f.fs.inject(vfs.OpWrite, f.name)
	if err != nil {
		if short && len(p) > 1 {
			n, _ := f.File.Write(p[:len(p)/2])
			return n, err
		}
		return 0, err
	}
	return f.File.Write(p)
}

func (f *faultyFile) Sync() error {
	if err := f.fs.Inject(vfs.OpSync, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultyFile) Truncate(size int64) error {
	if err := f.fs.Inject(vfs.OpTruncate, f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// Unwrap returns the file underneath, for vfs.Fd: a faulty file can still be
// mapped, and reads of the mapping bypass the fault injection.
func (f *faultyFile) Unwrap() vfs.File { return f.File }

// BootID passes the wrapped file system's boot ID through.
func (f *FS) BootID() [16]byte { return vfs.BootID(f.fs) }
