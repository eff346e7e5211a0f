//go:build !linux

package engines

import "time"

// sleepThread sleeps for d (see the Linux version).
func sleepThread(d time.Duration) { time.Sleep(d) }
