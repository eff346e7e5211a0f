package bloomkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/wal"
)

// VerifyReport is what Verify and VerifyDir found. Damage is reported in
// Problems, not as an error: the error return is for being unable to check
// at all.
type VerifyReport struct {
	Segments   int   // live segments checked
	Blocks     int   // their data blocks, each read from the file and its checksum checked
	Entries    int64 // their entries (versions and tombstones)
	Bytes      int64 // their total size
	WALs       int   // WALs read (VerifyDir only: an open DB's are in use)
	WALRecords int   // records in them
	// Problems are damage and disagreements: a store with any is not
	// intact.
	Problems []Problem
	// Notes are findings that are not damage: files the next Open would
	// remove, a torn WAL tail it would cut off (a write never
	// acknowledged).
	Notes []Problem
}

// A Problem is one finding of Verify: the file, the offset in it (-1 when
// it is about the whole file) and what is wrong.
type Problem struct {
	File    string
	Offset  int64
	Message string
}

func (p Problem) String() string {
	if p.Offset < 0 {
		return fmt.Sprintf("%s: %s", p.File, p.Message)
	}
	return fmt.Sprintf("%s at offset %d: %s", p.File, p.Offset, p.Message)
}

// OK reports whether no problem was found.
func (r *VerifyReport) OK() bool { return len(r.Problems) == 0 }

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

func (r *VerifyReport) problemf(file string, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{File: file, Offset: -1, Message: fmt.Sprintf(format, args...)})
}

func (r *VerifyReport) notef(file string, format string, args ...any) {
	r.Notes = append(r.Notes, Problem{File: file, Offset: -1, Message: fmt.Sprintf(format, args...)})
}

// Verify checks the live data of an open DB without changing it: every
// segment is read again from its file — every block's checksum and
// structure, key order, that every key passes both the segment's stored
// filter and the filter held in memory (which the filter budget may have
// folded), and that the data agrees with the segment's properties and its
// manifest entry — and the directory holds every file the manifest lists.
// Reads and writes may go on meanwhile; the segments checked are those
// live when Verify starts. It stops early, with ctx's error, when ctx is
// done.
func (db *DB) Verify(ctx context.Context) (*VerifyReport, error) {
	rs := db.acquire()
	if rs == nil {
		return nil, ErrClosed
	}
	defer rs.release()
	rep := &VerifyReport{}
	for _, s := range rs.segments {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		verifySegment(s.file, s.meta, s.reader.ResidentFilter(), rep)
	}
	names, err := db.fs.List(db.dir)
	if err != nil {
		return rep, fmt.Errorf("bloomkv: verify: %w", err)
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	for _, s := range rs.segments {
		if !present[s.name] {
			rep.problemf(s.name, "live segment missing from the directory")
		}
	}
	return rep, nil
}

// VerifyDir checks the store in dir, which must not be open, without
// changing anything: the manifest (read-only), every live segment as
// Verify does, and every WAL that Open would replay, record by record. It
// returns ErrLocked if a DB has the store open (its files may change under
// the check), ErrNotStore if dir holds no manifest. fsys nil means the
// operating system's file system.
func VerifyDir(ctx context.Context, fsys vfs.FS, dir string) (*VerifyReport, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	lockPath := filepath.Join(dir, lockName)
	if _, err := fsys.Stat(lockPath); err == nil { // Lock would create a missing LOCK file
		l, err := lockDir(fsys, dir)
		if err != nil {
			return nil, err
		}
		defer l.Close()
	}
	st, err := manifest.ReadState(fsys, filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s", ErrNotStore, dir, manifestName)
	}
	if errors.Is(err, manifest.ErrLocked) {
		return nil, fmt.Errorf("%w: %w", ErrLocked, err)
	}
	if err != nil && !errors.Is(err, base.ErrCorrupt) {
		return nil, fmt.Errorf("bloomkv: verify: %w", err)
	}
	rep := &VerifyReport{}
	if err != nil {
		rep.problem(manifestName, err)
		return rep, nil
	}
	live := make(map[uint64]bool, len(st.Segments))
	for _, meta := range st.Segments {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		live[meta.FileNum] = true
		verifySegmentFile(fsys, dir, meta, rep)
	}
	names, err := fsys.List(dir)
	if err != nil {
		return rep, fmt.Errorf("bloomkv: verify: %w", err)
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		num, ext, ok := parseFileName(name)
		switch {
		case name == lockName || name == manifestName:
		case !ok:
			rep.notef(name, "not a file of the store")
		case ext == segExt && !live[num]:
			rep.notef(name, "segment not in the manifest (left by an interrupted flush or compaction); Open removes it")
		case ext == walExt && num < st.LogNum:
			rep.notef(name, "WAL already flushed; Open removes it")
		case ext == walExt:
			verifyWAL(fsys, filepath.Join(dir, name), name, rep)
		}
	}
	return rep, nil
}

func verifySegmentFile(fsys vfs.FS, dir string, meta manifest.SegmentMeta, rep *VerifyReport) {
	name := segFileName(meta.FileNum)
	f, err := fsys.Open(filepath.Join(dir, name))
	if err != nil {
		rep.problemf(name, "live segment cannot be opened: %v", err)
		return
	}
	defer f.Close()
	verifySegment(f, meta, nil, rep)
}

// verifySegment reads the segment in f afresh (a reader of its own: no
// cache, no mapping, so every byte comes from the file) and checks it
// against meta and, if set, the resident filter.
func verifySegment(f vfs.File, meta manifest.SegmentMeta, resident *bloom.Filter, rep *VerifyReport) {
	name := segFileName(meta.FileNum)
	st, err := f.Stat()
	if err != nil {
		rep.problem(name, err)
		return
	}
	if st.Size() != meta.Size {
		rep.problemf(name, "file is %d bytes, the manifest says %d", st.Size(), meta.Size)
		return
	}
	r, err := segment.Open(f, meta.Size, segment.ReaderOptions{Name: name})
	if err != nil {
		rep.problem(name, err)
		return
	}
	defer r.Close()
	rep.Segments++
	rep.Blocks += r.Blocks()
	rep.Bytes += meta.Size
	rep.Entries += int64(r.Properties().Entries)
	if err := r.Verify(); err != nil {
		rep.problem(name, err)
		return
	}
	if got := metaFromProperties(meta.FileNum, r.Properties()); !sameMeta(got, meta) {
		rep.problemf(name, "properties disagree with the manifest entry: file %+v, manifest %+v", got, meta)
	}
	if resident != nil && resident != r.Filter() {
		checkResidentFilter(r, resident, name, rep)
	}
}

// sameMeta compares the fields a segment's properties determine.
func sameMeta(a, b manifest.SegmentMeta) bool {
	return a.Entries == b.Entries && a.Tombstones == b.Tombstones && a.MinSeq == b.MinSeq &&
		a.MaxSeq == b.MaxSeq && bytes.Equal(a.Smallest, b.Smallest) && bytes.Equal(a.Largest, b.Largest)
}

// checkResidentFilter asks the in-memory filter (folded by the budget) for
// every key of the segment: a "no" would make Get miss stored data.
func checkResidentFilter(r *segment.Reader, f *bloom.Filter, name string, rep *VerifyReport) {
	it := r.NewIter(false)
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if !f.ContainsHash(bloom.Hash(it.Key())) {
			rep.problemf(name, "the resident (folded) filter misses key %q", it.Key())
			return
		}
	}
	if err := it.Error(); err != nil {
		rep.problem(name, err)
	}
}

// verifyWAL reads a WAL record by record and decodes each batch, without
// the truncation that recovery does.
func verifyWAL(fsys vfs.FS, path, name string, rep *VerifyReport) {
	f, err := fsys.Open(path)
	if err != nil {
		rep.problemf(name, "cannot be opened: %v", err)
		return
	}
	defer f.Close()
	rep.WALs++
	r := wal.NewReader(f, name)
	for {
		off := r.Offset()
		rec, err := r.Next()
		switch {
		case err == nil:
			rep.WALRecords++
			if err := decodeBatch(rec, name, off, func(uint64, batchOp) {}); err != nil {
				rep.problem(name, err)
				return
			}
			continue
		case errors.Is(err, io.EOF):
		case errors.Is(err, wal.ErrTornTail):
			rep.notef(name, "torn tail after offset %d (a write that was never acknowledged); Open cuts it off", r.Offset())
		default:
			rep.problem(name, err)
		}
		return
	}
}
