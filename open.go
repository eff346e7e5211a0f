package bloomkv

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"

	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/memtable"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/wal"
)

// Open opens the store in dir, creating it if dir does not exist or is
// empty. nil opts means DefaultOptions(). It fails with ErrLocked if the
// store is open elsewhere, with ErrNotStore if dir holds other files but no
// store, and with an error matching ErrCorrupt (naming the file) if a file
// of the store is damaged; in every failure nothing in dir is overwritten.
//
// Recovery replays the WALs that hold writes not yet in a segment, flushes
// them to a segment, and removes files the manifest does not reference
// (left by a crash during a flush or a compaction).
func Open(dir string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if err := o.FS.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("bloomkv: %w", err)
	}
	lock, err := lockDir(o.FS, dir)
	if err != nil {
		return nil, err
	}
	db := &DB{
		dir:      dir,
		fs:       o.FS,
		opts:     o,
		logger:   o.Logger,
		lockFile: lock,
		cache:    segment.NewCache(o.BlockCacheSize),
		// Tiers come from the manifest's Tier field (flush = 0, merge =
		// inputs' tier + 1), not from file sizes, which depend on how well
		// the data compresses.
		policy: compaction.SizeTiered{FanIn: o.CompactionFanIn},
	}
	db.cond = sync.NewCond(&db.mu)
	db.commit.idle.L = &db.commit.mu
	if err := db.recover(); err != nil {
		db.closeFiles()
		return nil, err
	}
	return db, nil
}

// recover loads the manifest, opens the live segments, replays the WALs and
// removes obsolete files.
func (db *DB) recover() error {
	entries, err := db.fs.List(db.dir)
	if err != nil {
		return fmt.Errorf("bloomkv: %w", err)
	}
	if db.manifest, err = db.openManifest(entries); err != nil {
		return err
	}
	state := db.manifest.State()
	for _, meta := range state.Segments {
		s, err := db.loadSegment(meta)
		if err != nil {
			return err
		}
		db.segments = append(db.segments, s)
	}
	logs, maxNum := db.classifyFiles(entries, state)
	db.lastSeq = state.FlushedSeq
	for _, s := range db.segments {
		db.lastSeq = max(db.lastSeq, s.meta.MaxSeq)
	}
	replayed, err := db.replay(logs, state.FlushedSeq)
	if err != nil {
		return err
	}
	return db.startFresh(replayed, logs, maxNum)
}

// openManifest opens the manifest, or creates it for a new store
// (manifest.Create builds it under a temporary name and links it into
// place, so a crash during creation never leaves a half-made MANIFEST).
func (db *DB) openManifest(entries []string) (*manifest.Manifest, error) {
	m, err := manifest.Open(db.fs, db.path(manifestName))
	if err == nil {
		return m, nil
	}
	if errors.Is(err, manifest.ErrLocked) {
		return nil, fmt.Errorf("%w: %w", ErrLocked, err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("bloomkv: open manifest: %w", err)
	}
	for _, name := range entries {
		if name != lockName && name != manifestName+".tmp" {
			return nil, fmt.Errorf("%w: %s holds %s but no %s", ErrNotStore, db.dir, name, manifestName)
		}
	}
	if m, err = manifest.Create(db.fs, db.path(manifestName)); err != nil {
		return nil, fmt.Errorf("bloomkv: create manifest: %w", err)
	}
	return m, nil
}

// loadSegment opens a live segment and checks it against its manifest entry.
func (db *DB) loadSegment(meta manifest.SegmentMeta) (*segHandle, error) {
	name := segFileName(meta.FileNum)
	f, err := db.fs.Open(db.path(name))
	if err != nil {
		return nil, fmt.Errorf("bloomkv: live segment %s: %w", name, err)
	}
	st, err := f.Stat()
	if err == nil && st.Size() != meta.Size {
		// The offset is where the file and the manifest part ways: the end
		// of the shorter of the two.
		err = base.Corruptf(name, min(st.Size(), meta.Size), "file is %d bytes, the manifest says %d", st.Size(), meta.Size)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bloomkv: open segment: %w", err)
	}
	return db.openSegment(f, meta)
}

// classifyFiles removes files the store no longer needs — segments the
// manifest does not list (outputs of an interrupted flush or compaction),
// WALs already flushed — and returns the WALs to replay, in order, and the
// largest file number seen.
func (db *DB) classifyFiles(entries []string, state manifest.State) (logs []uint64, maxNum uint64) {
	live := make(map[uint64]bool, len(state.Segments))
	for _, s := range state.Segments {
		live[s.FileNum] = true
	}
	for _, name := range entries {
		num, ext, ok := parseFileName(name)
		if !ok {
			continue
		}
		maxNum = max(maxNum, num)
		switch {
		case ext == walExt && num >= state.LogNum:
			logs = append(logs, num)
		case ext == segExt && live[num]:
		default:
			db.logger.Info("removing obsolete file", "file", name)
			db.removeFile(name)
		}
	}
	slices.Sort(logs)
	return logs, maxNum
}

// replay applies the WAL records newer than flushedSeq to a new memtable.
// A torn final record (a write that was never acknowledged) is cut off by
// wal.Recover; damage before it is an error.
func (db *DB) replay(logs []uint64, flushedSeq uint64) (*memtable.Memtable, error) {
	mem := memtable.New(db.opts.MemtableSize)
	for _, num := range logs {
		name := walName(num)
		res, err := wal.Recover(db.fs, db.path(name), func(rec []byte, offset int64) error {
			return decodeBatch(rec, name, offset, func(seq uint64, op batchOp) {
				if seq > flushedSeq {
					mem.Add(seq, op.kind, op.key, op.value)
					db.lastSeq = max(db.lastSeq, seq)
				}
			})
		})
		if err != nil {
			return nil, fmt.Errorf("bloomkv: replay %s: %w", name, err)
		}
		if res.Truncated {
			db.logger.Warn("WAL had a torn tail, cut off", "file", name, "bytes", res.TruncatedBytes)
		}
	}
	return mem, nil
}

// startFresh flushes what the WALs held to a segment, starts a new WAL and
// memtable, and records in one manifest edit that the replayed WALs are no
// longer needed.
func (db *DB) startFresh(replayed *memtable.Memtable, logs []uint64, maxNum uint64) error {
	// File numbers handed out before a crash may not have reached the
	// manifest (a live WAL is named by one); move past every number present
	// — and never back: numbers the manifest counted may name files that
	// were never created (a create that failed).
	next := max(maxNum+1, db.manifest.State().NextFileNum)
	if err := db.manifest.Apply(manifest.Edit{NextFileNum: &next}); err != nil {
		return fmt.Errorf("bloomkv: %w", err)
	}
	logNum := db.manifest.NewFileNum()
	var added []manifest.SegmentMeta
	if replayed.Len() > 0 {
		s, err := db.writeSegment(compaction.NewDedup(replayed.NewIter(), nil, false), nil, 0)
		if err != nil {
			return fmt.Errorf("bloomkv: flush recovered writes: %w", err)
		}
		db.segments = append([]*segHandle{s}, db.segments...)
		added = append(added, s.meta)
	}
	logw, err := db.createWAL(logNum)
	if err != nil {
		return fmt.Errorf("bloomkv: %w", err)
	}
	db.logw, db.logNum = logw, logNum
	flushed := db.lastSeq
	if err := db.manifest.Apply(manifest.Edit{Add: added, FlushedSeq: &flushed, LogNum: &logNum}); err != nil {
		return fmt.Errorf("bloomkv: %w", err)
	}
	for _, num := range logs {
		db.removeFile(walName(num))
	}
	db.mem = memtable.New(db.opts.MemtableSize)
	db.visibleSeq.Store(db.lastSeq)
	db.mu.Lock()
	db.publishLocked()
	db.scheduleCompactionLocked()
	db.mu.Unlock()
	return nil
}

// closeFiles releases everything Open acquired; used by Close and by a
// failed Open.
func (db *DB) closeFiles() error {
	var errs []error
	if db.logw != nil {
		if db.opts.Sync {
			errs = append(errs, db.logw.Sync())
		}
		errs = append(errs, db.logw.Close())
	}
	if rs := db.current.Swap(nil); rs != nil {
		rs.release()
	}
	for _, s := range db.segments {
		s.unref()
	}
	db.segments = nil
	if db.manifest != nil {
		errs = append(errs, db.manifest.Close())
	}
	errs = append(errs, db.lockFile.Close()) // releases the lock
	return errors.Join(errs...)
}
