package bloomkv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"github.com/bloomkv/bloomkv/internal/invariants"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

var (
	modelSteps = flag.Int("model.steps", 4000, "steps of the randomized model test")
	modelSeed  = flag.Uint64("model.seed", 1, "seed of the randomized model test")
)

// smallOptions make flushes frequent so that tests cross memtable and
// segment boundaries with little data.
func smallOptions() *Options {
	o := DefaultOptions()
	o.MemtableSize = 16 << 10
	o.BlockSize = 512
	o.BlockCacheSize = 1 << 20
	return o
}

func mustOpen(t testing.TB, dir string, o *Options) *DB {
	t.Helper()
	db, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

func TestPutGetDelete(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	defer db.Close()
	if _, err := db.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if err := db.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	v, err := db.Get([]byte("a"))
	if err != nil || string(v) != "1" {
		t.Fatalf("Get = %q, %v; want 1", v, err)
	}
	if err := db.Put([]byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get([]byte("a")); err != nil || len(v) != 0 {
		t.Fatalf("empty value: Get = %q, %v", v, err)
	}
	if err := db.Delete([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
}

func TestBadInput(t *testing.T) {
	db := mustOpen(t, t.TempDir(), nil)
	big := make([]byte, MaxKeySize+1)
	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"empty key put", func() error { return db.Put(nil, []byte("v")) }, ErrEmptyKey},
		{"empty key get", func() error { _, err := db.Get([]byte{}); return err }, ErrEmptyKey},
		{"empty key delete", func() error { return db.Delete(nil) }, ErrEmptyKey},
		{"key too large", func() error { return db.Put(big, nil) }, ErrKeyTooLarge},
		{"key too large get", func() error { _, err := db.Get(big); return err }, ErrKeyTooLarge},
		{"value too large", func() error { return db.Put([]byte("k"), make([]byte, MaxValueSize+1)) }, ErrValueTooLarge},
		{"batch with a bad op", func() error {
			b := NewBatch()
			b.Put([]byte("ok"), []byte("v"))
			b.Delete(nil)
			return db.Write(b)
		}, ErrEmptyKey},
	}
	for _, tt := range tests {
		if err := tt.op(); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := db.Get([]byte("ok")); !errors.Is(err, ErrNotFound) {
		t.Errorf("a batch with an invalid op must apply nothing; Get(ok) = %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	closedOps := map[string]func() error{
		"Put":     func() error { return db.Put([]byte("k"), nil) },
		"Get":     func() error { _, err := db.Get([]byte("k")); return err },
		"Delete":  func() error { return db.Delete([]byte("k")) },
		"Flush":   db.Flush,
		"Compact": db.Compact,
		"Close":   db.Close,
	}
	for name, op := range closedOps {
		if err := op(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	db.Close()
	db2 := mustOpen(t, dir, nil) // the lock went with Close
	db2.Close()
}

func TestOpenLockedByOtherProcess(t *testing.T) {
	if os.Getenv("BLOOMKV_LOCK_CHILD") != "" {
		_, err := Open(os.Getenv("BLOOMKV_LOCK_CHILD"), nil)
		fmt.Println("child:", errors.Is(err, ErrLocked))
		return
	}
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	defer db.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenLockedByOtherProcess$")
	cmd.Env = append(os.Environ(), "BLOOMKV_LOCK_CHILD="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "child: true") {
		t.Fatalf("second process did not get ErrLocked; it printed %q", out)
	}
}

func TestOpenNotAStore(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "notes.txt")
	os.WriteFile(precious, []byte("mine"), 0o644)
	if _, err := Open(dir, nil); !errors.Is(err, ErrNotStore) {
		t.Fatalf("Open of a foreign directory: %v, want ErrNotStore", err)
	}
	if b, _ := os.ReadFile(precious); string(b) != "mine" {
		t.Fatal("Open touched a file it does not own")
	}
	if _, err := os.Stat(filepath.Join(dir, base.ManifestName)); !os.IsNotExist(err) {
		t.Fatal("Open created a manifest in a foreign directory")
	}
}

func TestCorruptSegmentNamed(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, smallOptions())
	for i := range 2000 {
		db.Put(fmt.Appendf(nil, "key%05d", i), bytes.Repeat([]byte{'v'}, 50))
	}
	if err := db.Compact(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt))
	if len(segs) != 1 {
		t.Fatalf("want 1 segment after Compact, have %v", segs)
	}
	data, _ := os.ReadFile(segs[0])
	for _, off := range []int{len(data) - 1, len(data) - 60, len(data) / 2, 10} {
		bad := bytes.Clone(data)
		bad[off] ^= 0x40
		os.WriteFile(segs[0], bad, 0o644)
		db, err := Open(dir, smallOptions())
		if err == nil {
			// Damage in a data block shows when the block is read.
			for i := range 2000 {
				if _, err = db.Get(fmt.Appendf(nil, "key%05d", i)); err != nil && !errors.Is(err, ErrNotFound) {
					break
				}
				err = nil
			}
			db.Close()
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(segs[0])) {
			t.Errorf("flip at %d: %v; want ErrCorrupt naming %s", off, err, filepath.Base(segs[0]))
		}
	}
}

// TestModel runs random operations against the DB and a map and compares
// every read. Reopens in between check recovery; tiny memtables make
// flushes and multi-segment reads frequent.
func TestModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(*modelSeed, 0))
	dir := t.TempDir()
	opts := smallOptions()
	db := mustOpen(t, dir, opts)
	defer func() { db.Close() }()
	model := map[string]string{}
	key := func() []byte { return fmt.Appendf(nil, "k%04d", rng.IntN(600)) }
	value := func() []byte { return bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, rng.IntN(200)) }
	check := func(k []byte) {
		t.Helper()
		got, err := db.Get(k)
		want, ok := model[string(k)]
		switch {
		case !ok && !errors.Is(err, ErrNotFound):
			t.Fatalf("Get(%s) = %q, %v; want ErrNotFound", k, got, err)
		case ok && (err != nil || string(got) != want):
			t.Fatalf("Get(%s) = %q, %v; want %q", k, got, err, want)
		}
	}
	for step := range *modelSteps {
		switch r := rng.IntN(100); {
		case r < 40:
			k, v := key(), value()
			if err := db.Put(k, v); err != nil {
				t.Fatal(err)
			}
			model[string(k)] = string(v)
		case r < 50:
			k := key()
			if err := db.Delete(k); err != nil {
				t.Fatal(err)
			}
			delete(model, string(k))
		case r < 52:
			start, end := randomRange(rng, 600)
			if err := db.DeleteRange([]byte(start), []byte(end)); err != nil {
				t.Fatal(err)
			}
			modelDeleteRange(model, start, end)
		case r < 58:
			// The batch's operations apply in order: a put after a range
			// deletion of its key survives it, one before does not.
			b := NewBatch()
			staged := maps.Clone(model)
			for range rng.IntN(10) + 1 {
				k := key()
				switch rng.IntN(6) {
				case 0, 1:
					b.Delete(k)
					delete(staged, string(k))
				case 2:
					start, end := randomRange(rng, 600)
					b.DeleteRange([]byte(start), []byte(end))
					modelDeleteRange(staged, start, end)
				default:
					v := string(value())
					b.Put(k, []byte(v))
					staged[string(k)] = v
				}
			}
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			model = staged
		case r < 95:
			check(key())
		case r < 97:
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		case r < 98:
			if err := db.Compact(); err != nil {
				t.Fatal(err)
			}
		default:
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = mustOpen(t, dir, opts)
		}
		if step%500 == 0 {
			for i := range 600 {
				check(fmt.Appendf(nil, "k%04d", i))
			}
		}
	}
	for i := range 600 {
		check(fmt.Appendf(nil, "k%04d", i))
	}
	t.Logf("stats after %d steps: %+v", *modelSteps, db.Stats())
}

// TestConcurrentWriters checks group commit under -race: every write of
// every goroutine is visible afterwards, and after a reopen.
func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, smallOptions())
	const writers, perWriter = 8, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				k := fmt.Appendf(nil, "w%d-%04d", w, i)
				if err := db.Put(k, k); err != nil {
					t.Error(err)
					return
				}
				if v, err := db.Get(k); err != nil || !bytes.Equal(v, k) {
					t.Errorf("read own write %s: %q, %v", k, v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	db.Close()
	db = mustOpen(t, dir, smallOptions())
	defer db.Close()
	for w := range writers {
		for i := range perWriter {
			k := fmt.Appendf(nil, "w%d-%04d", w, i)
			if v, err := db.Get(k); err != nil || !bytes.Equal(v, k) {
				t.Fatalf("after reopen %s: %q, %v", k, v, err)
			}
		}
	}
}

// TestFiltersSkipReads shows the point of the store: with many segments,
// Gets of absent keys read about FPR × segments blocks with filters, and
// one block per segment without.
func TestFiltersSkipReads(t *testing.T) {
	const segments, perSegment, gets = 20, 500, 2000
	for _, bpk := range []float64{10, 0} {
		opts := smallOptions()
		opts.BitsPerKey = bpk
		opts.DisableFilters = bpk == 0
		opts.MemtableSize = 1 << 20
		opts.DisableAutoCompaction = true // keep the 20 segments
		db := mustOpen(t, t.TempDir(), opts)
		for s := range segments {
			for i := range perSegment {
				// Segments interleave, so every key range spans all of them.
				db.Put(fmt.Appendf(nil, "key%08d", 2*(i*segments+s)), []byte("value"))
			}
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		before := db.Stats()
		if before.Segments != segments {
			t.Fatalf("have %d segments, want %d", before.Segments, segments)
		}
		for i := range gets { // odd numbers were never written
			k := fmt.Appendf(nil, "key%08d", 2*i+1)
			if _, err := db.Get(k); !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
		}
		st := db.Stats()
		reads := float64(st.BlockReads+st.BlockCacheHits-before.BlockReads-before.BlockCacheHits) / gets
		probed := float64(st.SegmentsProbed-before.SegmentsProbed) / gets
		t.Logf("bits/key %v: %.3f blocks read per absent Get, %.2f segments probed, %d false positives",
			bpk, reads, probed, st.FilterFalsePositives-before.FilterFalsePositives)
		if fpr := bloom.FPR(bloom.Blocked, bpk, bloom.OptimalK(bloom.Blocked, bpk)); bpk > 0 &&
			(reads > 2*fpr*probed || reads < fpr*probed/2) {
			t.Errorf("with filters an absent Get read %.3f blocks, want ≈ FPR × segments probed = %.3f", reads, fpr*probed)
		}
		if bpk == 0 && reads < 0.99*probed {
			t.Errorf("without filters an absent Get read %.3f blocks for %.2f segments probed, want one each", reads, probed)
		}
		db.Close()
	}
}

// TestBackgroundCompaction fills a store through many flushes and checks
// that size-tiered compaction keeps the segment count bounded, reports each
// merge, and loses nothing.
func TestBackgroundCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := smallOptions()
	db := mustOpen(t, dir, opts)
	const n = 20000
	for i := range n {
		k := fmt.Appendf(nil, "key%06d", (i*7919)%n)
		if err := db.Put(k, k); err != nil {
			t.Fatal(err)
		}
	}
	db.Flush()
	if err := db.WaitForCompactions(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := db.Stats()
	t.Logf("%d flushes, %d compactions, %d segments", st.Flushes, st.Compactions, st.Segments)
	if st.Compactions == 0 || len(st.RecentCompactions) == 0 {
		t.Fatal("no background compaction ran")
	}
	if limit := 3*4 + 1; st.Segments > limit {
		t.Errorf("%d segments after %d flushes, want at most %d", st.Segments, st.Flushes, limit)
	}
	for _, c := range st.RecentCompactions {
		if c.Inputs < 2 || c.OutputBytes == 0 || c.FilterPath == "" {
			t.Errorf("implausible compaction record %+v", c)
		}
	}
	db.Close()
	db = mustOpen(t, dir, opts)
	defer db.Close()
	for i := range n {
		k := fmt.Appendf(nil, "key%06d", i)
		if v, err := db.Get(k); err != nil || !bytes.Equal(v, k) {
			t.Fatalf("Get(%s) = %q, %v", k, v, err)
		}
	}
}

// The crash test is TestCrashLoop (crashloop_test.go): a child process
// with concurrent writers is SIGKILLed at random moments, 100 times.

// Benchmarks: 16-byte random keys, 100-byte values, as in the README's
// comparison. b.N operations per benchmark; the store for the get
// benchmarks is filled once with benchKeys keys and fully compacted.

const benchKeys = 1_000_000

func benchKey(dst []byte, i uint64) []byte {
	binary.BigEndian.PutUint64(dst[0:], i*0x9E3779B97F4A7C15)
	binary.BigEndian.PutUint64(dst[8:], i)
	return dst[:16]
}

// benchValue fills v with bytes derived from i: random-looking, so that
// blocks compress about as real data would, not to nothing.
func benchValue(v []byte, i uint64) []byte {
	r := rand.New(rand.NewPCG(i, 0))
	for j := 0; j+8 <= len(v); j += 8 {
		binary.LittleEndian.PutUint64(v[j:], r.Uint64())
	}
	return v
}

func BenchmarkFillRandom(b *testing.B) {
	db := mustOpen(b, b.TempDir(), nil)
	defer db.Close()
	var k [16]byte
	v := make([]byte, 100)
	b.ReportAllocs()
	b.SetBytes(116)
	for i := range b.N {
		if err := db.Put(benchKey(k[:], uint64(i)), benchValue(v, uint64(i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

var (
	benchOnce sync.Once
	benchDB   *DB
	benchDir  string // removed by TestMain
)

func filledDB(b *testing.B) *DB {
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bloomkv-bench")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
		db := mustOpen(b, dir, nil)
		var k [16]byte
		v := make([]byte, 100)
		for i := range uint64(benchKeys) {
			db.Put(benchKey(k[:], i), benchValue(v, i))
		}
		if err := db.Compact(); err != nil {
			b.Fatal(err)
		}
		benchDB = db
	})
	return benchDB
}

func BenchmarkGetHit(b *testing.B) {
	db := filledDB(b)
	var k [16]byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := db.Get(benchKey(k[:], uint64(i*7919)%benchKeys)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkGetMiss(b *testing.B) {
	db := filledDB(b)
	var k [16]byte
	before := db.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := db.Get(benchKey(k[:], benchKeys+uint64(i))); !errors.Is(err, ErrNotFound) {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	st := db.Stats()
	b.ReportMetric(float64(st.BlockReads-before.BlockReads)/float64(b.N), "blockreads/op")
}

// BenchmarkGetParallel runs Gets, present and absent keys, from
// GOMAXPROCS goroutines: run with -cpu 1,4,16 to see how reads scale with
// cores (ops/s is the total over all goroutines). Give -benchtime as a
// time, not a count (Nx): RunParallel hands out iterations from one shared
// counter in grains it sizes from a timed earlier run, and with a count
// that run is a single iteration, so the grains are a few Gets and the
// shared counter, not the store, sets the pace (55% of CPU at 16 cores).
//
//	go test -run '^$' -bench GetParallel -cpu 1,4,16 .
func BenchmarkGetParallel(b *testing.B) {
	db := filledDB(b)
	for _, tc := range []struct {
		name   string
		offset uint64 // added to the key number: benchKeys and beyond are absent
	}{{"hit", 0}, {"miss", benchKeys}} {
		b.Run(tc.name, func(b *testing.B) {
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var k [16]byte
				i := seed.Add(1) * 1_000_003
				for pb.Next() {
					i++
					_, err := db.Get(benchKey(k[:], tc.offset+uint64(i*7919)%benchKeys))
					if tc.offset == 0 && err != nil || tc.offset != 0 && !errors.Is(err, ErrNotFound) {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
	// ceiling is what the machine gives the core of a miss with nothing
	// shared: each goroutine builds the same absent keys and probes its
	// own copy of a filter as large as the store's. Its rate at -cpu 16
	// over -cpu 1 bounds what misses can scale to on that machine (its
	// clock falls as more cores run, and cores share caches), so that
	// their scaling is read against it rather than against the core count.
	b.Run("ceiling", func(b *testing.B) {
		shared := bloom.NewBitsPerKey(benchKeys, 10)
		var k [16]byte
		for i := range uint64(benchKeys) {
			shared.Add(benchKey(k[:], i))
		}
		var seed atomic.Uint64
		var maybes atomic.Uint64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			f := bloom.NewBitsPerKey(benchKeys, 10)
			if err := f.Union(shared); err != nil {
				b.Error(err)
				return
			}
			var k [16]byte
			var n uint64
			i := seed.Add(1) * 1_000_003
			for pb.Next() {
				i++
				if f.Contains(benchKey(k[:], benchKeys+uint64(i*7919)%benchKeys)) {
					n++
				}
			}
			maybes.Add(n)
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		b.ReportMetric(float64(maybes.Load())/float64(b.N), "fpr")
	})
}

// TestHasAndValueSize: both agree with Get in a memtable, in a segment,
// after a delete and under a range deletion, and copy nothing.
func TestHasAndValueSize(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	big := benchValue(make([]byte, 256<<10), 7) // incompressible: stored raw, read from the mapping
	mustDo(t, db.Put([]byte("big"), big))
	mustDo(t, db.Put([]byte("empty"), nil))
	mustDo(t, db.Put([]byte("gone"), []byte("v")))
	mustDo(t, db.Delete([]byte("gone")))
	mustDo(t, db.Put([]byte("ranged"), []byte("v")))
	mustDo(t, db.DeleteRange([]byte("r"), []byte("s")))
	check := func(stage string) {
		t.Helper()
		for _, tc := range []struct {
			key  string
			has  bool
			size int
		}{{"big", true, len(big)}, {"empty", true, 0}, {"gone", false, 0}, {"ranged", false, 0}, {"never", false, 0}} {
			has, err := db.Has([]byte(tc.key))
			if err != nil || has != tc.has {
				t.Fatalf("%s: Has(%s) = %v, %v; want %v", stage, tc.key, has, err, tc.has)
			}
			n, err := db.ValueSize([]byte(tc.key))
			if tc.has && (err != nil || n != tc.size) || !tc.has && !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: ValueSize(%s) = %d, %v; want %d (present %v)", stage, tc.key, n, err, tc.size, tc.has)
			}
		}
		// From a segment, copying nothing needs the mapping: where segments
		// are read with ReadAt (Windows), the value's block is read into a
		// buffer.
		if stage == "segment" && !segmentsMapped {
			return
		}
		if allocs := testing.AllocsPerRun(20, func() { db.Has([]byte("big")); db.ValueSize([]byte("big")) }); allocs > 0 && !raceEnabled && !invariants.Enabled {
			t.Fatalf("%s: Has and ValueSize of a 256 KiB value allocate %v times", stage, allocs)
		}
	}
	check("memtable")
	mustDo(t, db.Flush())
	check("segment")
	if _, err := db.Has(nil); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Has(nil): %v", err)
	}
}

// BenchmarkHasLargeValue compares Get and Has on a 256 KiB value in a
// flushed segment: Has finds it without copying it.
func BenchmarkHasLargeValue(b *testing.B) {
	db := mustOpen(b, b.TempDir(), nil)
	defer db.Close()
	mustDo(b, db.Put([]byte("big"), benchValue(make([]byte, 256<<10), 1)))
	mustDo(b, db.Flush())
	for _, op := range []struct {
		name string
		fn   func([]byte) error
	}{
		{"Get", func(k []byte) error { _, err := db.Get(k); return err }},
		{"Has", func(k []byte) error { _, err := db.Has(k); return err }},
		{"ValueSize", func(k []byte) error { _, err := db.ValueSize(k); return err }},
	} {
		b.Run(op.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				mustDo(b, op.fn([]byte("big")))
			}
		})
	}
}

// TestFlushRemovesItsWAL: once Flush returns, the WAL of the memtables it
// flushed is gone, so a store flushed and then copied file by file (as a
// crash image, or by a backup that does not use Checkpoint) holds only the
// current WAL (and perhaps the spare one the next rotation will start,
// which is numbered above it and empty). The unlink used to follow the
// wakeup of Flush's caller.
func TestFlushRemovesItsWAL(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	defer db.Close()
	for i := range 200 {
		mustDo(t, db.Put(fmt.Appendf(nil, "k%03d", i), []byte("v")))
		mustDo(t, db.Flush())
		wals, err := filepath.Glob(filepath.Join(dir, "*"+base.WALExt))
		if err != nil {
			t.Fatal(err)
		}
		db.mu.Lock()
		current := db.logNum
		db.mu.Unlock()
		var nums []uint64
		for _, w := range wals {
			if num, _, ok := base.ParseFileName(filepath.Base(w)); ok && num <= current {
				nums = append(nums, num)
			}
		}
		if len(nums) != 1 || nums[0] != current {
			t.Fatalf("after flush %d: WAL files %v, want the current one (%d) and none older", i, wals, current)
		}
	}
}
