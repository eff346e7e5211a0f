//go:build !unix

package bloomkv

import "time"

// cpuSeconds is 0 where getrusage is missing: cpu-ns/key then reads 0.
func cpuSeconds() float64 { return 0 }

// sleepThread sleeps for d (see the unix version).
func sleepThread(d time.Duration) { time.Sleep(d) }
