package wal

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/bloomkv/bloomkv/vfs"
)

// Result describes what Recover found.
type Result struct {
	Records        int   // records passed to fn
	ValidSize      int64 // end of the last good record (0 if the file header is missing)
	Truncated      bool  // a torn tail was cut off the file
	TruncatedBytes int64 // how many bytes were cut off
}

// Recover replays the log at path in fsys, calling fn with each record's payload in
// order, with the file offset at which the record starts (for error
// messages about its contents). The payload slice is only valid during the call. If fn returns an
// error, Recover stops and returns it unchanged.
//
// A torn tail (an incomplete final record, a final record whose checksum
// fails followed by nothing but zero bytes, or trailing zero bytes) is not
// an error: it was never acknowledged, so the file is truncated to
// ValidSize, synced, and Truncated reports it. Damage before the tail is
// returned as a *base.CorruptError naming the file and the offset of the
// bad record, and the file is left untouched. A file shorter than the file
// header (a crash right after it was created) is an empty log and is not
// modified either.
func Recover(fsys vfs.FS, path string, fn func(payload []byte, offset int64) error) (Result, error) {
	var res Result
	f, err := fsys.Open(path)
	if err != nil {
		return res, fmt.Errorf("wal: %w", err)
	}
	defer f.Close()

	r := NewReader(f, filepath.Base(path))
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
		switch {
		case err == io.EOF:
			return res, nil
		case errors.Is(err, ErrTornTail):
			return truncate(fsys, path, f, res)
		default:
			return res, err
		}
	}
}

// truncate cuts the torn tail off the log at path and makes the cut
// durable, so that a later crash cannot resurrect the unacknowledged bytes.
func truncate(fsys vfs.FS, path string, f vfs.File, res Result) (Result, error) {
	st, err := f.Stat()
	if err != nil {
		return res, fmt.Errorf("wal: %w", err)
	}
	wf, err := fsys.OpenReadWrite(path)
	if err != nil {
		return res, fmt.Errorf("wal: truncate torn tail: %w", err)
	}
	err = wf.Truncate(res.ValidSize)
	if err == nil {
		err = wf.Sync()
	}
	if cerr := wf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("wal: truncate torn tail: %w", err)
	}
	res.Truncated = true
	res.TruncatedBytes = st.Size() - res.ValidSize
	return res, nil
}
