package bloomkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

var (
	raftLogSeeds    = flag.Int("raftlog.seeds", 0, "seeds TestRaftLogModel runs for each option set (0: its default)")
	raftLogSeedBase = flag.Uint64("raftlog.seedbase", 0, "first seed of TestRaftLogModel")
	raftLogSteps    = flag.Int("raftlog.steps", 0, "steps TestRaftLogModel takes for each seed (0: its default)")
)

// raftLogModel is a raft log kept in a DB the way contrib/raftstore keeps
// it (key 0x01 and the index big-endian), beside a model of it: the live
// indexes [first, last] and each one's generation (a rewritten index gets
// a new one, and its value says which).
type raftLogModel struct {
	t           *testing.T
	db          *DB
	rng         *rand.Rand
	first, last uint64            // the live indexes; first > last when empty
	gen         map[uint64]uint64 // the generation of each live index
	nextGen     uint64

	// mu guards the window a concurrent reader may check, and the model of
	// it: the writer narrows the window to what its next step leaves alone
	// before it writes, and a reader holds mu (read-locked) across its read.
	mu         sync.RWMutex
	winLo      uint64
	winHi      uint64
	readerGets int
}

func raftLogKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte{0x01}, i) }

// raftLogValue is index i's value in generation g: it names both, padded
// to a length that varies with them so that memtables fill unevenly.
func raftLogValue(i, g uint64) []byte {
	v := fmt.Appendf(nil, "%d:%d:", i, g)
	return append(v, bytes.Repeat([]byte{byte('a' + i%26)}, int((i*7+g*13)%300))...)
}

// window publishes the range of indexes the next step leaves alone.
func (m *raftLogModel) window(lo, hi uint64) {
	m.mu.Lock()
	m.winLo, m.winHi = lo, hi
	m.mu.Unlock()
}

// write commits b and updates the model with apply, under the writer's
// side of mu.
func (m *raftLogModel) write(b *Batch, sync bool, apply func()) {
	m.t.Helper()
	var err error
	if sync {
		err = m.db.WriteSync(b)
	} else {
		err = m.db.Write(b)
	}
	if err != nil {
		m.t.Fatal(err)
	}
	m.mu.Lock()
	apply()
	m.mu.Unlock()
}

// appendRun stores indexes from, ..., to in one batch after b's records
// (raft's StoreLogs; after a truncation in the same batch when b holds one).
func (m *raftLogModel) appendRun(b *Batch, from, to uint64) {
	g := m.nextGen
	m.nextGen++
	for i := from; i <= to; i++ {
		b.Put(raftLogKey(i), raftLogValue(i, g))
	}
	m.write(b, m.rng.IntN(32) == 0, func() {
		for i := from; i <= to; i++ {
			m.gen[i] = g
		}
		if m.first > m.last {
			m.first = from
		}
		m.last = to
	})
}

// step does one of raft's log operations, picked at random.
func (m *raftLogModel) step() {
	empty := m.first > m.last
	switch r := m.rng.IntN(100); {
	case r < 60 || empty: // append a run after the end
		from := m.last + 1
		m.window(m.first, m.last)
		m.appendRun(NewBatch(), from, from+uint64(m.rng.IntN(64)))
	case r < 80: // a follower's conflicting suffix: truncate it, re-append
		k := m.last - uint64(m.rng.IntN(int(min(m.last-m.first+1, 100))))
		m.window(m.first, k-1)
		b := NewBatch()
		if err := b.DeleteRange(raftLogKey(k), raftLogKey(m.last+1)); err != nil {
			m.t.Fatal(err)
		}
		last := m.last
		if m.rng.IntN(3) != 0 { // raft: DeleteRange, then StoreLogs
			m.write(b, m.rng.IntN(32) == 0, func() {
				for i := k; i <= last; i++ {
					delete(m.gen, i)
				}
				m.last = k - 1 // empty (first > last) when k was first
			})
			m.check(false) // raft reads between the two
			b = NewBatch()
		} else { // both in one batch: the puts come after the tombstone
			m.mu.Lock()
			for i := k; i <= last; i++ {
				delete(m.gen, i)
			}
			m.last = k - 1
			m.mu.Unlock()
		}
		m.appendRun(b, k, k+uint64(m.rng.IntN(80)))
	case r >= 97: // a snapshot installed: the whole log goes, it resumes after a gap
		m.window(1, 0)
		b := NewBatch()
		if err := b.DeleteRange(raftLogKey(m.first), raftLogKey(m.last+1)); err != nil {
			m.t.Fatal(err)
		}
		first, last := m.first, m.last
		m.write(b, m.rng.IntN(32) == 0, func() {
			for i := first; i <= last; i++ {
				delete(m.gen, i)
			}
			m.first = last + 1 + m.rng.Uint64N(1000)
			m.last = m.first - 1
		})
	default: // compact the prefix behind a snapshot, keeping some trailing
		trailing := uint64(m.rng.IntN(200))
		if m.last-m.first+1 <= trailing {
			return
		}
		upTo := m.last - trailing
		m.window(upTo+1, m.last)
		b := NewBatch()
		if err := b.DeleteRange(raftLogKey(m.first), raftLogKey(upTo+1)); err != nil {
			m.t.Fatal(err)
		}
		first := m.first
		m.write(b, m.rng.IntN(32) == 0, func() {
			for i := first; i <= upTo; i++ {
				delete(m.gen, i)
			}
			m.first = upTo + 1
		})
	}
	m.window(m.first, m.last)
}

// check compares Gets around and inside the log, FirstIndex and LastIndex
// (an iterator's first and last key, as raftstore finds them) and, when
// full, a scan of every key both ways with the model.
func (m *raftLogModel) check(full bool) {
	m.t.Helper()
	m.checkGet(m.first - 1)
	m.checkGet(m.first)
	m.checkGet(m.last)
	m.checkGet(m.last + 1)
	if m.first <= m.last {
		for range 8 {
			m.checkGet(m.first + m.rng.Uint64N(m.last-m.first+1))
		}
	}
	it, err := m.db.NewIterator(&IterOptions{LowerBound: []byte{0x01}, UpperBound: []byte{0x02}})
	if err != nil {
		m.t.Fatal(err)
	}
	defer it.Close()
	idx := func() uint64 { return binary.BigEndian.Uint64(it.Key()[1:]) }
	if m.first > m.last {
		if it.First() || it.Last() {
			m.t.Fatalf("empty log: the iterator found %x", it.Key())
		}
	} else {
		if !it.First() || idx() != m.first {
			m.t.Fatalf("FirstIndex: %x (ok %v, err %v), want %d", it.Key(), it.Valid(), it.Error(), m.first)
		}
		if !it.Last() || idx() != m.last {
			m.t.Fatalf("LastIndex: %x (ok %v, err %v), want %d", it.Key(), it.Valid(), it.Error(), m.last)
		}
	}
	if full {
		want := m.first
		for ok := it.First(); ok; ok = it.Next() {
			if idx() != want || !bytes.Equal(it.Value(), raftLogValue(want, m.gen[want])) {
				m.t.Fatalf("forward scan of %d-%d: %d = %.20q, want %d = %.20q", m.first, m.last, idx(), it.Value(), want, raftLogValue(want, m.gen[want]))
			}
			want++
		}
		if want != m.last+1 && m.first <= m.last {
			m.t.Fatalf("forward scan of %d-%d ended before %d", m.first, m.last, want)
		}
		want = m.last
		for ok := it.Last(); ok; ok = it.Prev() {
			if idx() != want || !bytes.Equal(it.Value(), raftLogValue(want, m.gen[want])) {
				m.t.Fatalf("backward scan of %d-%d: %d = %.20q, want %d", m.first, m.last, idx(), it.Value(), want)
			}
			want--
		}
		if want != m.first-1 && m.first <= m.last {
			m.t.Fatalf("backward scan of %d-%d ended after %d", m.first, m.last, want)
		}
	}
	if err := it.Error(); err != nil {
		m.t.Fatal(err)
	}
}

// checkGet compares Get(i) with the model.
func (m *raftLogModel) checkGet(i uint64) {
	m.t.Helper()
	v, err := m.db.Get(raftLogKey(i))
	g, live := m.gen[i]
	switch {
	case !live && !errors.Is(err, ErrNotFound):
		m.t.Fatalf("Get(%d) outside %d-%d: %.20q, %v; want ErrNotFound", i, m.first, m.last, v, err)
	case live && err != nil:
		m.t.Fatalf("Get(%d) of %d-%d: %v", i, m.first, m.last, err)
	case live && !bytes.Equal(v, raftLogValue(i, g)):
		m.t.Fatalf("Get(%d) of %d-%d: %.20q, want %.20q", i, m.first, m.last, v, raftLogValue(i, g))
	}
}

// reader reads random indexes of the published window until stop closes,
// each one holding mu so that the writer cannot touch it meanwhile.
func (m *raftLogModel) reader(seed uint64, stop <-chan struct{}, errc chan<- error) {
	rng := rand.New(rand.NewPCG(seed, 3))
	for n := 0; ; n++ {
		if n%16 == 15 {
			time.Sleep(50 * time.Microsecond) // leave the writer some CPU
		}
		select {
		case <-stop:
			errc <- nil
			return
		default:
		}
		m.mu.RLock()
		if m.winLo > m.winHi {
			m.mu.RUnlock()
			continue
		}
		i := m.winLo + rng.Uint64N(m.winHi-m.winLo+1)
		g, live := m.gen[i]
		if !live {
			m.mu.RUnlock()
			errc <- fmt.Errorf("index %d of the window %d-%d is not in the model", i, m.winLo, m.winHi)
			return
		}
		want := raftLogValue(i, g)
		v, err := m.db.Get(raftLogKey(i))
		m.readerGets++
		m.mu.RUnlock()
		if err != nil || !bytes.Equal(v, want) {
			errc <- fmt.Errorf("concurrent Get(%d): %.20q, %v; want %.20q", i, v, err, want)
			return
		}
	}
}

// TestRaftLogModel runs raft's log operations on a DB under tiny
// memtables and a compaction fan-in of 2, with flushes and compactions
// running beside them and a reopen now and then: runs of appends, a
// conflicting suffix truncated and rewritten with new values (after the
// truncation, or in its batch), and the prefix compacted behind a
// snapshot. Every step is checked against a model (Gets around and in the
// log, the first and last index as raftstore finds them, full scans) and
// a concurrent reader checks Gets of the indexes the step leaves alone.
// A snapshot's install, which deletes the whole log and resumes it after
// a gap, comes now and then too.
func TestRaftLogModel(t *testing.T) {
	steps, seeds := 900, 1
	if testing.Short() {
		steps = 240
	}
	if raceEnabled {
		// Several times slower, and the package's race run is long: about
		// 10 s a run on two cores. CI runs it at -cpu 1,4,16 too.
		steps = 120
	}
	if *raftLogSeeds > 0 {
		seeds = *raftLogSeeds
	}
	if *raftLogSteps > 0 {
		steps = *raftLogSteps
	}
	configs := []struct {
		name string
		opts func(*Options)
	}{
		{"memtable=8KiB", func(o *Options) { o.MemtableSize, o.BlockSize = 8<<10, 256 }},
		{"memtable=64KiB", func(o *Options) { o.MemtableSize, o.CompactionConcurrency = 64<<10, 2 }},
		{"pread", func(o *Options) { o.DisableMmap = true }},
	}
	for _, cfg := range configs {
		for seed := range uint64(seeds) {
			seed := seed + *raftLogSeedBase
			t.Run(fmt.Sprintf("%s/seed=%d", cfg.name, seed), func(t *testing.T) {
				t.Parallel()
				o := smallOptions()
				o.CompactionFanIn = 2
				cfg.opts(o)
				dir := t.TempDir()
				m := &raftLogModel{t: t, rng: rand.New(rand.NewPCG(seed, 1)), first: 1, last: 0, winLo: 1, winHi: 0, gen: map[uint64]uint64{}}
				const epochs = 3
				for epoch := range epochs {
					m.db = mustOpen(t, dir, o)
					m.check(true)
					stop := make(chan struct{})
					errc := make(chan error, 2)
					go func() { // flushes and major compactions beside the background ones
						for i := 0; ; i++ {
							select {
							case <-stop:
								errc <- nil
								return
							default:
							}
							var err error
							if i%8 == 7 {
								err = m.db.Compact()
							} else {
								err = m.db.Flush()
							}
							if err != nil {
								errc <- err
								return
							}
							// A pause, or this loop holds the writer off
							// for most of the run.
							time.Sleep(time.Millisecond)
						}
					}()
					go m.reader(seed*10+uint64(epoch), stop, errc)
					for s := range steps / epochs {
						m.step()
						m.check(s%50 == 0)
					}
					close(stop)
					for range 2 {
						if err := <-errc; err != nil {
							t.Fatal(err)
						}
					}
					mustDo(t, m.db.WaitForCompactions(context.Background()))
					m.check(true)
					st := m.db.Stats()
					t.Logf("epoch %d: log %d-%d, %d flushes, %d compactions, %d segments, %d concurrent Gets",
						epoch, m.first, m.last, st.Flushes, st.Compactions, st.Segments, m.readerGets)
					mustDo(t, m.db.Close())
				}
			})
		}
	}
}
