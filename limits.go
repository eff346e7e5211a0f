package bloomkv

import (
	"errors"
	"fmt"
	"syscall"
)

// outOfFiles reports whether err is the process's limit on open files
// (EMFILE, RLIMIT_NOFILE) or the system's (ENFILE).
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// fileLimitHint adds to an error that ran out of file descriptors how many
// live segments the store holds: each holds one descriptor while it is
// live (or while a snapshot, iterator or checkpoint holds it), so their
// number, not a leak, is what reaches the limit, and the remedy is a
// higher limit (README, "Limits and errors") or fewer segments
// (compaction). Other errors are returned as they are.
func fileLimitHint(err error, segments int) error {
	if !outOfFiles(err) {
		return err
	}
	return fmt.Errorf("%w (out of file descriptors with %d live segments, one open file each: raise RLIMIT_NOFILE)", err, segments)
}
