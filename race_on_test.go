//go:build race

package bloomkv

// raceEnabled: the race detector instruments memory accesses and
// allocates for its own bookkeeping, so allocation counts do not hold
// under it.
const raceEnabled = true
