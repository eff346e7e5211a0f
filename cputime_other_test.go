//go:build !unix

package bloomkv

// cpuSeconds is 0 where getrusage is missing: cpu-ns/key then reads 0.
func cpuSeconds() float64 { return 0 }
