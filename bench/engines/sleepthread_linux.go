package engines

import (
	"syscall"
	"time"
)

// sleepThread blocks the calling thread for d in the kernel, as an fsync
// does, with the kernel's timer resolution: time.Sleep parks the
// goroutine instead, and an idle Go scheduler may wake it a millisecond
// late.
func sleepThread(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}
