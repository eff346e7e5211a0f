package bloomkv

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// sortedModel is the reference an Iterator is checked against: the
// model's keys in order, with the bounds applied.
type sortedModel struct {
	keys   []string
	vals   map[string]string
	lower  string
	upper  string // "" = none
	hasLow bool
}

func newSortedModel(m map[string]string, opts *IterOptions) *sortedModel {
	lo, hi := bounds(opts)
	sm := &sortedModel{vals: m, lower: string(lo), upper: string(hi), hasLow: lo != nil}
	for k := range m {
		if (lo == nil || k >= sm.lower) && (hi == nil || k < sm.upper) {
			sm.keys = append(sm.keys, k)
		}
	}
	slices.Sort(sm.keys)
	return sm
}

// seekGE and seekLT return the model's position after Seek / SeekLT:
// an index into keys, or -1 / len(keys) off either end.
func (sm *sortedModel) seekGE(k string) int {
	i, _ := slices.BinarySearch(sm.keys, k)
	return i
}

func (sm *sortedModel) seekLT(k string) int {
	i, _ := slices.BinarySearch(sm.keys, k)
	return i - 1
}

// checkIter drives it through random moves and compares every position
// with the model.
func checkIter(t *testing.T, rng *rand.Rand, it *Iterator, sm *sortedModel, moves int) {
	t.Helper()
	pos, valid := -1, false
	randKey := func() string {
		if len(sm.vals) > 0 && rng.IntN(2) == 0 {
			for k := range sm.vals { // a present key, or one next to it
				if rng.IntN(3) == 0 {
					return k + "\x00"
				}
				return k
			}
		}
		return fmt.Sprintf("k%04d", rng.IntN(1200))
	}
	for step := range moves {
		var op string
		var got bool
		switch r := rng.IntN(10); {
		case r == 0:
			op, got, pos = "First", it.First(), 0
		case r == 1:
			op, got, pos = "Last", it.Last(), len(sm.keys)-1
		case r == 2:
			k := randKey()
			op, got, pos = "Seek "+k, it.Seek([]byte(k)), sm.seekGE(k)
		case r == 3:
			k := randKey()
			op, got, pos = "SeekLT "+k, it.SeekLT([]byte(k)), sm.seekLT(k)
		case r < 7:
			if !valid {
				continue
			}
			op, got, pos = "Next", it.Next(), pos+1
		default:
			if !valid {
				continue
			}
			op, got, pos = "Prev", it.Prev(), pos-1
		}
		valid = pos >= 0 && pos < len(sm.keys)
		if got != valid || it.Valid() != valid {
			t.Fatalf("step %d %s: valid = %v, want %v (err %v)", step, op, got, valid, it.Error())
		}
		if valid {
			k := sm.keys[pos]
			if string(it.Key()) != k || string(it.Value()) != sm.vals[k] {
				t.Fatalf("step %d %s: at %q=%q, want %q=%q", step, op, it.Key(), it.Value(), k, sm.vals[k])
			}
		}
	}
	if err := it.Error(); err != nil {
		t.Fatalf("iterator error: %v", err)
	}
}

func randomIterOptions(rng *rand.Rand) *IterOptions {
	o := &IterOptions{FillCache: rng.IntN(2) == 0}
	switch rng.IntN(4) {
	case 1:
		o.LowerBound = fmt.Appendf(nil, "k%04d", rng.IntN(1200))
		o.UpperBound = fmt.Appendf(nil, "k%04d", rng.IntN(1200))
	case 2:
		o.Prefix = fmt.Appendf(nil, "k%02d", rng.IntN(12))
	case 3:
		o.LowerBound = fmt.Appendf(nil, "k%04d", rng.IntN(1200))
	}
	return o
}

// TestIteratorModel writes, deletes, flushes, compacts (in the background
// too) and reopens, and after each round checks random iterator moves and
// snapshots against a map.
func TestIteratorModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(*modelSeed, 7))
	dir := t.TempDir()
	o := smallOptions()
	o.CompactionFanIn = 2
	db := mustOpen(t, dir, o)
	defer func() { db.Close() }()
	model := map[string]string{}
	type snap struct {
		s     *Snapshot
		model map[string]string
	}
	var snaps []snap
	rounds := 60
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		randomModelWrites(t, db, rng, model, round, true)
		switch rng.IntN(5) {
		case 0:
			mustDo(t, db.Flush())
		case 1:
			mustDo(t, db.Compact())
		case 2:
			for _, s := range snaps {
				s.s.Close()
			}
			snaps = nil
			mustDo(t, db.Close())
			db = mustOpen(t, dir, o)
		}
		for range 3 {
			opts := randomIterOptions(rng)
			it, err := db.NewIterator(opts)
			mustDo(t, err)
			checkIter(t, rng, it, newSortedModel(model, opts), 200)
			mustDo(t, it.Close())
		}
		checkGets(t, rng, db.Get, model)
		for _, s := range snaps {
			checkSnapshot(t, rng, s.s, s.model)
		}
		if rng.IntN(3) == 0 {
			s, err := db.NewSnapshot()
			mustDo(t, err)
			snaps = append(snaps, snap{s, maps.Clone(model)})
		}
		if len(snaps) > 3 {
			snaps[0].s.Close()
			snaps = snaps[1:]
		}
	}
	for _, s := range snaps {
		s.s.Close()
	}
}

// checkGets compares get with the model on 50 random keys.
func checkGets(t *testing.T, rng *rand.Rand, get func([]byte) ([]byte, error), model map[string]string) {
	t.Helper()
	for range 50 {
		k := fmt.Sprintf("k%04d", rng.IntN(1000))
		v, err := get([]byte(k))
		want, ok := model[k]
		if ok && (err != nil || string(v) != want) || !ok && !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%s) = %q, %v; want %q (present %v)", k, v, err, want, ok)
		}
	}
}

// randomRange returns the bounds of a range deletion over keys k0000 to
// k(n-1): mostly a few dozen keys, sometimes hundreds, sometimes empty or
// from the first key.
// randomModelWrites applies 300 random writes over keys k0000-k0999 to db
// and to model: mostly Puts (values name the round), a quarter Deletes,
// and, if rangeDels, one DeleteRange in 40.
func randomModelWrites(t *testing.T, db *DB, rng *rand.Rand, model map[string]string, round int, rangeDels bool) {
	t.Helper()
	for range 300 {
		k := fmt.Sprintf("k%04d", rng.IntN(1000))
		switch r := rng.IntN(40); {
		case r == 0 && rangeDels:
			start, end := randomRange(rng, 1000)
			mustDo(t, db.DeleteRange([]byte(start), []byte(end)))
			modelDeleteRange(model, start, end)
		case r < 10:
			mustDo(t, db.Delete([]byte(k)))
			delete(model, k)
		default:
			v := fmt.Sprintf("v%d-%d", round, rng.IntN(1e6))
			mustDo(t, db.Put([]byte(k), []byte(v)))
			model[k] = v
		}
	}
}

func randomRange(rng *rand.Rand, n int) (start, end string) {
	lo := rng.IntN(n)
	width := rng.IntN(40)
	switch rng.IntN(10) {
	case 0:
		width = rng.IntN(n)
	case 1:
		width = -rng.IntN(3) // empty or reversed: deletes nothing
	}
	start, end = fmt.Sprintf("k%04d", lo), fmt.Sprintf("k%04d", lo+width)
	if rng.IntN(20) == 0 {
		start = ""
	}
	return start, end
}

// modelDeleteRange applies DeleteRange(start, end) to a model.
func modelDeleteRange(model map[string]string, start, end string) {
	for k := range model {
		if start <= k && k < end {
			delete(model, k)
		}
	}
}

func checkSnapshot(t *testing.T, rng *rand.Rand, s *Snapshot, model map[string]string) {
	t.Helper()
	checkGets(t, rng, s.Get, model)
	opts := randomIterOptions(rng)
	it, err := s.NewIterator(opts)
	mustDo(t, err)
	defer it.Close()
	checkIter(t, rng, it, newSortedModel(model, opts), 200)
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestIteratorAllAndBackward(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	var want []string
	for i := range 2000 {
		k := fmt.Sprintf("key%05d", i)
		mustDo(t, db.Put([]byte(k), []byte("v"+k)))
		if i%10 == 3 {
			mustDo(t, db.Delete([]byte(k)))
		} else if k >= "key00100" && k < "key00200" {
			want = append(want, k)
		}
	}
	it, err := db.NewIterator(&IterOptions{Prefix: []byte("key001")})
	mustDo(t, err)
	defer it.Close()
	var got []string
	for k, v := range it.All() {
		if string(v) != "v"+string(k) {
			t.Fatalf("value of %s = %s", k, v)
		}
		got = append(got, string(k))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("All: %d keys, want %d", len(got), len(want))
	}
	got = got[:0]
	for k := range it.Backward() {
		got = append(got, string(k))
	}
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Backward: %d keys, want %d", len(got), len(want))
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ p, want []byte }{
		{[]byte("ab"), []byte("ac")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("\xff\xff"), nil},
	} {
		if got := prefixEnd(tc.p); !bytes.Equal(got, tc.want) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

// TestIteratorSeesItsMoment: an iterator shows the state of the moment it
// was made, whatever is written, flushed and compacted after.
func TestIteratorSeesItsMoment(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	for i := range 500 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%04d", i), []byte("old")))
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	defer it.Close()
	for i := range 1000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%04d", i), []byte("new")))
	}
	mustDo(t, db.Delete([]byte("k0007")))
	mustDo(t, db.Compact())
	n := 0
	for k, v := range it.All() {
		if string(v) != "old" {
			t.Fatalf("%s = %s, want old", k, v)
		}
		n++
	}
	if n != 500 || it.Error() != nil {
		t.Fatalf("saw %d keys (err %v), want 500", n, it.Error())
	}
}

func TestIteratorAfterClose(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	for i := range 3000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%05d", i), []byte("v")))
	}
	mustDo(t, db.Flush())
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	if !it.First() {
		t.Fatal("First on a full DB")
	}
	mustDo(t, db.Close())
	if it.Next() || !errors.Is(it.Error(), ErrClosed) {
		t.Fatalf("Next after DB.Close: valid %v, err %v; want ErrClosed", it.Valid(), it.Error())
	}
	if err := it.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close = %v, want ErrClosed", err)
	}
	if err := it.Close(); !errors.Is(err, ErrIteratorClosed) {
		t.Fatalf("second Close = %v, want ErrIteratorClosed", err)
	}
	if it.First() || !errors.Is(it.Error(), ErrIteratorClosed) {
		t.Fatalf("First after Close: valid %v err %v; want ErrIteratorClosed", it.Valid(), it.Error())
	}
	if _, err := db.NewIterator(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewIterator on a closed DB: %v", err)
	}
	if _, err := db.NewSnapshot(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewSnapshot on a closed DB: %v", err)
	}
}

// TestIteratorReleasesFilesAfterDBClose: an iterator holds the segments
// it was made over while compaction replaces them, and through the DB's
// Close; its own Close then lets go of them, so that the obsolete file is
// removed and (on Linux, where the process's descriptors and mappings can
// be read) no descriptor or mapping of any of the store's files is left.
func TestIteratorReleasesFilesAfterDBClose(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, smallOptions())
	for i := range 2000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%05d", i), []byte("old")))
	}
	old := compactToOne(t, db, dir)
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	if !it.First() {
		t.Fatal("First on a full DB")
	}
	for i := range 2000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%05d", i), []byte("new")))
	}
	mustDo(t, db.Compact()) // the segment under the iterator is now obsolete
	mustDo(t, db.Close())
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("the segment an open iterator reads was removed: %v", err)
	}
	if it.Next() || !errors.Is(it.Error(), ErrClosed) {
		t.Fatalf("Next after DB.Close: valid %v, err %v; want ErrClosed", it.Valid(), it.Error())
	}
	if err := it.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close = %v, want the iteration's ErrClosed", err)
	}
	db.closer.wait() // files are closed and removed off the path that let go of them
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the obsolete segment is still there after the iterator's Close: %v", err)
	}
	if runtime.GOOS != "linux" {
		return
	}
	fds, err := os.ReadDir("/proc/self/fd")
	mustDo(t, err)
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
			t.Errorf("descriptor %s still open on %s", fd.Name(), target)
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	mustDo(t, err)
	if strings.Contains(string(maps), dir) {
		t.Errorf("a file of the store is still mapped:\n%s", maps)
	}
}

// compactToOne compacts db, whose directory is dir, into one segment and
// returns that segment file's path.
func compactToOne(t *testing.T, db *DB, dir string) string {
	t.Helper()
	mustDo(t, db.Compact())
	rs := db.acquire()
	defer rs.release()
	if len(rs.segments) != 1 {
		t.Fatalf("%d segments after Compact, want 1", len(rs.segments))
	}
	return filepath.Join(dir, rs.segments[0].name)
}

// TestObsoleteSegmentOutlivesItsLastReader: a segment a compaction
// replaced stays mapped and on disk while an iterator made before the
// compaction still reads it, and is removed as soon as that iterator, its
// last reader, lets go, the DB still open. The release is the only one in
// flight, so the closer has that one segment to close and nothing after
// it to push it along: a closer that leaves a lone segment waiting would
// keep the file, its mapping and its descriptor until some later
// compaction. The iterator reads every key after the compaction: in an
// invariants build a segment unmapped under it faults.
func TestObsoleteSegmentOutlivesItsLastReader(t *testing.T) {
	dir := t.TempDir()
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	defer db.Close()
	const n = 2000
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	for i := range n {
		mustDo(t, db.Put(key(i), fmt.Appendf(nil, "old%05d", i)))
	}
	old := compactToOne(t, db, dir)
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	for i := range n {
		mustDo(t, db.Put(key(i), fmt.Appendf(nil, "new%05d", i)))
	}
	mustDo(t, db.Compact()) // the segment under the iterator is now obsolete
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("the segment an open iterator reads was removed: %v", err)
	}
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if want := fmt.Sprintf("old%05d", i); string(it.Key()) != string(key(i)) || string(it.Value()) != want {
			t.Fatalf("entry %d = %q: %q, want %q: %q", i, it.Key(), it.Value(), key(i), want)
		}
		i++
	}
	if i != n {
		t.Fatalf("iterator read %d keys, want %d", i, n)
	}
	mustDo(t, it.Close())
	db.closer.wait() // files are closed and removed off the path that let go of them
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the obsolete segment is still there after its last reader let go: %v", err)
	}
	if v, err := db.Get(key(7)); err != nil || string(v) != "new00007" {
		t.Fatalf("Get after the release = %q, %v", v, err)
	}
}

func TestSnapshotReleased(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	s, err := db.NewSnapshot()
	mustDo(t, err)
	mustDo(t, db.Put([]byte("a"), []byte("2")))
	if v, err := s.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("snapshot Get = %q, %v; want 1", v, err)
	}
	mustDo(t, s.Close())
	if err := s.Close(); !errors.Is(err, ErrSnapshotReleased) {
		t.Fatalf("second Close: %v, want ErrSnapshotReleased", err)
	}
	if _, err := s.Get([]byte("a")); !errors.Is(err, ErrSnapshotReleased) {
		t.Fatalf("Get on a released snapshot: %v", err)
	}
	if _, err := s.NewIterator(nil); !errors.Is(err, ErrSnapshotReleased) {
		t.Fatalf("NewIterator on a released snapshot: %v", err)
	}
}

// TestSnapshotCompactionKeepsVersions: a major compaction with an open
// snapshot keeps the versions (and the tombstone over them) the snapshot
// sees, and drops them once it is released.
func TestSnapshotCompactionKeepsVersions(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	put := func(k, v string) { mustDo(t, db.Put([]byte(k), []byte(v))) }
	put("a", "1")
	put("b", "1")
	s1, _ := db.NewSnapshot()
	put("a", "2")
	mustDo(t, db.Delete([]byte("b")))
	s2, _ := db.NewSnapshot()
	put("a", "3")
	mustDo(t, db.Compact())
	expect := func(s *Snapshot, k, want string) {
		t.Helper()
		v, err := s.Get([]byte(k))
		if want == "" {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get(%s) = %q, %v; want not found", k, v, err)
			}
			return
		}
		if err != nil || string(v) != want {
			t.Fatalf("Get(%s) = %q, %v; want %s", k, v, err, want)
		}
	}
	expect(s1, "a", "1")
	expect(s1, "b", "1")
	expect(s2, "a", "2")
	expect(s2, "b", "")
	if got := db.Stats(); got.Segments != 1 {
		t.Fatalf("%d segments after Compact", got.Segments)
	}
	entries := func() uint64 {
		rs := db.acquire()
		defer rs.release()
		return rs.segments[0].meta.Entries
	}
	if n := entries(); n != 5 { // a:3,2,1  b:del,1
		t.Fatalf("%d entries kept with two snapshots open, want 5", n)
	}
	s1.Close()
	s2.Close()
	mustDo(t, db.Compact())     // one segment, but holding what no reader needs now
	if n := entries(); n != 1 { // a:3
		t.Fatalf("%d entries after the snapshots were released, want 1", n)
	}
	before := db.Stats().Compactions
	mustDo(t, db.Compact()) // and now nothing to do
	if n, c := entries(), db.Stats().Compactions; n != 1 || c != before {
		t.Fatalf("a second Compact: %d entries, %d merges (before %d); want 1 and no merge", n, c, before)
	}
}

// TestSnapshotIsolationConcurrent: writers move money between accounts in
// batches; every snapshot and every iterator must see a constant total,
// while flushes and compactions run (-race finds the data races).
func TestSnapshotIsolationConcurrent(t *testing.T) {
	o := smallOptions()
	o.CompactionFanIn = 2
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	const accounts, initial = 200, 1000
	acct := func(i int) []byte { return fmt.Appendf(nil, "acct%04d", i) }
	b := NewBatch()
	for i := range accounts {
		b.Put(acct(i), fmt.Appendf(nil, "%d", initial))
	}
	mustDo(t, db.Write(b))

	var wg sync.WaitGroup
	var transfers atomic.Int64
	stop := make(chan struct{})
	var mu sync.Mutex // one transfer at a time: read-modify-write
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				from, to := rng.IntN(accounts), rng.IntN(accounts)
				if from == to {
					continue
				}
				mu.Lock()
				fv, tv := balance(t, db, acct(from)), balance(t, db, acct(to))
				b := NewBatch()
				b.Put(acct(from), fmt.Appendf(nil, "%d", fv-7))
				b.Put(acct(to), fmt.Appendf(nil, "%d", tv+7))
				if err := db.Write(b); err != nil {
					t.Error(err)
				}
				mu.Unlock()
				transfers.Add(1)
			}
		}()
	}
	// Enough transfers for many flushes and compactions under the readers.
	minTransfers := int64(5000)
	if testing.Short() {
		minTransfers = 1000
	}
	for checks := 0; checks < 20 || transfers.Load() < minTransfers; checks++ {
		s, err := db.NewSnapshot()
		mustDo(t, err)
		it, err := s.NewIterator(nil)
		mustDo(t, err)
		total, n := 0, 0
		for _, v := range it.All() {
			var x int
			fmt.Sscan(string(v), &x)
			total += x
			n++
		}
		mustDo(t, it.Close())
		if n != accounts || total != accounts*initial {
			t.Fatalf("snapshot iterator: %d accounts, total %d; want %d, %d", n, total, accounts, accounts*initial)
		}
		sum := 0
		for i := range accounts {
			v, err := s.Get(acct(i))
			mustDo(t, err)
			var x int
			fmt.Sscan(string(v), &x)
			sum += x
		}
		if sum != accounts*initial {
			t.Fatalf("snapshot Gets: total %d, want %d", sum, accounts*initial)
		}
		s.Close()
	}
	close(stop)
	wg.Wait()
	if st := db.Stats(); st.Flushes < 3 || st.Compactions == 0 {
		t.Fatalf("%d flushes, %d compactions under the readers; the test needs some of both", st.Flushes, st.Compactions)
	}
}

func balance(t *testing.T, db *DB, k []byte) int {
	v, err := db.Get(k)
	if err != nil {
		t.Error(err)
		return 0
	}
	var x int
	fmt.Sscan(string(v), &x)
	return x
}

// BenchmarkScanFull reads every key of the benchmark DB (benchKeys keys,
// fully compacted) in order, and backward from the last. cpu-ns/key is
// the process's CPU time per key, steadier than the wall time on a
// shared, loaded machine.
func BenchmarkScanFull(b *testing.B) {
	for _, reverse := range []bool{false, true} {
		name := "forward"
		if reverse {
			name = "reverse"
		}
		b.Run(name, func(b *testing.B) {
			db := filledDB(b)
			b.ReportAllocs()
			b.ResetTimer()
			keys := 0
			cpu := cpuSeconds()
			for range b.N {
				it, err := db.NewIterator(nil)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				first, step := it.First, it.Next
				if reverse {
					first, step = it.Last, it.Prev
				}
				for ok := first(); ok; ok = step() {
					n += len(it.Key()) + len(it.Value())
					keys++
				}
				if err := it.Close(); err != nil || n == 0 {
					b.Fatal(err, n)
				}
			}
			if keys != b.N*benchKeys {
				b.Fatalf("%d keys in %d scans of %d", keys, b.N, benchKeys)
			}
			b.ReportMetric(float64(keys)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric((cpuSeconds()-cpu)*1e9/float64(keys), "cpu-ns/key")
		})
	}
}

// BenchmarkScan100 seeks to a random key and reads the next 100.
func BenchmarkScan100(b *testing.B) {
	db := filledDB(b)
	it, err := db.NewIterator(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	var k [16]byte
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		n := 0
		for ok := it.Seek(benchKey(k[:], rng.Uint64N(benchKeys))); ok && n < 100; ok = it.Next() {
			n++
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "scans/s")
}
