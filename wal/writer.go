package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// File is what the Writer needs of an *os.File. It is an interface so that
// tests can inject write and sync failures.
type File interface {
	io.Writer
	Sync() error
	Close() error
}

// maxRetainedBuffer caps the encoding buffer the Writer keeps between calls,
// so that one huge batch does not pin its memory for the life of the log.
const maxRetainedBuffer = 1 << 20

// Writer appends records to a log file. One goroutine at a time may call
// WriteRecords, Seal and Close (the DB's commit leader), and one at a time
// may call Sync or MarkPrevSealed — concurrently with a WriteRecords: the
// DB fsyncs one group commit while the next is copied in (pipelined
// commit). A Sync makes durable what the WriteRecords calls that returned
// before it began wrote, and perhaps more; Synced tells how much it
// covered.
//
// After a failed write the Writer is broken for writing and every later
// WriteRecords returns that same error: the file may hold a partial record,
// and nothing appended behind it could be recovered (it would look like
// mid-file corruption), so the DB must switch to a new log instead. Sync
// still works then, so that the records written before the failure can
// be made durable for the writers who wrote them. After a failed Sync the
// Writer is broken for good: after an fsync error the kernel may already
// have dropped the dirty pages, so a retry could falsely report success.
type Writer struct {
	f    File
	name string
	// amu orders the appends of WriteRecords and Seal with the one of
	// MarkPrevSealed, which another goroutine makes; it is held across
	// the copy into the file, never across an fsync.
	amu    sync.Mutex
	buf    []byte       // encoding buffer, reused across calls (writer only)
	size   atomic.Int64 // bytes written; stored after the bytes are in the file
	synced atomic.Int64 // bytes fsynced
	boot   [16]byte     // for marks; zero when the log has none
	marks  bool         // write a mark before a write that follows a sync
	marked int64        // the Synced of the last mark written (under amu)

	errMu  sync.Mutex // guards the sticky errors; never held across I/O
	werr   error      // set by the first failed write: fails writes
	serr   error      // set by the first failed Sync: fails writes and syncs
	closed error      // set by Close: fails everything

	mapped  []byte // see UseMapping
	writeAt func([]byte, int64) (int, error)
	release func(size int64) error
	zeroing bool  // see Mapping.ZeroAhead
	zeroed  int64 // mapped[:zeroed] has been written through writeAt (see zeroAhead)
}

// Mapping lets a Writer append by copying into a shared, writable mapping
// of its file instead of calling write(2) for every group commit: a copy
// into a shared mapping is in the page cache at once, so it survives a
// crash of the process just as a write(2) does, and Sync (fsync) makes it
// durable the same way. The file must already be allocated on disk for the
// whole mapping (fallocate), so that a page fault can never find the
// device full (which would be SIGBUS, not an error).
type Mapping struct {
	// Bytes is the mapping of the file from offset 0.
	Bytes []byte
	// WriteAt writes past the mapping (a group that does not fit): from
	// then on the Writer appends through it.
	WriteAt func(b []byte, off int64) (int, error)
	// ZeroAhead has the Writer also write zeros through WriteAt over the
	// still-zero region just ahead of its records (see zeroAhead): for a
	// log whose writes are not each fsynced.
	ZeroAhead bool
	// Release is called by Close with the log's size: it unmaps and trims
	// the file to that size.
	Release func(size int64) error
}

// UseMapping makes later writes go through m (see Mapping).
func (w *Writer) UseMapping(m Mapping) {
	w.mapped, w.writeAt, w.release = m.Bytes, m.WriteAt, m.Release
	w.zeroing, w.zeroed = m.ZeroAhead && m.WriteAt != nil, w.size.Load()
}

// zeroChunk is how far ahead of its records the Writer writes zeros into
// a mapped log (zeroAhead), and the size of each such write.
const zeroChunk = 64 << 10

// zeros is the source of zeroAhead's writes; it is never modified.
var zeros [zeroChunk]byte

// zeroAhead writes zeros through writeAt over the mapping from zeroed up
// to the next zeroChunk boundary at least zeroChunk past end, so that the
// copies into the mapping up to there take cheap page faults.
//
// A page of a preallocated (fallocate) region is an unwritten extent: the
// first store to it through the mapping faults into the file system,
// which on ext4 measured 3 to 14 µs a page, one fault per 30 Puts of
// 100-byte values and one or more per Put of 4 KiB values. A write(2) of
// zeros puts the pages in the page cache, and a store to a cached page
// faults only to map it: 64 KiB of zeros written and then faulted in cost
// about 0.6 µs a page (ext4, Linux 6.18). The file's contents do not
// change (the region read as zeros before), so nothing a crash or a
// power cut leaves behind changes either; what does is that an fsync also
// writes out the zeroed pages not yet written back, at most about
// 2*zeroChunk more than it would have. That is why it is for logs whose
// writes are not each fsynced (Mapping.ZeroAhead): appending 130-byte
// records each followed by an fsync measured about 7% slower with it
// (ext4, Linux 6.18), where one fault per 30 fsyncs is no cost.
//
// The region is only ever written ahead of size, by the one goroutine
// that appends, so no record is ever overwritten. A failed write of zeros
// changes nothing the log holds either; the Writer just stops zeroing and
// takes the slow faults.
func (w *Writer) zeroAhead(end int64) {
	limit := min((end+2*zeroChunk-1)&^(zeroChunk-1), int64(len(w.mapped)))
	for w.zeroed < limit {
		n := min(limit-w.zeroed, zeroChunk)
		if _, err := w.writeAt(zeros[:n], w.zeroed); err != nil {
			w.zeroed = int64(len(w.mapped))
			return
		}
		w.zeroed += n
	}
}

// NewWriter starts a log on f, which must be empty, by writing the file
// header. name identifies the file in errors. The log carries no marks;
// NewMarkedWriter is what the store uses.
func NewWriter(f File, name string) (*Writer, error) {
	w := &Writer{f: f, name: name}
	hdr := appendFileHeader(make([]byte, 0, fileHeaderSize))
	if _, err := w.write(hdr); err != nil {
		return nil, err
	}
	return w, nil
}

// NewMarkedWriter starts a log on f, which must be empty, with the file
// header and a first mark (m.Synced is ignored: nothing is synced yet), and
// from then on writes a mark before any write that follows a Sync, so that
// recovery can tell a power cut's damage from corruption (see Mark).
func NewMarkedWriter(f File, name string, m Mark) (*Writer, error) {
	w := &Writer{f: f, name: name, boot: m.BootID, marks: true}
	m.Synced = 0
	b := appendMark(appendFileHeader(make([]byte, 0, fileHeaderSize+recordHeaderSize+markLen)), m)
	if _, err := w.write(b); err != nil {
		return nil, err
	}
	return w, nil
}

// WriteRecords appends one record per payload and returns the number of
// bytes written. All records are encoded into one buffer and handed to the
// file in exactly one Write call, so a group commit of several batches
// costs one system call. Calling it with no payloads writes nothing.
//
// A payload longer than MaxRecordSize fails with ErrRecordTooLarge before
// anything is written, and leaves the Writer usable.
func (w *Writer) WriteRecords(payloads ...[]byte) (int64, error) {
	if err := w.writeErr(); err != nil {
		return 0, err
	}
	if len(payloads) == 0 {
		return 0, nil
	}
	w.amu.Lock()
	defer w.amu.Unlock()
	total := 0
	synced := w.synced.Load()
	mark := w.marks && synced > w.marked
	if mark {
		total += recordHeaderSize + markLen
	}
	for i, p := range payloads {
		if len(p) > MaxRecordSize {
			return 0, fmt.Errorf("%w: %s: payload %d is %d bytes, limit %d",
				ErrRecordTooLarge, w.name, i, len(p), MaxRecordSize)
		}
		total += recordHeaderSize + len(p)
	}
	buf := w.buf[:0]
	if cap(buf) < total {
		buf = make([]byte, 0, total)
	}
	if mark {
		buf = appendMark(buf, Mark{BootID: w.boot, Synced: synced})
		w.marked = synced
	}
	for _, p := range payloads {
		buf = appendRecord(buf, p)
	}
	n, err := w.write(buf)
	if cap(buf) <= maxRetainedBuffer {
		w.buf = buf
	} else {
		w.buf = nil
	}
	return n, err
}

// writeErr returns the error that refuses a write, if any: the first
// failure, write or sync, or else the Writer's closing.
func (w *Writer) writeErr() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	switch {
	case w.werr != nil:
		return w.werr
	case w.serr != nil:
		return w.serr
	}
	return w.closed
}

// syncErr returns the error that refuses a Sync, if any.
func (w *Writer) syncErr() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.serr != nil {
		return w.serr
	}
	return w.closed
}

// write issues one Write call, tracking the file size and breaking the
// Writer on failure. The size is stored only once the bytes are in the
// file, so a concurrent Sync never claims bytes still being copied.
func (w *Writer) write(b []byte) (int64, error) {
	size := w.size.Load()
	if end := size + int64(len(b)); end <= int64(len(w.mapped)) {
		if end > w.zeroed && w.zeroing {
			w.zeroAhead(end)
		}
		copyRecords(w.mapped[size:], b)
		w.size.Store(end)
		return int64(len(b)), nil
	}
	var n int
	var err error
	if w.writeAt != nil {
		n, err = w.writeAt(b, size)
	} else {
		n, err = w.f.Write(b)
	}
	w.size.Store(size + int64(n))
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("wal: write %s: %w", w.name, err)
		w.errMu.Lock()
		w.werr = err
		w.errMu.Unlock()
		return int64(n), err
	}
	return int64(n), nil
}

// Sync makes durable everything written before it began (Size at its
// start). It may run concurrently with WriteRecords (see Writer). A
// failed Sync breaks the Writer: after an fsync error the kernel may
// already have dropped the dirty pages, so retrying could falsely report
// success.
func (w *Writer) Sync() error {
	if err := w.syncErr(); err != nil {
		return err
	}
	size := w.size.Load()
	if err := w.f.Sync(); err != nil {
		err = fmt.Errorf("wal: sync %s: %w", w.name, err)
		w.errMu.Lock()
		if w.serr == nil {
			w.serr = err
		}
		err = w.serr
		w.errMu.Unlock()
		return err
	}
	if size > w.synced.Load() { // one Sync at a time: no lost update
		w.synced.Store(size)
	}
	return nil
}

// Synced returns how many bytes of the file (header included) a completed
// Sync has made durable.
func (w *Writer) Synced() int64 { return w.synced.Load() }

// Seal ends the log cleanly, before Close: it makes everything written
// durable, then appends a mark that claims all of it synced, and makes
// that durable too. On recovery, damage to any record before that mark is
// then corruption (the mark proves the record was durable), where damage
// to the last record of a log that was not sealed reads as a torn tail:
// the write in flight when the process died, never acknowledged. Nothing
// may be written after Seal. A log without marks (NewWriter) is only
// synced.
func (w *Writer) Seal() error {
	if err := w.syncErr(); err != nil {
		return err
	}
	if w.synced.Load() < w.size.Load() { // else the DB's seal of a rotated WAL has just synced it
		if err := w.Sync(); err != nil {
			return err
		}
	}
	if err := w.writeErr(); err != nil {
		// A failed write may have left a partial record: a mark after it
		// would make that tail look like damage to durable data.
		return err
	}
	if !w.marks {
		return nil
	}
	w.amu.Lock()
	err := w.appendMark(Mark{Seal: true})
	w.amu.Unlock()
	if err != nil {
		return err
	}
	return w.Sync()
}

// MarkPrevSealed appends a mark with the prev-sealed flag: the caller
// has seen the seal of every older log the store's recovery reads made
// durable, so that recovery may take the mark for proof that those logs
// ended in a seal (FORMAT.md, "A later log's proof"). The store calls it
// before the log's first fsync past its creation, so the writes that
// fsync acknowledges come with the proof. It may run concurrently with
// WriteRecords; it fails, writing nothing, once a write has failed (a
// mark after a partial record would make that tail look like damage to
// durable data) or the Writer is closed. A log without marks takes none.
func (w *Writer) MarkPrevSealed() error {
	// Checked under amu: a WriteRecords that fails beside this call has
	// either failed before (its partial record ends the log, and no mark
	// may follow it) or begins after the mark.
	w.amu.Lock()
	defer w.amu.Unlock()
	if err := w.writeErr(); err != nil {
		return err
	}
	if !w.marks {
		return nil
	}
	return w.appendMark(Mark{PrevSealed: true})
}

// appendMark appends the mark m with the log's boot ID and its synced
// bytes. amu is held.
func (w *Writer) appendMark(m Mark) error {
	m.BootID, m.Synced = w.boot, w.synced.Load()
	var b [recordHeaderSize + markLen]byte
	if _, err := w.write(appendMark(b[:0], m)); err != nil {
		return err
	}
	w.marked = m.Synced
	return nil
}

// Size returns the number of bytes written to the file so far, file header
// included.
func (w *Writer) Size() int64 { return w.size.Load() }

// Close closes the file. It does not sync: call Sync first if the tail must
// be durable. Later calls to any method fail.
func (w *Writer) Close() error {
	if w.f == nil {
		return fmt.Errorf("wal: close %s: %w", w.name, os.ErrClosed)
	}
	f := w.f
	w.f = nil
	w.errMu.Lock()
	w.closed = fmt.Errorf("wal: %s: %w", w.name, os.ErrClosed)
	w.errMu.Unlock()
	var err error
	if w.release != nil {
		err = w.release(w.size.Load())
		w.mapped, w.release = nil, nil
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("wal: close %s: %w", w.name, err)
	}
	return nil
}

// fence orders stores: an atomic operation is a full barrier in Go's
// memory model, on every architecture.
var fence atomic.Uint32

// copyRecords copies the encoded records b into dst, a shared mapping of
// the file, so that a process killed in the middle leaves a torn tail and
// never damage followed by a valid record. memmove stores a copy's bytes
// in whatever order suits it (on amd64, a copy over 256 bytes stores its
// first 32 bytes last), so one copy of a group could leave the group's
// first record (a sync mark, say) zero and a later record whole; the
// reader rightly calls that corruption, and the store would not open
// (found by contrib/raftstore's kill -9 test, about once in 50 kills).
// Here each record is stored in three steps, fenced from each other and
// from the next record's: its length and type, then its payload, then its
// checksum. Whenever the process dies, everything before the step under
// way is whole and everything after it is still zero, and the reader's rule
// for a record that fails its checksum with only zeros after it — a torn
// tail — covers every moment: a half-stored length can only point into
// zeros, and a record whose checksum matches was whole, as was every record
// before it.
func copyRecords(dst, b []byte) {
	for len(b) > 0 {
		n := recordHeaderSize + int(binary.LittleEndian.Uint32(b[4:8]))
		store(dst[4:recordHeaderSize], b[4:recordHeaderSize])
		fence.Add(1)
		store(dst[recordHeaderSize:n], b[recordHeaderSize:n])
		fence.Add(1)
		store(dst[:4], b[:4])
		fence.Add(1)
		dst, b = dst[n:], b[n:]
	}
}

// storeHook, if set (by tests), sees every copy copyRecords makes, in
// order, instead of it.
var storeHook func(dst, src []byte)

func store(dst, src []byte) {
	if storeHook != nil {
		storeHook(dst, src)
		return
	}
	copy(dst, src)
}
