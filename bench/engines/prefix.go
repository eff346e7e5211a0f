package engines

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bloomkv/bloomkv"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// PrefixLen is the prefix length of the prefix-lookup comparison: keys
// are an 8-byte prefix and a suffix.
const PrefixLen = 8

// PrefixEngine is a store set up for prefix lookups: Count returns how
// many keys start with prefix (which is PrefixLen bytes long).
type PrefixEngine interface {
	Put(key, value []byte) error
	// Settle flushes and lets background compactions finish, so that the
	// lookups measure a store at rest.
	Settle() error
	Count(prefix []byte) (int, error)
	Layout() string
	Close() error
}

// PrefixSpec names a store configured for prefix lookups.
type PrefixSpec struct {
	Name string
	Open func(dir string) (PrefixEngine, error)
}

// PrefixSpecs returns the stores of the prefix-lookup comparison: bloomkv
// with prefix filters (Options.Prefix = FixedPrefix(8)) and without (its
// reference), and Pebble with Comparer.Split = the first 8 bytes and its
// bloom filter policy at BitsPerKey on every level, which then filters by
// prefix: SeekPrefixGE on one iterator reused for every lookup (Pebble's
// fast path), and on a new iterator per lookup; bloomkv's prefix filters
// too with one iterator reused through SetPrefix.
func PrefixSpecs() []PrefixSpec {
	return []PrefixSpec{
		{"bloomkv prefix filters", func(dir string) (PrefixEngine, error) { return openBloomkvPrefix(dir, true) }},
		{"bloomkv no prefix filters", func(dir string) (PrefixEngine, error) { return openBloomkvPrefix(dir, false) }},
		{"bloomkv prefix filters, reused iterator", func(dir string) (PrefixEngine, error) {
			e, err := openBloomkvPrefix(dir, true)
			if err == nil {
				e.(*bloomkvPrefix).reuse = true
			}
			return e, err
		}},
		{"pebble SeekPrefixGE, reused iterator", func(dir string) (PrefixEngine, error) { return openPebblePrefix(dir, true) }},
		{"pebble SeekPrefixGE, iterator per lookup", func(dir string) (PrefixEngine, error) { return openPebblePrefix(dir, false) }},
	}
}

// bloomkvPrefix is bloomkv with DefaultOptions, plus Options.Prefix =
// FixedPrefix(PrefixLen) if prefix is set.
type bloomkvPrefix struct {
	db    *bloomkv.DB
	opts  bloomkv.IterOptions
	reuse bool
	it    *bloomkv.Iterator // the reused iterator, once made
}

func openBloomkvPrefix(dir string, prefix bool) (PrefixEngine, error) {
	o := bloomkv.DefaultOptions()
	if prefix {
		o.Prefix = bloomkv.FixedPrefix(PrefixLen)
	}
	db, err := bloomkv.Open(dir, o)
	if err != nil {
		return nil, err
	}
	return &bloomkvPrefix{db: db}, nil
}

func (e *bloomkvPrefix) Put(key, value []byte) error { return e.db.Put(key, value) }

func (e *bloomkvPrefix) Settle() error {
	if err := e.db.Flush(); err != nil {
		return err
	}
	return e.db.WaitForCompactions(context.Background())
}

// Count opens an Iterator with IterOptions.Prefix and reads it to the
// end; or, reusing one iterator (made at the first Count, after Settle:
// it sees the store as of then), narrows it with SetPrefix and reads it
// from First.
func (e *bloomkvPrefix) Count(prefix []byte) (int, error) {
	if e.reuse {
		if e.it == nil {
			it, err := e.db.NewIterator(nil)
			if err != nil {
				return 0, err
			}
			e.it = it
		}
		e.it.SetPrefix(prefix)
		n := 0
		for ok := e.it.First(); ok; ok = e.it.Next() {
			n++
		}
		return n, e.it.Error()
	}
	e.opts.Prefix = prefix
	it, err := e.db.NewIterator(&e.opts)
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, it.Close()
}

func (e *bloomkvPrefix) Layout() string {
	s := e.db.Stats()
	return fmt.Sprintf("%d segments", s.Segments)
}

func (e *bloomkvPrefix) Close() error {
	var err error
	if e.it != nil {
		err = e.it.Close()
	}
	return errors.Join(err, e.db.Close())
}

// pebblePrefix is the pebbleEngine's settings with a Comparer whose Split
// is the first PrefixLen bytes.
type pebblePrefix struct {
	db    *pebble.DB
	reuse bool
	it    *pebble.Iterator // the reused iterator, once made
}

// fixedPrefixComparer is Pebble's bytewise comparer with Split = the
// first PrefixLen bytes (all of a shorter key), under a name of its own.
func fixedPrefixComparer() *pebble.Comparer {
	c := *pebble.DefaultComparer
	c.Name = "bloomkv.bench.FixedPrefix8"
	c.Split = func(key []byte) int { return min(len(key), PrefixLen) }
	return &c
}

func openPebblePrefix(dir string, reuse bool) (PrefixEngine, error) {
	cache := pebble.NewCache(BlockCacheSize)
	defer cache.Unref()
	opts := &pebble.Options{
		Cache:              cache,
		Comparer:           fixedPrefixComparer(),
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietLogger{},
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(BitsPerKey)
		opts.Levels[i].FilterType = pebble.TableFilter
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return &pebblePrefix{db: db, reuse: reuse}, nil
}

func (e *pebblePrefix) Put(key, value []byte) error { return e.db.Set(key, value, pebble.NoSync) }

// Settle flushes the memtable and waits until no compaction is running
// or due (Pebble has no call for that: it polls the metrics).
func (e *pebblePrefix) Settle() error {
	if err := e.db.Flush(); err != nil {
		return err
	}
	return waitPebbleCompactions(e.db)
}

// Count positions with SeekPrefixGE(prefix) and steps with Next, which in
// prefix mode stops at the end of the prefix. UseL6Filters makes the
// filters of the last level count too.
func (e *pebblePrefix) Count(prefix []byte) (int, error) {
	it := e.it
	if it == nil {
		var err error
		if it, err = e.db.NewIter(&pebble.IterOptions{UseL6Filters: true}); err != nil {
			return 0, err
		}
		if e.reuse {
			e.it = it
		}
	}
	n := 0
	for ok := it.SeekPrefixGE(prefix); ok; ok = it.Next() {
		n++
	}
	err := it.Error()
	if !e.reuse {
		err = errors.Join(err, it.Close())
	}
	return n, err
}

func (e *pebblePrefix) Layout() string { return (&pebbleEngine{db: e.db}).Layout() }

func (e *pebblePrefix) Close() error {
	var err error
	if e.it != nil {
		err = e.it.Close()
	}
	return errors.Join(err, e.db.Close())
}

// waitPebbleCompactions polls db's metrics until no compaction has run for
// three polls in a row (Pebble schedules the next one as one ends), or a
// minute has passed.
func waitPebbleCompactions(db *pebble.DB) error {
	idle := 0
	for deadline := time.Now().Add(time.Minute); idle < 3; {
		if time.Now().After(deadline) {
			return errors.New("pebble: compactions still running after a minute")
		}
		if m := db.Metrics(); m.Compact.NumInProgress == 0 {
			idle++
		} else {
			idle = 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
