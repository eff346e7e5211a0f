package engines

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/filter"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// goleveldbEngine is goleveldb with a 10 bits/key Bloom filter, a
// BlockCacheSize block cache and writes without fsync (WriteOptions.Sync
// false). Other options are its defaults (4 MiB write buffer, snappy,
// 4 KiB blocks).
type goleveldbEngine struct {
	db   *leveldb.DB
	opts *opt.Options
	wo   *opt.WriteOptions
}

func goleveldbOptions() *opt.Options {
	return &opt.Options{
		Filter:             filter.NewBloomFilter(BitsPerKey),
		BlockCacheCapacity: BlockCacheSize,
	}
}

func openGoleveldb(dir string) (Engine, error) {
	opts := goleveldbOptions()
	db, err := leveldb.OpenFile(dir, opts)
	if err != nil {
		return nil, err
	}
	return &goleveldbEngine{db: db, opts: opts, wo: &opt.WriteOptions{Sync: false}}, nil
}

func (e *goleveldbEngine) Put(key, value []byte) error { return e.db.Put(key, value, e.wo) }

// Get returns goleveldb's result, a fresh copy.
func (e *goleveldbEngine) Get(_, key []byte) ([]byte, bool, error) {
	v, err := e.db.Get(key, nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// Compact compacts the whole key range (util.Range{} is unbounded):
// CompactRange flushes the memtable, then merges each level into the next
// down to the deepest level that holds data. If that level is over its
// size target (L1: 100 MiB), goleveldb's background compaction would go on
// moving data down during the reads, so Compact waits for it to start
// filling a deeper level and compacts again, until all data sits in one
// level within its target, where no compaction will follow.
func (e *goleveldbEngine) Compact() error {
	deadline := time.Now().Add(goleveldbSettleTimeout)
	for time.Now().Before(deadline) {
		if err := e.db.CompactRange(util.Range{}); err != nil {
			return err
		}
		var s leveldb.DBStats
		if err := e.db.Stats(&s); err != nil {
			return err
		}
		deepest, levels := deepestLevel(&s)
		switch {
		case levels > 1:
			// A background compaction ran after CompactRange: compact again.
		case deepest == 0 || s.LevelSizes[deepest] < e.opts.GetCompactionTotalSize(deepest):
			return nil // one level within its target: compaction score < 1
		default:
			if err := e.waitBelow(deepest, deadline); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("goleveldb: not settled in one level after %v", goleveldbSettleTimeout)
}

// goleveldbSettleTimeout bounds Compact's wait for background compaction.
const goleveldbSettleTimeout = 10 * time.Minute

// deepestLevel returns the deepest level holding tables and how many
// levels hold tables.
func deepestLevel(s *leveldb.DBStats) (deepest, levels int) {
	for level, n := range s.LevelTablesCounts {
		if n > 0 {
			levels++
			deepest = level
		}
	}
	return deepest, levels
}

// waitBelow waits until a level deeper than level holds tables, the sign
// that background compaction has moved data down.
func (e *goleveldbEngine) waitBelow(level int, deadline time.Time) error {
	for {
		var s leveldb.DBStats
		if err := e.db.Stats(&s); err != nil {
			return err
		}
		if slices.ContainsFunc(s.LevelTablesCounts[level+1:], func(n int) bool { return n > 0 }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("goleveldb: L%d over its target but not compacted after %v", level, goleveldbSettleTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *goleveldbEngine) Layout() string {
	var parts []string
	for level := range 7 {
		n, err := e.db.GetProperty(fmt.Sprintf("leveldb.num-files-at-level%d", level))
		if err == nil && n != "0" {
			parts = append(parts, fmt.Sprintf("L%d: %s tables", level, n))
		}
	}
	return strings.Join(parts, ", ")
}

func (e *goleveldbEngine) Close() error { return e.db.Close() }

// Scan uses one goleveldb iterator per call with default ReadOptions
// (DontFillCache false: scans fill the block cache, goleveldb's default).
func (e *goleveldbEngine) Scan(start []byte, n int) (int, int64, error) {
	it := e.db.NewIterator(nil, nil)
	defer it.Release()
	keys, bytes := scanCursor(it, start, n)
	return keys, bytes, it.Error()
}

// ScanReverse is Scan backward, from Last with Prev.
func (e *goleveldbEngine) ScanReverse() (int, int64, error) {
	it := e.db.NewIterator(nil, nil)
	defer it.Release()
	keys, bytes := scanCursorReverse(it)
	return keys, bytes, it.Error()
}
