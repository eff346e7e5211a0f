package bloomkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/wal"
)

// VerifyReport is what Verify and VerifyDir found. Damage is reported in
// Problems, not as an error: the error return is for being unable to check
// at all.
type VerifyReport struct {
	Segments   int   `json:"segments"`    // live segments opened and checked
	Blocks     int   `json:"blocks"`      // their data blocks read from the file and found intact
	Entries    int64 `json:"entries"`     // entries (versions and tombstones) of the segments found intact
	Bytes      int64 `json:"bytes"`       // total size of the segments checked
	WALs       int   `json:"wals"`        // WALs read
	WALRecords int   `json:"wal_records"` // intact records in them
	// Problems are damage and disagreements: a store with any is not
	// intact.
	Problems []Problem `json:"problems"`
	// Notes are findings that are not damage: files the store does not
	// use (Open removes those it made itself), a torn WAL tail that Open
	// cuts off (a write never acknowledged).
	Notes []Problem `json:"notes"`
}

// A Problem is one finding of Verify: the file, the offset in it (-1 when
// it is about the whole file) and what is wrong.
type Problem struct {
	File    string `json:"file"`
	Offset  int64  `json:"offset"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Offset < 0 {
		return fmt.Sprintf("%s: %s", p.File, p.Message)
	}
	return fmt.Sprintf("%s at offset %d: %s", p.File, p.Offset, p.Message)
}

// OK reports whether no problem was found. Notes do not count.
func (r *VerifyReport) OK() bool { return len(r.Problems) == 0 }

// Err returns nil if the report has no problem, and otherwise an error for
// the first one, matching ErrCorrupt, that errors.As turns into a
// *CorruptError with its file and offset: for callers that treat any
// problem as damage ("if err := rep.Err(); err != nil"). Its text is
// "bloomkv: verify: corrupt data: FILE at offset N: ...", with the number
// of further problems; Problems has them all.
func (r *VerifyReport) Err() error {
	if r == nil || r.OK() {
		return nil
	}
	p := r.Problems[0]
	ce := &CorruptError{File: p.File, Offset: p.Offset, Reason: p.Message}
	if n := len(r.Problems) - 1; n > 0 {
		return fmt.Errorf("bloomkv: verify: %w (and %d more problems)", ce, n)
	}
	return fmt.Errorf("bloomkv: verify: %w", ce)
}

// String summarizes the report, one finding per line.
func (r *VerifyReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d segments (%d blocks, %d entries, %d bytes), %d WALs (%d records): ",
		r.Segments, r.Blocks, r.Entries, r.Bytes, r.WALs, r.WALRecords)
	if r.OK() {
		b.WriteString("OK\n")
	} else {
		fmt.Fprintf(&b, "%d problems\n", len(r.Problems))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "problem: %s\n", p)
	}
	for _, p := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", p)
	}
	return b.String()
}

// problem records err as a Problem of file, taking the offset from a
// *base.CorruptError when there is one.
func (r *VerifyReport) problem(file string, err error) {
	p := Problem{File: file, Offset: -1, Message: err.Error()}
	var ce *base.CorruptError
	if errors.As(err, &ce) {
		p.Offset, p.Message = ce.Offset, ce.Reason
	}
	r.Problems = append(r.Problems, p)
}

func (r *VerifyReport) problemAt(file string, off int64, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{File: file, Offset: off, Message: fmt.Sprintf(format, args...)})
}

func (r *VerifyReport) problemf(file string, format string, args ...any) {
	r.problemAt(file, -1, format, args...)
}

func (r *VerifyReport) notef(file string, format string, args ...any) {
	r.Notes = append(r.Notes, Problem{File: file, Offset: -1, Message: fmt.Sprintf(format, args...)})
}

// Verify checks the live data of an open DB without changing it: every
// segment is read again from its file — every block's checksum and
// structure, key order, that every key passes both the segment's stored
// filter and the filter held in memory (which the filter budget may have
// folded), and that the data agrees with the segment's properties and its
// manifest entry. The WALs of the unflushed writes are read record by
// record (a torn tail of the active WAL is a write in progress, not
// reported), and the directory must hold every file the DB needs; other
// files are reported as notes.
//
// Reads and writes may go on meanwhile; the segments checked are those
// live when Verify starts, kept on disk until it returns even if a
// compaction replaces them. It stops early, with ctx's error and the
// report so far (nil if it had not begun), when ctx is done; it checks ctx
// between blocks. It returns ErrClosed after Close.
func (db *DB) Verify(ctx context.Context) (*VerifyReport, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs := db.acquire()
	if rs == nil {
		return nil, ErrClosed
	}
	defer rs.release()
	wals := db.liveWALs()
	rep := &VerifyReport{}
	for _, s := range rs.segments {
		if err := verifySegment(ctx, s.file, s.meta, s.reader.ResidentFilter(), db.opts.Prefix, rep); err != nil {
			return rep, err
		}
	}
	if err := db.verifyWALs(ctx, wals, rep); err != nil {
		return rep, err
	}
	return rep, db.verifyOpenDir(rs, wals, rep)
}

// liveWALs returns the WALs the DB needs, oldest first: those of the
// frozen memtables, then the active one.
func (db *DB) liveWALs() []uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.opts.ReadOnly {
		return db.replayedLogs // read-only: nothing new is written
	}
	nums := make([]uint64, 0, len(db.imm)+1)
	for _, f := range db.imm {
		nums = append(nums, f.logNum)
	}
	return append(nums, db.logNum)
}

// verifyWALs reads the WALs of an open DB. A WAL whose memtable was
// flushed since liveWALs may be gone already: the manifest's LogNum, which
// a flush advances before it removes the WAL, tells that from a loss.
func (db *DB) verifyWALs(ctx context.Context, wals []uint64, rep *VerifyReport) error {
	for i, num := range wals {
		name := base.WALFileName(num)
		f, err := db.fs.Open(db.path(name))
		switch {
		case errors.Is(err, fs.ErrNotExist) && num < db.manifest.State().LogNum:
			continue
		case errors.Is(err, fs.ErrNotExist):
			rep.problemf(name, "WAL of unflushed writes is missing from the directory")
			continue
		case err != nil:
			rep.problemf(name, "cannot be opened: %v", err)
			continue
		}
		_, tail, err := scanWAL(ctx, f, name, i == len(wals)-1, wal.RecoverOptions{}, rep)
		f.Close()
		if err != nil {
			return err
		}
		rep.noteTail(name, tail)
	}
	return nil
}

// verifyOpenDir checks that the directory holds the live segments and
// notes files the DB does not use. Flushes and compactions may run: a
// segment they are writing, or one replaced but still read by an
// iterator, shows up as a note.
func (db *DB) verifyOpenDir(rs *readState, wals []uint64, rep *VerifyReport) error {
	names, err := db.fs.List(db.dir)
	if err != nil {
		return fmt.Errorf("bloomkv: verify: %w", err)
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	known := map[string]bool{base.LockName: true, base.ManifestName: true}
	for _, s := range rs.segments {
		known[s.name] = true
		if !present[s.name] {
			rep.problemf(s.name, "live segment is missing from the directory")
		}
	}
	for _, num := range wals {
		known[base.WALFileName(num)] = true
	}
	var newest uint64
	if len(wals) > 0 {
		newest = wals[len(wals)-1]
	}
	for _, name := range names {
		num, ext, ok := base.ParseFileName(name)
		switch {
		case known[name]:
		case ok && ext == base.WALExt && num > newest: // created since the check began
		case ok && ext == base.SegmentExt:
			rep.notef(name, "segment not live when the check began (being written, replaced but still read, or left by a crash; Open removes it)")
		case ok:
			rep.notef(name, "WAL not needed (flushed; removed soon or by the next Open)")
		default:
			noteForeign(name, rep)
		}
	}
	return nil
}

// noteForeign notes a file that is not named like a file of the store.
// isRegular reports whether path is a regular file, or cannot be told to
// be anything else (Stat fails): what removeObsolete takes for the
// store's own leftover.
func isRegular(fsys vfs.FS, path string) bool {
	fi, err := fsys.Stat(path)
	return err != nil || fi.Mode().IsRegular()
}

func noteForeign(name string, rep *VerifyReport) {
	if name == base.ManifestTmpName {
		rep.notef(name, "temporary file of a store creation that was interrupted; unused, safe to delete")
		return
	}
	rep.notef(name, "not a file of the store (Open ignores it)")
}

// VerifyDir checks the store in dir, which must not be open, without
// changing anything: the manifest (opened read-only), every live segment
// as Verify does (but without a resident filter to check: nothing is
// open), and every WAL that Open would replay, record by record. Damage
// before a WAL's end is a problem; a torn tail (a final write never
// acknowledged, which Open cuts off) is a note. Files the manifest does
// not reference are notes: Open removes the store's own leftovers and
// ignores foreign files.
//
// VerifyDir takes the store's lock, shared, without waiting, so it returns
// an error matching ErrLocked if a writer has the store open: a live DB
// may rewrite files under the check. Read-only DBs and other checks may
// share the store with it. It returns ErrNotStore
// if dir holds no manifest, ctx's error (with the report so far, nil if
// it had not begun) when ctx is done. fsys nil means the operating system's file system.
func VerifyDir(ctx context.Context, fsys vfs.FS, dir string) (*VerifyReport, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if fsys == nil {
		fsys = vfs.Default
	}
	// A shared lock, as a read-only Open takes: it excludes writers, not
	// other readers, and creates no file.
	l, err := lockDirShared(fsys, dir)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	var st manifest.State
	_, err = waitManifestLock(func() (*manifest.Manifest, error) { // see manifestLockWait
		st, err = manifest.ReadState(fsys, filepath.Join(dir, base.ManifestName))
		return nil, err
	})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s has no %s", ErrNotStore, dir, base.ManifestName)
	case errors.Is(err, manifest.ErrLocked):
		return nil, manifestLocked(dir)
	case err != nil && !errors.Is(err, base.ErrCorrupt):
		return nil, fmt.Errorf("bloomkv: verify: %w", err)
	}
	rep := &VerifyReport{}
	if err != nil {
		rep.problem(base.ManifestName, err)
		return rep, nil
	}
	live := make(map[uint64]bool, len(st.Segments))
	px := closedDirPrefix(st, rep)
	for _, meta := range st.Segments {
		live[meta.FileNum] = true
		if err := verifySegmentFile(ctx, fsys, dir, meta, px, rep); err != nil {
			return rep, err
		}
	}
	return rep, verifyClosedDir(ctx, fsys, dir, st, live, rep)
}

// verifyClosedDir reads the WALs Open would replay and notes the files
// Open would remove or ignore.
func verifyClosedDir(ctx context.Context, fsys vfs.FS, dir string, st manifest.State, live map[uint64]bool, rep *VerifyReport) error {
	names, err := fsys.List(dir)
	if err != nil {
		return fmt.Errorf("bloomkv: verify: %w", err)
	}
	sawLog := false
	var logs []uint64 // the WALs Open would replay, oldest first
	for _, name := range names {
		if num, ext, ok := base.ParseFileName(name); ok && ext == base.WALExt && num >= st.LogNum && checkFileNum(name, num, st) == nil {
			logs = append(logs, num)
		}
	}
	slices.Sort(logs)
	boot := vfs.BootID(fsys)
	for _, name := range names {
		num, ext, ok := base.ParseFileName(name)
		var numErr error
		if ok {
			numErr = checkFileNum(name, num, st)
		}
		switch {
		case name == base.LockName || name == base.ManifestName:
		case !ok:
			noteForeign(name, rep)
		case numErr != nil:
			rep.problem(name, numErr)
		case (ext == base.SegmentExt && !live[num] || ext == base.WALExt && num < st.LogNum) && !isRegular(fsys, filepath.Join(dir, name)):
			rep.notef(name, "not a regular file, so not the store's though it bears the name of an obsolete file (Open leaves it)")
		case ext == base.SegmentExt && !live[num]:
			rep.notef(name, "segment not in the manifest (left by an interrupted flush or compaction); Open removes it")
		case ext == base.WALExt && num < st.LogNum:
			rep.notef(name, "WAL already flushed; Open removes it")
		case ext == base.WALExt:
			sawLog = sawLog || num == st.LogNum
			i := slices.Index(logs, num)
			opts := walRecoverOptions(fsys, dir, logs, i, boot)
			res, tail, err := verifyWALFile(ctx, fsys, filepath.Join(dir, name), name, opts, rep)
			if err != nil {
				return err
			}
			lost := i < len(logs)-1 && mayHaveLostTail(opts, res)
			if res.Unsynced || i < len(logs)-1 && unsealed(opts, res) {
				if err := sealProven(fsys, dir, logs, i, res); err != nil {
					// The tail is corruption, not the torn or unsynced
					// tail that Open would get past.
					rep.problem(name, err)
					continue
				}
			}
			rep.noteTail(name, tail)
			if lost {
				rep.notef(name, "not sealed, and written under another boot: a power cut may have lost its last writes, so Open recovers it and ignores the %d later WALs (none of their writes was synced)", len(logs)-i-1)
			}
		}
	}
	// A store that was ever opened has a WAL from LogNum on; its loss
	// would lose the writes after the last flush without a trace.
	if st.LogNum != 0 && !st.Legacy && !sawLog {
		rep.problemf(base.WALFileName(st.LogNum), "the WAL the manifest names as holding the unflushed writes is missing")
	}
	return nil
}

func verifySegmentFile(ctx context.Context, fsys vfs.FS, dir string, meta base.SegmentMeta, px *PrefixExtractor, rep *VerifyReport) error {
	name := base.SegmentFileName(meta.FileNum)
	f, err := fsys.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		rep.problemf(name, "live segment is missing from the directory")
		return nil
	}
	if err != nil {
		rep.problemf(name, "live segment cannot be opened: %v", err)
		return nil
	}
	defer f.Close()
	return verifySegment(ctx, f, meta, nil, px, rep)
}

// verifySegment reads the segment in f afresh (a reader of its own: no
// cache, no mapping, so every byte comes from the file) and checks it
// against meta and, if set, the resident filter; with px, its prefix
// filter must hold every key's prefix (checkSegmentPrefix). Damage goes
// into rep; the error is ctx's.
func verifySegment(ctx context.Context, f vfs.File, meta base.SegmentMeta, resident *bloom.Filter, px *PrefixExtractor, rep *VerifyReport) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name := base.SegmentFileName(meta.FileNum)
	st, err := f.Stat()
	if err != nil {
		rep.problem(name, err)
		return nil
	}
	if st.Size() != meta.Size {
		// As Open reports it: where the file and the manifest part ways.
		rep.problemAt(name, min(st.Size(), meta.Size), "file is %d bytes, the manifest says %d", st.Size(), meta.Size)
		return nil
	}
	r, err := segment.Open(f, meta.Size, verifyReaderOptions(name, px))
	if err != nil {
		rep.problem(name, err)
		return nil
	}
	checkSegmentPrefix(r, px, name, rep)
	defer r.Close()
	rep.Segments++
	rep.Bytes += meta.Size
	blocks, err := r.VerifyContext(ctx)
	rep.Blocks += blocks
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	if err != nil {
		rep.problem(name, err)
		return nil
	}
	rep.Entries += int64(r.Properties().Entries)
	if got := metaFromProperties(meta.FileNum, r.Properties()); !sameMeta(got, meta) {
		rep.problemf(name, "properties disagree with the manifest entry: file %+v, manifest %+v", got, meta)
	}
	if resident == nil {
		return nil
	}
	return checkResidentFilter(ctx, r, resident, name, rep)
}

// sameMeta compares the fields a segment's properties determine.
func sameMeta(a, b base.SegmentMeta) bool {
	return a.Entries == b.Entries && a.Tombstones == b.Tombstones && a.MinSeq == b.MinSeq &&
		a.MaxSeq == b.MaxSeq && bytes.Equal(a.Smallest, b.Smallest) && bytes.Equal(a.Largest, b.Largest) &&
		a.FilterLayout == b.FilterLayout && a.FilterK == b.FilterK && a.FilterBits == b.FilterBits
}

// ctxEvery is how many keys or records the checks go through between
// looks at ctx: often enough to stop within milliseconds, rarely enough to
// cost nothing.
const ctxEvery = 4096

// checkResidentFilter asks the in-memory filter (folded by the budget) for
// every key of the segment: a "no" would make Get miss stored data.
func checkResidentFilter(ctx context.Context, r *segment.Reader, f *bloom.Filter, name string, rep *VerifyReport) error {
	it := r.NewIter(false)
	it.SkipValueRecords() // Verify checks them separately
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%ctxEvery == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if !f.ContainsHash(bloom.Hash(it.Key())) {
			rep.problemf(name, "the resident (in-memory) filter misses key %q", it.Key())
			return nil
		}
	}
	if err := it.Error(); err != nil {
		rep.problem(name, err)
	}
	return nil
}

func verifyWALFile(ctx context.Context, fsys vfs.FS, path, name string, opts wal.RecoverOptions, rep *VerifyReport) (wal.Result, string, error) {
	f, err := fsys.Open(path)
	if err != nil {
		rep.problemf(name, "cannot be opened: %v", err)
		return wal.Result{}, "", nil
	}
	defer f.Close()
	return scanWAL(ctx, f, name, false, opts, rep)
}

// scanWAL reads a WAL record by record and decodes each batch, without
// the truncation that recovery does. active says a writer may be
// appending to it, so that a torn tail is a write in progress, not worth
// a note. Damage goes into rep; the error is ctx's. A tail Open would
// recover past (torn, or unsynced after a power cut) is returned as the
// note to make of it (noteTail), not made here: where a later WAL proves
// the WAL sealed, the caller reports that tail as a problem instead.
func scanWAL(ctx context.Context, f io.Reader, name string, active bool, opts wal.RecoverOptions, rep *VerifyReport) (res wal.Result, tail string, err error) {
	rep.WALs++
	r := wal.NewReader(f, name)
	if opts.UnsyncedMayBeLost {
		r.AllowUnsyncedLoss(opts.BootID)
	}
	for n := 1; ; n++ {
		if n%ctxEvery == 0 && ctx.Err() != nil {
			return wal.Result{}, "", ctx.Err()
		}
		off := r.Offset()
		rec, err := r.Next()
		switch {
		case err == nil:
			if err := batch.Decode(rec, name, off, func(uint64, batch.Op) {}); err != nil {
				rep.problem(name, err)
				return wal.Result{}, "", nil
			}
			rep.WALRecords++
			continue
		case errors.Is(err, io.EOF):
		case errors.Is(err, wal.ErrUnsyncedTail):
			tail = fmt.Sprintf("damage after the last sync at offset %d, as a power cut leaves it; Open recovers the writes before it (the rest was never synced)", r.Offset())
		case errors.Is(err, wal.ErrTornTail):
			if !active {
				tail = fmt.Sprintf("torn tail after offset %d (a write that was never acknowledged); Open ignores it", r.Offset())
			}
		default:
			rep.problem(name, err)
		}
		res = wal.Result{ValidSize: r.Offset(), Unsynced: errors.Is(err, wal.ErrUnsyncedTail)}
		res.Marked, res.Sealed, res.ThisBoot = r.Whole(opts.BootID)
		return res, tail, nil
	}
}

// noteTail notes the tail scanWAL found in file, if any.
func (r *VerifyReport) noteTail(file, tail string) {
	if tail != "" {
		r.notef(file, "%s", tail)
	}
}
