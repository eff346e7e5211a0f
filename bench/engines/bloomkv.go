package engines

import (
	"errors"
	"fmt"

	"github.com/bloomkv/bloomkv"
)

// bloomkvEngine is bloomkv with DefaultOptions: 10 bits/key filters, 64 MiB
// block cache, 4 MiB memtable, no fsync per write (Sync false).
type bloomkvEngine struct{ db *bloomkv.DB }

func openBloomkv(dir string) (Engine, error) {
	db, err := bloomkv.Open(dir, bloomkv.DefaultOptions())
	if err != nil {
		return nil, err
	}
	return &bloomkvEngine{db}, nil
}

func (e *bloomkvEngine) Put(key, value []byte) error { return e.db.Put(key, value) }

// Get copies the value into dst through GetFunc, as the bbolt and Pebble
// adapters copy theirs out of the page or block they read: no allocation
// per lookup once dst has grown.
func (e *bloomkvEngine) Get(dst, key []byte) ([]byte, bool, error) {
	err := e.db.GetFunc(key, func(v []byte) error {
		dst = append(dst[:0], v...)
		return nil
	})
	if errors.Is(err, bloomkv.ErrNotFound) {
		return dst[:0], false, nil
	}
	return dst, err == nil, err
}

// Compact flushes the memtable and merges every segment into one.
func (e *bloomkvEngine) Compact() error { return e.db.Compact() }

func (e *bloomkvEngine) Layout() string {
	s := e.db.Stats()
	return fmt.Sprintf("%d segments, %d memtables, filters %d bytes", s.Segments, s.Memtables, s.FilterBytes)
}

func (e *bloomkvEngine) Close() error { return e.db.Close() }

// Scan uses one Iterator per call, with bloomkv's default of not filling
// the block cache. It calls the Iterator's methods directly, as the bbolt
// adapter calls its cursor's, rather than through the cursor interface
// that goleveldb's adapter shares (scanCursor): the three calls per key
// through an interface took 7-10% of a full scan's CPU time (10^5 keys,
// 100-byte values, both loops alternating in one process).
func (e *bloomkvEngine) Scan(start []byte, n int) (int, int64, error) {
	it, err := e.db.NewIterator(nil)
	if err != nil {
		return 0, 0, err
	}
	keys, bytes := 0, int64(0)
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
	return keys, bytes, it.Close()
}

// Flush writes the memtable to a segment (DB.Flush).
func (e *bloomkvEngine) Flush() error { return e.db.Flush() }

// Flushes is Stats().Flushes.
func (e *bloomkvEngine) Flushes() uint64 { return e.db.Stats().Flushes }

// WriteStats returns Stats' WriteStalls, Flushes, Compactions,
// WriteStallTime, FlushStallTime and LongestWriteStall.
func (e *bloomkvEngine) WriteStats() WriteStats {
	s := e.db.Stats()
	return WriteStats{Stalls: s.WriteStalls, Flushes: s.Flushes, Compactions: s.Compactions,
		StallTime: s.WriteStallTime, FlushStallTime: s.FlushStallTime, LongestStall: s.LongestWriteStall}
}

// ScanReverse is Scan backward, from Last with Prev.
func (e *bloomkvEngine) ScanReverse() (int, int64, error) {
	it, err := e.db.NewIterator(nil)
	if err != nil {
		return 0, 0, err
	}
	keys, bytes := 0, int64(0)
	for ok := it.Last(); ok; ok = it.Prev() {
		keys++
		bytes += taken(it.Key(), it.Value())
	}
	return keys, bytes, it.Close()
}
