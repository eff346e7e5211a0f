// Package flock is bloomkv's one file lock: vfs locks a store's LOCK file
// with it, and the manifest locks its bbolt file with it before bbolt
// does, so both take the same kind of lock on every platform.
package flock

import "errors"

// ErrLocked is returned by TryLock when another holder has a conflicting
// lock.
var ErrLocked = errors.New("flock: file is locked")
