package bloomkv

import (
	"fmt"
	"time"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/vfs"
)

// Flush writes the memtable to a segment and returns when it, and every
// memtable frozen before it, is on disk and in the manifest.
func (db *DB) Flush() error {
	var (
		last *frozen
		err  error
	)
	db.commit.exclusive(db, func() {
		db.mu.Lock()
		defer db.mu.Unlock()
		if err = db.writableLocked(); err != nil {
			return
		}
		if db.mem.Len() > 0 {
			for len(db.imm) >= maxFrozen && db.writableLocked() == nil {
				db.cond.Wait()
			}
			if err = db.writableLocked(); err != nil {
				return
			}
			if err = db.rotateLocked(); err != nil {
				return
			}
		}
		if n := len(db.imm); n > 0 {
			last = db.imm[n-1]
		}
	})
	if err != nil || last == nil {
		return err
	}
	<-last.done
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.bgErr != nil {
		return fmt.Errorf("%w: %w", ErrReadOnly, db.bgErr)
	}
	return nil
}

// scheduleFlushLocked starts the background flush goroutine unless it runs.
func (db *DB) scheduleFlushLocked() {
	if db.flushing || len(db.imm) == 0 || db.closed {
		return
	}
	db.flushing = true
	db.bgWG.Add(1)
	go db.flushLoop()
}

// flushLoop flushes frozen memtables, oldest first, until none is left.
func (db *DB) flushLoop() {
	defer db.bgWG.Done()
	db.mu.Lock()
	defer db.mu.Unlock()
	for len(db.imm) > 0 && db.bgErr == nil && !db.closed {
		f := db.imm[0]
		db.mu.Unlock()
		s, err := db.flushFrozen(f)
		db.mu.Lock()
		if err != nil {
			db.failLocked(fmt.Errorf("flush: %w", err))
			break
		}
		db.imm = db.imm[1:]
		if s != nil { // nil: the memtable held no entries
			db.segments = append([]*segHandle{s}, db.segments...)
			db.stats.flushBytes.Add(uint64(s.meta.Size))
		}
		db.publishLocked()
		db.stats.flushes.Add(1)
		db.scheduleCompactionLocked()
		close(f.done)
		db.cond.Broadcast()
		// Only now, with the segment in place of the memtable (under
		// db.mu), is the WAL unneeded: a Checkpoint reading imm and the
		// segments under db.mu must find the writes in one or the other.
		// The unlink itself needs no lock.
		db.mu.Unlock()
		db.removeFile(walName(f.logNum))
		db.mu.Lock()
	}
	for _, f := range db.imm { // on failure or close: wake Flush callers
		closeOnce(f.done)
	}
	db.flushing = false
	db.cond.Broadcast()
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// flushFrozen writes f to a new segment and commits it to the manifest
// together with the advanced FlushedSeq and LogNum; flushLoop removes f's
// WAL once the segment has taken the memtable's place.
func (db *DB) flushFrozen(f *frozen) (*segHandle, error) {
	start := time.Now()
	it := compaction.NewDedup(f.mem.NewIter(), db.snapshotSeqs(), false)
	s, err := db.writeSegment(it, nil, 0, nil)
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	nextLog := db.logNum // the WAL of the memtable after f
	if len(db.imm) > 1 {
		nextLog = db.imm[1].logNum
	}
	db.mu.Unlock()
	edit := manifest.Edit{FlushedSeq: &f.maxSeq, LogNum: &nextLog}
	if s != nil {
		edit.Add = []manifest.SegmentMeta{s.meta}
	}
	if err := db.manifest.Apply(edit); err != nil {
		// Whether the commit reached the disk is unknown, so the file
		// stays: if the commit did not land, the next Open removes it.
		if s != nil {
			s.unref()
		}
		return nil, fmt.Errorf("manifest: %w", err)
	}
	db.logger.Info("flushed memtable", "entries", f.mem.Len(), "segment", segName(s), "took", time.Since(start))
	return s, nil
}

// writeSegment writes the entries of it to a new segment file, syncs it and
// opens it for reading. It returns nil (and no error) if it has no entries.
// The file is not live until the caller commits it to the manifest.
// replaces are the segments it will replace (a merge's inputs; nil for a
// flush), for the filter allocation.
func (db *DB) writeSegment(it compaction.Iterator, filter *bloom.Filter, tier uint32, replaces []*segHandle) (*segHandle, error) {
	num, err := db.manifest.NewFileNum()
	if err != nil {
		return nil, fmt.Errorf("segment file number: %w", err)
	}
	name := segFileName(num)
	f, err := db.fs.Create(db.path(name))
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	props, err := db.fillSegment(f, it, filter, replaces)
	if err == nil && props.Entries > 0 {
		err = f.Sync()
	}
	if err == nil && props.Entries > 0 {
		err = db.fs.SyncDir(db.dir)
	}
	if err != nil || props.Entries == 0 {
		f.Close()
		db.fs.Remove(db.path(name))
		if err != nil {
			return nil, fmt.Errorf("write segment %s: %w", name, err)
		}
		return nil, nil
	}
	meta := metaFromProperties(num, props)
	meta.Tier = tier
	st, err := f.Stat()
	if err != nil {
		f.Close()
		db.fs.Remove(db.path(name))
		return nil, fmt.Errorf("write segment %s: %w", name, err)
	}
	meta.Size = st.Size()
	s, err := db.openSegment(f, meta)
	if err != nil {
		db.fs.Remove(db.path(name))
	}
	return s, err
}

// fillSegment writes the entries of it as a segment to f. A non-nil filter
// (compaction's union path) replaces the one the writer would build.
func (db *DB) fillSegment(f vfs.File, it compaction.Iterator, filter *bloom.Filter, replaces []*segHandle) (segment.Properties, error) {
	w := segment.NewWriter(f, segment.WriterOptions{
		BlockSize:      db.opts.BlockSize,
		Compression:    !db.opts.DisableCompression,
		BitsPerKey:     db.opts.BitsPerKey,
		FilterGeometry: db.segmentFilter(replaces), // issue 17: filtermem.go
	})
	if filter != nil {
		w.SetFilter(filter)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := w.Add(it.Key(), it.Seq(), it.Kind(), it.Value()); err != nil {
			return segment.Properties{}, err
		}
	}
	if err := compaction.Err(it); err != nil {
		return segment.Properties{}, err
	}
	return w.Finish()
}

func metaFromProperties(num uint64, p segment.Properties) manifest.SegmentMeta {
	return manifest.SegmentMeta{
		FileNum:      num,
		Entries:      p.Entries,
		Tombstones:   p.Tombstones,
		MinSeq:       p.MinSeq,
		MaxSeq:       p.MaxSeq,
		Smallest:     p.Smallest,
		Largest:      p.Largest,
		FilterLayout: p.FilterLayout,
		FilterK:      p.FilterK,
		FilterBits:   p.FilterBits,
	}
}

// openSegment opens the reader of segment file f described by meta; the
// handle owns f and starts with the DB's reference.
func (db *DB) openSegment(f vfs.File, meta manifest.SegmentMeta) (*segHandle, error) {
	name := segFileName(meta.FileNum)
	ro := segment.ReaderOptions{
		Cache:    db.cache,
		Counters: &db.counters,
		FileNum:  meta.FileNum,
		Name:     name,
	}
	if !db.opts.DisableMmap {
		m, err := mapSegment(f, meta.Size)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("open segment %s: %w", name, err)
		}
		ro.Mapped = m
	}
	if ro.Mapped == nil {
		adviseRandom(f)
	}
	r, err := segment.Open(f, meta.Size, ro)
	if err != nil {
		if ro.Mapped != nil {
			unmapSegment(ro.Mapped)
		}
		f.Close()
		return nil, fmt.Errorf("open segment %s: %w", name, err)
	}
	s := &segHandle{meta: meta, name: name, path: db.path(name), fs: db.fs, file: f, mapped: ro.Mapped, reader: r, logger: db.logger}
	s.refs.Store(1)
	return s, nil
}

func segName(s *segHandle) string {
	if s == nil {
		return "(empty)"
	}
	return s.name
}
