package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/bloomkv/bloomkv"
	bolt "go.etcd.io/bbolt"
)

// bboltTxnPuts is how many Puts one bbolt fill transaction commits. One
// transaction per Put would measure bbolt's commit (a page-tree copy and
// two writes, or fsyncs) rather than its inserts; 1000 is the batching an
// application loading data would use. The commit's cost lands on the Put
// that triggers it, so it shows in bbolt's fill p99.9, not its p50.
const bboltTxnPuts = 1000

var bboltBucket = []byte("kv")

// bboltStore adapts go.etcd.io/bbolt: one bucket, reads in one read-only
// transaction per Get (as a point lookup of an application would be).
type bboltStore struct {
	db      *bolt.DB
	path    string
	sync    bool
	tx      *bolt.Tx // the open fill transaction, if any
	bucket  *bolt.Bucket
	pending int
}

// openBbolt creates a bbolt file in dir. Without sync, commits skip fsync
// (NoSync), matching bloomkv's default of surviving process crashes only.
func openBbolt(dir string, sync bool) (*bboltStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open bbolt: %w", err)
	}
	s := &bboltStore{path: dir, sync: sync}
	return s, s.open()
}

func (s *bboltStore) open() error {
	db, err := bolt.Open(filepath.Join(s.path, "bbolt.db"), 0o644, &bolt.Options{Timeout: time.Second, NoSync: !s.sync})
	if err != nil {
		return fmt.Errorf("open bbolt: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bboltBucket)
		return err
	})
	if err != nil {
		return errors.Join(fmt.Errorf("open bbolt: %w", err), db.Close())
	}
	s.db = db
	return nil
}

func (s *bboltStore) reopen(whileClosed func(dir string) error) error {
	if err := s.close(); err != nil {
		return err
	}
	if err := whileClosed(s.path); err != nil {
		return errors.Join(err, s.open())
	}
	return s.open()
}

func (s *bboltStore) put(key, value []byte) error {
	if s.tx == nil {
		tx, err := s.db.Begin(true)
		if err != nil {
			return err
		}
		s.tx, s.bucket = tx, tx.Bucket(bboltBucket)
	}
	// bbolt keeps key and value until the commit; the data set's slices
	// stay put, so no copy is needed.
	if err := s.bucket.Put(key, value); err != nil {
		return err
	}
	if s.pending++; s.pending == bboltTxnPuts {
		return s.commit()
	}
	return nil
}

func (s *bboltStore) finishFill(context.Context) error { return s.commit() }

func (s *bboltStore) commit() error {
	if s.tx == nil {
		return nil
	}
	tx := s.tx
	s.tx, s.bucket, s.pending = nil, nil, 0
	return tx.Commit()
}

func (s *bboltStore) get(dst, key []byte) (value []byte, found bool, err error) {
	value = dst[:0]
	err = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bboltBucket).Get(key); v != nil {
			// v points into the mmap and dies with the transaction.
			value, found = append(value, v...), true
		}
		return nil
	})
	return value, found, err
}

func (s *bboltStore) stats() bloomkv.Stats { return bloomkv.Stats{} }
func (s *bboltStore) dir() string          { return s.path }

func (s *bboltStore) close() error {
	var err error
	if s.tx != nil {
		err = s.tx.Rollback()
		s.tx, s.bucket, s.pending = nil, nil, 0
	}
	return errors.Join(err, s.db.Close())
}

// baseline runs fill-random, get-hit and get-miss on bbolt with the same
// data and key sequences, and lines them up with bloomkv's.
func (b *bench) baseline(ctx context.Context) (err error) {
	if b.cfg.Baseline == "" {
		return nil
	}
	const section = "baseline"
	b.rep.section("Baseline: bbolt (same data, same key sequences)")
	s, err := openBbolt(filepath.Join(b.work, "bbolt"), b.cfg.Sync)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()

	fill, err := b.measure(ctx, s, fillWorkload(s, "fill-random", b.data, b.data.randomOrder))
	if err != nil {
		return err
	}
	fill.BytesPerOp = keySize + b.cfg.ValueSize
	ours := []result{b.fills[1], b.reads[0], b.reads[1]}
	theirs := []result{fill}
	for _, w := range []struct {
		name     string
		hitRatio float64
	}{{"get-hit", 1}, {"get-miss", 0}} {
		r, err := b.readPhase(ctx, s, b.readWorkload(s, w.name, b.data, w.hitRatio))
		if err != nil {
			return err
		}
		theirs = append(theirs, r)
	}
	for i := range theirs {
		theirs[i].Store, theirs[i].Shape = "bbolt", dbShape{}
		if err := b.finishResult(&theirs[i], section, 0); err != nil {
			return err
		}
	}
	b.rep.printf("bbolt: one bucket; the fill commits a transaction every %d Puts (bloomkv: one Put per write), %s;\n",
		bboltTxnPuts, onOff(b.cfg.Sync, "fsync per commit", "NoSync"))
	b.rep.printf("each Get is one read-only transaction and copies its value out.\n")
	baselineTable(ours, theirs).write(b.rep.text)
	return nil
}

// baselineTable puts bloomkv's and bbolt's results for the same workloads
// side by side; ratio is bloomkv's ops/s over bbolt's.
func baselineTable(ours, theirs []result) *table {
	t := &table{
		groups: []group{{"", 1}, {"ops/s", 3}, {"p50", 2}, {"p99", 2}, {"p99.9", 2}, {"syscr per op", 2}},
		header: []string{"workload", "bloomkv", "bbolt", "ratio", "bloomkv", "bbolt", "bloomkv", "bbolt", "bloomkv", "bbolt", "bloomkv", "bbolt"},
	}
	syscr := func(r result) string {
		if r.IO == nil {
			return "n/a"
		}
		return fmtPerOp(perOp(r.IO.SyscR, r.Ops))
	}
	for i := range min(len(ours), len(theirs)) {
		a, z := ours[i], theirs[i]
		t.add(a.Workload,
			fmtInt(int64(math.Round(a.OpsPerSec))), fmtInt(int64(math.Round(z.OpsPerSec))), fmtRatio(ratio(a.OpsPerSec, z.OpsPerSec)),
			fmtLatency(a.Latency.P50), fmtLatency(z.Latency.P50),
			fmtLatency(a.Latency.P99), fmtLatency(z.Latency.P99),
			fmtLatency(a.Latency.P999), fmtLatency(z.Latency.P999),
			syscr(a), syscr(z))
	}
	return t
}
