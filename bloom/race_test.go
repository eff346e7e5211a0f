//go:build race

package bloom

// raceEnabled shrinks the statistical tests under the race detector, which
// slows the probe loops tenfold and has nothing to find in them.
const raceEnabled = true
