package bloomkv

import (
	"os"
	"testing"
)

// TestMain removes the store the benchmarks share (filledDB), which
// outlives any one benchmark and so cannot use b.TempDir.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDB != nil {
		benchDB.Close()
	}
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}
