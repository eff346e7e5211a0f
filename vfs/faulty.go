package vfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Op is a kind of file system operation, as a bit so that a Fault can
// name several.
type Op uint32

// The operations Faulty counts and can fail.
const (
	OpCreate Op = 1 << iota
	OpOpen
	OpRead // Read and ReadAt
	OpWrite
	OpSync
	OpTruncate
	OpRemove
	OpRename
	OpLink
	OpList
	OpMkdir
	OpSyncDir
	OpLock
	OpStat
	OpCommit // a manifest transaction (see Check)

	OpAny Op = 1<<iota - 1
)

var opNames = []string{"create", "open", "read", "write", "sync", "truncate", "remove", "rename", "link", "list", "mkdir", "syncdir", "lock", "stat", "commit"}

func (op Op) String() string {
	for i, n := range opNames {
		if op == 1<<i {
			return n
		}
	}
	return fmt.Sprintf("Op(%#x)", uint32(op))
}

// Fault describes the failure Faulty injects.
type Fault struct {
	// Ops are the operations the fault applies to (OpAny for all).
	Ops Op
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

// Faulty is an FS that passes everything to another FS, counting
// operations, and fails the ones its Fault selects. Its zero Fault fails
// nothing. It is safe for concurrent use.
//
// The usual test runs a workload once to count its operations (Count),
// then again for each k in 1..n with Fault{Ops: op, Nth: k}, checking
// that each failure is reported and nothing acknowledged is lost. When
// the workload runs goroutines (background flushes), the kth operation
// need not be the same one in every run; the loop still fails each step
// of some interleaving, and Fired tells whether the fault was reached.
type Faulty struct {
	fs FS

	mu      sync.Mutex
	fault   Fault
	armed   bool
	matched int // matching operations since the fault was set
	fired   int
	counts  map[Op]int
}

// NewFaulty wraps fs.
func NewFaulty(fs FS) *Faulty { return &Faulty{fs: fs, counts: make(map[Op]int)} }

// SetFault arms f; the count for Nth starts now.
func (f *Faulty) SetFault(fault Fault) {
	if fault.Err == nil {
		fault.Err = syscall.EIO
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault, f.armed, f.matched, f.fired = fault, true, 0, 0
}

// Clear disarms f: nothing fails any more.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
}

// Fired reports how many operations the current fault has failed.
func (f *Faulty) Fired() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// Count returns how many operations of the kinds in ops were performed
// (attempted) through f so far, whatever the file.
func (f *Faulty) Count(ops Op) int {
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
// selects this operation. It is the Injector hook that Check calls.
func (f *Faulty) Inject(op Op, name string) error {
	_, err := f.inject(op, name)
	return err
}

// inject also reports whether a failing write should be short.
func (f *Faulty) inject(op Op, name string) (short bool, err error) {
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

// Injector is implemented by file systems that inject faults. Code whose
// writes cannot go through an FS calls Check at the point where it would
// fail.
type Injector interface {
	Inject(op Op, name string) error
}

// Check returns the fault fs injects for op on name, nil if fs injects
// none (or is not an Injector).
func Check(fs FS, op Op, name string) error {
	if i, ok := fs.(Injector); ok {
		return i.Inject(op, name)
	}
	return nil
}

// Create implements FS, failing as the fault says.
func (f *Faulty) Create(name string) (File, error) {
	if err := f.Inject(OpCreate, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.Create(name))(name)
}

// Open implements FS, failing as the fault says.
func (f *Faulty) Open(name string) (File, error) {
	if err := f.Inject(OpOpen, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.Open(name))(name)
}

// OpenReadWrite implements FS, failing as the fault says.
func (f *Faulty) OpenReadWrite(name string) (File, error) {
	if err := f.Inject(OpOpen, name); err != nil {
		return nil, err
	}
	return f.wrap(f.fs.OpenReadWrite(name))(name)
}

func (f *Faulty) wrap(file File, err error) func(string) (File, error) {
	return func(name string) (File, error) {
		if err != nil {
			return nil, err
		}
		return &faultyFile{File: file, fs: f, name: name}, nil
	}
}

// Remove implements FS, failing as the fault says.
func (f *Faulty) Remove(name string) error {
	if err := f.Inject(OpRemove, name); err != nil {
		return err
	}
	return f.fs.Remove(name)
}

// Rename implements FS, failing as the fault says.
func (f *Faulty) Rename(oldname, newname string) error {
	if err := f.Inject(OpRename, newname); err != nil {
		return err
	}
	return f.fs.Rename(oldname, newname)
}

// Link implements FS, failing as the fault says.
func (f *Faulty) Link(oldname, newname string) error {
	if err := f.Inject(OpLink, newname); err != nil {
		return err
	}
	return f.fs.Link(oldname, newname)
}

// List implements FS, failing as the fault says.
func (f *Faulty) List(dir string) ([]string, error) {
	if err := f.Inject(OpList, dir); err != nil {
		return nil, err
	}
	return f.fs.List(dir)
}

// MkdirAll implements FS, failing as the fault says.
func (f *Faulty) MkdirAll(dir string) error {
	if err := f.Inject(OpMkdir, dir); err != nil {
		return err
	}
	return f.fs.MkdirAll(dir)
}

// SyncDir implements FS, failing as the fault says.
func (f *Faulty) SyncDir(dir string) error {
	if err := f.Inject(OpSyncDir, dir); err != nil {
		return err
	}
	return f.fs.SyncDir(dir)
}

// Lock implements FS, failing as the fault says.
func (f *Faulty) Lock(name string) (io.Closer, error) {
	if err := f.Inject(OpLock, name); err != nil {
		return nil, err
	}
	return f.fs.Lock(name)
}

// LockShared implements FS, failing as the fault says (as OpLock).
func (f *Faulty) LockShared(name string) (io.Closer, error) {
	if err := f.Inject(OpLock, name); err != nil {
		return nil, err
	}
	return f.fs.LockShared(name)
}

// Stat implements FS, failing as the fault says.
func (f *Faulty) Stat(name string) (os.FileInfo, error) {
	if err := f.Inject(OpStat, name); err != nil {
		return nil, err
	}
	return f.fs.Stat(name)
}

// faultyFile is a File of a Faulty FS.
type faultyFile struct {
	File
	fs   *Faulty
	name string
}

func (f *faultyFile) Read(p []byte) (int, error) {
	if err := f.fs.Inject(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.Inject(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultyFile) Write(p []byte) (int, error) {
	short, err := f.fs.inject(OpWrite, f.name)
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
	if err := f.fs.Inject(OpSync, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultyFile) Truncate(size int64) error {
	if err := f.fs.Inject(OpTruncate, f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// Unwrap returns the file underneath, for Fd: a Faulty file can still be
// mapped, and reads of the mapping bypass the fault injection.
func (f *faultyFile) Unwrap() File { return f.File }
