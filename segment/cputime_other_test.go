//go:build !unix

package segment

// cpuSeconds is not measured here: benchmarks report 0 CPU time.
func cpuSeconds() float64 { return 0 }
