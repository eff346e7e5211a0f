package bloomkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// prefixModelKey returns a random key: mostly under one of 300 prefixes
// "pNNN:", some without a ':' (no prefix for SeparatorPrefix; 4 bytes,
// too short for FixedPrefix(5)), some long ones without a ':'.
func prefixModelKey(rng *rand.Rand) []byte {
	switch r := rng.IntN(20); {
	case r == 0:
		return fmt.Appendf(nil, "q%03d", rng.IntN(50))
	case r == 1:
		return fmt.Appendf(nil, "r%06d", rng.IntN(500))
	default:
		return fmt.Appendf(nil, "p%03d:%02d", rng.IntN(300), rng.IntN(40))
	}
}

// prefixModelScan returns a random IterOptions.Prefix: whole prefixes
// present and absent (pNNN: up to 399), partial ones, longer ones.
func prefixModelScan(rng *rand.Rand) []byte {
	switch r := rng.IntN(10); {
	case r < 6:
		return fmt.Appendf(nil, "p%03d:", rng.IntN(400))
	case r == 6:
		return fmt.Appendf(nil, "p%02d", rng.IntN(40))
	case r == 7:
		return fmt.Appendf(nil, "p%03d:%d", rng.IntN(300), rng.IntN(4))
	case r == 8:
		return fmt.Appendf(nil, "r%04d", rng.IntN(60))
	default:
		return []byte("q")
	}
}

// checkPrefixScan compares a prefix scan (forward or backward, with an
// optional lower bound) with the model.
func checkPrefixScan(t *testing.T, db *DB, model map[string]string, rng *rand.Rand, what string) {
	t.Helper()
	p := prefixModelScan(rng)
	opts := &IterOptions{Prefix: p}
	if rng.IntN(4) == 0 {
		opts.LowerBound = append(bytes.Clone(p), '1')
	}
	var want []string
	for k := range model {
		if strings.HasPrefix(k, string(p)) && (opts.LowerBound == nil || k >= string(opts.LowerBound)) {
			want = append(want, k+"="+model[k])
		}
	}
	slices.Sort(want)
	backward := rng.IntN(3) == 0
	if backward {
		slices.Reverse(want)
	}
	it, err := db.NewIterator(opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	seq := it.All()
	if backward {
		seq = it.Backward()
	}
	for k, v := range seq {
		got = append(got, string(k)+"="+string(v))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: scan of prefix %q (lower %q, backward %v):\n got  %q\n want %q", what, p, opts.LowerBound, backward, got, want)
	}
}

// TestPrefixModel writes random keys under a few hundred prefixes into
// many segments (compaction off), compares random prefix scans with a
// map, then compacts and reopens and compares again: with no extractor
// and with each ready one.
func TestPrefixModel(t *testing.T) {
	for _, px := range []*PrefixExtractor{nil, SeparatorPrefix(':'), FixedPrefix(5)} {
		name := "none"
		if px != nil {
			name = px.Name
		}
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(*modelSeed, 14))
			opts := smallOptions()
			opts.DisableAutoCompaction = true
			opts.MemtableSize = 1 << 20 // flushes are explicit
			opts.Prefix = px
			dir := t.TempDir()
			db := mustOpen(t, dir, opts)
			model := map[string]string{}
			steps := *modelSteps
			for i := range steps {
				k := prefixModelKey(rng)
				if rng.IntN(5) == 0 {
					if err := db.Delete(k); err != nil {
						t.Fatal(err)
					}
					delete(model, string(k))
				} else {
					v := fmt.Sprintf("v%d", i)
					if err := db.Put(k, []byte(v)); err != nil {
						t.Fatal(err)
					}
					model[string(k)] = v
				}
				if i%(steps/30) == 0 {
					if err := db.Flush(); err != nil {
						t.Fatal(err)
					}
				}
				if i%8 == 0 {
					checkPrefixScan(t, db, model, rng, fmt.Sprintf("step %d", i))
				}
			}
			st := db.Stats()
			t.Logf("%d segments; %d prefix filter probes, %d skips", st.Segments, st.PrefixFilterProbes, st.PrefixFilterSkips)
			if st.Segments < 25 {
				t.Fatalf("only %d segments", st.Segments)
			}
			if px == nil && st.PrefixFilterProbes != 0 {
				t.Fatalf("%d prefix filter probes without an extractor", st.PrefixFilterProbes)
			}
			if px != nil && st.PrefixFilterSkips < st.PrefixFilterProbes/2 {
				t.Fatalf("only %d of %d prefix filter probes skipped a segment", st.PrefixFilterSkips, st.PrefixFilterProbes)
			}
			if err := db.Compact(); err != nil {
				t.Fatal(err)
			}
			for i := range 200 {
				checkPrefixScan(t, db, model, rng, fmt.Sprintf("after compaction %d", i))
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = mustOpen(t, dir, opts)
			defer db.Close()
			for i := range 200 {
				checkPrefixScan(t, db, model, rng, fmt.Sprintf("after reopen %d", i))
			}
			rep, err := db.Verify(context.Background())
			if err != nil || !rep.OK() {
				t.Fatalf("Verify: %v\n%v", err, rep)
			}
		})
	}
}

// TestPrefixScanAbsentReadsNothing: over many segments, a scan of a
// prefix no segment holds is answered by the prefix filters alone — no
// block read, no byte read, every segment skipped — while a scan of a
// prefix held by one segment reads that segment only.
func TestPrefixScanAbsentReadsNothing(t *testing.T) {
	const segments, perSegment = 24, 40
	for _, mmap := range []bool{true, false} {
		opts := smallOptions()
		opts.DisableAutoCompaction = true
		opts.DisableMmap = !mmap
		opts.Prefix = SeparatorPrefix('/')
		db := mustOpen(t, t.TempDir(), opts)
		for s := range segments {
			for i := range perSegment {
				// Every segment spans the key space: its key range
				// never excludes it, only its prefix filter can.
				db.Put(fmt.Appendf(nil, "t%05d/%d", 2*(i*segments+s), s), []byte("value"))
			}
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		scan := func(p string) (keys int, st, before Stats) {
			before = db.Stats()
			it, err := db.NewIterator(&IterOptions{Prefix: []byte(p)})
			if err != nil {
				t.Fatal(err)
			}
			for range it.All() {
				keys++
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			return keys, db.Stats(), before
		}
		const absent = 50
		clean := 0 // absent prefixes every filter rejected
		for i := range absent {
			p := fmt.Sprintf("t%05d/", 2*(100+i*13)+1) // odd: never written, inside every segment's range
			keys, st, before := scan(p)
			probes, skips := st.PrefixFilterProbes-before.PrefixFilterProbes, st.PrefixFilterSkips-before.PrefixFilterSkips
			reads := st.BlockReads - before.BlockReads + st.BlockCacheHits - before.BlockCacheHits
			if keys != 0 || probes != segments {
				t.Fatalf("mmap %v: absent prefix %q: %d keys, %d probes, want 0 and %d", mmap, p, keys, probes, segments)
			}
			// A segment the filter passes (a false positive) costs a seek:
			// a block, or two if the prefix falls after a block's last
			// key; a skipped segment costs nothing at all.
			if reads > 2*(segments-skips) {
				t.Fatalf("mmap %v: absent prefix %q: %d blocks read with %d of %d segments skipped", mmap, p, reads, skips, segments)
			}
			if skips == segments {
				clean++
				if reads != 0 || st.BytesRead != before.BytesRead {
					t.Fatalf("mmap %v: absent prefix %q, every segment skipped, yet %d blocks and %d bytes read",
						mmap, p, reads, st.BytesRead-before.BytesRead)
				}
			}
		}
		// Each segment's filter passes about 1% of absent prefixes, so
		// about 0.99^24 ≈ 79% of them are rejected by all 24.
		if clean < absent*6/10 {
			t.Fatalf("mmap %v: only %d of %d absent prefixes were rejected by every segment", mmap, clean, absent)
		}
		t.Logf("mmap %v: %d of %d absent prefix scans read nothing at all", mmap, clean, absent)
		// A present prefix: one segment holds it; the others are skipped
		// but for the odd false positive.
		keys, st, before := scan("t00200/")
		if skips := st.PrefixFilterSkips - before.PrefixFilterSkips; keys != 1 || skips < segments-3 {
			t.Fatalf("mmap %v: present prefix: %d keys, %d of %d segments skipped", mmap, keys, skips, segments)
		}
		// Not a whole prefix: no filter is asked, every segment searched.
		keys, st, before = scan("t00200")
		if probes := st.PrefixFilterProbes - before.PrefixFilterProbes; keys != 1 || probes != 0 {
			t.Fatalf("mmap %v: partial prefix: %d keys, %d probes", mmap, keys, probes)
		}
		db.Close()
	}
}

func TestPrefixExtractorFixedForTheStore(t *testing.T) {
	open := func(dir string, px *PrefixExtractor, readOnly bool) (*DB, error) {
		o := smallOptions()
		o.Prefix, o.ReadOnly = px, readOnly
		return Open(dir, o)
	}
	refused := func(db *DB, err error) {
		t.Helper()
		if err == nil {
			db.Close()
			t.Fatal("Open succeeded")
		}
		if !errors.Is(err, ErrPrefixExtractor) || !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("%v, want ErrPrefixExtractor and ErrInvalidOptions", err)
		}
	}
	ok := func(db *DB, err error) *DB {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return db
	}

	// A store created with an extractor keeps it.
	dir := t.TempDir()
	db := ok(open(dir, SeparatorPrefix(':'), false))
	db.Put([]byte("a:1"), []byte("x"))
	db.Close()
	refused(open(dir, FixedPrefix(2), false))
	refused(open(dir, FixedPrefix(2), true))
	refused(open(dir, nil, false))
	db = ok(open(dir, nil, true)) // read-only may omit it
	if v, err := db.Get([]byte("a:1")); err != nil || string(v) != "x" {
		t.Fatalf("read-only Get: %q, %v", v, err)
	}
	db.Close()
	db = ok(open(dir, SeparatorPrefix(':'), false))
	db.Close()

	// A non-empty store without one refuses one, with or without data
	// flushed; an empty one takes it, and keeps it.
	dir = t.TempDir()
	db = ok(open(dir, nil, false))
	db.Put([]byte("a:1"), []byte("x")) // in the WAL only
	db.Close()
	refused(open(dir, SeparatorPrefix(':'), false))
	refused(open(dir, SeparatorPrefix(':'), true))
	db = ok(open(dir, nil, false))
	db.Close()

	dir = t.TempDir()
	db = ok(open(dir, nil, false))
	db.Close()
	db = ok(open(dir, nil, true)) // a read-only open records nothing
	db.Close()
	db = ok(open(dir, FixedPrefix(2), false))
	db.Close()
	refused(open(dir, nil, false))
	refused(open(dir, SeparatorPrefix(':'), false))
}

func TestPrefixOptionsValidated(t *testing.T) {
	split := func([]byte) int { return 0 }
	for _, px := range []*PrefixExtractor{
		{Name: "", Split: split},
		{Name: strings.Repeat("n", 256), Split: split},
		{Name: "nosplit"},
		FixedPrefix(0),
		FixedPrefix(MaxKeySize + 1),
	} {
		o := smallOptions()
		o.Prefix = px
		if db, err := Open(t.TempDir(), o); !errors.Is(err, ErrInvalidOptions) {
			if err == nil {
				db.Close()
			}
			t.Errorf("Prefix %+v: Open = %v, want ErrInvalidOptions", px, err)
		}
	}
}

// TestReadyExtractorsKeepTheContract checks, for FixedPrefix and
// SeparatorPrefix on random keys, the contract of PrefixExtractor: a key
// that begins with a whole prefix p has p as its prefix. And that
// builtinPrefix finds them by name, and nothing else.
func TestReadyExtractorsKeepTheContract(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte {
		k := make([]byte, rng.IntN(8))
		for i := range k {
			k[i] = "ab:/"[rng.IntN(4)]
		}
		return k
	}
	for _, px := range []*PrefixExtractor{FixedPrefix(1), FixedPrefix(3), SeparatorPrefix(':'), SeparatorPrefix('/')} {
		if b := builtinPrefix(px.Name); b == nil || b.Name != px.Name {
			t.Fatalf("builtinPrefix(%q) = %v", px.Name, b)
		}
		for range 20000 {
			p, k := key(), key()
			k = append(bytes.Clone(p), k...)
			if n := px.Split(p); n == len(p) && n > 0 && px.Split(k) != n {
				t.Fatalf("%s: Split(%q) = %d, but Split(%q) = %d", px.Name, p, n, k, px.Split(k))
			}
			if n := px.Split(k); n < 0 || n > len(k) {
				t.Fatalf("%s: Split(%q) = %d", px.Name, k, n)
			}
		}
	}
	for _, name := range []string{"", "bloomkv.FixedPrefix(0)", "bloomkv.FixedPrefix(07)", "bloomkv.FixedPrefix(3",
		"bloomkv.SeparatorPrefix(58)", "bloomkv.SeparatorPrefix(0x3A)", "bloomkv.SeparatorPrefix(0x100)", "mine"} {
		if b := builtinPrefix(name); b != nil {
			t.Fatalf("builtinPrefix(%q) = %q", name, b.Name)
		}
	}
}

// TestVerifyDirChecksPrefixFilters: a closed store with a ready extractor
// has its prefix filters checked; with a custom one, VerifyDir says it
// could not.
func TestVerifyDirChecksPrefixFilters(t *testing.T) {
	for _, px := range []*PrefixExtractor{FixedPrefix(2), {Name: "mine", Split: func(k []byte) int { return min(2, len(k)) }}} {
		dir := t.TempDir()
		o := smallOptions()
		o.Prefix = px
		db := mustOpen(t, dir, o)
		for i := range 100 {
			db.Put(fmt.Appendf(nil, "%02d-%d", i%37, i), []byte("v"))
		}
		db.Flush()
		db.Close()
		rep, err := VerifyDir(context.Background(), nil, dir)
		if err != nil || !rep.OK() {
			t.Fatalf("%s: VerifyDir: %v\n%v", px.Name, err, rep)
		}
		noted := slices.ContainsFunc(rep.Notes, func(p Problem) bool { return strings.Contains(p.Message, "prefix extractor") })
		if noted != (px.Name == "mine") {
			t.Fatalf("%s: notes %v", px.Name, rep.Notes)
		}
	}
}

// TestPrefixCheckpoint: a checkpoint records the store's extractor, so it
// opens with it (and its prefix filters serve), and refuses another.
func TestPrefixCheckpoint(t *testing.T) {
	o := smallOptions()
	o.Prefix = SeparatorPrefix(':')
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	for i := range 50 {
		db.Put(fmt.Appendf(nil, "k%02d:x", i), []byte("v"))
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "cp")
	if err := db.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	o2 := smallOptions()
	o2.Prefix = FixedPrefix(3)
	if db2, err := Open(cp, o2); !errors.Is(err, ErrPrefixExtractor) {
		if err == nil {
			db2.Close()
		}
		t.Fatalf("checkpoint opened with another extractor: %v", err)
	}
	c := mustOpen(t, cp, o)
	defer c.Close()
	it, err := c.NewIterator(&IterOptions{Prefix: []byte("k1:")}) // inside the segment's key range, absent
	if err != nil {
		t.Fatal(err)
	}
	if it.First() {
		t.Fatal("absent prefix found")
	}
	it.Close()
	if st := c.Stats(); st.PrefixFilterProbes == 0 {
		t.Fatal("the checkpoint's prefix filters were not asked")
	}
}

// TestPrefixFiltersApartFromFilterMemory: prefix filters are not counted
// in Stats().FilterBytes and not folded under FilterBudget. Two stores of
// the same keys, one with an extractor, report the same filter memory,
// with and without a budget; and under a budget that halves the key
// filters, the prefix filters skip exactly the segments they skipped
// before.
func TestPrefixFiltersApartFromFilterMemory(t *testing.T) {
	open := func(px *PrefixExtractor) *DB {
		o := DefaultOptions()
		o.Prefix, o.DisableAutoCompaction, o.FilterAllocation = px, true, FilterUniform
		db := mustOpen(t, t.TempDir(), o)
		for s := range 4 {
			for i := range 2000 {
				mustDo(t, db.Put(fmt.Appendf(nil, "p%04d/%d", i*4+s, i), []byte("v")))
			}
			mustDo(t, db.Flush())
		}
		return db
	}
	withPrefix, without := open(FixedPrefix(5)), open(nil)
	defer withPrefix.Close()
	defer without.Close()
	skips := func() uint64 { // absent prefixes within every segment's key range
		before := withPrefix.Stats().PrefixFilterSkips
		for i := range 400 {
			it, err := withPrefix.NewIterator(&IterOptions{Prefix: fmt.Appendf(nil, "p%04dx", i*20+1)})
			mustDo(t, err)
			for range it.All() {
				t.Fatal("an absent prefix has keys")
			}
			mustDo(t, it.Close())
		}
		return withPrefix.Stats().PrefixFilterSkips - before
	}
	same := func(when string) int64 {
		t.Helper()
		a, b := withPrefix.Stats().FilterBytes, without.Stats().FilterBytes
		if a != b || a == 0 {
			t.Fatalf("%s: FilterBytes %d with prefix filters, %d without; want the same, not 0", when, a, b)
		}
		return a
	}
	full := same("no budget")
	skipped := skips()
	if skipped == 0 {
		t.Fatal("the prefix filters skipped no segment")
	}
	for _, db := range []*DB{withPrefix, without} {
		mustDo(t, db.SetFilterBudget(full/2))
	}
	if folded := same("budget of half"); folded > full/2 {
		t.Fatalf("FilterBytes %d over the budget %d", folded, full/2)
	}
	if got := skips(); got != skipped {
		t.Fatalf("under the budget the prefix filters skipped %d segments, %d before: they were folded", got, skipped)
	}
}
