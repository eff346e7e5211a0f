//go:build race

package datastore

// raceEnabled: the race detector slows the store's background work
// several times over, so the longest tests shrink under it.
const raceEnabled = true
