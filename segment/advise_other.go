//go:build !unix

package segment

// adviseWillNeed is a no-op where madvise does not exist.
func adviseWillNeed(m []byte, off, n uint64) {}
