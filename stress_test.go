package bloomkv

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

var stressOps = flag.Int("stress.ops", 3000, "batches each writer commits in TestStress")

// TestStress runs writers, readers, iterators, snapshots, flushes and
// compactions (two at a time) together, under -race in CI, and checks what
// each reader sees against what the writers had acknowledged and issued.
//
// Each writer owns its keys and writes them in numbered versions; version
// n of a key is a put of "n", or a deletion when n%5 == 0. Each batch
// writes the same version to a key and to its mirror, so any consistent
// view shows the pair at equal versions. A reader that starts after
// version a was acknowledged and ends before version i was issued must see
// a version in [a, i].
// stressWriters and stressKeys size TestStress: writers, keys each.
const stressWriters, stressKeys = 3, 64

type versionTable = [stressWriters][stressKeys]atomic.Int64

func TestStress(t *testing.T) {
	const writers, keysPerWriter = stressWriters, stressKeys
	o := smallOptions()
	o.CompactionFanIn = 2
	o.CompactionConcurrency = 2
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()

	var acked, issued versionTable
	key := func(w, k int, mirror bool) []byte {
		if mirror {
			return fmt.Appendf(nil, "w%d/m/%03d", w, k)
		}
		return fmt.Appendf(nil, "w%d/k/%03d", w, k)
	}
	var wg, bg sync.WaitGroup
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for range *stressOps {
				k := rng.IntN(keysPerWriter)
				n := issued[w][k].Add(1)
				b := NewBatch()
				for _, m := range []bool{false, true} {
					if n%5 == 0 {
						b.Delete(key(w, k, m))
					} else {
						b.Put(key(w, k, m), strconv.AppendInt(nil, n, 10))
					}
				}
				if err := db.Write(b); err != nil {
					t.Error(err)
					return
				}
				acked[w][k].Store(n)
			}
		}()
	}
	// version turns a read into a version number: 0 for "absent" (never
	// written, or deleted), which the checks below accept only when a
	// deletion (or nothing) lies in the allowed range.
	version := func(v []byte, err error) int64 {
		if errors.Is(err, ErrNotFound) {
			return 0
		}
		if err != nil {
			t.Error(err)
			return -1
		}
		n, _ := strconv.ParseInt(string(v), 10, 64)
		return n
	}
	inRange := func(got, lo, hi int64) bool {
		if got == 0 { // absent: the newest version seen must be a deletion
			for n := lo; n <= hi; n++ {
				if n%5 == 0 {
					return true
				}
			}
			return false
		}
		return got >= lo && got <= hi && got%5 != 0
	}

	bg.Add(3)
	go func() { // point reads
		defer bg.Done()
		rng := rand.New(rand.NewPCG(7, 7))
		for stopped := false; !stopped; {
			select {
			case <-stop:
				stopped = true
			default:
			}
			w, k := rng.IntN(writers), rng.IntN(keysPerWriter)
			lo := acked[w][k].Load()
			got := version(db.Get(key(w, k, rng.IntN(2) == 0)))
			if hi := issued[w][k].Load(); !inRange(got, lo, hi) {
				t.Errorf("Get w%d/%d: version %d, want one in [%d, %d]", w, k, got, lo, hi)
				return
			}
		}
	}()
	go func() { // snapshots and iterators: consistent pairs, bounded versions
		defer bg.Done()
		for stopped := false; !stopped; {
			select {
			case <-stop:
				stopped = true
			default:
			}
			checkStressSnapshot(t, db, stop, &acked, &issued, version, inRange)
		}
	}()
	go func() { // flushes and major compactions beside the background ones
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if i%4 == 3 {
				err = db.Compact()
			} else {
				err = db.Flush()
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	bg.Wait()
	if st := db.Stats(); st.Flushes == 0 || st.Compactions == 0 {
		t.Fatalf("%d flushes, %d compactions: the readers raced nothing", st.Flushes, st.Compactions)
	}
}

func checkStressSnapshot(t *testing.T, db *DB, stop <-chan struct{}, acked, issued *versionTable,
	version func([]byte, error) int64, inRange func(got, lo, hi int64) bool) {
	const writers, keys = stressWriters, stressKeys
	var lo [stressWriters][stressKeys]int64
	for w := range writers {
		for k := range keys {
			lo[w][k] = acked[w][k].Load()
		}
	}
	s, err := db.NewSnapshot()
	if err != nil {
		t.Error(err)
		return
	}
	defer s.Close()
	// Let a compaction or two pass under the snapshot before reading: what
	// it sees must then come from versions that compaction kept for it.
	for c := db.Stats().Compactions; db.Stats().Compactions < c+2; {
		select {
		case <-stop: // the writers are done; compactions may have ended too
			return
		default:
			runtime.Gosched()
		}
	}
	it, err := s.NewIterator(nil)
	if err != nil {
		t.Error(err)
		return
	}
	seen := map[string]int64{}
	for k, v := range it.All() {
		seen[string(k)] = version(v, nil)
	}
	if err := it.Close(); err != nil {
		t.Error(err)
		return
	}
	for w := range writers {
		for k := range keys {
			a, m := seen[fmt.Sprintf("w%d/k/%03d", w, k)], seen[fmt.Sprintf("w%d/m/%03d", w, k)]
			hi := issued[w][k].Load()
			if a != m || !inRange(a, lo[w][k], hi) {
				t.Errorf("snapshot iterator w%d/%d: versions %d and mirror %d, want equal and in [%d, %d]", w, k, a, m, lo[w][k], hi)
			}
			if g := version(s.Get(fmt.Appendf(nil, "w%d/k/%03d", w, k))); g != a {
				t.Errorf("snapshot Get w%d/%d: version %d, its iterator saw %d", w, k, g, a)
			}
		}
	}
	for k := range seen {
		if !strings.HasPrefix(k, "w") {
			t.Errorf("unexpected key %q", k)
		}
	}
}
