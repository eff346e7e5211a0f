// Package raftstore implements hashicorp/raft's LogStore and StableStore
// (github.com/hashicorp/raft) on one bloomkv store, as raft-boltdb does on
// bbolt.
//
//	s, err := raftstore.New(raftstore.Options{Path: dir})
//	if err != nil { ... }
//	defer s.Close()
//	r, err := raft.NewRaft(conf, fsm, s, s, snaps, transport)
//
// # Layout
//
// Log entries live under the one-byte prefix 0x01 followed by the index as
// a big-endian uint64, so bloomkv's key order is index order and FirstIndex
// and LastIndex are the first and last key of an iterator bounded to that
// prefix. Stable keys live under the prefix 0x02. A Store given an existing
// DB (Options.DB) owns every key that starts with 0x01 or 0x02 and leaves
// every other key alone, so the DB can hold other data too.
//
// A raft.Log is encoded compactly with a version byte (see encodeLog): its
// term, type, data, extensions and AppendedAt (to the nanosecond, as wall
// clock time in the local zone; a zero AppendedAt stays zero). An empty
// Data or Extensions comes back nil.
//
// # Durability
//
// A log store must be durable before raft acknowledges what it wrote:
// raft counts a follower's append as stored, and a candidate's vote as
// cast, once the call returned. So StoreLog, StoreLogs, DeleteRange, Set and
// SetUint64 write with bloomkv's DB.WriteSync: the write is fsynced before
// the call returns (concurrent calls share one fsync through bloomkv's group
// commit). StoreLogs is one atomic batch when its entries fit in one
// (bloomkv.MaxBatchSize, 256 MiB): after a crash all of them are there or
// none; a larger call is split into batches in index order, and a crash
// leaves a prefix of its entries.
//
// DeleteRange is one range deletion in bloomkv (a range tombstone): one
// record however many entries it covers, atomic, and fsynced like the
// rest. FirstIndex after raft's compactions is then the first key an
// iterator finds, which steps over the deleted front in one seek.
//
// Options.NoSync writes with DB.Write instead: acknowledged writes survive
// a crash of the process but not of the machine. That is unsafe for a real
// cluster — a node that loses acknowledged entries or votes after a power
// cut can make raft lose committed entries or elect two leaders in one
// term — and is meant for benchmarks and tests only.
//
// # Errors
//
// raft recognizes a missing stable key only by the error's text: Get and
// GetUint64 of a missing key return ErrKeyNotFound, whose text is exactly
// "not found" (as raft-boltdb's). GetLog of a missing index returns
// raft.ErrLogNotFound itself. Neither is wrapped; every other error is,
// with %w.
package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/bloomkv/bloomkv"
	"github.com/hashicorp/raft"
)

// ErrKeyNotFound is returned by Get and GetUint64 for a key that was never
// set. raft compares the text of this error with "not found" to tell a
// fresh node from a failing store, so it is returned unwrapped.
var ErrKeyNotFound = errors.New("not found")

// Key prefixes: one byte each.
const (
	prefixLog    = 0x01
	prefixStable = 0x02
)

// Options configure New.
type Options struct {
	// Path is the directory of the bloomkv store to open (created if
	// missing). Ignored when DB is set.
	Path string
	// BloomKV are the options bloomkv.Open is given for Path; nil means
	// bloomkv.DefaultOptions(). Options.Sync need not be set: the Store
	// fsyncs its own writes (see NoSync).
	BloomKV *bloomkv.Options
	// DB, if set, is an open DB to use instead of opening Path. The Store
	// uses the keys starting with the bytes 0x01 and 0x02 only, and Close
	// leaves the DB open: it is the caller's.
	DB *bloomkv.DB
	// NoSync writes without fsync: acknowledged log entries and votes
	// survive a crash of the process, not a power cut. UNSAFE for a real
	// cluster (raft may then lose committed entries or elect two leaders
	// in a term); for benchmarks and tests.
	NoSync bool
}

// Store is a raft.LogStore and raft.StableStore on a bloomkv DB. It is safe
// for concurrent use.
type Store struct {
	db     *bloomkv.DB
	ownsDB bool
	noSync bool
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens (or creates) a Store in the bloomkv directory path with default
// options: every write fsynced.
func Open(path string) (*Store, error) { return New(Options{Path: path}) }

// New returns a Store over opts.DB, or over the bloomkv store at opts.Path.
// A directory another Store or DB has open is refused with an error
// matching bloomkv.ErrLocked.
func New(opts Options) (*Store, error) {
	s := &Store{db: opts.DB, noSync: opts.NoSync}
	if s.db == nil {
		if opts.Path == "" {
			return nil, errors.New("raftstore: Options.Path or Options.DB is required")
		}
		bo := bloomkv.DefaultOptions()
		if opts.BloomKV != nil {
			o := *opts.BloomKV
			bo = &o
		}
		db, err := bloomkv.Open(opts.Path, bo)
		if err != nil {
			return nil, fmt.Errorf("raftstore: open %s: %w", opts.Path, err)
		}
		s.db, s.ownsDB = db, true
	}
	return s, nil
}

// DB returns the underlying bloomkv DB.
func (s *Store) DB() *bloomkv.DB { return s.db }

// Close closes the DB if New opened it; a DB given in Options.DB stays open.
func (s *Store) Close() error {
	if !s.ownsDB {
		return nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("raftstore: close: %w", err)
	}
	return nil
}

// Sync fsyncs every write acknowledged so far: with NoSync, a way to make
// them durable at chosen moments.
func (s *Store) Sync() error {
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("raftstore: sync: %w", err)
	}
	return nil
}

// write commits b, fsynced unless NoSync.
func (s *Store) write(b *bloomkv.Batch) error {
	if s.noSync {
		return s.db.Write(b)
	}
	return s.db.WriteSync(b)
}

func logKey(idx uint64) []byte {
	var k [9]byte
	k[0] = prefixLog
	binary.BigEndian.PutUint64(k[1:], idx)
	return k[:]
}

func stableKey(k []byte) []byte {
	return append([]byte{prefixStable}, k...)
}

// logBounds bound an iterator to the log prefix.
var logBounds = bloomkv.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}}

// FirstIndex returns the first index written, 0 for no entries.
func (s *Store) FirstIndex() (uint64, error) { return s.edgeIndex(false) }

// LastIndex returns the last index written, 0 for no entries.
func (s *Store) LastIndex() (uint64, error) { return s.edgeIndex(true) }

// edgeIndex returns the first or last index.
func (s *Store) edgeIndex(last bool) (idx uint64, err error) {
	it, err := s.db.NewIterator(&logBounds)
	if err != nil {
		return 0, fmt.Errorf("raftstore: iterator: %w", err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			idx, err = 0, fmt.Errorf("raftstore: iterate logs: %w", cerr)
		}
	}()
	var ok bool
	if last {
		ok = it.Last()
	} else {
		ok = it.First()
	}
	if !ok {
		return 0, nil
	}
	k := it.Key()
	if len(k) != 9 {
		return 0, fmt.Errorf("raftstore: log key %x: %w", k, errCorrupt)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// GetLog reads the entry at index idx into log; raft.ErrLogNotFound if
// there is none.
func (s *Store) GetLog(idx uint64, log *raft.Log) error {
	v, err := s.db.Get(logKey(idx))
	if errors.Is(err, bloomkv.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftstore: get log %d: %w", idx, err)
	}
	if err := decodeLog(v, log); err != nil {
		return fmt.Errorf("raftstore: log %d: %w", idx, err)
	}
	log.Index = idx
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(log *raft.Log) error { return s.StoreLogs([]*raft.Log{log}) }

// StoreLogs stores the entries, durable (unless NoSync) when it returns, in
// one atomic batch when they fit in one (bloomkv.MaxBatchSize). raft hands
// it up to MaxAppendEntries entries of up to MaxLogData bytes each, which
// can add up to more: those are written as consecutive batches in the
// order given, each durable before the next is written, so a crash leaves
// a prefix of them. raft counts none of a call's entries as stored before
// it returns, and raft's calls append, so a prefix is a log it can go on
// from.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := bloomkv.NewBatch()
	var buf []byte
	for _, l := range logs {
		buf = encodeLog(buf[:0], l)
		key := logKey(l.Index)
		if b.Len() > 0 && b.Size()+batchOpOverhead+len(key)+len(buf) > bloomkv.MaxBatchSize {
			if err := s.write(b); err != nil {
				return fmt.Errorf("raftstore: store logs %d-%d: %w", logs[0].Index, logs[len(logs)-1].Index, err)
			}
			b = bloomkv.NewBatch()
		}
		b.Put(key, buf)
	}
	if err := s.write(b); err != nil {
		return fmt.Errorf("raftstore: store logs %d-%d: %w", logs[0].Index, logs[len(logs)-1].Index, err)
	}
	return nil
}

// batchOpOverhead bounds what a put adds to a batch besides its key and
// value: a kind byte and two uvarint lengths (bloomkv's batch encoding).
const batchOpOverhead = 1 + 2*binary.MaxVarintLen32

// DeleteRange deletes the entries with indexes in [lo, hi], in one atomic
// write (a bloomkv range deletion), durable unless NoSync when it returns.
func (s *Store) DeleteRange(lo, hi uint64) error {
	if lo > hi {
		return nil
	}
	b := bloomkv.NewBatch()
	if err := b.DeleteRange(logKey(lo), logEnd(hi)); err != nil {
		return fmt.Errorf("raftstore: delete logs %d-%d: %w", lo, hi, err)
	}
	if err := s.write(b); err != nil {
		return fmt.Errorf("raftstore: delete logs %d-%d: %w", lo, hi, err)
	}
	return nil
}

// logEnd is the exclusive upper bound of the log keys up to max.
func logEnd(max uint64) []byte {
	if max == math.MaxUint64 {
		return []byte{prefixLog + 1}
	}
	return logKey(max + 1)
}

// Set stores a stable key, durable (unless NoSync) when it returns.
func (s *Store) Set(key, val []byte) error {
	b := bloomkv.NewBatch()
	b.Put(stableKey(key), val)
	if err := s.write(b); err != nil {
		return fmt.Errorf("raftstore: set %q: %w", key, err)
	}
	return nil
}

// Get returns the value of a stable key, or ErrKeyNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	v, err := s.db.Get(stableKey(key))
	if errors.Is(err, bloomkv.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: get %q: %w", key, err)
	}
	return v, nil
}

// SetUint64 stores val (big-endian) under a stable key.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the uint64 stored under a stable key, or
// ErrKeyNotFound.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftstore: uint64 %q is %d bytes: %w", key, len(v), errCorrupt)
	}
	return binary.BigEndian.Uint64(v), nil
}
