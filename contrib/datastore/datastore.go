// Package datastore adapts a bloomkv store to go-datastore
// (github.com/ipfs/go-datastore), the key-value interface of IPFS and
// libp2p: a *Datastore is a ds.Datastore, ds.Batching,
// ds.PersistentDatastore and ds.CheckedDatastore, and an io.Closer.
//
//	d, err := datastore.New(dir, nil) // nil: bloomkv.DefaultOptions()
//	if err != nil { ... }
//	defer d.Close()
//	err = d.Put(ctx, ds.NewKey("/blocks/abc"), data)
//
// # Keys
//
// A ds.Key is stored as its string's bytes, so bloomkv's byte order is
// go-datastore's key order. Empty values are allowed; keys and values are
// bounded by bloomkv.MaxKeySize and bloomkv.MaxValueSize.
//
// # Queries
//
// A query's prefix becomes a bounded bloomkv iterator, with go-datastore's
// meaning: prefix "/a" selects "/a/b" but neither "/a" nor "/ab". Results
// come in ascending key order when the query has no order or its first
// order is by key; a descending key order iterates backwards. Either way
// filters, offset and limit are applied while iterating, so a query with a
// limit reads only as far as it needs. Any other first order (by value, a
// function) reads every matching entry and sorts them with query.Sort
// before offset and limit, as go-datastore's naive implementation does.
//
// A query sees the store as it was when Query was called (a bloomkv
// iterator is a snapshot), and holds that state's files open until its
// Results are closed or run out. Every entry owns its key and value; none
// aliases the iterator's memory. Size is always set, even with KeysOnly:
// the iterator has the value at hand, so its length costs nothing. With
// KeysOnly no value is copied, and filters and orders see the entry as
// returned, without a value, as with go-datastore's MapDatastore. The
// query's context is checked before each entry the iterator visits.
//
// # Durability
//
// Without bloomkv.Options.Sync a write that returned survives a crash of
// the process but not of the machine; Sync then makes every earlier write
// durable with one fsync of the WAL (DB.Sync), writing no segment. With
// Options.Sync every write is durable when it returns and Sync does
// nothing.
package datastore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"

	"github.com/bloomkv/bloomkv"
	"github.com/bloomkv/bloomkv/vfs"
	ds "github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
)

// Datastore is a go-datastore over a bloomkv store. Its methods are safe
// for concurrent use.
type Datastore struct {
	db   *bloomkv.DB
	dir  string
	fsys vfs.FS
	// syncWrites is Options.Sync: every commit is already fsynced, so Sync
	// has nothing left to do.
	syncWrites bool
	// ownsDB is set by New: Close closes the DB. A Datastore from Wrap
	// leaves the DB to its owner.
	ownsDB bool
	closed atomic.Bool
}

// The interfaces a *Datastore implements.
var (
	_ ds.Datastore           = (*Datastore)(nil)
	_ ds.Batching            = (*Datastore)(nil)
	_ ds.PersistentDatastore = (*Datastore)(nil)
	_ ds.CheckedDatastore    = (*Datastore)(nil)
)

// New opens (or creates) the bloomkv store in dir with opts (nil means
// bloomkv.DefaultOptions()) and returns a Datastore over it. Close closes
// the store.
func New(dir string, opts *bloomkv.Options) (*Datastore, error) {
	db, err := bloomkv.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("bloomkv datastore: open %s: %w", dir, err)
	}
	d := Wrap(db, dir, opts)
	d.ownsDB = true
	return d, nil
}

// Wrap returns a Datastore over db, a store already open in dir with opts
// (nil meaning bloomkv.DefaultOptions(), as for Open). The Datastore needs
// dir and opts because the DB does not expose them: dir and opts.FS for
// DiskUsage, opts.Sync to know whether Sync has work to do.
//
// The caller keeps db: closing the Datastore does not close it, and db
// must stay open while the Datastore is used.
func Wrap(db *bloomkv.DB, dir string, opts *bloomkv.Options) *Datastore {
	if opts == nil {
		opts = bloomkv.DefaultOptions()
	}
	fsys := opts.FS
	if fsys == nil {
		fsys = vfs.Default
	}
	return &Datastore{db: db, dir: dir, fsys: fsys, syncWrites: opts.Sync}
}

// DB returns the underlying store, for what go-datastore has no method
// for: Stats, Compact, snapshots.
func (d *Datastore) DB() *bloomkv.DB { return d.db }

// Get returns the value of key, or ds.ErrNotFound (the value itself, not
// wrapped, as go-datastore's callers compare with ==). The slice is the
// caller's.
func (d *Datastore) Get(_ context.Context, key ds.Key) ([]byte, error) {
	v, err := d.db.Get(key.Bytes())
	if err != nil {
		return nil, mapErr("get", key, err)
	}
	return v, nil
}

// Has reports whether key has a value, without reading or copying the
// value (bloomkv's DB.Has). An absent key is cheap too: the segments'
// Bloom filters rule it out without a disk read.
func (d *Datastore) Has(_ context.Context, key ds.Key) (bool, error) {
	ok, err := d.db.Has(key.Bytes())
	if err != nil {
		return false, mapErr("has", key, err)
	}
	return ok, nil
}

// GetSize returns the length of key's value, or -1 and ds.ErrNotFound,
// without copying the value (bloomkv's DB.ValueSize).
func (d *Datastore) GetSize(_ context.Context, key ds.Key) (int, error) {
	n, err := d.db.ValueSize(key.Bytes())
	if err != nil {
		return -1, mapErr("get size", key, err)
	}
	return n, nil
}

// Put sets key to value. The store copies value.
func (d *Datastore) Put(_ context.Context, key ds.Key, value []byte) error {
	if err := d.db.Put(key.Bytes(), value); err != nil {
		return fmt.Errorf("bloomkv datastore: put %s: %w", key, err)
	}
	return nil
}

// Delete removes key; deleting an absent key is not an error.
func (d *Datastore) Delete(_ context.Context, key ds.Key) error {
	if err := d.db.Delete(key.Bytes()); err != nil {
		return fmt.Errorf("bloomkv datastore: delete %s: %w", key, err)
	}
	return nil
}

// Sync makes every write that returned before it durable against power
// loss. The prefix is ignored: bloomkv has one log for all keys, so the
// whole store is made durable, with one fsync of its write-ahead log
// (DB.Sync), shared with concurrent writers. With Options.Sync each write
// was fsynced before it returned, and Sync does nothing.
func (d *Datastore) Sync(ctx context.Context, _ ds.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.syncWrites {
		return nil
	}
	if err := d.db.Sync(); err != nil {
		return fmt.Errorf("bloomkv datastore: sync: %w", err)
	}
	return nil
}

// DiskUsage returns the total size of the files in the store's directory:
// segments, write-ahead logs and the manifest.
func (d *Datastore) DiskUsage(ctx context.Context) (uint64, error) {
	names, err := d.fsys.List(d.dir)
	if err != nil {
		return 0, fmt.Errorf("bloomkv datastore: disk usage: %w", err)
	}
	var total uint64
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		fi, err := d.fsys.Stat(filepath.Join(d.dir, name))
		if err != nil {
			// A compaction or flush removed it since List: it no longer
			// uses space.
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return 0, fmt.Errorf("bloomkv datastore: disk usage: %w", err)
		}
		if fi.Mode().IsRegular() {
			total += uint64(fi.Size())
		}
	}
	return total, nil
}

// Check verifies the store's live files (bloomkv's DB.Verify: every
// block's checksum, key order, filters, the WALs) and returns an error
// matching bloomkv.ErrCorrupt, naming the damage, if any is found. It
// stops with ctx's error when ctx is done.
func (d *Datastore) Check(ctx context.Context) error {
	rep, err := d.db.Verify(ctx)
	if err != nil {
		return fmt.Errorf("bloomkv datastore: check: %w", err)
	}
	if !rep.OK() {
		return fmt.Errorf("bloomkv datastore: check: %w: %s", bloomkv.ErrCorrupt, rep)
	}
	return nil
}

// Batch returns a new, empty batch. Commit applies its writes as one
// bloomkv batch, atomically even across a crash, up to
// bloomkv.MaxBatchSize (256 MiB) of encoded writes; a larger batch is
// split into several, written in order (go-datastore promises no
// atomicity for batches). A batch may be reused after Commit.
func (d *Datastore) Batch(context.Context) (ds.Batch, error) {
	return &batch{d: d}, nil
}

// Close closes the store if New opened it (a Datastore from Wrap leaves
// it open). Queries still open fail at their next result. Closing twice
// is harmless.
func (d *Datastore) Close() error {
	if !d.closed.CompareAndSwap(false, true) || !d.ownsDB {
		return nil
	}
	if err := d.db.Close(); err != nil {
		return fmt.Errorf("bloomkv datastore: close: %w", err)
	}
	return nil
}

// Query runs q; see the package documentation for what is done natively.
func (d *Datastore) Query(ctx context.Context, q dsq.Query) (dsq.Results, error) {
	return d.query(ctx, q)
}

// mapErr turns bloomkv.ErrNotFound into ds.ErrNotFound, unwrapped, and
// wraps every other error.
func mapErr(op string, key ds.Key, err error) error {
	if errors.Is(err, bloomkv.ErrNotFound) {
		return ds.ErrNotFound
	}
	return fmt.Errorf("bloomkv datastore: %s %s: %w", op, key, err)
}
