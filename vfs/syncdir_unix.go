//go:build unix

package vfs

import "os"

// syncDir fsyncs the directory d, making the creations, renames and
// removals in it durable.
func syncDir(d *os.File) error { return d.Sync() }
