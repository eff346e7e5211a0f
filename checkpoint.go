package bloomkv

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/vfs"
)

// ErrCheckpointExists is returned by Checkpoint when the destination holds
// files: a checkpoint is made into a new or empty directory only.
var ErrCheckpointExists = errors.New("bloomkv: checkpoint destination is not empty")

// Checkpoint writes a consistent copy of the store into dir, a directory
// that does not exist or is empty, while reads and writes go on. The copy
// holds exactly the writes acknowledged before some moment during the call
// (a prefix of every writer's history, batches whole) and opens as a store
// of its own. Segments, which never change, are hard-linked where the file
// system allows and copied otherwise; the WALs holding writes not yet in a
// segment are copied up to that moment, and a new manifest describes the
// copy. Everything is synced before Checkpoint returns. A dir inside the
// store's own directory, by any name (symbolic links included), is
// refused (an error matching fs.ErrInvalid).
//
// A failed Checkpoint removes the files it wrote, and dir if it made it,
// so that it may be tried again at the same place. Should that removal
// fail too, its error is joined to the first, and the partial copy left
// in dir is never a store that opens as complete (the manifest is
// written last): remove it.
func (db *DB) Checkpoint(dir string) error {
	if inside, err := within(db.fs, db.dir, dir); err != nil || inside {
		if err == nil {
			err = fs.ErrInvalid
		}
		return fmt.Errorf("bloomkv: checkpoint: %s is inside the store's directory %s: %w", dir, db.dir, err)
	}
	if db.isClosed.Load() {
		return ErrClosed // before dir is made (captureCheckpoint checks again)
	}
	made, err := checkEmptyDest(db.fs, dir)
	if err != nil {
		return err
	}
	cp, err := db.captureCheckpoint()
	if err != nil {
		return errors.Join(err, removeDest(db.fs, dir, nil, made))
	}
	defer cp.release()
	if err := cp.write(db, dir); err != nil {
		return fmt.Errorf("bloomkv: checkpoint: %w", errors.Join(err, removeDest(db.fs, dir, cp.names(), made)))
	}
	return nil
}

// removeDest undoes a Checkpoint that failed: it removes the files it
// may have written in dir (names), and dir if the Checkpoint made it, so
// that the caller may try again at the same place, which an empty
// directory or none allows and a partial copy would refuse
// (ErrCheckpointExists). A file not there was never written. Its error,
// if any, is joined to the one that failed the Checkpoint.
func removeDest(fsys vfs.FS, dir string, names []string, made bool) error {
	var errs []error
	for _, name := range names {
		if err := fsys.Remove(pathIn(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if made && len(errs) == 0 {
		if err := fsys.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the partial checkpoint: %w", err)
	}
	return nil
}

// within reports whether path is dir or lies below it (a checkpoint there
// would copy the store into itself, and the next Open would find foreign
// files in it): by their absolute, cleaned names, and then by the files
// themselves, where fsys's Stat tells them apart (the operating system's
// does), so that a symbolic link to dir or to a directory above it, in
// either name, does not hide it. The second test starts at the longest
// prefix of path, as given, that exists, and climbs by appending "..",
// which the file system resolves: cleaning the name first would take
// "link/.." for the directory holding link, where the file system goes to
// the parent of link's target, which may be dir.
func within(fsys vfs.FS, dir, path string) (bool, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	p, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if rel, err := filepath.Rel(d, p); err == nil && // else on another volume
		(rel == "." || !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && rel != "..") {
		return true, nil
	}
	di, err := fsys.Stat(d)
	if err != nil || !os.SameFile(di, di) {
		return false, nil // no store to compare with, or no file identities
	}
	cur := path
	if !filepath.IsAbs(cur) {
		wd, err := os.Getwd()
		if err != nil {
			return false, err
		}
		cur = wd + string(filepath.Separator) + cur
	}
	fi, err := fsys.Stat(cur)
	for err != nil {
		i := strings.LastIndexByte(cur, filepath.Separator)
		if i <= 0 {
			return false, nil // below the root, nothing of it exists
		}
		cur = cur[:i]
		fi, err = fsys.Stat(cur)
	}
	for range maxClimb {
		if os.SameFile(di, fi) {
			return true, nil
		}
		up := strings.TrimSuffix(cur, string(filepath.Separator)) + string(filepath.Separator) + ".."
		ui, err := fsys.Stat(up)
		if err != nil || os.SameFile(ui, fi) {
			return false, nil // the root: its ".." is itself
		}
		cur, fi = up, ui
	}
	return false, nil
}

// maxClimb bounds within's climb to the root, in directories, where a
// file system's Stat would not refuse the growing name first (Linux's
// PATH_MAX, 4,096 bytes, stops it at about 1,360 levels).
const maxClimb = 4096

// checkEmptyDest creates dir, or accepts it if it exists and is empty.
func checkEmptyDest(fsys vfs.FS, dir string) (made bool, err error) {
	entries, err := fsys.List(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err, made = fsys.MkdirAll(dir), true
	case err == nil && len(entries) > 0:
		return false, fmt.Errorf("%w: %s holds %s", ErrCheckpointExists, dir, entries[0])
	}
	if err != nil {
		return false, fmt.Errorf("bloomkv: checkpoint: %w", err)
	}
	return made, nil
}

// checkpoint is what Checkpoint captured at its moment: the live segments
// (referenced, so no compaction removes them), the complete WALs of frozen
// memtables and the active WAL up to a length, each open so that a flush
// removing them meanwhile does not matter.
type checkpoint struct {
	segments []*segHandle
	logs     []cpLog
	flushed  uint64 // every write up to here is in segments
}

type cpLog struct {
	num  uint64
	file vfs.File
	size int64
}

// captureCheckpoint fixes the checkpoint's moment: no commit is in
// progress, and the segments and memtables are read under db.mu, where a
// flush moves a memtable into a segment in one step.
func (db *DB) captureCheckpoint() (*checkpoint, error) {
	cp := &checkpoint{}
	var err error
	db.commit.exclusive(db, func() {
		// Every group written is published first, so the WAL captured
		// holds no write whose fsync may still fail; and a WAL a rotation
		// replaced is sealed first (acquireSync waits for sealLoop), so
		// that its copy, read after a reboot, is known whole.
		if err = db.commit.syncQueued(db); err != nil {
			return
		}
		db.mu.Lock()
		defer db.mu.Unlock()
		if db.closed {
			err = ErrClosed
			return
		}
		cp.segments = db.refSegmentsLocked(0, len(db.segments))
		for _, s := range cp.segments {
			// Flushes run in order, so every write up to the newest
			// segment's last sequence number is in the segments, and
			// every write in a WAL below is newer.
			cp.flushed = max(cp.flushed, s.meta.MaxSeq)
		}
		err = db.captureLogsLocked(cp)
	})
	if err != nil {
		cp.release()
		return nil, err
	}
	return cp, nil
}

// captureLogsLocked opens the WALs the checkpoint needs: the frozen
// memtables' and the active one (its length now), or, read-only, the
// replayed ones.
func (db *DB) captureLogsLocked(cp *checkpoint) error {
	var nums []uint64
	if db.opts.ReadOnly {
		nums = db.replayedLogs
	} else {
		for _, f := range db.imm {
			nums = append(nums, f.logNum)
		}
		nums = append(nums, db.logNum)
	}
	for i, num := range nums {
		f, err := db.fs.Open(db.path(base.WALFileName(num)))
		if err != nil {
			return fmt.Errorf("bloomkv: checkpoint: %w", err)
		}
		size := int64(-1) // all of it
		if i == len(nums)-1 && !db.opts.ReadOnly {
			size = db.logw.Size()
		}
		cp.logs = append(cp.logs, cpLog{num: num, file: f, size: size})
	}
	return nil
}

func (cp *checkpoint) release() {
	unrefAll(cp.segments)
	for _, l := range cp.logs {
		l.file.Close()
	}
}

// names returns the names of the files write makes in the checkpoint's
// directory.
func (cp *checkpoint) names() []string {
	names := []string{base.ManifestName}
	for _, s := range cp.segments {
		names = append(names, s.name)
	}
	for _, l := range cp.logs {
		names = append(names, base.WALFileName(l.num))
	}
	return names
}

// write puts the captured files into dir, then the manifest, then syncs
// the directory.
func (cp *checkpoint) write(db *DB, dir string) error {
	var adds []base.SegmentMeta
	maxNum := uint64(0)
	for _, s := range cp.segments {
		if err := linkOrCopy(db.fs, s.path, pathIn(dir, s.name), s.file, -1); err != nil {
			return err
		}
		adds = append(adds, s.meta)
		maxNum = max(maxNum, s.meta.FileNum)
	}
	for _, l := range cp.logs {
		name := base.WALFileName(l.num)
		if err := copyFile(db.fs, l.file, pathIn(dir, name), l.size); err != nil {
			return err
		}
		maxNum = max(maxNum, l.num)
	}
	next := maxNum + 1
	e := manifest.Edit{Add: adds, FlushedSeq: &cp.flushed, NextFileNum: &next,
		PrefixExtractor: db.manifest.State().PrefixExtractor}
	// A store opened read-only may have no WAL at all (one whose creation
	// a crash cut short before its first WAL was committed): its copy
	// then keeps log number 0, which names no WAL, as the source's does.
	if len(cp.logs) > 0 {
		e.LogNum = &cp.logs[0].num
	}
	// The manifest is made whole under its temporary name and linked into
	// place: a Checkpoint killed before leaves no MANIFEST, which Open
	// refuses as ErrNotStore, never one that names none of the files.
	m, err := manifest.CreateWith(db.fs, pathIn(dir, base.ManifestName), e)
	if err != nil {
		return err
	}
	return errors.Join(m.Close(), db.fs.SyncDir(dir))
}

// linkOrCopy hard-links a segment into the checkpoint (segments never
// change), or copies it from its open file where links are not possible.
func linkOrCopy(fsys vfs.FS, src, dst string, f vfs.File, size int64) error {
	if err := fsys.Link(src, dst); err == nil {
		return nil
	}
	return copyFile(fsys, f, dst, size)
}

// copyFile copies the first size bytes of f (all of it if size < 0) to a
// new file dst and syncs it.
func copyFile(fsys vfs.FS, f vfs.File, dst string, size int64) error {
	if size < 0 {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		size = st.Size()
	}
	out, err := fsys.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.NewSectionReader(f, 0, size))
	if err == nil {
		err = out.Sync()
	}
	return errors.Join(err, out.Close())
}
