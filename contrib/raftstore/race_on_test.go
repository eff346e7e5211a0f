//go:build race

package raftstore

// raceEnabled: tests that prove sizes, not concurrency, skip themselves
// under the race detector, whose shadow memory makes them slow.
const raceEnabled = true
