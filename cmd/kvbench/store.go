package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/bloomkv/bloomkv"
)

// kvStore is what the workloads need from a store under test, so that the
// same loops measure bloomkv and the baseline.
type kvStore interface {
	// put writes one key. The store may hold on to key and value until
	// finishFill returns (bbolt does): callers pass slices that stay put.
	put(key, value []byte) error
	// finishFill makes every put readable from the store's files and lets
	// the store come to rest: bloomkv flushes its memtable and waits for
	// its background compactions, bbolt commits its open transaction.
	finishFill(ctx context.Context) error
	// get appends key's value to dst[:0]; found is false if key is absent.
	get(dst, key []byte) (value []byte, found bool, err error)
	// stats returns the store's cumulative counters (zero if it has none).
	stats() bloomkv.Stats
	// dir is where the store's files are.
	dir() string
	// reopen closes the store, calls whileClosed with its directory, and
	// opens it again. -drop-cache needs this: the kernel does not evict
	// pages that a process has mapped, and both stores map their files.
	// Counters start again from zero.
	reopen(whileClosed func(dir string) error) error
	close() error
}

// bloomkvStore adapts a *bloomkv.DB.
type bloomkvStore struct {
	db   *bloomkv.DB
	path string
	opts *bloomkv.Options
}

// openBloomkv opens a store in dir with the run's options, the given bits
// per key (0: no filters, for the twin store), and background compaction
// unless -no-compaction or compact is false.
func openBloomkv(dir string, cfg config, bitsPerKey float64, compact bool) (*bloomkvStore, error) {
	opts := bloomkv.DefaultOptions()
	opts.BitsPerKey = bitsPerKey
	opts.DisableFilters = bitsPerKey == 0 // the twin store: no filters
	opts.BlockCacheSize = cfg.CacheSize
	opts.MemtableSize = int(cfg.MemtableSize)
	opts.Sync = cfg.Sync
	opts.DisableMmap = cfg.NoMmap
	opts.Compression, _ = bloomkv.ParseCompression(cfg.Compression) // validated with the flags
	opts.DisableAutoCompaction = cfg.NoCompaction || !compact
	s := &bloomkvStore{path: dir, opts: opts}
	return s, s.open()
}

func (s *bloomkvStore) open() error {
	db, err := bloomkv.Open(s.path, s.opts)
	if err != nil {
		return fmt.Errorf("open bloomkv store: %w", err)
	}
	s.db = db
	return nil
}

func (s *bloomkvStore) reopen(whileClosed func(dir string) error) error {
	if err := s.db.Close(); err != nil {
		return err
	}
	if err := whileClosed(s.path); err != nil {
		return errors.Join(err, s.open())
	}
	return s.open()
}

func (s *bloomkvStore) put(key, value []byte) error { return s.db.Put(key, value) }

func (s *bloomkvStore) finishFill(ctx context.Context) error {
	if err := s.db.Flush(); err != nil {
		return err
	}
	if s.opts.DisableAutoCompaction {
		return nil
	}
	return s.settle(ctx)
}

// settle waits until the background compactions are done: reads measured
// while a merge runs would measure the merge.
func (s *bloomkvStore) settle(ctx context.Context) error { return s.db.WaitForCompactions(ctx) }

func (s *bloomkvStore) get(dst, key []byte) ([]byte, bool, error) {
	v, err := s.db.Get(key)
	if errors.Is(err, bloomkv.ErrNotFound) {
		return dst[:0], false, nil
	}
	if err != nil {
		return dst[:0], false, err
	}
	// Get already returns a fresh slice; using it as is keeps the copy
	// count equal to what an application sees.
	return v, true, nil
}

func (s *bloomkvStore) stats() bloomkv.Stats { return s.db.Stats() }
func (s *bloomkvStore) dir() string          { return s.path }
func (s *bloomkvStore) close() error         { return s.db.Close() }

// dbCounters are the cumulative counters of bloomkv.Stats, as differences
// over a workload.
type dbCounters struct {
	Gets                 uint64 `json:"gets"`
	SegmentsProbed       uint64 `json:"segments_probed"`
	FilterNegatives      uint64 `json:"filter_negatives"`
	FilterFalsePositives uint64 `json:"filter_false_positives"`
	BlockReads           uint64 `json:"block_reads"`
	BlockCacheHits       uint64 `json:"block_cache_hits"`
	BytesRead            uint64 `json:"bytes_read"`
	PrefixFilterProbes   uint64 `json:"prefix_filter_probes"`
	PrefixFilterSkips    uint64 `json:"prefix_filter_skips"`
	Writes               uint64 `json:"writes"`
	WALBytes             uint64 `json:"wal_bytes"`
	WriteStalls          uint64 `json:"write_stalls"`
	Flushes              uint64 `json:"flushes"`
	Compactions          uint64 `json:"compactions"`
}

// dbShape is the store's live data after a workload.
type dbShape struct {
	Segments     int   `json:"segments"`
	SegmentBytes int64 `json:"segment_bytes"`
	FilterBytes  int64 `json:"filter_bytes"`
	Memtables    int   `json:"memtables"`
}

// statsDelta returns the counters of after minus before.
func statsDelta(before, after bloomkv.Stats) dbCounters {
	return dbCounters{
		Gets:                 after.Gets - before.Gets,
		SegmentsProbed:       after.SegmentsProbed - before.SegmentsProbed,
		FilterNegatives:      after.FilterNegatives - before.FilterNegatives,
		FilterFalsePositives: after.FilterFalsePositives - before.FilterFalsePositives,
		BlockReads:           after.BlockReads - before.BlockReads,
		BlockCacheHits:       after.BlockCacheHits - before.BlockCacheHits,
		BytesRead:            after.BytesRead - before.BytesRead,
		PrefixFilterProbes:   after.PrefixFilterProbes - before.PrefixFilterProbes,
		PrefixFilterSkips:    after.PrefixFilterSkips - before.PrefixFilterSkips,
		Writes:               after.Writes - before.Writes,
		WALBytes:             after.WALBytes - before.WALBytes,
		WriteStalls:          after.WriteStalls - before.WriteStalls,
		Flushes:              after.Flushes - before.Flushes,
		Compactions:          after.Compactions - before.Compactions,
	}
}

// shapeOf returns the live-data part of st.
func shapeOf(st bloomkv.Stats) dbShape {
	return dbShape{
		Segments:     st.Segments,
		SegmentBytes: st.SegmentBytes,
		FilterBytes:  st.FilterBytes,
		Memtables:    st.Memtables,
	}
}
