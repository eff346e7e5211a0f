package engines

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// bboltEngine is bbolt, a copy-on-write B+tree in one memory-mapped file.
// It has no Bloom filter and no block cache (reads go straight to the
// mapping, so the OS page cache is its cache). Writes skip fsync (NoSync,
// and NoFreelistSync with the hashmap freelist, as etcd runs it). Puts are
// batched: one write transaction commits every bboltBatch puts, since a
// transaction per key would rewrite a leaf-to-root page path per key.
type bboltEngine struct {
	db   *bolt.DB
	path string
	tx   *bolt.Tx // the open write transaction of Put, or nil
	b    *bolt.Bucket
	puts int // in tx
}

// bboltBatch is the number of puts per write transaction, etcd's default
// batch limit.
const bboltBatch = 10_000

var bboltBucket = []byte("kv")

func bboltOptions() *bolt.Options {
	return &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType}
}

func openBbolt(dir string) (Engine, error) {
	path := filepath.Join(dir, "bolt.db")
	db, err := bolt.Open(path, 0o600, bboltOptions())
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bboltBucket)
		return err
	})
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return &bboltEngine{db: db, path: path}, nil
}

func (e *bboltEngine) Put(key, value []byte) error {
	if e.tx == nil {
		tx, err := e.db.Begin(true)
		if err != nil {
			return err
		}
		e.tx, e.b = tx, tx.Bucket(bboltBucket)
	}
	if err := e.b.Put(key, value); err != nil {
		return err
	}
	if e.puts++; e.puts == bboltBatch {
		return e.commit()
	}
	return nil
}

// commit commits the open write transaction, if any.
func (e *bboltEngine) commit() error {
	if e.tx == nil {
		return nil
	}
	err := e.tx.Commit()
	e.tx, e.b, e.puts = nil, nil, 0
	return err
}

// Get runs one read transaction per lookup, bbolt's point read.
func (e *bboltEngine) Get(dst, key []byte) ([]byte, bool, error) {
	found := false
	err := e.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bboltBucket).Get(key)
		found = v != nil
		dst = append(dst[:0], v...)
		return nil
	})
	return dst, found, err
}

// Compact commits the pending puts, then rewrites the tree into a new file
// with full pages (bolt.Compact sets FillPercent 1.0; random inserts leave
// pages about half full) and replaces the old file with it.
func (e *bboltEngine) Compact() error {
	if err := e.commit(); err != nil {
		return err
	}
	tmp := e.path + ".compact"
	dst, err := bolt.Open(tmp, 0o600, bboltOptions())
	if err != nil {
		return err
	}
	err = bolt.Compact(dst, e.db, 64<<20)
	err = errors.Join(err, dst.Sync(), dst.Close(), e.db.Close())
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, e.path); err != nil {
		return err
	}
	e.db, err = bolt.Open(e.path, 0o600, bboltOptions())
	return err
}

func (e *bboltEngine) Layout() string {
	var s bolt.BucketStats
	err := e.db.View(func(tx *bolt.Tx) error {
		s = tx.Bucket(bboltBucket).Stats()
		return nil
	})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("B+tree depth %d, %d leaf pages, %d branch pages", s.Depth, s.LeafPageN, s.BranchPageN)
}

func (e *bboltEngine) Close() error { return errors.Join(e.commit(), e.db.Close()) }

// Scan walks the bucket with a cursor in a read transaction.
func (e *bboltEngine) Scan(start []byte, n int) (int, int64, error) {
	keys, bytes := 0, int64(0)
	err := e.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bboltBucket).Cursor()
		k, v := c.First()
		if start != nil {
			k, v = c.Seek(start)
		}
		for ; k != nil && keys != n; k, v = c.Next() {
			keys++
			bytes += taken(k, v)
		}
		return nil
	})
	return keys, bytes, err
}

// ScanReverse is Scan backward, from Last with Prev.
func (e *bboltEngine) ScanReverse() (int, int64, error) {
	keys, bytes := 0, int64(0)
	err := e.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bboltBucket).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			keys++
			bytes += taken(k, v)
		}
		return nil
	})
	return keys, bytes, err
}
