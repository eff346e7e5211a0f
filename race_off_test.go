//go:build !race

package bloomkv

// raceEnabled: see race_on_test.go.
const raceEnabled = false
