package wal

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/bloomkv/bloomkv/internal/base"

	"github.com/bloomkv/bloomkv/vfs"
)

// Result describes what Recover found.
type Result struct {
	Records   int   // records passed to fn
	ValidSize int64 // end of the last good record (0 if the file header is missing)
	TornTail  bool  // a torn tail follows ValidSize
	TornBytes int64 // how many bytes the torn tail has
	// Unsynced: the log's durable history ends at ValidSize in damage that
	// a power cut may leave (only with RecoverOptions.UnsyncedMayBeLost);
	// TornBytes counts what follows, unrecovered.
	Unsynced bool
	// Marked: the log has marks (every log the store wrote since marks
	// exist; a version-1 log has none).
	Marked bool
	// Sealed: the log ends in the mark Writer.Seal writes, so it was
	// durable to its end: a power cut cannot have lost its last records.
	Sealed bool
	// ThisBoot: the log was written under the current boot (its first
	// mark says so, and the boot is known), so the page cache held every
	// byte since: no power cut can have lost any of it.
	ThisBoot bool
}

// RecoverOptions say what recovery may assume about the log.
type RecoverOptions struct {
	// UnsyncedMayBeLost: the log is the newest, so a power cut may have
	// lost what was written after its last fsync (Reader.AllowUnsyncedLoss).
	UnsyncedMayBeLost bool
	// BootID is the current boot's (vfs.BootID).
	BootID [16]byte
	// Complete: the log is known to have been durable to its end (its
	// successor's first mark says it was fsynced before the successor was
	// created), so no crash can have torn its last record: a damaged tail
	// is corruption, not a torn tail. A tail of zero bytes (unused
	// preallocated space) is still the end of the log.
	Complete bool
}

// Recover replays the log at path in fsys, calling fn with each record's
// payload in order, with the file offset at which the record starts (for
// error messages about its contents). The payload slice is only valid
// during the call. If fn returns an error, Recover stops and returns it
// unchanged.
//
// Recover only reads: the file is never modified. A torn tail (an
// incomplete final record, a final record whose checksum fails followed by
// nothing but zero bytes, or trailing zero bytes, with no valid record in
// the bytes the final record claims) is not an error: it was never
// acknowledged, and TornTail reports it. The DB never appends to a
// recovered log (it starts a new one and deletes the old once its records
// are in a segment), so the tail needs no cutting, and a recovery that
// fails later leaves the log exactly as the crash did. Damage before the
// tail is returned as a *base.CorruptError naming the file and the offset
// of the bad record — unless opts allow a power cut's loss and the marks
// show the damaged bytes were never durable (Result.Unsynced). A file
// shorter than the file header (a crash right after it was created) is an
// empty log.
func Recover(fsys vfs.FS, path string, opts RecoverOptions, fn func(payload []byte, offset int64) error) (Result, error) {
	var res Result
	f, err := fsys.Open(path)
	if err != nil {
		return res, fmt.Errorf("wal: %w", err)
	}
	defer f.Close()

	r := NewReader(f, filepath.Base(path))
	if opts.UnsyncedMayBeLost {
		r.AllowUnsyncedLoss(opts.BootID)
	}
	for {
		start := r.Offset()
		p, err := r.Next()
		if err == nil {
			if err := fn(p, start); err != nil {
				return res, err
			}
			res.Records++
			res.ValidSize = r.Offset()
			continue
		}
		res.ValidSize = r.Offset()
		res.Marked, res.Sealed, res.ThisBoot = r.Whole(opts.BootID)
		switch {
		case err == io.EOF:
			return res, nil
		case errors.Is(err, ErrTornTail), errors.Is(err, ErrUnsyncedTail):
			st, err2 := f.Stat()
			if err2 != nil {
				return res, fmt.Errorf("wal: %w", err2)
			}
			res.TornTail, res.Unsynced = errors.Is(err, ErrTornTail), errors.Is(err, ErrUnsyncedTail)
			res.TornBytes = st.Size() - res.ValidSize
			if opts.Complete && res.TornTail {
				zero, zerr := zeroFrom(f, res.ValidSize, st.Size())
				if zerr != nil {
					return res, fmt.Errorf("wal: %w", zerr)
				}
				if !zero {
					return res, base.Corruptf(filepath.Base(path), res.ValidSize,
						"damaged final record in a log that was fsynced to its end (%v)", err)
				}
			}
			return res, nil
		default:
			return res, err
		}
	}
}

// zeroFrom reports whether f holds only zero bytes in [off, end).
func zeroFrom(f io.ReaderAt, off, end int64) (bool, error) {
	buf := make([]byte, 64<<10)
	for off < end {
		n := int(min(int64(len(buf)), end-off))
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return false, err
		}
		if !allZero(buf[:n]) {
			return false, nil
		}
		off += int64(n)
	}
	return true, nil
}

// ProvesPrevSealed reads the log at path, up to its end or its first
// damage, and reports whether it holds a mark that proves every older log
// of the store ended in a durable seal (Reader.ProvesPrevSealed). Damage
// ends the search without an error: only an I/O error is returned.
func ProvesPrevSealed(fsys vfs.FS, path string) (bool, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return false, fmt.Errorf("wal: %w", err)
	}
	defer f.Close()
	r := NewReader(f, filepath.Base(path))
	for !r.ProvesPrevSealed() {
		_, err := r.Next()
		var ce *base.CorruptError
		switch {
		case err == nil:
		case err == io.EOF, errors.Is(err, ErrTornTail), errors.As(err, &ce):
			return r.ProvesPrevSealed(), nil
		default:
			return false, err
		}
	}
	return true, nil
}

// ReadFirstMark returns the first mark of the log at path, if it has a
// readable one.
func ReadFirstMark(fsys vfs.FS, path string) (Mark, bool) {
	f, err := fsys.Open(path)
	if err != nil {
		return Mark{}, false
	}
	defer f.Close()
	r := NewReader(f, filepath.Base(path))
	_, _ = r.Next()
	return r.FirstMark()
}
