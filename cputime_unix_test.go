//go:build unix

package bloomkv

import "syscall"

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
