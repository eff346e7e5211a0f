// Package heapstat measures the live heap for the memory-bound tests of
// the store's packages: what a structure holds, not what it allocated on
// the way.
package heapstat

import "runtime"

// Live returns the bytes of live heap objects after a full collection.
// It collects twice: objects with finalizers, and memory a first cycle's
// sweep has not returned yet, are gone after the second.
func Live() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
