package engines

import "os"

// writeFile writes size bytes of non-zero data to path.
func writeFile(path string, size int) error {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return os.WriteFile(path, b, 0o600)
}
