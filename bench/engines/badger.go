package engines

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// badgerEngine is Badger v4 with its default Bloom filter setting
// (BloomFalsePositive 0.01, about 9.6 bits/key), a BlockCacheSize block
// cache, SyncWrites false and no logger. Other options are its defaults,
// notably a 64 MiB memtable (the other stores use 4 MiB) and values up to
// 1 MiB stored in the LSM tree itself, so the value log plays no part
// in reads here.
type badgerEngine struct {
	db   *badger.DB
	opts badger.Options
}

func badgerOptions(dir string) badger.Options {
	return badger.DefaultOptions(dir).
		WithLogger(nil).
		WithSyncWrites(false).
		WithBlockCacheSize(BlockCacheSize).
		WithCompactL0OnClose(true)
}

func openBadger(dir string) (Engine, error) {
	opts := badgerOptions(dir)
	db, err := badger.Open(opts)
	if err != nil {
		return nil, err
	}
	return &badgerEngine{db: db, opts: opts}, nil
}

// Put writes one key per transaction, Badger's ordinary write path.
func (e *badgerEngine) Put(key, value []byte) error {
	return e.db.Update(func(txn *badger.Txn) error { return txn.Set(key, value) })
}

func (e *badgerEngine) Get(dst, key []byte) ([]byte, bool, error) {
	found := false
	err := e.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		dst, err = item.ValueCopy(dst[:0])
		return err
	})
	return dst, found, err
}

// Compact closes and reopens the store, because Badger has no public call
// to flush its memtable but Close flushes it to L0 and (CompactL0OnClose)
// compacts L0 into the base level; Flatten then merges every level into
// one and returns when no level needs compacting. (Flatten alone leaves
// overlapping L0 tables where they are if no other level holds data.)
func (e *badgerEngine) Compact() error {
	if err := e.db.Close(); err != nil {
		return err
	}
	db, err := badger.Open(e.opts)
	if err != nil {
		return err
	}
	e.db = db
	if err := db.Flatten(1); err != nil {
		return err
	}
	return e.checkOneLevel()
}

// checkOneLevel verifies that Compact reached one sorted run: one level
// holds all tables, and not several overlapping L0 tables.
func (e *badgerEngine) checkOneLevel() error {
	levels := 0
	for _, l := range e.db.Levels() {
		if l.NumTables > 0 {
			levels++
		}
		if l.Level == 0 && l.NumTables > 1 {
			return fmt.Errorf("badger: %d tables in L0 after Compact", l.NumTables)
		}
	}
	if levels > 1 {
		return fmt.Errorf("badger: %d levels hold tables after Compact", levels)
	}
	return nil
}

func (e *badgerEngine) Layout() string {
	var parts []string
	for _, l := range e.db.Levels() {
		if l.NumTables > 0 {
			parts = append(parts, fmt.Sprintf("L%d: %d tables", l.Level, l.NumTables))
		}
	}
	return strings.Join(parts, ", ")
}

func (e *badgerEngine) Close() error { return e.db.Close() }

// Scan uses a read transaction's iterator with PrefetchValues on (Badger's
// default), reading each value in place with Item.Value.
func (e *badgerEngine) Scan(start []byte, n int) (int, int64, error) {
	keys, bytes := 0, int64(0)
	err := e.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		if start != nil {
			it.Seek(start)
		} else {
			it.Rewind()
		}
		for ; it.Valid() && keys != n; it.Next() {
			item := it.Item()
			err := item.Value(func(v []byte) error {
				bytes += taken(item.Key(), v)
				return nil
			})
			if err != nil {
				return err
			}
			keys++
		}
		return nil
	})
	return keys, bytes, err
}
