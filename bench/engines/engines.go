// Package engines runs one key-value workload against bloomkv and other
// embedded Go stores, each behind the same small Engine interface, so that
// cmd/enginebench can put their throughput side by side.
//
// Every adapter is configured alike where the stores allow it: no fsync per
// write, a Bloom filter of about 10 bits per key on every sorted table, and
// a BlockCacheSize block cache. Where a store has no such knob (bbolt keeps
// no filters and no cache of its own) the adapter's doc comment says so.
package engines

import (
	"fmt"
	"slices"
)

// Settings shared by every adapter that has the knob.
const (
	// BitsPerKey is the Bloom filter budget per key.
	BitsPerKey = 10
	// BlockCacheSize is the block cache of every store that has one:
	// bloomkv's default.
	BlockCacheSize = 64 << 20
)

// Engine is one open store, reduced to what the workload does. Methods are
// called from one goroutine.
type Engine interface {
	// Put stores value under key. The caller never modifies key or value
	// afterwards, so an engine may keep them until Compact or Close (bbolt
	// does, inside its open write transaction).
	Put(key, value []byte) error
	// Get looks key up. found reports whether it is present; value is its
	// value, appended to dst[:0] or newly allocated, never the store's own
	// memory: the caller passes it back as the next dst.
	Get(dst, key []byte) (value []byte, found bool, err error)
	// Compact writes everything out and brings the store to its fully
	// compacted state: one sorted run, or the closest the store has.
	Compact() error
	// Layout describes the on-disk shape (levels, tables) in one line.
	Layout() string
	// Close releases the store; its files stay in its directory.
	Close() error
}

// IterGetter is implemented by engines with a second point-lookup path
// worth measuring: Pebble's prefix iterator, which, unlike its Get,
// consults the Bloom filters of the last level. Same contract as Get.
type IterGetter interface {
	GetIter(dst, key []byte) (value []byte, found bool, err error)
}

// Spec names a store and how to open it.
type Spec struct {
	// Name is what -engine takes.
	Name string
	// Module is the Go module the store comes from, to look its version up.
	Module string
	// Open opens (creating if needed) a store in the directory dir.
	Open func(dir string) (Engine, error)
}

// Specs returns every store under comparison, bloomkv first (the ratios'
// reference).
func Specs() []Spec {
	return []Spec{
		{"bloomkv", "github.com/bloomkv/bloomkv", openBloomkv},
		{"pebble", "github.com/cockroachdb/pebble/v2", openPebble},
		{"goleveldb", "github.com/syndtr/goleveldb", openGoleveldb},
		{"badger", "github.com/dgraph-io/badger/v4", openBadger},
		{"bbolt", "go.etcd.io/bbolt", openBbolt},
	}
}

// ScanRead makes every engine's scans read each key and value they take,
// one byte of each cache line, as a consumer of the data would, instead
// of only their lengths. A scan then costs every engine the memory
// traffic of the bytes it returns, including one whose iterator finds
// their lengths and places without reading them (bbolt). Set it before
// scanning, not during.
var ScanRead bool

// readWeight is 0, and never written: what touch reads is multiplied by
// it and added to the count, so that the compiler, which cannot know it
// is 0, keeps the loads, without a write that concurrent scans would
// share.
var readWeight int64

// taken is what a scan counts for one key and value: their length, after
// reading them if ScanRead is set.
func taken(k, v []byte) int64 {
	n := int64(len(k) + len(v))
	if ScanRead {
		n += int64(touch(k)+touch(v)) * readWeight
	}
	return n
}

// touch reads one byte of each cache line b spans: stepping 64 bytes from
// its first byte lands once in each line, and its last byte covers the
// line the steps may end before.
func touch(b []byte) (s byte) {
	for i := 0; i < len(b); i += 64 {
		s += b[i]
	}
	if len(b) > 0 {
		s += b[len(b)-1]
	}
	return s
}

// Lookup returns the Spec called name.
func Lookup(name string) (Spec, error) {
	specs := Specs()
	i := slices.IndexFunc(specs, func(s Spec) bool { return s.Name == name })
	if i < 0 {
		return Spec{}, fmt.Errorf("unknown engine %q", name)
	}
	return specs[i], nil
}

// Scanner is implemented by every engine: ordered reads with the store's
// own iterator. Scan reads up to n keys (all of them for n < 0) in key
// order from the first key >= start (from the first key for nil start),
// taking each key and value as a slice, and returns how many keys and
// key+value bytes it read. Only the slices' lengths are summed (taken): a
// store that knows a value's length without reading the value (bbolt's
// leaf elements) is not made to read it, and none can skip a key
// unnoticed. With ScanRead set, every scan also reads the keys and values
// it takes.
type Scanner interface {
	Scan(start []byte, n int) (keys int, bytes int64, err error)
}

// ReverseScanner is implemented by the engines whose iterators also move
// backward (bloomkv, bbolt, Pebble, goleveldb): ScanReverse reads every key
// in descending key order from the last, taking keys and values as Scan
// does, and returns how many keys and key+value bytes it
// read.
type ReverseScanner interface {
	ScanReverse() (keys int, bytes int64, err error)
}

// reverseCursor is the backward half of the iterator shape bloomkv and
// goleveldb share.
type reverseCursor interface {
	Last() bool
	Prev() bool
	Key() []byte
	Value() []byte
}

// scanCursorReverse is ReverseScanner.ScanReverse over a cursor; the
// caller closes it.
func scanCursorReverse(it reverseCursor) (keys int, bytes int64) {
	for ok := it.Last(); ok; ok = it.Prev() {
		keys++
		bytes += taken(it.Key(), it.Value())
	}
	return keys, bytes
}

// cursor is the iterator shape bloomkv and goleveldb share.
type cursor interface {
	First() bool
	Seek(key []byte) bool
	Next() bool
	Key() []byte
	Value() []byte
}

// scanCursor is Scanner.Scan over a cursor; the caller closes it.
func scanCursor(it cursor, start []byte, n int) (keys int, bytes int64) {
	var ok bool
	if start != nil {
		ok = it.Seek(start)
	} else {
		ok = it.First()
	}
	for ; ok && keys != n; ok = it.Next() {
		keys++
		bytes += taken(it.Key(), it.Value())
	}
	return keys, bytes
}
