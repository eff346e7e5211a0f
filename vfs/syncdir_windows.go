//go:build windows

package vfs

import "os"

// syncDir does nothing: Windows cannot flush a directory handle
// (FlushFileBuffers needs write access to a file), and NTFS journals
// its metadata, so a rename or creation is not left behind by a later
// flush of the file it names.
func syncDir(*os.File) error { return nil }
