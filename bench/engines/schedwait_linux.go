package engines

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// threadRunqueueWait returns the time the calling OS thread has spent
// runnable but waiting for a CPU (the second field of
// /proc/thread-self/schedstat), and false where that is unavailable. The
// caller must be locked to its thread (runtime.LockOSThread) for the
// difference of two calls to mean anything.
func threadRunqueueWait() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(n), true
}
