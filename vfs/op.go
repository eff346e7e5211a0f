package vfs

import "fmt"

// Op is a kind of file system operation, as a bit so that a set of them
// fits in one value. It names what Bypass announces, and the test
// doubles (vfs/errorfs, vfs/powerfs) use it to say which operations
// they fail or count.
type Op uint32

// The operations of an FS and its files, a manifest commit, and the
// mapping of a segment file.
const (
	OpCreate Op = 1 << iota
	OpOpen
	OpRead // Read and ReadAt
	OpWrite
	OpSync
	OpTruncate
	OpRemove
	OpRename
	OpLink
	OpList
	OpMkdir
	OpSyncDir
	OpLock
	OpStat
	OpCommit // a manifest transaction (see Bypass)
	OpMap    // a file mapped into memory for reading (see Bypass)

	OpAny Op = 1<<iota - 1
)

var opNames = []string{"create", "open", "read", "write", "sync", "truncate", "remove", "rename", "link", "list", "mkdir", "syncdir", "lock", "stat", "commit", "map"}

func (op Op) String() string {
	for i, n := range opNames {
		if op == 1<<i {
			return n
		}
	}
	return fmt.Sprintf("Op(%#x)", uint32(op))
}

// Bypasser is implemented by file systems that want to see, and may
// refuse, what is done to a file without going through them. The
// manifest is a bbolt database, and bbolt opens, writes and syncs its
// file with the os package itself; so the manifest calls Bypass before
// bbolt creates or opens the file (OpCreate, OpOpen) and before each
// transaction (OpCommit). The store also calls it before it maps a
// segment file (OpMap), whose reads then go through the mapping, not the
// FS; refused, the mapping is not made and the segment is read through
// the FS, as when the operating system refuses it. A fault-injecting FS
// can fail those steps (OpMap with ENOMEM is a store out of mappings); a
// power-loss simulation can note which files it must take as they are on
// disk, and refuse commits once the power is off.
type Bypasser interface {
	// Bypass is told that op is about to be done to the file name outside
	// the FS; a non-nil error is the one the caller fails with instead
	// (or, for OpMap, the reason it reads the file through the FS).
	Bypass(op Op, name string) error
}

// Bypass announces to fsys that op is about to be done to the file name
// outside it (see Bypasser), and returns the error fsys wants the caller
// to fail with: nil if fsys is not a Bypasser, as for Default.
func Bypass(fsys FS, op Op, name string) error {
	if b, ok := fsys.(Bypasser); ok {
		return b.Bypass(op, name)
	}
	return nil
}
