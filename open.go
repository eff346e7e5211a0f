package bloomkv

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/memtable"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/wal"
)

// Open opens the store in dir, creating it if dir does not exist or is
// empty. nil opts means DefaultOptions(). It fails with ErrInvalidOptions
// for options out of range, with fs.ErrInvalid for an empty dir, with
// ErrLocked if the store is open elsewhere,
// with ErrNotStore if dir holds other files but no store, and with an
// error matching ErrCorrupt (a *base.CorruptError naming the file and
// offset) if a file of the store is damaged or the files and the manifest
// disagree. A file of the store that is not a regular file (a directory,
// a named pipe, a device) gives an error matching vfs.ErrNotRegular under
// the operating system's file system, without waiting on the pipe.
//
// Open is transactional: until recovery is known to succeed it only reads
// (and creates the LOCK file of an existing store that lacks one). It
// replays the WALs that hold writes not yet in a segment, writes those to a
// new segment, starts a new WAL and commits all of that in one manifest
// edit; only then does it delete the files that edit made obsolete and the
// leftovers of an interrupted flush or compaction. A failing Open removes
// what it created and leaves every other file as it found it.
func Open(dir string, opts *Options) (*DB, error) {
	if dir == "" {
		return nil, fmt.Errorf("bloomkv: open: empty directory name: %w", fs.ErrInvalid)
	}
	o, err := opts.validated()
	if err != nil {
		return nil, err
	}
	recoverFn, lock := (*DB).recover, lockDir
	if o.ReadOnly {
		recoverFn, lock = (*DB).recoverReadOnly, lockDirShared
	} else if err := prepareDir(o.FS, dir); err != nil {
		return nil, err
	}
	l, err := lock(o.FS, dir)
	if err != nil {
		return nil, err
	}
	db := newDB(dir, o, l)
	if err := recoverFn(db); err != nil {
		if db.manifest != nil {
			err = fileLimitHint(err, len(db.manifest.State().Segments))
		}
		db.closeFiles()
		return nil, err
	}
	return db, nil
}

func newDB(dir string, o Options, lock io.Closer) *DB {
	db := &DB{
		dir:         dir,
		fs:          o.FS,
		bootID:      vfs.BootID(o.FS),
		opts:        o,
		logger:      o.Logger,
		lockFile:    lock,
		cache:       segment.NewCache(o.BlockCacheSize),
		frozenLimit: frozenLimit(o.MemtableSize),
		// Tiers come from the manifest's Tier field (flush = 0, merge =
		// inputs' tier + 1), not from file sizes, which depend on how well
		// the data compresses.
		policy:       compaction.SizeTiered{FanIn: o.CompactionFanIn},
		flushRetry:   retryState{what: "flush", then: retryingThen},
		compactRetry: retryState{what: "compaction", then: retryingThen},
		walRetry: retryState{what: "WAL creation",
			then: "the writes that need a new WAL fail with the error, and the next such write tries again"},
		retryMin: minRetryDelay,
		retryMax: maxRetryDelay,
	}
	db.cond = sync.NewCond(&db.mu)
	db.closer.idle.L = &db.closer.mu
	db.commit.idle.L = &db.commit.mu
	db.commit.pidle.L = &db.commit.pmu
	return db
}

// prepareDir checks, before anything is locked or created, that dir is a
// store or may become one: it creates a missing dir, and refuses (with
// ErrNotStore, touching nothing) a directory holding anything but a store.
func prepareDir(fsys vfs.FS, dir string) error {
	entries, err := fsys.List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		err = fsys.MkdirAll(dir)
	}
	if err != nil {
		return fmt.Errorf("bloomkv: %w", err)
	}
	return checkNewStore(fsys, dir, entries)
}

// checkNewStore returns nil if entries (dir's listing) hold a MANIFEST or
// could only be the beginning of a store: nothing, a LOCK file, or the
// MANIFEST.tmp that an Open creating the store left when it was
// interrupted (recognised by its content: see manifest.IsCreateLeftover).
func checkNewStore(fsys vfs.FS, dir string, entries []string) error {
	if slices.Contains(entries, base.ManifestName) {
		return nil
	}
	for _, name := range entries {
		switch name {
		case base.LockName:
			continue
		case base.ManifestTmpName:
			if manifest.IsCreateLeftover(fsys, pathIn(dir, name)) {
				continue
			}
			return fmt.Errorf("%w: %s holds %s but no %s (if it is left from an interrupted store creation, remove it)",
				ErrNotStore, dir, name, base.ManifestName)
		}
		return fmt.Errorf("%w: %s holds %s but no %s", ErrNotStore, dir, name, base.ManifestName)
	}
	return nil
}

// recover loads the manifest, checks it against the files, opens the live
// segments, replays the WALs and starts a new WAL; see Open.
func (db *DB) recover() error {
	files, replayed, err := db.load(db.openManifest)
	if err != nil {
		return err
	}
	if err := db.checkPrefixExtractor(db.manifest.State(), replayed); err != nil {
		return err
	}
	db.manifest.SkipTo(files.maxNum + 1)
	if err := db.startFresh(replayed); err != nil {
		return err
	}
	db.removeObsolete(files)
	return nil
}

// recoverReadOnly is recover for Options.ReadOnly: the same checks of the
// manifest against the files, the same replay, but into memory only.
func (db *DB) recoverReadOnly() error {
	files, replayed, err := db.load(db.openManifestReadOnly)
	if err != nil {
		return err
	}
	if err := db.checkPrefixExtractor(db.manifest.State(), replayed); err != nil {
		return err
	}
	db.replayedLogs = files.logs
	db.visibleSeq.Store(db.lastSeq)
	db.mu.Lock()
	db.installLocked(shapeEdit{mem: replayed}) // the segments load opened, nothing added
	db.mu.Unlock()
	return nil
}

// load is what both recoveries share, and it only reads: open the manifest
// (with openManifest), check the directory's files against it, open the
// live segments and replay the WALs into a memtable.
func (db *DB) load(openManifest func([]string) (*manifest.Manifest, error)) (storeFiles, *memtable.Memtable, error) {
	entries, err := db.fs.List(db.dir)
	if err != nil {
		return storeFiles{}, nil, fmt.Errorf("bloomkv: %w", err)
	}
	if db.manifest, err = openManifest(entries); err != nil {
		return storeFiles{}, nil, err
	}
	state := db.manifest.State()
	files, err := classifyFiles(entries, state)
	if err != nil {
		return storeFiles{}, nil, fmt.Errorf("bloomkv: %w", err)
	}
	if err := db.loadSegments(state); err != nil {
		return storeFiles{}, nil, err
	}
	replayed, err := db.replay(files.logs, state.FlushedSeq)
	return files, replayed, err
}

// openManifestReadOnly opens an existing manifest for reading only.
func (db *DB) openManifestReadOnly(entries []string) (*manifest.Manifest, error) {
	if !slices.Contains(entries, base.ManifestName) {
		return nil, fmt.Errorf("%w: %s has no %s", ErrNotStore, db.dir, base.ManifestName)
	}
	m, err := waitManifestLock(func() (*manifest.Manifest, error) {
		return manifest.OpenReadOnly(db.fs, db.path(base.ManifestName))
	})
	switch {
	case errors.Is(err, manifest.ErrLocked):
		return nil, manifestLocked(db.dir)
	case err != nil:
		return nil, fmt.Errorf("bloomkv: open manifest: %w", err)
	}
	return m, nil
}

// loadSegments opens the live segments and sets lastSeq from them.
func (db *DB) loadSegments(state manifest.State) error {
	for _, meta := range state.Segments {
		s, err := db.loadSegment(meta)
		if err != nil {
			return err
		}
		db.segments = append(db.segments, s)
	}
	db.lastSeq = state.FlushedSeq
	for _, s := range db.segments {
		db.lastSeq = max(db.lastSeq, s.meta.MaxSeq)
	}
	db.loadCoverage()
	return nil
}

// manifestLocked is the error for a MANIFEST that another opener holds,
// though this one got the directory's LOCK (a store copied with its
// MANIFEST open, or a LOCK file removed under a running DB).
func manifestLocked(dir string) error {
	return fmt.Errorf("%w: %s: its %s is open elsewhere", ErrLocked, dir, base.ManifestName)
}

// manifestLockWait bounds how long an opener that holds the directory's
// LOCK waits for the MANIFEST's own lock (bbolt's flock on it).
//
// Holding LOCK, no live DB can hold the MANIFEST: a DB holds LOCK until
// it has closed the MANIFEST. But a process that died may still: its open
// files are closed as it exits, and LOCK's flock goes with them, while
// the MANIFEST stays referenced by bbolt's mapping of it, and so keeps its
// flock, until the kernel tears the dead process's address space down.
// That happens as it exits unless another process holds a reference to
// that address space (reading /proc/PID/mem, smaps or stat, as ps, top
// and monitoring agents do): then it happens when that process lets go,
// after the dead one has been reaped. A restart right after a crash met
// that as "locked by another opener" (TestReopenWhileTornDown reproduces
// it); it lasts as long as the reader's read, well under this bound.
const manifestLockWait = 5 * time.Second

// waitManifestLock calls open, which waits briefly for the MANIFEST's
// lock itself, until it returns anything but manifest.ErrLocked or
// manifestLockWait has passed.
func waitManifestLock(open func() (*manifest.Manifest, error)) (*manifest.Manifest, error) {
	deadline := time.Now().Add(manifestLockWait)
	for {
		m, err := open()
		if !errors.Is(err, manifest.ErrLocked) || time.Now().After(deadline) {
			return m, err
		}
	}
}

// openManifest opens the manifest, or creates it for a new store
// (manifest.Create builds it under a temporary name and links it into
// place, so a crash during creation never leaves a half-made MANIFEST).
func (db *DB) openManifest(entries []string) (*manifest.Manifest, error) {
	m, err := waitManifestLock(func() (*manifest.Manifest, error) {
		return manifest.Open(db.fs, db.path(base.ManifestName))
	})
	if err == nil {
		return m, nil
	}
	if errors.Is(err, manifest.ErrLocked) {
		return nil, manifestLocked(db.dir)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("bloomkv: open manifest: %w", err)
	}
	// Checked again under the lock: another process may have made a store
	// here since prepareDir looked.
	if err := checkNewStore(db.fs, db.dir, entries); err != nil {
		return nil, err
	}
	if m, err = manifest.Create(db.fs, db.path(base.ManifestName)); err != nil {
		return nil, fmt.Errorf("bloomkv: create manifest: %w", err)
	}
	return m, nil
}

// storeFiles sorts a store directory's WAL and segment files by what
// recovery does with them.
type storeFiles struct {
	logs     []uint64 // WALs to replay, oldest first
	obsolete []string // WALs below the log number: flushed, left by a crash before their removal
	orphans  []string // segments the manifest does not list: outputs of an interrupted flush or compaction
	maxNum   uint64   // the largest file number present or named by the manifest
}

// classifyFiles checks the directory's files against the manifest and
// sorts them. It changes nothing. Files the manifest cannot explain are
// corruption, never garbage to delete: a file numbered at or above
// NextFileNum (numbers are committed before files bear them), a live
// segment that is missing, a missing WAL at the log number (it is created
// before the commit that names it). Each of these means the manifest is
// older than the files — a bbolt meta page fell back to the previous commit
// — or a file is not the store's, and opening anyway would lose writes.
func classifyFiles(entries []string, st manifest.State) (storeFiles, error) {
	var files storeFiles
	live := make(map[uint64]bool, len(st.Segments))
	for _, s := range st.Segments {
		live[s.FileNum] = true
		files.maxNum = max(files.maxNum, s.FileNum)
	}
	files.maxNum = max(files.maxNum, st.LogNum)
	present := make(map[string]bool, len(entries))
	for _, name := range entries {
		num, ext, ok := base.ParseFileName(name)
		if !ok {
			continue
		}
		if err := checkFileNum(name, num, st); err != nil {
			return storeFiles{}, err
		}
		present[name] = true
		files.maxNum = max(files.maxNum, num)
		switch {
		case ext == base.WALExt && num >= st.LogNum:
			files.logs = append(files.logs, num)
		case ext == base.WALExt:
			files.obsolete = append(files.obsolete, name)
		case !live[num]:
			files.orphans = append(files.orphans, name)
		}
	}
	for _, s := range st.Segments {
		if name := base.SegmentFileName(s.FileNum); !present[name] {
			return storeFiles{}, base.Corruptf(name, -1, "missing, though %s lists it as live (the manifest is older than the files, or the file was removed)", base.ManifestName)
		}
	}
	if name := base.WALFileName(st.LogNum); st.LogNum > 0 && !st.Legacy && !present[name] {
		return storeFiles{}, base.Corruptf(name, -1, "missing, though %s's log number names it: writes not yet in a segment would be lost (the manifest is older than the files, or the file was removed)", base.ManifestName)
	}
	slices.Sort(files.logs)
	return files, nil
}

// checkFileNum rejects a file whose number the manifest never handed out.
func checkFileNum(name string, num uint64, st manifest.State) error {
	switch {
	case num == 0 || num >= manifest.MaxFileNum:
		return base.Corruptf(name, -1, "file number %d is not one the store issues", num)
	case num >= st.NextFileNum && !st.Legacy:
		return base.Corruptf(name, -1, "file number %d is at or above %s's next file number %d: the file is not the store's, or the manifest is older than the files",
			num, base.ManifestName, st.NextFileNum)
	}
	return nil
}

// replay applies the WAL records newer than flushedSeq to a new memtable.
// It only reads. A torn final record (a write that was never acknowledged)
// ends a log; damage before it is an error — except where a power cut may
// have left it (walRecoverOptions): then the store's durable history ends
// there, and nothing after it is applied, so what is recovered is a prefix
// of the acknowledged writes, in whole batches.
func (db *DB) replay(logs []uint64, flushedSeq uint64) (*memtable.Memtable, error) {
	mem := memtable.New(db.opts.MemtableSize)
	for i, num := range logs {
		name := base.WALFileName(num)
		opts := walRecoverOptions(db.fs, db.dir, logs, i, db.bootID)
		var dels []rangedel.Tombstone
		res, err := wal.Recover(db.fs, db.path(name), opts, func(rec []byte, offset int64) error {
			var last uint64
			var err error
			dels, last, err = applyBatch(mem, rec, name, offset, flushedSeq, dels)
			if last > flushedSeq {
				db.lastSeq = max(db.lastSeq, last)
			}
			return err
		})
		if err == nil && (res.Unsynced || i < len(logs)-1 && unsealed(opts, res)) {
			err = sealProven(db.fs, db.dir, logs, i, res)
		}
		switch {
		case err != nil:
			return nil, fmt.Errorf("bloomkv: replay %s: %w", name, err)
		case res.Unsynced:
			db.logger.Warn("WAL ends in damage after its last sync, as a power cut leaves it; the writes before it are recovered, the rest was never synced",
				"file", name, "offset", res.ValidSize, "lost_bytes", res.TornBytes, "later_logs_ignored", len(logs)-i-1)
			return mem, nil
		case res.TornTail:
			db.logger.Warn("WAL ends in a torn tail (a write in flight at a crash)", "file", name, "bytes", res.TornBytes)
		}
		if i < len(logs)-1 && mayHaveLostTail(opts, res) {
			db.logger.Warn("WAL was not sealed and the machine has restarted since it was written: a power cut may have lost its last writes, so the writes of later WALs, none of them synced, are not recovered",
				"file", name, "later_logs_ignored", len(logs)-i-1)
			return mem, nil
		}
	}
	return mem, nil
}

// mayHaveLostTail reports whether a power cut may have lost the last
// records of a log that has a successor. A rotation hands the old WAL's
// fsync to a goroutine of its own (sealLoop) and writes the next WAL at
// once, so the next WAL may hold writes the kernel put on the device
// before the old WAL's last ones, and a power cut may have kept those
// and lost these. The store's history then ends with the old WAL: no
// synced write is lost, for a write in the next WAL is acknowledged as
// synced only after the old WAL is sealed. A log is known whole if it is
// sealed (it says it was fsynced to its end), if its successor vouches
// for it (opts.Complete: the rotations of earlier versions fsynced a WAL
// before they created the next), if it was written under this boot (the
// page cache held it), or if it has no marks (a version-1 log, which
// those earlier rotations also fsynced first).
func mayHaveLostTail(opts wal.RecoverOptions, res wal.Result) bool {
	return unsealed(opts, res) && !res.ThisBoot
}

// unsealed reports whether a replaced log of this version (marked, and
// not vouched for by its successor as earlier versions' were) ends
// without its seal: a crash before the seal, or, if a later WAL proves
// the seal durable (sealProven), the file system's or the media's loss.
// Under this boot such a log is whole, and recovery goes on past it; cut
// by the file system at a record boundary it would leave a hole in the
// history, its last writes missing and later ones present.
func unsealed(opts wal.RecoverOptions, res wal.Result) bool {
	return res.Marked && !res.Sealed && !opts.Complete
}

// sealProven checks logs[i], whose recovery (res) would end the store's
// history there or, under this boot, go on past a log that is not sealed,
// for a later WAL that proves it was sealed (wal.ProvesPrevSealed): one
// holding a mark that claims bytes synced past its creation, or the mark
// the sealer leaves in the next WAL once the seal is durable (endWAL,
// rotate). The sync role fsyncs a WAL only once every WAL a rotation
// replaced before it is sealed and that mark is written, and no WAL at
// all once an fsync or a seal has failed (syncHeld, closeFiles); so
// logs[i] ended in a seal that was durable, and a seal missing or
// damaged, or damage before it, is the media's, not a crash's: the later
// WALs may hold writes acknowledged as synced. It is corruption at
// res.ValidSize, where the damage (or the end of the file) is. A crash
// during the seal leaves no such proof: nothing is written to a newer
// WAL that proves it before the seal's fsync returns.
func sealProven(fsys vfs.FS, dir string, logs []uint64, i int, res wal.Result) error {
	for _, num := range logs[i+1:] {
		later := base.WALFileName(num)
		proof, err := wal.ProvesPrevSealed(fsys, pathIn(dir, later))
		if err != nil {
			return err
		}
		if proof {
			return base.Corruptf(base.WALFileName(logs[i]), res.ValidSize,
				"the WAL does not end in a whole seal (damaged or missing from here), but %s, a later WAL, holds a mark written only once this WAL's seal was durable: the seal was, and the later WALs may hold writes acknowledged as synced", later)
		}
	}
	return nil
}

// walRecoverOptions says how far recovery may trust logs[i]: a power cut
// may have lost its unsynced writes unless its successor vouches that it
// was synced to its end before the successor was created (the rotations
// of earlier versions did; a rotation now seals the old WAL beside the
// writes to the new one, see mayHaveLostTail). A log so vouched for is
// complete: no crash can have torn its last record, so damage there is
// corruption.
func walRecoverOptions(fsys vfs.FS, dir string, logs []uint64, i int, boot [16]byte) wal.RecoverOptions {
	opts := wal.RecoverOptions{UnsyncedMayBeLost: true, BootID: boot}
	if i+1 < len(logs) {
		if m, ok := wal.ReadFirstMark(fsys, pathIn(dir, base.WALFileName(logs[i+1]))); ok && m.PrevSynced {
			opts.UnsyncedMayBeLost = false
			opts.Complete = true
		}
	}
	return opts
}

// startFresh writes what the WALs held to a segment, starts a new WAL and
// memtable, and commits both in one manifest edit that also retires the
// replayed WALs. If anything fails before the commit, the files it created
// are removed; if the commit itself fails its outcome is unknown, so they
// stay (the next Open deletes them if the commit did not land).
func (db *DB) startFresh(replayed *memtable.Memtable) error {
	var (
		added []base.SegmentMeta
		seg   *segHandle
		err   error
	)
	if !replayed.Empty() {
		if seg, err = db.writeMemtable(replayed, nil); err != nil {
			return fmt.Errorf("bloomkv: flush recovered writes: %w", err)
		}
		added = append(added, seg.meta)
	}
	logNum, err := db.manifest.NewFileNum()
	var logw *wal.Writer
	if err == nil {
		logw, err = db.createWAL(logNum, false)
	}
	if err != nil {
		if seg != nil {
			seg.obsolete.Store(true)
			seg.unref()
		}
		return fmt.Errorf("bloomkv: %w", err)
	}
	db.logw, db.logNum = logw, logNum
	flushed := db.lastSeq
	e := shapeEdit{
		Edit:  manifest.Edit{Add: added, FlushedSeq: &flushed, LogNum: &logNum, PrefixExtractor: db.recordPrefix},
		added: seg,
		mem:   memtable.New(db.opts.MemtableSize),
	}
	if err := db.logAndApply(e); err != nil {
		return fmt.Errorf("bloomkv: %w", err)
	}
	db.visibleSeq.Store(db.lastSeq)
	db.mu.Lock()
	db.scheduleCompactionLocked()
	db.mu.Unlock()
	return nil
}

// removeObsolete deletes, after a successful recovery, the WALs it
// replayed and the files a crash left behind. Every one of them is below
// the committed log number or unlisted and below NextFileNum, so the store
// made it and no longer needs it — if it is a regular file: the store
// makes nothing else, so a directory, named pipe or socket that bears
// such a name is someone else's, and is left where it is.
func (db *DB) removeObsolete(files storeFiles) {
	for _, num := range files.logs {
		db.removeFile(base.WALFileName(num))
	}
	for _, name := range slices.Concat(files.obsolete, files.orphans) {
		if fi, err := db.fs.Stat(db.path(name)); err == nil && !fi.Mode().IsRegular() {
			db.logger.Warn("leaving a file that is not the store's: it bears the name of an obsolete one but is not a regular file", "file", name, "mode", fi.Mode().String())
			continue
		}
		db.logger.Info("removing obsolete file", "file", name)
		db.removeFile(name)
	}
}

// closeFiles releases everything Open acquired; used by Close and by a
// failed Open.
func (db *DB) closeFiles() error {
	var errs []error
	if db.logw != nil {
		// Sealed, so that damage to the log's last records is reported as
		// corruption at the next Open rather than dropped as the torn tail
		// a crash leaves; but not once the commit queue has failed: an
		// older WAL may then be unsealed, and a seal here claims this
		// WAL's bytes synced, which recovery would take for proof that
		// every older WAL was sealed (see syncHeld).
		if db.commit.failure() == nil {
			errs = append(errs, db.logw.Seal())
		}
		errs = append(errs, db.logw.Close())
	}
	db.dropSpareLocked()
	if rs := db.current.Swap(nil); rs != nil {
		rs.retire()
	}
	for _, s := range db.segments {
		s.unref()
	}
	db.segments = nil
	// Before the lock goes, the files no reader holds are closed (and the
	// obsolete ones removed). Those a read in progress or an open
	// Iterator still holds are closed when it lets go, possibly after the
	// lock went and another process opened the store: harmless, since an
	// obsolete segment's number was committed to the manifest, which
	// never hands it out again, and a live one is only closed, not
	// removed.
	db.closer.wait()
	if db.manifest != nil {
		errs = append(errs, db.manifest.Close())
	}
	errs = append(errs, db.lockFile.Close()) // releases the lock
	return errors.Join(errs...)
}
