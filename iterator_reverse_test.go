package bloomkv

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestIteratorSingleSegmentReverseModel checks the single-segment path
// backward against a map: one compacted segment of small blocks whose
// entries are partly short (restart intervals of several entries, keys
// rebuilt from shared prefixes) and partly of 64 bytes and more (an
// interval each, keys aliased in the block) or stored apart (value
// records), with deletions and old
// versions that snapshots keep, some keys' versions spanning blocks.
// Values compress, so that an iterator that does not fill the cache
// decodes each block into the buffer of the one before: a key or value
// kept across a step into another block would read the new block's bytes.
// Each view (the DB and every snapshot) is walked fully backward, then by
// random mixed moves (Next, Prev, seeks, First, Last) under random bounds.
func TestIteratorSingleSegmentReverseModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(*modelSeed, 23))
	o := smallOptions()
	o.LargeValueSize = 200 // the longest values are stored apart, as value records
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	value := func(round int) string {
		n := rng.IntN(8)
		switch rng.IntN(3) {
		case 1:
			n = 60 + rng.IntN(60)
		case 2:
			n = 150 + rng.IntN(200)
		}
		return fmt.Sprintf("%d-", round) + strings.Repeat(string(rune('a'+rng.IntN(26))), n)
	}
	model := map[string]string{}
	type view struct {
		s     *Snapshot
		model map[string]string
	}
	var views []view
	defer func() {
		for _, v := range views {
			v.s.Close()
		}
	}()
	rounds := 12
	if testing.Short() {
		rounds = 6
	}
	for round := range rounds {
		for range 150 {
			k := fmt.Sprintf("k%04d", rng.IntN(400))
			if rng.IntN(5) == 0 {
				mustDo(t, db.Delete([]byte(k)))
				delete(model, k)
				continue
			}
			v := value(round)
			mustDo(t, db.Put([]byte(k), []byte(v)))
			model[k] = v
		}
		// Hot keys get a large version each round, which the snapshots
		// keep: their versions fill several blocks.
		for _, k := range []string{"k0100", "k0101", "k0300"} {
			v := fmt.Sprintf("%d-", round) + strings.Repeat("h", 300)
			mustDo(t, db.Put([]byte(k), []byte(v)))
			model[k] = v
		}
		s, err := db.NewSnapshot()
		mustDo(t, err)
		views = append(views, view{s, maps.Clone(model)})
	}
	mustDo(t, db.Compact())
	newIter := func(v view, opts *IterOptions) *Iterator {
		var it *Iterator
		var err error
		if v.s == nil {
			it, err = db.NewIterator(opts)
		} else {
			it, err = v.s.NewIterator(opts)
		}
		mustDo(t, err)
		return it
	}
	for i, v := range append([]view{{nil, model}}, views...) {
		for _, fill := range []bool{false, true} {
			it := newIter(v, &IterOptions{FillCache: fill})
			if it.seg == nil {
				t.Fatalf("view %d: the iterator does not read the one segment directly", i)
			}
			sm := newSortedModel(v.model, &IterOptions{})
			n := len(sm.keys)
			for ok := it.Last(); ok; ok = it.Prev() {
				n--
				if n < 0 || string(it.Key()) != sm.keys[n] || string(it.Value()) != v.model[sm.keys[n]] {
					t.Fatalf("view %d: backward scan at %q=%.20q, want key %d", i, it.Key(), it.Value(), n)
				}
			}
			if it.Error() != nil || n != 0 {
				t.Fatalf("view %d: backward scan stopped %d keys early: %v", i, n, it.Error())
			}
			checkIter(t, rng, it, sm, 300)
			for range 4 {
				lower, upper := randomBounds(rng)
				it.SetBounds(lower, upper)
				checkIter(t, rng, it, newSortedModel(v.model, &IterOptions{LowerBound: lower, UpperBound: upper}), 200)
			}
			p := []byte(fmt.Sprintf("k0%d", rng.IntN(4)))
			it.SetPrefix(p)
			checkIter(t, rng, it, newSortedModel(v.model, &IterOptions{Prefix: p}), 200)
			mustDo(t, it.Close())
		}
	}
}

// TestIteratorSingleSegmentAllVisible checks when the single-segment path
// steps forward without looking at sequence numbers and kinds
// (Iterator.segAll): only over a segment of one put per key, all of them
// visible. A snapshot older than some of the segment's keys (written after
// it, kept by the compaction as their only version) and a segment that
// holds tombstones of keys no other source has (a flush into an empty
// store) must still hide those, forward and backward.
func TestIteratorSingleSegmentAllVisible(t *testing.T) {
	o := smallOptions()
	o.LargeValueSize = 100   // some values stored apart
	o.MemtableSize = 1 << 20 // one flush, one segment
	// The test compacts by hand: a background merge of the flushed
	// segment alone, which a slow machine let run before the first
	// check, drops the tombstones that check needs.
	o.DisableAutoCompaction = true
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	value := func(i int) []byte { return fmt.Appendf(nil, "v%d-%s", i, strings.Repeat("x", i%150)) }
	// A flushed segment: puts of the even keys, tombstones of the odd
	// ones, which the store never held.
	for i := range 600 {
		if i%2 == 0 {
			mustDo(t, db.Put(key(i), value(i)))
		} else {
			mustDo(t, db.Delete(key(i)))
		}
	}
	mustDo(t, db.Flush())
	check := func(name string, it *Iterator, wantAll bool, want func(i int) bool) {
		t.Helper()
		if it.seg == nil || it.segAll != wantAll {
			t.Fatalf("%s: single segment %v, segAll %v; want true, %v", name, it.seg != nil, it.segAll, wantAll)
		}
		var got, exp []string
		for ok := it.First(); ok; ok = it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		for i := range 1200 {
			if want(i) {
				exp = append(exp, string(key(i))+"="+string(value(i)))
			}
		}
		if it.Error() != nil || strings.Join(got, ",") != strings.Join(exp, ",") {
			t.Fatalf("%s: forward scan of %d keys (%v), want %d", name, len(got), it.Error(), len(exp))
		}
		n := len(exp)
		for ok := it.Last(); ok; ok = it.Prev() {
			if n--; n < 0 || string(it.Key())+"="+string(it.Value()) != exp[n] {
				t.Fatalf("%s: backward scan at %q, want key %d", name, it.Key(), n)
			}
		}
		if it.Error() != nil || n != 0 {
			t.Fatalf("%s: backward scan stopped %d keys early: %v", name, n, it.Error())
		}
		mustDo(t, it.Close())
	}
	rs := db.acquire()
	tombstones := rs.segments[0].meta.Tombstones
	rs.release()
	if tombstones == 0 {
		t.Fatal("the flushed segment holds no tombstones; the test needs them")
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	check("flushed with tombstones", it, false, func(i int) bool { return i < 600 && i%2 == 0 })

	// Compacted, the segment holds only puts; keys written after a
	// snapshot are kept as their only version, newer than it.
	mustDo(t, db.Compact())
	s, err := db.NewSnapshot()
	mustDo(t, err)
	defer s.Close()
	for i := 600; i < 1200; i += 2 {
		mustDo(t, db.Put(key(i), value(i)))
	}
	mustDo(t, db.Compact())
	it, err = s.NewIterator(nil)
	mustDo(t, err)
	check("snapshot older than some keys", it, false, func(i int) bool { return i < 600 && i%2 == 0 })
	it, err = db.NewIterator(nil)
	mustDo(t, err)
	check("all visible", it, true, func(i int) bool { return i%2 == 0 })

	// A snapshot keeps the old versions of keys written again: the
	// segment holds two versions of them, the newer one visible.
	s2, err := db.NewSnapshot()
	mustDo(t, err)
	defer s2.Close()
	old := value
	value = func(i int) []byte {
		if i%10 == 0 {
			return fmt.Appendf(nil, "new%d", i)
		}
		return old(i)
	}
	for i := 0; i < 1200; i += 10 {
		mustDo(t, db.Put(key(i), value(i)))
	}
	mustDo(t, db.Compact())
	it, err = db.NewIterator(nil)
	mustDo(t, err)
	check("two versions of some keys", it, false, func(i int) bool { return i%2 == 0 })
}

// TestIteratorSingleSegmentUpperIsLargest: read directly from its one
// segment, an iterator whose exclusive upper bound is the segment's
// largest key stops before it, whether the segment's entries are all
// visible puts (a step is the segment's Next) or not.
func TestIteratorSingleSegmentUpperIsLargest(t *testing.T) {
	for _, allVisible := range []bool{true, false} {
		t.Run(fmt.Sprintf("allVisible=%v", allVisible), func(t *testing.T) {
			o := DefaultOptions()
			o.DisableAutoCompaction = true
			db := mustOpen(t, t.TempDir(), o)
			defer db.Close()
			for _, k := range []string{"a", "b", "c", "d", "e"} {
				mustDo(t, db.Put([]byte(k), []byte("v")))
			}
			if !allVisible {
				mustDo(t, db.Delete([]byte("a"))) // a tombstone: not every entry is a visible put
			}
			mustDo(t, db.Flush())
			const upper = "e"
			it, err := db.NewIterator(&IterOptions{LowerBound: []byte("b"), UpperBound: []byte(upper)})
			mustDo(t, err)
			defer it.Close()
			if it.seg == nil || it.seg.AllVisible(it.seq) != allVisible {
				t.Fatalf("single segment %v; want one whose entries are all visible puts: %v", it.seg != nil, allVisible)
			}
			var got []string
			for k := range it.All() {
				got = append(got, string(k))
			}
			if want := "[b c d]"; fmt.Sprint(got) != want {
				t.Fatalf("scan below %q: %v, want %v", upper, got, want)
			}
			if it.Seek([]byte(upper)) {
				t.Fatalf("Seek(%q) at %q, past the upper bound", upper, it.Key())
			}
		})
	}
}

// TestIteratorReverseLargeVersionsModel checks backward moves over keys
// written many times with values above maxEagerCopy, whose newest
// visible version findPrev reads again once it knows it (newestVisible),
// beside small values, deletions, range deletions, flushes and snapshots
// that keep older versions visible: at the latest state and at each
// snapshot, Last, SeekLT, Prev and direction changes show the model's
// keys and values.
func TestIteratorReverseLargeVersionsModel(t *testing.T) {
	const keys = 24
	rounds := 400
	if raceEnabled || testing.Short() {
		rounds = 150
	}
	rng := rand.New(rand.NewPCG(21, 4))
	o := smallOptions()
	o.MemtableSize = 1 << 20
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "k%02d", i) }
	model := map[string]string{}
	type snap struct {
		s     *Snapshot
		model map[string]string
	}
	var snaps []snap
	for round := range rounds {
		k := key(rng.IntN(keys))
		switch op := rng.IntN(20); {
		case op < 14:
			size := []int{8, maxEagerCopy, maxEagerCopy + 1, 20 << 10}[rng.IntN(4)]
			v := fmt.Sprintf("%s/%d/", k, round)
			v += strings.Repeat("x", max(0, size-len(v)))
			mustDo(t, db.Put(k, []byte(v)))
			model[string(k)] = v
		case op < 16:
			mustDo(t, db.Delete(k))
			delete(model, string(k))
		case op < 17:
			a := rng.IntN(keys)
			e := key(a + 1 + rng.IntN(4))
			mustDo(t, db.DeleteRange(key(a), e))
			for mk := range model {
				if mk >= string(key(a)) && mk < string(e) {
					delete(model, mk)
				}
			}
		case op < 19:
			if len(snaps) < 8 {
				s, err := db.NewSnapshot()
				mustDo(t, err)
				snaps = append(snaps, snap{s, maps.Clone(model)})
			}
		default:
			mustDo(t, db.Flush())
		}
	}
	check := func(name string, newIter func() (*Iterator, error), m map[string]string) {
		t.Helper()
		var want []string
		for k := range m {
			want = append(want, k)
		}
		slices.Sort(want)
		it, err := newIter()
		mustDo(t, err)
		defer it.Close()
		pos := -1
		for move := range 200 {
			var ok bool
			var what string
			switch r := rng.IntN(10); {
			case r == 0:
				what, ok, pos = "Last", it.Last(), len(want)-1
			case r == 1:
				k := key(rng.IntN(keys + 1))
				what, ok = "SeekLT "+string(k), it.SeekLT(k)
				pos, _ = slices.BinarySearch(want, string(k))
				pos--
			case r == 2 && it.Valid():
				what, ok = "Next", it.Next()
				pos++
			case it.Valid():
				what, ok = "Prev", it.Prev()
				pos--
			default:
				what, ok, pos = "Last", it.Last(), len(want)-1
			}
			wantOK := pos >= 0 && pos < len(want)
			if ok != wantOK {
				t.Fatalf("%s move %d: %s = %v, want %v", name, move, what, ok, wantOK)
			}
			if !ok {
				continue
			}
			if w := want[pos]; string(it.Key()) != w || string(it.Value()) != m[w] {
				t.Fatalf("%s move %d: %s at %s (value %.12q…, %d bytes), want %s (%.12q…, %d bytes)",
					name, move, what, it.Key(), it.Value(), len(it.Value()), w, m[w], len(m[w]))
			}
		}
		mustDo(t, it.Error())
	}
	check("latest", func() (*Iterator, error) { return db.NewIterator(nil) }, model)
	for i, s := range snaps {
		check(fmt.Sprint("snapshot ", i), func() (*Iterator, error) { return s.s.NewIterator(nil) }, s.model)
		mustDo(t, s.s.Close())
	}
}

// BenchmarkReverseOverVersions: a backward scan over 16 keys of the
// memtable, each written v times with a 64 KiB value; one op per key
// scanned. Forward for comparison: a backward step should cost about what
// a forward one does, not a copy of every version's value.
//
//	go test -run '^$' -bench ReverseOverVersions .
func BenchmarkReverseOverVersions(b *testing.B) { benchOverVersions(b, "memtable") }

// benchSteps steps it once per iteration of b, forward or backward,
// starting over from First or Last at the end.
func benchSteps(b *testing.B, it *Iterator, forward bool) {
	ok := false
	for b.Loop() {
		if forward {
			if !ok {
				ok = it.First()
			}
			ok = it.Next()
		} else {
			if !ok {
				ok = it.Last()
			}
			ok = it.Prev()
		}
	}
}

// BenchmarkReverseOverSegmentVersions: as BenchmarkReverseOverVersions,
// but the versions are in one segment, kept there by a snapshot taken
// after each round of writes. A backward step leaves the value records
// of the versions it steps over unread (segment.Iter.DeferValueRecords)
// and reads the one it shows, as a forward step (NextVisible) does: when
// it read each one, a step over a key of 100 versions took 5.7 ms, now
// 0.09 ms (2 cores, one run each).
func BenchmarkReverseOverSegmentVersions(b *testing.B) { benchOverVersions(b, "segment") }

// BenchmarkScanOverMergedVersions: as BenchmarkReverseOverSegmentVersions,
// with a key in the memtable too, so that the iterator merges its
// sources. The segment below the merge leaves the records of the versions
// a step passes unread (Iterator.mergeValue): when it read each one, a
// step over a key of 100 versions took 7.4 ms forward and 7.7 ms
// backward, now 0.11 and 0.18 ms (2 cores, one run each).
func BenchmarkScanOverMergedVersions(b *testing.B) { benchOverVersions(b, "merged") }

// benchOverVersions steps forward and backward over 16 keys, each written
// v times with a 64 KiB value, where says: in the memtable, or in one
// segment, with a snapshot taken after each round of writes so that the
// segment keeps every version, or "merged": in that segment and one more
// key in the memtable.
func benchOverVersions(b *testing.B, where string) {
	for _, v := range []int{1, 10, 100} {
		for _, dir := range []string{"forward", "backward"} {
			b.Run(fmt.Sprintf("versions=%d/%s", v, dir), func(b *testing.B) {
				const keys = 16
				db := mustOpen(b, b.TempDir(), &Options{MemtableSize: 256 << 20, DisableAutoCompaction: true})
				defer db.Close()
				val := make([]byte, 64<<10)
				for range v {
					for i := range keys {
						mustDo(b, db.Put(fmt.Appendf(nil, "k%03d", i), val))
					}
					if where != "memtable" {
						s, err := db.NewSnapshot()
						mustDo(b, err)
						defer s.Close()
					}
				}
				if where != "memtable" {
					mustDo(b, db.Flush())
				}
				if where == "merged" {
					mustDo(b, db.Put([]byte("k"), []byte("v")))
				}
				it, err := db.NewIterator(nil)
				mustDo(b, err)
				defer it.Close()
				benchSteps(b, it, dir == "forward")
			})
		}
	}
}

// versionsStore writes keys keys, each in rounds versions of valueSize
// bytes stored apart from their keys (version r of key i is marked
// "k<i>/v<r>/" and otherwise incompressible), a snapshot after each round
// keeping every version, and flushes them into one segment, or, if
// merged, into two (the older half of the versions in one): a scan then
// merges them. It returns the store's directory and the segments' names;
// the store is closed, its snapshots with it.
func versionsStore(t *testing.T, keys, rounds, valueSize int, merged bool, o *Options) (dir string, segs []string) {
	t.Helper()
	dir = t.TempDir()
	db := mustOpen(t, dir, o)
	for r := range rounds {
		for i := range keys {
			mustDo(t, db.Put(fmt.Appendf(nil, "k%03d", i), versionValue(i, r, valueSize)))
		}
		if _, err := db.NewSnapshot(); err != nil {
			t.Fatal(err)
		}
		if merged && r == rounds/2 {
			mustDo(t, db.Flush())
		}
	}
	mustDo(t, db.Flush())
	want := 1
	if merged {
		want = 2
	}
	if n := db.Stats().Segments; n != want {
		t.Fatalf("%d segments, want %d", n, want)
	}
	mustDo(t, db.Close())
	paths, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt))
	for _, p := range paths {
		segs = append(segs, filepath.Base(p))
	}
	return dir, segs
}

// versionValue is version r of key i, for versionsStore.
func versionValue(i, r, size int) []byte {
	v := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(i), uint64(r)))
	for j := range v {
		v[j] = byte(rng.Uint32())
	}
	copy(v, fmt.Sprintf("k%03d/v%03d/", i, r))
	return v
}

// TestScansReadOneRecordPerKey checks that a scan reads the value record
// of each version it shows, not those of the versions it steps over,
// forward and backward, over one segment and over two merged: a fresh
// scan of keys with 40 versions each reads about the bytes of one record
// per key (every record is read, and its checksum verified, once per
// open), not 40.
func TestScansReadOneRecordPerKey(t *testing.T) {
	const keys, rounds, size = 20, 40, 4 << 10
	o := smallOptions()
	o.MemtableSize = 8 << 20
	o.DisableAutoCompaction = true
	for _, merged := range []bool{false, true} {
		dir, _ := versionsStore(t, keys, rounds, size, merged, o)
		scanBytes := func(backward bool) uint64 {
			db := mustOpen(t, dir, o)
			defer db.Close()
			before := db.Stats().BytesRead
			it, err := db.NewIterator(nil)
			mustDo(t, err)
			seq := it.All()
			if backward {
				seq = it.Backward()
			}
			n := 0
			for k, v := range seq {
				i := 0
				fmt.Sscanf(string(k), "k%03d", &i)
				if !bytes.Equal(v, versionValue(i, rounds-1, size)) {
					t.Fatalf("merged=%v backward=%v: %s = %.9q, want its last version", merged, backward, k, v)
				}
				n++
			}
			mustDo(t, it.Close())
			if n != keys {
				t.Fatalf("merged=%v backward=%v: %d keys, want %d", merged, backward, n, keys)
			}
			return db.Stats().BytesRead - before
		}
		// The data blocks add a few KiB; a record of every version would
		// add 40 times the records.
		limit := uint64(3 * keys * size)
		for _, backward := range []bool{false, true} {
			if n := scanBytes(backward); n > limit {
				t.Fatalf("merged=%v backward=%v: a fresh scan read %d bytes, more than %d: it read the records of versions it does not show", merged, backward, n, limit)
			} else {
				t.Logf("merged=%v backward=%v: %d bytes", merged, backward, n)
			}
		}
	}
}

// TestScanDeferredRecordDamage checks the scans' deferred reads of value
// records against damage, over one segment and over two merged: a
// damaged record of the version a scan shows fails it with ErrCorrupt at
// the record, and one of a version it steps over does not, in either
// direction.
func TestScanDeferredRecordDamage(t *testing.T) {
	const keys, rounds, size = 6, 5, 2 << 10
	for _, merged := range []bool{false, true} {
		for _, mmap := range []bool{true, false} {
			o := smallOptions()
			o.MemtableSize = 8 << 20
			o.DisableAutoCompaction = true
			o.DisableCompression = true
			o.DisableMmap = !mmap
			dir, segs := versionsStore(t, keys, rounds, size, merged, o)
			// Damage the record of key 3's newest version and of key 1's
			// second version, past their markers.
			damage := func(marker string) (seg string, off int) {
				for _, seg := range segs {
					path := filepath.Join(dir, seg)
					data, err := os.ReadFile(path)
					mustDo(t, err)
					if off = bytes.Index(data, []byte(marker)); off >= 0 {
						data[off+100] ^= 1
						mustDo(t, os.WriteFile(path, data, 0o644))
						return seg, off
					}
				}
				t.Fatalf("marker %s not found", marker)
				return "", 0
			}
			newestSeg, newest := damage(fmt.Sprintf("k003/v%03d/", rounds-1))
			damage("k001/v001/")

			db := mustOpen(t, dir, o)
			for _, backward := range []bool{false, true} {
				name := fmt.Sprintf("merged=%v mmap=%v backward=%v", merged, mmap, backward)
				it, err := db.NewIterator(nil)
				mustDo(t, err)
				seq, want := it.All(), []string{"k000", "k001", "k002"}
				if backward {
					seq, want = it.Backward(), []string{"k005", "k004"}
				}
				var got []string
				for k := range seq {
					got = append(got, string(k))
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: scan yields %q before the damage at k003, want %q", name, got, want)
				}
				wantCorrupt(t, it.Close(), newestSeg, newest-32, newest, name)

				// Key 1's damaged version is older than the one shown: a
				// scan below k003 steps over it without reading it.
				it, err = db.NewIterator(&IterOptions{UpperBound: []byte("k003")})
				mustDo(t, err)
				seq, want = it.All(), []string{"k000", "k001", "k002"}
				if backward {
					seq, want = it.Backward(), []string{"k002", "k001", "k000"}
				}
				got = got[:0]
				for k := range seq {
					got = append(got, string(k))
				}
				if err := it.Close(); err != nil || !slices.Equal(got, want) {
					t.Fatalf("%s: scan below k003 yields %q, %v; want %q", name, got, err, want)
				}
			}
			mustDo(t, db.Close())
		}
	}
}
