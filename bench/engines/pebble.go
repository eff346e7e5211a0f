package engines

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// pebbleEngine is Pebble v2 with a 10 bits/key Bloom filter on every level
// (Pebble's default has none on L0 and inherits upwards, so all seven are
// set explicitly), a BlockCacheSize cache, the newest stable format, and
// writes without fsync (pebble.NoSync). Other options are Pebble's
// defaults (4 MiB memtable, snappy, 4 KiB blocks).
type pebbleEngine struct {
	db *pebble.DB
	// it serves GetIter. It is created on first use and reused: an
	// iterator reads the state of its creation, which is fine because the
	// workload writes nothing after Compact.
	it *pebble.Iterator
}

func openPebble(dir string) (Engine, error) {
	db, err := openPebbleDB(dir)
	if err != nil {
		return nil, err
	}
	return &pebbleEngine{db: db}, nil
}

// openPebbleDB opens a Pebble DB with the adapter's settings.
func openPebbleDB(dir string) (*pebble.DB, error) { return openPebbleDBWith(dir, nil) }

// openPebbleDBWith is openPebbleDB with edit applied to the options (if
// not nil) before the open.
func openPebbleDBWith(dir string, edit func(*pebble.Options)) (*pebble.DB, error) {
	cache := pebble.NewCache(BlockCacheSize)
	defer cache.Unref() // the DB holds its own reference
	opts := &pebble.Options{
		Cache:              cache,
		Comparer:           wholeKeyComparer(),
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietLogger{},
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(BitsPerKey)
		opts.Levels[i].FilterType = pebble.TableFilter
	}
	if edit != nil {
		edit(opts)
	}
	return pebble.Open(dir, opts)
}

// wholeKeyComparer is Pebble's default bytewise comparer with Split made
// explicit: the whole key is the prefix, so SeekPrefixGE(key) is an exact
// lookup whose filter probe is for the key itself. (DefaultSplit already
// does this; spelling it out keeps the iterator measurement from depending
// on a default.)
func wholeKeyComparer() *pebble.Comparer {
	c := *pebble.DefaultComparer
	c.Split = func(key []byte) int { return len(key) }
	return &c
}

func (e *pebbleEngine) Put(key, value []byte) error { return e.db.Set(key, value, pebble.NoSync) }

// Get is DB.Get, which in Pebble v2 does not read the filters of L6 tables,
// where a fully compacted store keeps all its data.
func (e *pebbleEngine) Get(dst, key []byte) ([]byte, bool, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst[:0], false, nil
	}
	if err != nil {
		return dst[:0], false, err
	}
	dst = append(dst[:0], v...)
	return dst, true, closer.Close()
}

// GetIter looks key up with SeekPrefixGE on an iterator opened with
// UseL6Filters, so the filters of every level are consulted.
func (e *pebbleEngine) GetIter(dst, key []byte) ([]byte, bool, error) {
	if e.it == nil {
		it, err := e.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			return dst[:0], false, err
		}
		e.it = it
	}
	if !e.it.SeekPrefixGE(key) || !bytes.Equal(e.it.Key(), key) {
		return dst[:0], false, e.it.Error()
	}
	v, err := e.it.ValueAndErr()
	if err != nil {
		return dst[:0], false, err
	}
	return append(dst[:0], v...), true, nil
}

// Compact flushes the memtable (Compact does that for an overlapping
// range) and compacts the whole key space, level by level, into the
// bottommost level that holds data.
func (e *pebbleEngine) Compact() error {
	if err := e.closeIter(); err != nil {
		return err
	}
	// Every 16-byte key is > {0x00} and < 17 bytes of 0xff.
	return e.db.Compact(context.Background(), []byte{0}, bytes.Repeat([]byte{0xff}, 17), false)
}

func (e *pebbleEngine) Layout() string {
	m := e.db.Metrics()
	var parts []string
	for level, l := range m.Levels {
		if l.TablesCount > 0 {
			parts = append(parts, fmt.Sprintf("L%d: %d tables", level, l.TablesCount))
		}
	}
	return strings.Join(parts, ", ")
}

func (e *pebbleEngine) closeIter() error {
	if e.it == nil {
		return nil
	}
	err := e.it.Close()
	e.it = nil
	return err
}

func (e *pebbleEngine) Close() error { return errors.Join(e.closeIter(), e.db.Close()) }

// quietLogger drops Pebble's informational messages but not its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

// Scan uses one pebble.Iterator per call with default IterOptions; its
// blocks go through the block cache (Pebble has no knob to keep them out).
func (e *pebbleEngine) Scan(start []byte, n int) (int, int64, error) {
	it, err := e.db.NewIter(nil)
	if err != nil {
		return 0, 0, err
	}
	ok := it.First()
	if start != nil {
		ok = it.SeekGE(start)
	}
	return pebbleCount(it, ok, it.Next, n)
}

// pebbleCount counts up to n keys (-1: all) and their bytes from it,
// positioned (ok) by the caller, moving with step, and closes it.
func pebbleCount(it *pebble.Iterator, ok bool, step func() bool, n int) (int, int64, error) {
	keys, bytes := 0, int64(0)
	for ; ok && keys != n; ok = step() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return keys, bytes, err
		}
		keys++
		bytes += taken(it.Key(), v)
	}
	return keys, bytes, it.Close()
}

// NewIterGetter returns GetIter's lookup on an iterator of its own, for
// one goroutine of a concurrent phase (a pebble.Iterator is not safe for
// concurrent use).
func (e *pebbleEngine) NewIterGetter() (func(dst, key []byte) ([]byte, bool, error), func() error, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return nil, nil, err
	}
	own := &pebbleEngine{db: e.db, it: it}
	return own.GetIter, own.closeIter, nil
}

// Flush writes the memtable to an L0 table (DB.Flush).
func (e *pebbleEngine) Flush() error { return e.db.Flush() }

// Flushes is Metrics().Flush.Count.
func (e *pebbleEngine) Flushes() uint64 { return uint64(e.db.Metrics().Flush.Count) }

// ScanReverse is Scan backward, from Last with Prev.
func (e *pebbleEngine) ScanReverse() (int, int64, error) {
	it, err := e.db.NewIter(nil)
	if err != nil {
		return 0, 0, err
	}
	return pebbleCount(it, it.Last(), it.Prev, -1)
}
