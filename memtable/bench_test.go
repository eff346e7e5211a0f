package memtable

import (
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

const benchMemtableSize = 4 << 20

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func randomKeys(rng *rand.Rand, count int) [][]byte {
	keys := make([][]byte, count)
	for i := range keys {
		keys[i] = randomBytes(rng, 16)
	}
	return keys
}

// BenchmarkAdd adds 16-byte random keys with 100-byte values, starting a
// new memtable whenever the current one reaches 4 MiB, as the DB would.
func BenchmarkAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	keys := randomKeys(rng, 1<<16)
	value := randomBytes(rng, 100)
	m := New(benchMemtableSize)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if m.ApproximateSize() >= benchMemtableSize {
			m = New(benchMemtableSize)
		}
		// Keys repeat across the pool, but (key, seq) never does.
		m.Add(uint64(i+1), base.KindPut, keys[i%len(keys)], value)
	}
}

// fullMemtable returns a 4 MiB memtable of random 16-byte keys with
// 100-byte values, and the keys.
func fullMemtable(rng *rand.Rand) (*Memtable, [][]byte) {
	m := New(benchMemtableSize)
	value := randomBytes(rng, 100)
	var keys [][]byte
	for seq := uint64(1); m.ApproximateSize() < benchMemtableSize; seq++ {
		key := randomBytes(rng, 16)
		keys = append(keys, key)
		m.Add(seq, base.KindPut, key, value)
	}
	return m, keys
}

func BenchmarkGetHit(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	m, keys := fullMemtable(rng)
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, _, found := m.Get(keys[i%len(keys)], base.MaxSeq); !found {
			b.Fatal("key not found")
		}
	}
}

func BenchmarkGetMiss(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 3))
	m, _ := fullMemtable(rng)
	absent := randomKeys(rng, 1<<16) // 128-bit random keys: collisions are negligible
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, _, found := m.Get(absent[i%len(absent)], base.MaxSeq); found {
			b.Fatal("absent key found")
		}
	}
}

// BenchmarkIterScan measures a full forward scan of a 4 MiB memtable, as a
// flush does; reported per entry.
func BenchmarkIterScan(b *testing.B) {
	m, _ := fullMemtable(rand.New(rand.NewPCG(4, 4)))
	it := m.NewIter()
	b.ReportAllocs()
	for b.Loop() {
		for ok := it.First(); ok; ok = it.Next() {
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*m.Len()), "ns/entry")
}
