//go:build unix

package main

import "syscall"

// majorFaults returns the process's major page faults so far: faults that
// had to read the page from the device (0 if getrusage fails).
func majorFaults() uint64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return uint64(ru.Majflt)
}
