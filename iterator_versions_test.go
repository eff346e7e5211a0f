package bloomkv

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/invariants"
)

// hotKeyDB opens a store whose memtable holds key "b" overwritten v
// times between "a" and "c", as a counter updated in place is: every
// version stays in the memtable until it is flushed.
func hotKeyDB(t testing.TB, v int) *DB {
	db := mustOpen(t, t.TempDir(), &Options{MemtableSize: 256 << 20})
	mustDo(t, db.Put([]byte("a"), []byte("1")))
	mustDo(t, db.Put([]byte("c"), []byte("3")))
	overwriteHotKey(t, db, v, "%d")
	return db
}

// overwriteHotKey writes key "b" v times, the i-th time with the value
// format makes of i, in batches of 10,000.
func overwriteHotKey(t testing.TB, db *DB, v int, format string) {
	for i := 0; i < v; {
		b := NewBatch()
		for ; i < v && b.Len() < 10_000; i++ {
			mustDo(t, b.Put([]byte("b"), fmt.Appendf(nil, format, i)))
		}
		mustDo(t, db.Write(b))
	}
}

// scanPastHotKey seeks to "a" and steps to "c", then back from "c" to
// "a", checking what it passes.
func scanPastHotKey(t testing.TB, it *Iterator, v int) {
	want := fmt.Appendf(nil, "%d", v-1)
	if !it.Seek([]byte("a")) || !it.Next() || !bytes.Equal(it.Key(), []byte("b")) || !bytes.Equal(it.Value(), want) ||
		!it.Next() || !bytes.Equal(it.Key(), []byte("c")) {
		t.Fatalf("scan past the hot key: at %q = %q, %v", it.Key(), it.Value(), it.Error())
	}
	if !it.SeekLT([]byte("d")) || !it.Prev() || !bytes.Equal(it.Key(), []byte("b")) || !bytes.Equal(it.Value(), want) ||
		!it.Prev() || !bytes.Equal(it.Key(), []byte("a")) {
		t.Fatalf("scan back past the hot key: at %q = %q, %v", it.Key(), it.Value(), it.Error())
	}
}

// scansWithin runs scans and fails t if they took over 200 ms of CPU
// time (2 s under -race and the invariants build, where each Key and
// Value is a guarded copy): a wide margin over the few milliseconds they
// take, far under the seconds of a step per version. CPU time, as the
// hostile input tests bound theirs: steps have no counter.
func scansWithin(t *testing.T, what string, scans func()) {
	t.Helper()
	cpuWithin(t, what, 200*time.Millisecond, scans)
}

// cpuWithin runs work and fails t if it took over limit of CPU time (ten
// times that under -race and the invariants build).
func cpuWithin(t *testing.T, what string, limit time.Duration, work func()) {
	t.Helper()
	cpu, start := cpuSeconds(), time.Now()
	work()
	used := time.Duration((cpuSeconds() - cpu) * float64(time.Second))
	if used <= 0 { // no CPU clock on this platform
		used = time.Since(start)
	}
	t.Logf("%s: %v", what, used)
	if raceEnabled || invariants.Enabled {
		limit *= 10
	}
	if used > limit {
		t.Errorf("%s took %v, want under %v", what, used, limit)
	}
}

// TestScanPastManyVersions: a step past a key, either way, steps over a
// few of its versions, then seeks past the rest, so its cost does not
// grow with the versions the memtable holds. Stepping over each, a scan
// past a key overwritten 2·10^5 times took 2·10^5 steps each way: 1,000
// scans took 3.4 s of CPU forward and 100 s backward (a memtable's Prev
// is a search); now 5 ms. An Iterator made before more versions were
// written still shows the one it saw. (CPU time with a wide margin, as
// the hostile input tests bound theirs: steps have no counter.)
func TestScanPastManyVersions(t *testing.T) {
	const v, scans = 200_000, 1000
	db := hotKeyDB(t, v)
	defer db.Close()
	it, err := db.NewIterator(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	scanPastHotKey(t, it, v) // the first, untimed
	scansWithin(t, fmt.Sprintf("%d scans past a key of %d versions", scans, v), func() {
		for range scans {
			scanPastHotKey(t, it, v)
		}
	})
	// Backward, then forward again: the turn seeks past the key too.
	if !it.SeekLT([]byte("c")) || !bytes.Equal(it.Key(), []byte("b")) || !it.Next() || !bytes.Equal(it.Key(), []byte("c")) {
		t.Fatalf("turn at the hot key: at %q, %v", it.Key(), it.Error())
	}
	// Versions newer than the Iterator, and a deletion it does not see.
	for i := range 100 {
		mustDo(t, db.Put([]byte("b"), fmt.Appendf(nil, "later %d", i)))
	}
	mustDo(t, db.Delete([]byte("b")))
	scanPastHotKey(t, it, v)
	it2, err := db.NewIterator(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it2.Close()
	var keys []string
	for k := range it2.All() {
		keys = append(keys, string(k))
	}
	for k := range it2.Backward() {
		keys = append(keys, string(k))
	}
	if fmt.Sprint(keys) != "[a c c a]" {
		t.Fatalf("after deleting the hot key: %q", keys)
	}
}

// TestScanPastNewerVersions: versions written after an Iterator was made
// are passed the same way, a few steps and then one seek to the newest
// version the Iterator sees, in either direction. The Iterator here sees
// one version of the hot key and 2·10^5 newer ones follow it in the
// memtable, as for an Iterator kept for repeated lookups (SetBounds)
// beside a counter updated in place. Stepping over each, 1,000 scans both
// ways took 8.2 s of CPU (4.3 s each way alone, on a loaded machine);
// now 4 ms.
func TestScanPastNewerVersions(t *testing.T) {
	const v, scans = 200_000, 1000
	db := hotKeyDB(t, 1)
	defer db.Close()
	it, err := db.NewIterator(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	overwriteHotKey(t, db, v, "later %d")
	mustDo(t, db.Delete([]byte("b")))
	scanPastHotKey(t, it, 1) // the first, untimed
	scansWithin(t, fmt.Sprintf("%d scans past a key of %d versions newer than the Iterator", scans, v), func() {
		for range scans {
			scanPastHotKey(t, it, 1)
		}
	})
	// A seek to the key itself, and a turn at it, show the version seen.
	if !it.Seek([]byte("b")) || string(it.Key()) != "b" || string(it.Value()) != "0" ||
		!it.Prev() || string(it.Key()) != "a" || !it.Next() || string(it.Key()) != "b" || string(it.Value()) != "0" {
		t.Fatalf("seek to the hot key: at %q = %q, %v", it.Key(), it.Value(), it.Error())
	}
	if !it.SeekLT([]byte("c")) || string(it.Key()) != "b" || string(it.Value()) != "0" {
		t.Fatalf("seek back to the hot key: at %q = %q, %v", it.Key(), it.Value(), it.Error())
	}
}

// BenchmarkScanPastManyVersions is a seek to "a" and two steps, past a
// key of 1 or 10^5 versions in the memtable.
func BenchmarkScanPastManyVersions(b *testing.B) {
	for _, v := range []int{1, 100_000} {
		b.Run(fmt.Sprintf("versions=%d", v), func(b *testing.B) {
			db := hotKeyDB(b, v)
			defer db.Close()
			it, err := db.NewIterator(nil)
			if err != nil {
				b.Fatal(err)
			}
			defer it.Close()
			for b.Loop() {
				scanPastHotKey(b, it, v)
			}
		})
	}
}
