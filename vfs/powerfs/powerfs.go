// Package powerfs is a test double for vfs.FS that simulates losing
// power (see FS). It is for tests only: no production code imports it.
package powerfs

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/bloomkv/bloomkv/vfs"
)

// FS is a vfs.FS that simulates losing power. A killed process leaves
// the kernel's page cache behind, so crash tests that kill processes never
// lose a write that was not fsynced; FS does, in the manner of
// LevelDB's and RocksDB's fault-injection Env, Pebble's strict MemFS and
// SQLite's crash-test VFS.
//
// It is an overlay on real directories: every operation is passed to the
// FS underneath (vfs.Default, or an errorfs.FS over it), so the files are real and
// code that does its own I/O on them — bbolt, for the manifest — works.
// Alongside, FS records what a power cut would leave:
//
//   - per file, its durable content (as of its last successful vfs.File.Sync)
//     and the writes and truncations made since, in order;
//   - per directory, the durable entries (name → file, as of the last
//     successful SyncDir of that directory) next to the current ones, so
//     that a Create, Rename, Link or Remove is durable only once its
//     directory has been synced (POSIX's rule, stricter than ext4's
//     journal, which often makes a new name durable with the file's own
//     fsync).
//
// A directory is read from the disk the first time an operation names a
// file in it: files already there count as durable, with the content they
// have on disk, until they are changed through the FS.
//
// Cut (or CutAfter) turns the power off: from then on every operation
// fails with EIO wrapped in an *os.PathError, Bypass included, so a store
// stops. After the store has been closed (or abandoned: nothing may still
// write its files), Restore rewrites the directories to what the disk
// would hold after the power came back: every file rolled back to its
// durable content plus none, a prefix or a subset of its unsynced writes
// (Writeback), every unsynced directory change undone.
//
// Files written by someone else — bbolt's manifest, which vfs.Bypass announces
// (vfs.OpCreate, vfs.OpOpen) — are taken as they are on disk at Restore. bbolt
// makes a commit all there or not at all once its fsync returns, and a
// store calls vfs.Bypass(vfs.OpCommit) just before each commit, which fails once
// the power is off; so a cut falls between two commits, and the manifest
// on disk is exactly what a power loss at that moment would leave (a
// commit already past its Bypass when the cut comes completes, as if the
// cut came just after it).
//
// Files written through a shared, writable mapping (the store's WAL on
// Linux) change without a call to the FS. A file's descriptor handed out
// for that (vfs.MapFd) puts it in another mode: its content is read from
// the file itself when each Sync begins (what the fsync makes durable)
// and when the power goes off (what the page cache held then), and
// Restore keeps, of the 4 KiB pages that differ, none, the first ones or
// a random subset, each whole as of the cut, as Writeback says.
//
// What is not simulated: torn writes inside a bbolt commit (bbolt's own
// guarantee), the loss of a directory created by MkdirAll (directories
// are taken as durable), faults on reads from memory maps (they bypass
// the FS), the states of a mapped page between two syncs other than the
// one at the cut, metadata other than names and content (mode, times),
// and a file written both through the FS and by someone else.
//
// Every method is safe for concurrent use. The model keeps the content of
// every file written through the FS in memory: it is meant for tests.
type FS struct {
	fs   vfs.FS
	opts Options

	// dead mirrors "cut" for the read paths, which take no lock; gen
	// counts Restores, so that a file opened before one fails forever.
	dead atomic.Bool
	gen  atomic.Uint64

	mu     sync.Mutex
	cut    bool
	done   chan struct{} // closed by the cut
	ops    int           // mutating operations admitted since creation (or Restore)
	cutAt  int           // cut after this many operations; 0: no automatic cut
	dirs   map[string]*plDir
	nextID int
	// syncDirs counts the SyncDirs under way: the snapshot each took may
	// make a file that has lost all its names durable again, so such
	// files wait in limbo, content kept, until none is under way.
	syncDirs int
	limbo    []*plInode
	// mapped are the inodes of files mapped for writing (MapFd); nMapped
	// counts them across Restores.
	mapped  []*plInode
	nMapped int
}

// Writeback says which unsynced writes of a file the kernel had written
// back to the disk when the power went off. Whatever the mode, Restore
// keeps all of a file's synced content and none of the writes its
// descriptor made after the cut (they all failed). Each file draws on
// its own, as the kernel writes files back in no particular order: one
// file can keep its unsynced tail while another, written earlier, loses
// its own.
type Writeback int

const (
	// WritebackNone loses every unsynced write: the strict case, as
	// LevelDB's DropUnsyncedFileData.
	WritebackNone Writeback = iota
	// WritebackPrefix keeps a random prefix, in bytes, of each file's
	// unsynced writes in the order they were made: the last one kept may
	// be torn. This is an appending file whose tail did not make it (as
	// LevelDB's DropRandomUnsyncedFileData).
	WritebackPrefix
	// WritebackSubset keeps a random subset of each file's unsynced
	// pages: the kernel writes dirty 4 KiB pages back in any order, so
	// each page is left as of some moment — with a random prefix of the
	// unsynced writes that touched it, independently of the other pages —
	// and a later page can be there while an earlier one is a hole of
	// zeros (or old bytes). Truncations are kept or lost at random, each
	// on its own. Torn sectors inside a page are not simulated.
	WritebackSubset
)

// String returns the mode's name: none, prefix or subset.
func (w Writeback) String() string {
	switch w {
	case WritebackNone:
		return "none"
	case WritebackPrefix:
		return "prefix"
	case WritebackSubset:
		return "subset"
	}
	return fmt.Sprintf("Writeback(%d)", int(w))
}

// pageSize is the unit WritebackSubset keeps or loses.
const pageSize = 4096

// plInode is a file of the model; names in directories point at it (hard
// links share one).
type plInode struct {
	id   int
	kind plKind
	// durable is the content as of the last Sync (kind plLoaded only).
	durable []byte
	// pending are the writes and truncations since, oldest first.
	pending []plOp
	nextSeq uint64 // sequence number of the next pending op
	// saved holds the on-disk content of a plOnDisk or plExternal file
	// whose last current name was removed while a durable name remained.
	saved    []byte
	hasSaved bool
	// curLinks and durLinks count the current and the durable names of
	// the file; a file with neither is forgotten: its content dropped,
	// its writes no longer recorded.
	curLinks, durLinks int
	forgotten          bool

	// mapped is set once a descriptor of the file has been handed out for
	// a shared, writable mapping (MapFd): from then on the file changes
	// behind the FS's back, so instead of recording writes the model reads
	// the content from the file itself — durable is what it held when its
	// last successful Sync began, atCut what it held when the power went
	// off — and Restore keeps a random subset of the pages that differ.
	mapped bool
	// open are the files open on a mapped inode, to read it through;
	// atClose is what it held when the last of them was closed.
	open    map[*plFile]struct{}
	atClose []byte
	atCut   []byte
}

type plKind int

const (
	plOnDisk   plKind = iota // found on disk, unchanged through the FS: durable as it is
	plLoaded                 // content tracked: durable + pending
	plExternal               // written by someone else (bbolt): taken as on disk
)

// plOp is one unsynced write (data at off) or truncation (to size).
type plOp struct {
	seq   uint64
	trunc bool
	off   int64 // write offset, or truncation size
	data  []byte
}

// plDir is a directory of the model.
type plDir struct {
	path     string
	cur, dur map[string]*plInode
	// ver counts changes to cur; durVer is the ver that dur reflects, so
	// that of two overlapping SyncDirs the older cannot win.
	ver, durVer uint64
}

// Options configure an FS.
type Options struct {
	// SkipRealSync makes vfs.File.Sync and SyncDir change only the model, not
	// fsync the real files: the simulation needs no real durability, and
	// fsyncs make up most of a small store's run time on a real disk.
	// vfs.Bypass(vfs.OpSync) or vfs.Bypass(vfs.OpSyncDir) is still asked of the FS
	// underneath, so that an errorfs.FS there can fail them.
	SkipRealSync bool
}

// New wraps fs, which must reach the real files (vfs.Default, or
// an errorfs.FS over it): the directories p tracks are read and, by
// Restore, rewritten with the os package. opts may be nil.
func New(fs vfs.FS, opts *Options) *FS {
	p := &FS{fs: fs, done: make(chan struct{}), dirs: make(map[string]*plDir)}
	if opts != nil {
		p.opts = *opts
	}
	return p
}

// Cut turns the power off now: every later operation through p, and
// Bypass, fails with EIO. Operations already under way complete.
func (p *FS) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
}

func (p *FS) cutLocked() {
	if !p.cut {
		p.cut = true
		p.dead.Store(true)
		close(p.done)
		// What the page cache held of each mapped file at this moment is
		// what the kernel may have written back of it; whatever reaches
		// the mapping from now on came after the power went off.
		for _, ino := range p.mapped {
			if !ino.forgotten {
				ino.atCut = ino.contentLocked()
			}
		}
	}
}

// contentLocked reads a mapped inode's current content through one of
// its open files (not the name: it may be gone), or returns what it held
// when its last file was closed. A failed read gives the durable content:
// nothing unsynced is kept.
func (ino *plInode) contentLocked() []byte {
	for f := range ino.open {
		if b, err := readContent(f.File); err == nil {
			return b
		}
	}
	if ino.atClose != nil {
		return ino.atClose
	}
	return ino.durable
}

// readContent reads all of f with ReadAt, leaving its offset alone.
func readContent(f vfs.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if n == len(b) {
		err = nil
	}
	return b[:n], err
}

// CutAfter arms an automatic cut right after the nth mutating operation
// (counted by Ops, from the creation of p or its last Restore): that
// operation completes, every later one fails. If n operations have already
// been made, the power goes off at once. n <= 0 disarms.
//
// The mutating operations are vfs.File.Write, vfs.File.Sync, vfs.File.Truncate,
// Create, Remove, Rename, Link, SyncDir, and Bypass with vfs.OpCreate or
// vfs.OpCommit (a manifest file created or committed by bbolt). The usual test
// counts a workload's operations once with no cut, then cuts at random
// points of later runs.
func (p *FS) CutAfter(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAt = max(n, 0)
	if p.cutAt > 0 && p.ops >= p.cutAt {
		p.cutLocked()
	}
}

// Ops returns the number of mutating operations made through p so far.
func (p *FS) Ops() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ops
}

// IsCut reports whether the power is off.
func (p *FS) IsCut() bool { return p.dead.Load() }

// Done returns a channel that is closed when the power goes off.
func (p *FS) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// cutError is the error of every operation after the cut.
func cutError(op vfs.Op, name string) error {
	return &os.PathError{Op: op.String() + " (power cut)", Path: name, Err: syscall.EIO}
}

// admit lets a mutating operation through, or fails it after the cut; the
// operation that reaches the CutAfter count is the last one let through.
func (p *FS) admitLocked(op vfs.Op, name string) error {
	if p.cut {
		return cutError(op, name)
	}
	p.ops++
	if p.cutAt > 0 && p.ops >= p.cutAt {
		p.cutLocked()
	}
	return nil
}

// split returns the directory of the model for name (reading it from the
// disk on first use) and the base name.
func (p *FS) splitLocked(name string) (*plDir, string) {
	abs, err := filepath.Abs(name)
	if err != nil {
		abs = filepath.Clean(name)
	}
	return p.dirLocked(filepath.Dir(abs)), filepath.Base(abs)
}

// dirLocked returns the model of directory path, reading it from the disk
// the first time: its regular files are durable as they are. Hard links
// within the directory share one file of the model.
func (p *FS) dirLocked(path string) *plDir {
	if d, ok := p.dirs[path]; ok {
		return d
	}
	d := &plDir{path: path, cur: make(map[string]*plInode), dur: make(map[string]*plInode)}
	p.dirs[path] = d
	entries, _ := os.ReadDir(path) // a missing directory is empty
	byIno := make(map[[2]uint64]*plInode)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue // directories and the like are left alone
		}
		var ino *plInode
		if info, err := e.Info(); err == nil {
			if key, ok := fileID(info); ok {
				if ino = byIno[key]; ino == nil {
					ino = p.newInode(plOnDisk)
					byIno[key] = ino
				}
			}
		}
		if ino == nil {
			ino = p.newInode(plOnDisk)
		}
		d.cur[e.Name()], d.dur[e.Name()] = ino, ino
		ino.curLinks++
		ino.durLinks++
	}
	return d
}

func (p *FS) newInode(kind plKind) *plInode {
	p.nextID++
	return &plInode{id: p.nextID, kind: kind}
}

// setCurLocked points name at ino (nil: removes it) in the current
// entries of d.
func (p *FS) setCurLocked(d *plDir, name string, ino *plInode) {
	if old := d.cur[name]; old != nil {
		old.curLinks--
		p.forgetLocked(old)
	}
	if ino == nil {
		delete(d.cur, name)
	} else {
		d.cur[name] = ino
		ino.curLinks++
	}
	d.ver++
}

// forgetLocked drops the content of a file no name can reach any more (a
// descriptor still open on it writes into the void), or puts it in limbo
// while a SyncDir is under way.
func (p *FS) forgetLocked(ino *plInode) {
	switch {
	case ino.curLinks > 0 || ino.durLinks > 0 || ino.forgotten:
	case p.syncDirs > 0:
		p.limbo = append(p.limbo, ino)
	default:
		ino.durable, ino.pending, ino.saved, ino.forgotten = nil, nil, nil, true
	}
}

// load makes ino's content tracked, reading what is on disk at path as
// durable, before the FS changes it.
func (ino *plInode) load(path string) error {
	if ino.kind != plOnDisk {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	ino.kind, ino.durable = plLoaded, b
	return nil
}

// saveBeforeUnlinkLocked keeps the on-disk content of a file whose
// content is not tracked, when the name at path about to go is its last
// current one but a durable name remains (or may, by a SyncDir under
// way): Restore will need it.
func (p *FS) saveBeforeUnlinkLocked(ino *plInode, path string) {
	if ino == nil || ino.kind == plLoaded || ino.curLinks != 1 || ino.durLinks == 0 && p.syncDirs == 0 || ino.hasSaved {
		return
	}
	if b, err := os.ReadFile(path); err == nil {
		ino.saved, ino.hasSaved = b, true
	}
}

func (ino *plInode) record(op plOp) {
	if ino == nil || ino.kind != plLoaded || ino.forgotten || ino.mapped {
		return
	}
	op.seq = ino.nextSeq
	ino.nextSeq++
	ino.pending = append(ino.pending, op)
}

// syncUpTo makes the pending ops before sequence number end durable.
func (ino *plInode) syncUpTo(end uint64) {
	n := 0
	for n < len(ino.pending) && ino.pending[n].seq < end {
		ino.durable = applyOp(ino.durable, ino.pending[n])
		n++
	}
	ino.pending = slices.Delete(ino.pending, 0, n)
}

// applyOp applies a write or a truncation to content b.
func applyOp(b []byte, op plOp) []byte {
	if op.trunc {
		if op.off <= int64(len(b)) {
			return b[:op.off]
		}
		return append(b, make([]byte, op.off-int64(len(b)))...)
	}
	if end := op.off + int64(len(op.data)); end > int64(len(b)) {
		b = append(b, make([]byte, end-int64(len(b)))...)
	}
	copy(b[op.off:], op.data)
	return b
}

// Bypass implements vfs.Bypasser: after the cut it fails with EIO. Before,
// it passes the question to the FS underneath (an errorfs.FS's faults still
// fire) and takes note of what bbolt is about to do: vfs.OpCreate makes a new
// file (not durable until its directory is synced), vfs.OpOpen opens one, and
// both files' content is from then on bbolt's (taken as on disk). vfs.OpCreate
// and vfs.OpCommit are mutating operations, counted for CutAfter.
func (p *FS) Bypass(op vfs.Op, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return cutError(op, name)
	}
	if err := vfs.Bypass(p.fs, op, name); err != nil {
		return err
	}
	switch op {
	case vfs.OpCreate:
		d, base := p.splitLocked(name)
		if d.cur[base] == nil { // else bbolt's O_EXCL open fails
			p.setCurLocked(d, base, p.newInode(plExternal))
		}
		return p.admitLocked(op, name)
	case vfs.OpOpen:
		d, base := p.splitLocked(name)
		if ino := d.cur[base]; ino != nil && ino.kind == plOnDisk {
			ino.kind = plExternal
		}
	case vfs.OpCommit:
		return p.admitLocked(op, name)
	}
	return nil
}

// Create implements vfs.FS: the new file's name is not durable until its
// directory is synced, its content until it is synced.
func (p *FS) Create(name string) (vfs.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, base := p.splitLocked(name)
	if err := p.admitLocked(vfs.OpCreate, name); err != nil {
		return nil, err
	}
	f, err := p.fs.Create(name)
	if err != nil {
		return nil, err
	}
	ino := p.newInode(plLoaded)
	p.setCurLocked(d, base, ino)
	return p.newFile(f, ino, name), nil
}

// Open implements vfs.FS.
func (p *FS) Open(name string) (vfs.File, error) {
	return p.open(name, false)
}

// OpenReadWrite implements vfs.FS. A file found on disk is read into the
// model first, as its durable content.
func (p *FS) OpenReadWrite(name string) (vfs.File, error) {
	return p.open(name, true)
}

func (p *FS) open(name string, write bool) (vfs.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return nil, cutError(vfs.OpOpen, name)
	}
	d, base := p.splitLocked(name)
	var f vfs.File
	var err error
	if write {
		f, err = p.fs.OpenReadWrite(name)
	} else {
		f, err = p.fs.Open(name)
	}
	if err != nil {
		return nil, err
	}
	ino := d.cur[base]
	if ino == nil {
		// Made behind the FS's back (or a directory): take it as durable,
		// as a file found at the first look would be.
		ino = p.newInode(plOnDisk)
		p.setCurLocked(d, base, ino)
		d.dur[base] = ino
		ino.durLinks++
	}
	if write {
		if err := ino.load(name); err != nil {
			f.Close()
			return nil, err
		}
	}
	return p.newFile(f, ino, name), nil
}

// Remove implements vfs.FS: the name comes back at Restore, with the durable
// content, unless the directory is synced after.
func (p *FS) Remove(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, base := p.splitLocked(name)
	if err := p.admitLocked(vfs.OpRemove, name); err != nil {
		return err
	}
	ino := d.cur[base]
	p.saveBeforeUnlinkLocked(ino, name)
	if err := p.fs.Remove(name); err != nil {
		return err
	}
	if ino != nil {
		p.setCurLocked(d, base, nil)
	}
	return nil
}

// Rename implements vfs.FS: undone at Restore unless both directories are
// synced after.
func (p *FS) Rename(oldname, newname string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	od, obase := p.splitLocked(oldname)
	nd, nbase := p.splitLocked(newname)
	if err := p.admitLocked(vfs.OpRename, newname); err != nil {
		return err
	}
	ino, replaced := od.cur[obase], nd.cur[nbase]
	if replaced != ino {
		p.saveBeforeUnlinkLocked(replaced, newname)
	}
	if err := p.fs.Rename(oldname, newname); err != nil {
		return err
	}
	if ino != nil && replaced != ino { // renaming a link onto its twin does nothing
		p.setCurLocked(nd, nbase, ino)
		p.setCurLocked(od, obase, nil)
	}
	return nil
}

// Link implements vfs.FS: the new name is not durable until its directory is
// synced.
func (p *FS) Link(oldname, newname string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	od, obase := p.splitLocked(oldname)
	nd, nbase := p.splitLocked(newname)
	if err := p.admitLocked(vfs.OpLink, newname); err != nil {
		return err
	}
	if err := p.fs.Link(oldname, newname); err != nil {
		return err
	}
	if ino := od.cur[obase]; ino != nil {
		p.setCurLocked(nd, nbase, ino)
	}
	return nil
}

// List implements vfs.FS.
func (p *FS) List(dir string) ([]string, error) {
	if p.dead.Load() {
		return nil, cutError(vfs.OpList, dir)
	}
	return p.fs.List(dir)
}

// MkdirAll implements vfs.FS. Directories it makes are taken as durable.
func (p *FS) MkdirAll(dir string) error {
	if p.dead.Load() {
		return cutError(vfs.OpMkdir, dir)
	}
	return p.fs.MkdirAll(dir)
}

// SyncDir implements vfs.FS: the current entries of dir become its durable
// ones. The real directory sync runs without the lock, so that the
// store's other goroutines go on; what becomes durable is the directory as
// it was when SyncDir began.
func (p *FS) SyncDir(dir string) error {
	p.mu.Lock()
	if err := p.admitLocked(vfs.OpSyncDir, dir); err != nil {
		p.mu.Unlock()
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = filepath.Clean(dir)
	}
	d := p.dirLocked(abs)
	snap, ver, gen := maps.Clone(d.cur), d.ver, p.gen.Load()
	p.syncDirs++
	p.mu.Unlock()

	err = p.syncThrough(vfs.OpSyncDir, dir, func() error { return p.fs.SyncDir(dir) })

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen.Load() != gen {
		return err // Restore came: this p is a new one
	}
	// Unless a newer SyncDir got there first, the snapshot is durable.
	if err == nil && ver >= d.durVer {
		for _, ino := range snap {
			ino.durLinks++
		}
		for _, ino := range d.dur {
			ino.durLinks--
			p.forgetLocked(ino)
		}
		d.dur, d.durVer = snap, ver
	}
	if p.syncDirs--; p.syncDirs == 0 {
		limbo := p.limbo
		p.limbo = nil
		for _, ino := range limbo {
			p.forgetLocked(ino)
		}
	}
	return err
}

// syncThrough runs the real sync, or with SkipRealSync only asks the FS
// underneath whether it would fail.
func (p *FS) syncThrough(op vfs.Op, name string, sync func() error) error {
	if p.opts.SkipRealSync {
		return vfs.Bypass(p.fs, op, name)
	}
	return sync()
}

// Lock implements vfs.FS. A LOCK file it creates is a new, unsynced name.
// Closing the lock releases it even after the cut.
func (p *FS) Lock(name string) (io.Closer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return nil, cutError(vfs.OpLock, name)
	}
	d, base := p.splitLocked(name)
	l, err := p.fs.Lock(name)
	if err != nil {
		return nil, err
	}
	if d.cur[base] == nil {
		p.setCurLocked(d, base, p.newInode(plLoaded))
	}
	return l, nil
}

// LockShared implements vfs.FS.
func (p *FS) LockShared(name string) (io.Closer, error) {
	if p.dead.Load() {
		return nil, cutError(vfs.OpLock, name)
	}
	return p.fs.LockShared(name)
}

// BootID implements BootIDer: every Restore is a reboot, so the ID
// changes with each one (the machine's own ID, altered by the number of
// restores). Recovery then knows that unsynced writes may be lost.
func (p *FS) BootID() [16]byte {
	id := vfs.BootID(p.fs)
	if g := p.gen.Load(); g > 0 {
		x := binary.LittleEndian.Uint64(id[8:]) ^ (g * 0x9E3779B97F4A7C15)
		binary.LittleEndian.PutUint64(id[8:], x)
	}
	return id
}

// Stat implements vfs.FS.
func (p *FS) Stat(name string) (os.FileInfo, error) {
	if p.dead.Load() {
		return nil, cutError(vfs.OpStat, name)
	}
	return p.fs.Stat(name)
}

// plFile is a vfs.File of an FS.
type plFile struct {
	vfs.File
	p    *FS
	ino  *plInode
	name string
	gen  uint64
	pos  atomic.Int64 // the descriptor's offset, where Write writes
}

func (p *FS) newFile(f vfs.File, ino *plInode, name string) *plFile {
	pf := &plFile{File: f, p: p, ino: ino, name: name, gen: p.gen.Load()}
	if ino.mapped {
		ino.open[pf] = struct{}{}
	}
	return pf
}

// MapFd implements vfs.Mapper: it hands out the descriptor of the file
// underneath (if that can be mapped: an OS file, not a fault injector's)
// and from then on reads the file's content from the file itself, at each
// Sync and at the cut, since writes through the mapping bypass Write.
func (f *plFile) MapFd() (uintptr, bool) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if f.p.cut || f.p.gen.Load() != f.gen {
		return 0, false
	}
	fd, ok := vfs.MapFd(f.File)
	if !ok {
		return 0, false
	}
	ino := f.ino
	if !ino.mapped {
		if err := ino.load(f.name); err != nil {
			return 0, false
		}
		ino.mapped, ino.pending, ino.open = true, nil, map[*plFile]struct{}{}
		f.p.mapped = append(f.p.mapped, ino)
		f.p.nMapped++
	}
	ino.open[f] = struct{}{}
	return fd, true
}

// Mapped returns how many files have been mapped for writing through p
// (MapFd) since it was made, Restores included: a test that means to
// cover a store's mapped WAL can check that it was.
func (p *FS) Mapped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nMapped
}

// dead reports whether f may no longer be used: the power is off, or f
// was opened before a Restore.
func (f *plFile) dead() bool { return f.p.dead.Load() || f.p.gen.Load() != f.gen }

// admitLocked is FS.admitLocked for an operation on f.
func (f *plFile) admitLocked(op vfs.Op) error {
	if f.p.gen.Load() != f.gen {
		return cutError(op, f.name)
	}
	return f.p.admitLocked(op, f.name)
}

func (f *plFile) Read(b []byte) (int, error) {
	if f.dead() {
		return 0, cutError(vfs.OpRead, f.name)
	}
	n, err := f.File.Read(b)
	f.pos.Add(int64(n))
	return n, err
}

func (f *plFile) ReadAt(b []byte, off int64) (int, error) {
	if f.dead() {
		return 0, cutError(vfs.OpRead, f.name)
	}
	return f.File.ReadAt(b, off)
}

// Write records the bytes written as unsynced.
func (f *plFile) Write(b []byte) (int, error) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if err := f.admitLocked(vfs.OpWrite); err != nil {
		return 0, err
	}
	off := f.pos.Load()
	n, err := f.File.Write(b)
	if n > 0 {
		f.ino.record(plOp{off: off, data: slices.Clone(b[:n])})
		f.pos.Add(int64(n))
	}
	return n, err
}

// WriteAt records the bytes written at off as unsynced; the file's offset
// is left alone. It fails if the file underneath has no WriteAt.
func (f *plFile) WriteAt(b []byte, off int64) (int, error) {
	wa, ok := f.File.(io.WriterAt)
	if !ok {
		return 0, &os.PathError{Op: "writeat", Path: f.name, Err: syscall.ENOTSUP}
	}
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if err := f.admitLocked(vfs.OpWrite); err != nil {
		return 0, err
	}
	n, err := wa.WriteAt(b, off)
	if n > 0 {
		f.ino.record(plOp{off: off, data: slices.Clone(b[:n])})
	}
	return n, err
}

// Sync makes the writes and truncations made before it began durable.
// The real fsync runs without the lock.
func (f *plFile) Sync() error {
	f.p.mu.Lock()
	if err := f.admitLocked(vfs.OpSync); err != nil {
		f.p.mu.Unlock()
		return err
	}
	end, mapped := f.ino.nextSeq, f.ino.mapped
	f.p.mu.Unlock()

	// A mapped file's content is read before the fsync starts: what the
	// mapping held then is what the fsync (which also flushes the
	// mapping's dirty pages) makes durable.
	var snap []byte
	if mapped {
		var err error
		if snap, err = readContent(f.File); err != nil {
			return err
		}
	}
	if err := f.p.syncThrough(vfs.OpSync, f.name, f.File.Sync); err != nil {
		return err // what reached the disk is unknown: leave it unsynced
	}
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if f.p.gen.Load() == f.gen && !f.ino.forgotten {
		if mapped {
			f.ino.durable = snap
		} else {
			f.ino.syncUpTo(end)
		}
	}
	return nil
}

// Truncate records an unsynced truncation.
func (f *plFile) Truncate(size int64) error {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if err := f.admitLocked(vfs.OpTruncate); err != nil {
		return err
	}
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	f.ino.record(plOp{trunc: true, off: size})
	return nil
}

func (f *plFile) Stat() (os.FileInfo, error) {
	if f.dead() {
		return nil, cutError(vfs.OpStat, f.name)
	}
	return f.File.Stat()
}

// Close closes the descriptor even after the cut, and then reports no
// error: closing does no I/O that a power cut could undo, and a test must
// be able to release every descriptor of the store it abandons.
func (f *plFile) Close() error {
	f.p.mu.Lock()
	if _, ok := f.ino.open[f]; ok {
		if len(f.ino.open) == 1 {
			f.ino.atClose, _ = readContent(f.File)
		}
		delete(f.ino.open, f)
	}
	f.p.mu.Unlock()
	err := f.File.Close()
	if f.dead() {
		return nil
	}
	return err
}

// Unwrap returns the file underneath, for Fd: segments can still be
// mapped. After Restore the file a mapping shows may be gone.
func (f *plFile) Unwrap() vfs.File { return f.File }

// RestoreStats tells what Restore changed on disk.
type RestoreStats struct {
	// Removed counts names removed: created, linked or renamed to
	// without a sync of their directory.
	Removed int
	// Revived counts names brought back: removed or renamed away
	// without a sync of their directory.
	Revived int
	// RolledBack counts files whose content was rewritten because they
	// had unsynced writes.
	RolledBack int
	// Kept and Lost count the bytes of unsynced writes that the
	// Writeback mode kept and lost.
	Kept, Lost int64
}

// Restore simulates the power coming back: it cuts the power if that has
// not happened, then rewrites the directories p has seen to what a disk
// would hold after the cut: each durable name, pointing at its file with
// the file's durable content plus, by mode, none, a prefix or a subset of
// its unsynced writes; every other name removed. Files of bbolt (see
// Bypass) and files found on disk and never changed are taken as they are
// on disk. The random choices are a function of seed and the recorded
// history: each file draws from its own generator, seeded with seed and
// the file's name (its base name, so that the same history in another
// directory gives the same result).
//
// Call Restore only once nothing writes the files any more: the store
// closed (or abandoned with all its goroutines stopped). Afterwards p
// starts afresh on the restored directories (files durable as they are,
// no cut, Ops at zero), and every file opened before fails.
func (p *FS) Restore(mode Writeback, seed uint64) (RestoreStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
	var st RestoreStats
	err := p.restoreLocked(mode, seed, &st)

	p.gen.Add(1)
	p.dirs = make(map[string]*plDir)
	p.cut, p.done, p.ops, p.cutAt = false, make(chan struct{}), 0, 0
	p.syncDirs, p.limbo, p.mapped = 0, nil, nil
	p.dead.Store(false)
	return st, err
}

// plName is a name in a directory of the model.
type plName struct {
	d    *plDir
	name string
}

func (n plName) path() string { return filepath.Join(n.d.path, n.name) }

func (p *FS) restoreLocked(mode Writeback, seed uint64, st *RestoreStats) error {
	dirs := make([]*plDir, 0, len(p.dirs))
	for _, d := range p.dirs {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b *plDir) int { return cmp.Compare(a.path, b.path) })

	// The files the durable names point at, each with its durable and
	// current names, in a deterministic order.
	type target struct {
		ino      *plInode
		dur, cur []plName
	}
	targets := make(map[*plInode]*target)
	var order []*target
	for _, d := range dirs {
		for _, name := range sortedKeys(d.dur) {
			ino := d.dur[name]
			t := targets[ino]
			if t == nil {
				t = &target{ino: ino}
				targets[ino] = t
				order = append(order, t)
			}
			t.dur = append(t.dur, plName{d, name})
		}
	}
	for _, d := range dirs {
		for _, name := range sortedKeys(d.cur) {
			if t := targets[d.cur[name]]; t != nil {
				t.cur = append(t.cur, plName{d, name})
			}
		}
	}

	// First decide every file's content, reading from the disk while the
	// current names are still there.
	type plan struct {
		*target
		anchor  *plName // a durable name that is current for the file too
		content []byte  // nil: the anchor's content stays as it is
		skip    bool    // nothing to restore it from
	}
	plans := make([]plan, 0, len(order))
	for _, t := range order {
		pl := plan{target: t}
		for _, dn := range t.dur {
			if dn.d.cur[dn.name] == t.ino {
				pl.anchor = &dn
				break
			}
		}
		ino := t.ino
		switch {
		case ino.mapped:
			// Always rewritten: the mapping may have been written after
			// the cut.
			rng := rand.New(rand.NewPCG(seed, hashString(t.dur[0].name)))
			var kept, lost int64
			pl.content, kept, lost = writebackPages(ino.durable, ino.atCut, mode, rng)
			st.Kept += kept
			st.Lost += lost
			if pl.anchor != nil && !bytes.Equal(ino.durable, ino.atCut) {
				st.RolledBack++
			}
			if pl.content == nil {
				pl.content = []byte{}
			}
		case ino.kind == plLoaded:
			if pl.anchor == nil || len(ino.pending) > 0 {
				rng := rand.New(rand.NewPCG(seed, hashString(t.dur[0].name)))
				var kept, lost int64
				pl.content, kept, lost = writeback(ino.durable, ino.pending, mode, rng)
				st.Kept += kept
				st.Lost += lost
				if pl.anchor != nil {
					st.RolledBack++
				}
				if pl.content == nil {
					pl.content = []byte{}
				}
			}
		case pl.anchor != nil:
			// On disk as it is.
		case len(t.cur) > 0:
			b, err := os.ReadFile(t.cur[0].path())
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("vfs: restore: %w", err)
			}
			pl.content, pl.skip = b, err != nil
			if pl.content == nil {
				pl.content = []byte{}
			}
		case ino.hasSaved:
			pl.content = ino.saved
		default:
			pl.skip = true // announced by Bypass but never made
		}
		plans = append(plans, pl)
	}

	// Remove the names that are not durable, or point elsewhere.
	for _, d := range dirs {
		for _, name := range sortedKeys(d.cur) {
			if d.dur[name] == d.cur[name] {
				continue
			}
			if err := os.Remove(filepath.Join(d.path, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("vfs: restore: %w", err)
			}
			st.Removed++
		}
	}

	// Write the files and bring back their names.
	for _, pl := range plans {
		if pl.skip {
			continue
		}
		first := pl.anchor
		if first == nil {
			first = &pl.dur[0]
		}
		if pl.content != nil {
			if err := os.WriteFile(first.path(), pl.content, 0o644); err != nil {
				return fmt.Errorf("vfs: restore: %w", err)
			}
		}
		for _, dn := range pl.dur {
			if dn == *first || dn.d.cur[dn.name] == pl.ino {
				continue
			}
			if err := os.Link(first.path(), dn.path()); err != nil {
				return fmt.Errorf("vfs: restore: %w", err)
			}
		}
		for _, dn := range pl.dur {
			if dn.d.cur[dn.name] != pl.ino {
				st.Revived++
			}
		}
	}
	return nil
}

// writeback returns durable with the unsynced ops pending applied as mode
// says, and how many bytes of writes it kept and lost.
func writeback(durable []byte, pending []plOp, mode Writeback, rng *rand.Rand) (b []byte, kept, lost int64) {
	b = slices.Clone(durable)
	var total int64
	for _, op := range pending {
		total += int64(len(op.data))
	}
	switch mode {
	case WritebackPrefix:
		// Truncations count as one unit, so that a prefix can end just
		// before or just after one.
		units := total
		for _, op := range pending {
			if op.trunc {
				units++
			}
		}
		budget := rng.Int64N(units + 1)
		for _, op := range pending {
			if budget == 0 {
				break
			}
			if op.trunc {
				b = applyOp(b, op)
				budget--
				continue
			}
			n := min(budget, int64(len(op.data)))
			op.data = op.data[:n]
			b = applyOp(b, op)
			kept += n
			budget -= n
		}
	case WritebackSubset:
		// Cut the writes into pieces at page boundaries; each page keeps
		// a random prefix of its pieces, in the order they were written.
		type piece struct {
			op   int   // index in pending
			page int64 // page index in the file
			op2  plOp
		}
		var pieces []piece
		touches := make(map[int64]int) // pieces per page
		for i, op := range pending {
			if op.trunc {
				continue
			}
			for off, data := op.off, op.data; len(data) > 0; {
				n := min(int64(len(data)), pageSize-off%pageSize)
				pieces = append(pieces, piece{i, off / pageSize, plOp{off: off, data: data[:n]}})
				touches[off/pageSize]++
				off, data = off+n, data[n:]
			}
		}
		pages := make([]int64, 0, len(touches))
		for pg := range touches {
			pages = append(pages, pg)
		}
		slices.Sort(pages) // draw in a fixed order
		keep := make(map[int64]int, len(pages))
		for _, pg := range pages {
			keep[pg] = rng.IntN(touches[pg] + 1)
		}
		next := 0
		for i, op := range pending {
			if op.trunc {
				if rng.IntN(2) == 0 {
					b = applyOp(b, op)
				}
				continue
			}
			for ; next < len(pieces) && pieces[next].op == i; next++ {
				pc := pieces[next]
				if keep[pc.page] > 0 {
					keep[pc.page]--
					b = applyOp(b, pc.op2)
					kept += int64(len(pc.op2.data))
				}
			}
		}
	}
	return b, kept, total - kept
}

// writebackPages returns what a mapped file holds after the power comes
// back, given its content at its last sync (durable) and at the cut
// (atCut), and how many bytes of the pages that differ it kept and lost.
// The kernel writes a mapping's dirty pages back as it pleases, so, as
// for write(2) (see Writeback), each mode keeps of the pages that differ:
// none, the first ones in file order, or a random subset. The file's
// length is the durable one, or with WritebackSubset (or a prefix that
// kept every page) the length at the cut, at random: a file's size is
// metadata, written back on its own. Unlike the pages of unsynced
// write(2) calls, a page is kept as of the cut or not at all: the model
// does not see the moments between.
func writebackPages(durable, atCut []byte, mode Writeback, rng *rand.Rand) (b []byte, kept, lost int64) {
	page := func(c []byte, i int) []byte {
		lo := min(i*pageSize, len(c))
		return c[lo:min(lo+pageSize, len(c))]
	}
	var changed []int
	var total int64
	for i := 0; i*pageSize < max(len(durable), len(atCut)); i++ {
		if cur := page(atCut, i); !bytes.Equal(page(durable, i), cur) {
			changed = append(changed, i)
			total += int64(len(cur))
		}
	}
	keep := make([]bool, len(changed))
	size := len(durable)
	switch mode {
	case WritebackPrefix:
		k := rng.IntN(len(changed) + 1)
		for i := range k {
			keep[i] = true
		}
		if k == len(changed) {
			size = len(atCut)
		}
	case WritebackSubset:
		for i := range keep {
			keep[i] = rng.IntN(2) == 0
		}
		if rng.IntN(2) == 0 {
			size = len(atCut)
		}
	}
	b = slices.Clone(durable)
	if size <= len(b) {
		b = b[:size]
	} else {
		b = append(b, make([]byte, size-len(b))...)
	}
	for j, i := range changed {
		if !keep[j] {
			continue
		}
		cur := page(atCut, i)
		if lo := i * pageSize; lo < size {
			n := copy(b[lo:min(lo+len(cur), size)], cur)
			kept += int64(n)
		}
	}
	return b, kept, total - kept
}

func sortedKeys(m map[string]*plInode) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
