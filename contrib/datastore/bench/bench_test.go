// Package bench compares the bloomkv go-datastore with the datastores IPFS
// ships over LevelDB (go-ds-leveldb) and Pebble (go-ds-pebble), through
// the go-datastore interface alone. It is its own module so that the
// datastore module does not depend on either peer.
//
//	go test -run '^$' -bench . -benchmem
//
// Writes are measured twice where the stores allow: without fsync (each
// store's default, except go-ds-leveldb, whose v0.5.0 fsyncs every write
// and has no option to stop) and with an fsync per write or batch
// ("-sync": bloomkv Options.Sync, Pebble WriteOptions Sync, go-ds-leveldb
// as shipped). Reads run over a store loaded with 100,000 keys (10,000
// with -short) of 100-byte values, then closed and reopened so that the
// data is in each store's files rather than only its memtable. Every
// store gets a 64 MiB block cache.
package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv"
	bloomds "github.com/bloomkv/bloomkv/contrib/datastore"
	"github.com/cockroachdb/pebble/v2"
	ds "github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	leveldb "github.com/ipfs/go-ds-leveldb"
	pebbleds "github.com/ipfs/go-ds-pebble"
)

const (
	valueSize = 100
	// perPrefix is the number of keys under each prefix of the loaded
	// data set, and so the results of a prefix query.
	perPrefix = 100
	batchSize = 1000
)

// store is one datastore implementation under test.
type store struct {
	name string
	open func(dir string) (ds.Batching, error)
}

// cacheSize is every store's block cache: bloomkv's default. Pebble's and
// LevelDB's defaults (8 MiB) hold less of the loaded data set (10 MiB of
// values) and would measure the cache sizes more than the stores.
const cacheSize = 64 << 20

var (
	bloomkvStore = store{"bloomkv", func(dir string) (ds.Batching, error) { return bloomds.New(dir, nil) }}
	pebbleStore  = store{"pebble", func(dir string) (ds.Batching, error) {
		return pebbleds.NewDatastore(dir, pebbleds.WithCacheSize(cacheSize))
	}}
	leveldbStore = store{"leveldb-sync", func(dir string) (ds.Batching, error) {
		return leveldb.NewDatastore(dir, &leveldb.Options{BlockCacheCapacity: cacheSize})
	}}

	bloomkvSync = store{"bloomkv-sync", func(dir string) (ds.Batching, error) {
		o := bloomkv.DefaultOptions()
		o.Sync = true
		return bloomds.New(dir, o)
	}}
	pebbleSync = store{"pebble-sync", func(dir string) (ds.Batching, error) {
		return pebbleds.NewDatastore(dir, pebbleds.WithCacheSize(cacheSize), pebbleds.WithPebbleWriteOptions(pebble.Sync))
	}}
)

// writeStores are measured by the write benchmarks, readStores by the
// read ones (where the write mode makes no difference).
var (
	writeStores = []store{bloomkvStore, pebbleStore, bloomkvSync, pebbleSync, leveldbStore}
	readStores  = []store{bloomkvStore, pebbleStore, leveldbStore}
)

func openStore(tb testing.TB, s store, dir string) ds.Batching {
	tb.Helper()
	d, err := s.open(dir)
	if err != nil {
		tb.Fatalf("open %s: %v", s.name, err)
	}
	return d
}

// randomKey is a key as IPFS makes them: a namespace and a hash-like name.
func randomKey(rng *rand.Rand) ds.Key {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], rng.Uint64())
	return ds.NewKey(fmt.Sprintf("/blocks/%x", b))
}

func value(rng *rand.Rand) []byte {
	v := make([]byte, valueSize)
	for i := range v {
		v[i] = byte(rng.UintN(256))
	}
	return v
}

func BenchmarkPut(b *testing.B) {
	for _, s := range writeStores {
		b.Run(s.name, func(b *testing.B) {
			d := openStore(b, s, b.TempDir())
			defer d.Close()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			v := value(rng)
			b.SetBytes(valueSize)
			for b.Loop() {
				if err := d.Put(ctx, randomKey(rng), v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBatch1000(b *testing.B) {
	for _, s := range writeStores {
		b.Run(s.name, func(b *testing.B) {
			d := openStore(b, s, b.TempDir())
			defer d.Close()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			v := value(rng)
			b.SetBytes(batchSize * valueSize)
			for b.Loop() {
				batch, err := d.Batch(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for range batchSize {
					if err := batch.Put(ctx, randomKey(rng), v); err != nil {
						b.Fatal(err)
					}
				}
				if err := batch.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// numKeys is the size of the loaded data set.
func numKeys() int {
	if testing.Short() {
		return 10_000
	}
	return 100_000
}

// loadedKey is key i of the loaded data set: prefix i/perPrefix, so each
// prefix holds perPrefix keys.
func loadedKey(i int) ds.Key {
	return ds.NewKey(fmt.Sprintf("/q/%05d/%03d", i/perPrefix, i%perPrefix))
}

// loaded returns s over the data set, written in batches, closed and
// reopened.
func loaded(b *testing.B, s store) ds.Batching {
	b.Helper()
	dir := b.TempDir()
	d := openStore(b, s, dir)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	n := numKeys()
	for start := 0; start < n; start += batchSize {
		batch, _ := d.Batch(ctx)
		for i := start; i < min(start+batchSize, n); i++ {
			if err := batch.Put(ctx, loadedKey(i), value(rng)); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	return openStore(b, s, dir)
}

// keys returns 4,096 random keys of the data set (or absent ones), made
// before the timer runs.
func keys(present bool) []ds.Key {
	rng := rand.New(rand.NewPCG(5, 6))
	ks := make([]ds.Key, 4096)
	for i := range ks {
		if present {
			ks[i] = loadedKey(rng.IntN(numKeys()))
		} else {
			ks[i] = randomKey(rng)
		}
	}
	return ks
}

func BenchmarkGet(b *testing.B) {
	for _, s := range readStores {
		b.Run(s.name, func(b *testing.B) {
			d := loaded(b, s)
			defer d.Close()
			ctx := context.Background()
			ks := keys(true)
			i := 0
			for b.Loop() {
				if _, err := d.Get(ctx, ks[i%len(ks)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkHas(b *testing.B) {
	for _, s := range readStores {
		b.Run(s.name, func(b *testing.B) {
			d := loaded(b, s)
			defer d.Close()
			ctx := context.Background()
			ks := keys(true)
			i := 0
			for b.Loop() {
				if ok, err := d.Has(ctx, ks[i%len(ks)]); err != nil || !ok {
					b.Fatal(ok, err)
				}
				i++
			}
		})
	}
}

// BenchmarkHasMiss asks for absent keys: where bloomkv's filters answer
// without reading a block.
func BenchmarkHasMiss(b *testing.B) {
	for _, s := range readStores {
		b.Run(s.name, func(b *testing.B) {
			d := loaded(b, s)
			defer d.Close()
			ctx := context.Background()
			ks := keys(false)
			i := 0
			for b.Loop() {
				if ok, err := d.Has(ctx, ks[i%len(ks)]); err != nil || ok {
					b.Fatal(ok, err)
				}
				i++
			}
		})
	}
}

// BenchmarkQueryPrefix runs a prefix query of perPrefix (100) results,
// values included, and reads them all.
func BenchmarkQueryPrefix(b *testing.B) {
	for _, s := range readStores {
		b.Run(s.name, func(b *testing.B) {
			d := loaded(b, s)
			defer d.Close()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(7, 8))
			prefixes := numKeys() / perPrefix
			for b.Loop() {
				r, err := d.Query(ctx, dsq.Query{Prefix: fmt.Sprintf("/q/%05d", rng.IntN(prefixes))})
				if err != nil {
					b.Fatal(err)
				}
				es, err := r.Rest()
				if err != nil || len(es) != perPrefix {
					b.Fatalf("%d results, %v", len(es), err)
				}
			}
		})
	}
}

// TestPeers checks that every store answers the benchmarks' operations
// alike, so that the numbers compare like with like.
func TestPeers(t *testing.T) {
	for _, s := range writeStores {
		t.Run(s.name, func(t *testing.T) {
			ctx := t.Context()
			d := openStore(t, s, t.TempDir())
			defer d.Close()
			batch, _ := d.Batch(ctx)
			for i := range 3 * perPrefix {
				batch.Put(ctx, loadedKey(i), []byte{byte(i)})
			}
			if err := batch.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r, err := d.Query(ctx, dsq.Query{Prefix: "/q/00001"})
			if err != nil {
				t.Fatal(err)
			}
			es, err := r.Rest()
			if err != nil || len(es) != perPrefix {
				t.Fatalf("prefix query: %d results, %v", len(es), err)
			}
			if ok, err := d.Has(ctx, loadedKey(5)); !ok || err != nil {
				t.Fatalf("Has: %v, %v", ok, err)
			}
			if _, err := d.Get(ctx, ds.NewKey("/absent")); err != ds.ErrNotFound {
				t.Fatalf("Get of an absent key: %v", err)
			}
		})
	}
}
