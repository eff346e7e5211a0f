//go:build race

package compaction

// raceEnabled skips the allocation simulation under the race detector: it
// is single-goroutine arithmetic that only prints DESIGN.md's table.
const raceEnabled = true
