//go:build !unix

package bloomkv

// segmentsMapped: segments are read with ReadAt here (mmap_other.go).
const segmentsMapped = false
