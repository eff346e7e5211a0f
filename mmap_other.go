//go:build !unix

package bloomkv

import "github.com/bloomkv/bloomkv/vfs"

// mapSegment does not map on this platform (Windows): it returns nil, and
// segments are read with ReadAt (pread), as with Options.DisableMmap.
func mapSegment(vfs.File, int64) ([]byte, error) { return nil, nil }

// unmapSegment is never given a mapping here.
func unmapSegment([]byte) error { return nil }
