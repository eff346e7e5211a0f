//go:build unix

package bloomkv

import (
	"syscall"
	"time"
)

// cpuSeconds is the CPU time this process has used (user and system):
// on a shared, loaded machine, a benchmark's CPU time per operation is
// steadier than its wall time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// sleepThread blocks the calling thread for d in the kernel, as an fsync
// does, with the kernel's timer resolution: time.Sleep parks the
// goroutine instead, and an idle Go scheduler may wake it a millisecond
// late.
func sleepThread(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}
