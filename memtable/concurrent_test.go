package memtable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestConcurrentReaders runs one writer against four readers. Entry i is
// added with seq i+1; after Add returns, the writer publishes done = i+1.
// Readers check that every entry below done is visible (Get at its seq
// returns exactly it, SeekGE lands on its key, iteration sees it), that
// iteration is strictly ordered both ways, and that nothing they see is
// torn (each entry matches what the writer added at that seq).
func TestConcurrentReaders(t *testing.T) {
	const n = 20000
	rng := rand.New(rand.NewPCG(3, 4))
	keys := make([][]byte, n)
	kinds := make([]base.Kind, n)
	values := make([][]byte, n)
	for i := range n {
		keys[i] = fmt.Appendf(nil, "key%05d", rng.IntN(n/4)) // ~4 versions per key
		kinds[i] = base.KindPut
		values[i] = fmt.Appendf(nil, "%s@%d", keys[i], i+1)
		if rng.IntN(5) == 0 {
			kinds[i], values[i] = base.KindDelete, nil
		}
	}

	m := New(1 << 20)
	var done atomic.Int64
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 99))
			for round := 0; ; round++ {
				finished := done.Load() == n
				d := int(done.Load())
				if err := checkVisible(m, rng, d, keys, kinds, values); err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				if round%10 == 0 || finished {
					if err := checkScan(m, d, keys, kinds, values); err != nil {
						t.Errorf("reader %d: %v", r, err)
						return
					}
				}
				if finished {
					return
				}
			}
		})
	}
	for i := range n {
		m.Add(uint64(i+1), kinds[i], keys[i], values[i])
		done.Store(int64(i + 1))
	}
	wg.Wait()
}

// checkVisible probes random entries among the first d added.
func checkVisible(m *Memtable, rng *rand.Rand, d int, keys [][]byte, kinds []base.Kind, values [][]byte) error {
	if d == 0 {
		return nil
	}
	it := m.NewIter()
	for range 50 {
		i := rng.IntN(d)
		value, kind, found := m.Get(keys[i], uint64(i+1))
		if !found || kind != kinds[i] || !bytes.Equal(value, values[i]) {
			return fmt.Errorf("Get(%q, %d) = %q, %v, %v; want %q, %v, true", keys[i], i+1, value, kind, found, values[i], kinds[i])
		}
		if !it.SeekGE(keys[i]) || !bytes.Equal(it.Key(), keys[i]) || it.Seq() < uint64(i+1) {
			return fmt.Errorf("SeekGE(%q) did not land on its newest version (seq >= %d)", keys[i], i+1)
		}
	}
	return nil
}

// checkScan iterates forward and backward over the whole memtable.
func checkScan(m *Memtable, d int, keys [][]byte, kinds []base.Kind, values [][]byte) error {
	it := m.NewIter()
	for _, dir := range []struct {
		name        string
		start, step func() bool
		order       int // sign of Compare(previous, current)
	}{
		{"forward", it.First, it.Next, -1},
		{"backward", it.Last, it.Prev, +1},
	} {
		seen := make([]bool, len(keys)+1)
		var prevKey []byte
		var prevTrailer uint64
		for ok, first := dir.start(), true; ok; ok, first = dir.step(), false {
			seq := it.Seq()
			if seq < 1 || seq > uint64(len(keys)) {
				return fmt.Errorf("%s: unknown seq %d", dir.name, seq)
			}
			i := seq - 1
			if !bytes.Equal(it.Key(), keys[i]) || it.Kind() != kinds[i] || !bytes.Equal(it.Value(), values[i]) {
				return fmt.Errorf("%s: torn entry at seq %d: %q %v %q", dir.name, seq, it.Key(), it.Kind(), it.Value())
			}
			trailer := base.MakeTrailer(seq, it.Kind())
			if !first && base.Compare(prevKey, prevTrailer, it.Key(), trailer) != dir.order {
				return fmt.Errorf("%s: out of order: (%q, %d) then (%q, %d)", dir.name, prevKey, prevTrailer>>8, it.Key(), seq)
			}
			prevKey, prevTrailer = it.Key(), trailer
			seen[seq] = true
		}
		for seq := 1; seq <= d; seq++ {
			if !seen[seq] {
				return fmt.Errorf("%s: entry with seq %d was added before the scan but not seen", dir.name, seq)
			}
		}
	}
	return nil
}
