//go:build !race

package datastore

// raceEnabled: see race_on_test.go.
const raceEnabled = false
