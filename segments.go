package bloomkv

import (
	"bytes"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/invariants"
	"github.com/bloomkv/bloomkv/internal/rangedel"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/vfs"
)

// segHandle is an open segment: its file, its reader (filter and index in
// memory) and its manifest entry. The DB holds one reference while the
// segment is live, each read state one more.
type segHandle struct {
	refs    atomic.Int32
	meta    base.SegmentMeta
	name    string // file name, for errors
	path    string
	fs      vfs.FS
	file    vfs.File
	mapped  []byte // the file mapped read-only; nil with Options.DisableMmap or where mapping failed (mapOrRead)
	folds   int    // halvings of the resident filter (filter budget); db.mu
	reader  *segment.Reader
	garbage uint64 // segmentGarbage of its properties, for garbageMergeLocked
	// coversOlder estimates what its range tombstones cover in the live
	// segments older than it (rangegarbage.go), for garbageMergeLocked;
	// db.mu, set before the handle is installed.
	coversOlder []coverage
	obsolete    atomic.Bool // remove the file when the last reference goes
	logger      *slog.Logger
	closer      *closer // closes it when the last reference goes; nil: unref does
}

// closer closes segments whose last reference is gone, in a goroutine of
// its own that runs while there is work. wait lets Flush, Compact,
// WaitForCompactions and Close return only once the files they made
// obsolete are gone.
type closer struct {
	mu      sync.Mutex
	idle    sync.Cond // signalled when the goroutine stops
	pending []*segHandle
	running bool
}

func (c *closer) add(s *segHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, s)
	if !c.running {
		c.running = true
		go c.run()
	}
}

func (c *closer) run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 {
		batch := c.pending
		c.pending = nil
		c.mu.Unlock()
		for _, s := range batch {
			s.close()
		}
		c.mu.Lock()
	}
	c.running = false
	c.idle.Broadcast()
}

// wait returns once every segment handed to c before the call is closed.
func (c *closer) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.running {
		c.idle.Wait()
	}
}

// covers reports whether key lies within the segment's key range, a check
// that costs no I/O and no hashing.
func (s *segHandle) covers(key []byte) bool {
	return bytes.Compare(key, s.meta.Smallest) >= 0 && bytes.Compare(key, s.meta.Largest) <= 0
}

// unref drops a reference. The last one closes the segment — unmaps its
// file, which ends the life of every slice that aliases the mapping, and
// removes the file if it is obsolete — on the DB's closer goroutine, not
// on the path that let go: that may be a Get (whose latency would take an
// munmap and an unlink) or code holding db.mu (which guards memory, not
// I/O).
func (s *segHandle) unref() {
	n := s.refs.Add(-1)
	invariants.Check(n >= 0, "segment released more often than referenced")
	if n != 0 {
		return
	}
	if s.closer != nil {
		s.closer.add(s)
		return
	}
	s.close()
}

// close closes the reader, unmaps and closes the file, and removes it if
// it is obsolete.
func (s *segHandle) close() {
	s.reader.Close()
	if s.mapped != nil {
		if err := unmapSegment(s.mapped); err != nil {
			s.logger.Warn("unmapping segment", "file", s.name, "err", err)
		}
	}
	s.file.Close()
	if s.obsolete.Load() {
		if err := s.fs.Remove(s.path); err != nil {
			s.logger.Warn("removing obsolete segment", "file", s.name, "err", err)
		}
	}
}

// refSegmentsLocked returns db.segments[start:end] with a reference each,
// so they stay open while a merge reads them.
func (db *DB) refSegmentsLocked(start, end int) []*segHandle {
	out := append([]*segHandle(nil), db.segments[start:end]...)
	for _, s := range out {
		s.refs.Add(1)
	}
	return out
}

func unrefAll(segs []*segHandle) {
	for _, s := range segs {
		s.unref()
	}
}

// writeSegment writes the entries of it and the range tombstones rangeDels
// to a new segment file, syncs it and opens it for reading. It returns nil
// (and no error) if there is nothing to write. The file is not live until
// the caller commits it to the manifest. replaces are the segments it will
// replace (a merge's inputs; nil for a flush), for the filter allocation.
//
// A failure removes the file. One that ran out of a resource (ENOSPC,
// EMFILE, …) while the file was created, written, synced, or opened for
// reading is marked retryable (retry.go): nothing durable changed. The
// file number's manifest commit is not, nor a failed sync of the
// directory, even for want of space: that sync covers the entries of
// other files too (the WALs'), which a failed sync may have dropped. Only
// running out of descriptors to open the directory is retried: no sync
// was made.
func (db *DB) writeSegment(it base.ForwardIterator, rangeDels *rangedel.List, filter *bloom.Filter, tier uint32, replaces []*segHandle, keys int) (*segHandle, error) {
	num, err := db.manifest.NewFileNum()
	if err != nil {
		return nil, fmt.Errorf("segment file number: %w", err)
	}
	name := base.SegmentFileName(num)
	f, err := db.fs.Create(db.path(name))
	if err != nil {
		return nil, markRetryable(fmt.Errorf("create segment: %w", err))
	}
	discard := func(err error) error {
		db.fs.Remove(db.path(name))
		return fmt.Errorf("write segment %s: %w", name, err)
	}
	props, err := db.fillSegment(writeBehind(f), it, rangeDels, filter, replaces, keys)
	empty := props.Entries == 0 && props.RangeDels == 0
	if err == nil && !empty {
		err = f.Sync()
	}
	if err != nil || empty {
		f.Close()
		if err != nil {
			return nil, markRetryable(discard(err))
		}
		db.fs.Remove(db.path(name))
		return nil, nil
	}
	if err := db.fs.SyncDir(db.dir); err != nil {
		f.Close()
		return nil, markDirSyncRetryable(discard(err))
	}
	meta := metaFromProperties(num, props)
	meta.Tier = tier
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, markRetryable(discard(err))
	}
	meta.Size = st.Size()
	s, err := db.openSegment(f, meta)
	if err != nil {
		return nil, markRetryable(discard(err))
	}
	return s, nil
}

// hugeSegmentBytes is the input size from which a merge writes its output
// in huge chunks (segment.HugeChunkSize), so that mappings of it may use
// huge pages. Below it the segment is mapped by few enough page table
// entries to stay in the CPU's caches, and merged again soon in a growing
// store: the writes' cost would not be repaid by faster reads.
const hugeSegmentBytes = 64 << 20

// chunkSize is the size of the writes of a segment that replaces the
// segments replaces (none: a flush).
func chunkSize(replaces []*segHandle) int {
	var in int64
	for _, s := range replaces {
		in += s.meta.Size
	}
	if in >= hugeSegmentBytes {
		return segment.HugeChunkSize
	}
	return segment.DefaultChunkSize
}

// fillSegment writes the entries of it as a segment to f. A non-nil filter
// (compaction's union path) replaces the one the writer would build.
func (db *DB) fillSegment(f vfs.File, it base.ForwardIterator, rangeDels *rangedel.List, filter *bloom.Filter, replaces []*segHandle, keys int) (segment.Properties, error) {
	wo := segment.WriterOptions{
		BlockSize:      db.opts.BlockSize,
		Compression:    db.opts.segmentCompression(),
		BitsPerKey:     db.opts.BitsPerKey,
		SeparateValues: db.opts.LargeValueSize,
		FilterGeometry: db.segmentFilter(replaces), // the filter allocation: filtermem.go
		ChunkSize:      chunkSize(replaces),
		PageAlign:      true, // a cold Get reads one page of a block, not two
	}
	if filter == nil {
		wo.KeysHint = keys // the writer builds the filter from the keys' hashes
	}
	if px := db.opts.Prefix; px != nil {
		wo.Prefix, wo.PrefixName = px.Split, px.Name
	}
	w := segment.NewWriter(f, wo)
	if filter != nil {
		w.SetFilter(filter)
	}
	w.SetRangeDels(rangeDels)
	// A merge's inputs hand out the value records they keep as stored
	// (compactSegments: KeepValueRecords) and the writer copies them as
	// they are, without decompressing and compressing, checksumming and
	// copying each large value again.
	rv, _ := it.(base.RawValuer)
	for n, ok := 0, it.First(); ok; n, ok = n+1, it.Next() {
		if replaces != nil && n%yieldEvery == 0 && db.flushWaiters.Load() > 0 {
			db.yieldToFlush()
		}
		key, trailer := it.InternalKey()
		seq, kind := base.SplitTrailer(trailer)
		if rv != nil && kind == base.KindPut {
			// Value is nil at a record kept as stored: the inputs keep
			// only what the writer stores apart (one threshold).
			if rec, vlen, ok := rv.RawValue(); ok {
				if err := w.AddValueRecord(key, seq, rec, vlen); err != nil {
					return segment.Properties{}, err
				}
				continue
			}
		}
		if err := w.Add(key, seq, kind, it.Value()); err != nil {
			return segment.Properties{}, err
		}
	}
	if err := it.Error(); err != nil {
		return segment.Properties{}, err
	}
	if c, ok := it.(interface{ RangeCovered() uint64 }); ok {
		// What a snapshot kept that the latest state no longer sees
		// (compaction.Dedup): the trigger of garbageMergeLocked.
		w.SetRangeCovered(c.RangeCovered())
	}
	return w.Finish()
}

// yieldEvery is how many entries a merge writes between looks at whether
// writers wait for a flush: about 100 µs of merging at 100-byte values.
const yieldEvery = 1024

// yieldToFlush pauses a merge while writers wait for a flush to free a
// memtable (db.frozenLimit memtables already wait for theirs). The flush is then
// the one thing between the writers and progress, and on a machine with
// fewer cores than busy goroutines the merges would take most of its CPU:
// on two cores, with three merges beside it, a 15 ms flush took 115 ms
// and every writer stalled for all of it. A paused merge holds only its
// inputs' references; a flush needs nothing from it.
func (db *DB) yieldToFlush() {
	db.mu.Lock()
	defer db.mu.Unlock()
	for db.flushWaiters.Load() > 0 && !db.closed && db.bgErr == nil {
		db.cond.Wait()
	}
}

func metaFromProperties(num uint64, p segment.Properties) base.SegmentMeta {
	return base.SegmentMeta{
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
func (db *DB) openSegment(f vfs.File, meta base.SegmentMeta) (*segHandle, error) {
	name := base.SegmentFileName(meta.FileNum)
	ro := segment.ReaderOptions{
		Cache:    db.cache,
		Counters: &db.counters,
		FileNum:  meta.FileNum,
		Name:     name,
	}
	if !db.opts.DisableMmap {
		ro.Mapped = db.mapOrRead(f, name, meta.Size)
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
	s := &segHandle{meta: meta, name: name, path: db.path(name), fs: db.fs, file: f, mapped: ro.Mapped, reader: r, logger: db.logger, closer: &db.closer}
	s.garbage = segmentGarbage(r.Properties())
	s.refs.Store(1)
	return s, nil
}

// mapOrRead maps segment file f, or returns nil, and the segment is then
// read with pread, as under Options.DisableMmap: a mapping is a speed-up,
// never a condition of opening a segment. Mapping fails with ENOMEM where
// the process has run out of mappings (on Linux vm.max_map_count, 65530
// by default, and each mapped segment takes one) or of address space
// (RLIMIT_AS), and on file systems that cannot map. Failing the open
// instead would fail the flush or compaction that wrote the segment,
// making the store read-only, and every later Open that loads it: a store
// with more segments than the machine allows mappings could not be
// opened there at all. vfs.OpMap lets a test's FS refuse the mapping.
func (db *DB) mapOrRead(f vfs.File, name string, size int64) []byte {
	err := vfs.Bypass(db.fs, vfs.OpMap, db.path(name))
	var m []byte
	if err == nil {
		m, err = mapSegment(f, size)
	}
	if err != nil {
		db.logger.Warn("segment not mapped: reading it with pread", "file", name, "err", err)
		return nil
	}
	return m
}

func segName(s *segHandle) string {
	if s == nil {
		return "(empty)"
	}
	return s.name
}

// loadSegment opens a live segment and checks it against its manifest entry.
func (db *DB) loadSegment(meta base.SegmentMeta) (*segHandle, error) {
	name := base.SegmentFileName(meta.FileNum)
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
	s, err := db.openSegment(f, meta)
	if err != nil {
		return nil, fmt.Errorf("bloomkv: %w", err)
	}
	return s, nil
}
