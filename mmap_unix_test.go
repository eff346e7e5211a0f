//go:build unix

package bloomkv

// segmentsMapped: segments are read through a memory mapping here
// (mmap_unix.go), unless Options.DisableMmap says otherwise.
const segmentsMapped = true
