package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

// coldFile is a segment's bytes behind ReadAt that counts the reads made
// after arm and can fail them, cut them short or flip a byte in them,
// while the "mapping" the Reader is given stays intact: what a point read
// returns then shows which of the two it read.
type coldFile struct {
	data []byte

	mu    sync.Mutex
	armed bool
	reads int
	err   error // every read fails with it
	short bool  // every read stops half-way, at "the end of the file"
	flip  int64 // a read covering this offset sees it flipped; -1: none
}

func (f *coldFile) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed {
		f.reads++
		if f.err != nil {
			return 0, f.err
		}
	}
	if off >= int64(len(f.data)) {
		return 0, fmt.Errorf("read at %d past the end", off)
	}
	n := copy(p, f.data[off:])
	if f.armed && f.short {
		n /= 2
	}
	if f.armed && f.flip >= off && f.flip < off+int64(n) {
		p[f.flip-off] ^= 0x40
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *coldFile) set(fn func(f *coldFile)) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
	n := f.reads
	f.reads = 0
	return n
}

// coldReader opens a segment of es as if mapped (Mapped holds its bytes),
// whose page cache residency the test decides: it answers inCache with
// *resident and counts the questions in *asked.
func coldReader(t *testing.T, es []entry, wo WriterOptions, cache *Cache) (r *Reader, f *coldFile, c *Counters, resident *bool, asked *int) {
	t.Helper()
	data, _ := writeSegment(t, es, wo)
	f = &coldFile{data: data, flip: -1}
	c = new(Counters)
	r, err := Open(f, int64(len(data)), ReaderOptions{
		Cache: cache, Counters: c, Name: "cold.seg", Mapped: bytes.Clone(data),
	})
	if err != nil {
		t.Fatal(err)
	}
	resident, asked = new(bool), new(int)
	r.inCache = func(m []byte, off, n uint64) bool {
		if off+n > uint64(len(m)) || n == 0 {
			t.Errorf("asked about [%d, %d+%d) of a %d-byte mapping", off, off, n, len(m))
		}
		*asked++
		return *resident
	}
	f.set(func(f *coldFile) { f.armed = true })
	return r, f, c, resident, asked
}

// checkLookups looks every key of es up in r and compares with the model:
// es is in internal-key order, so a key's first entry is its newest
// version.
func checkLookups(t *testing.T, r *Reader, es []entry) int {
	t.Helper()
	n := 0
	for i, want := range es {
		if i > 0 && bytes.Equal(es[i-1].key, want.key) {
			continue
		}
		e := want
		v, seq, kind, found, err := r.Lookup(e.key, bloom.Hash(e.key), base.MaxSeq)
		if err != nil || !found || seq != want.seq || kind != want.kind || !bytes.Equal(v, want.value) {
			t.Fatalf("Lookup(%q) = %q, %d, %v, %v, %v; want %q, %d, %v", e.key, v, seq, kind, found, err, want.value, want.seq, want.kind)
		}
		n++
	}
	return n
}

// TestColdPointReads: a point read of a block the page cache does not hold
// reads it with ReadAt (pread) into the block cache, one read per block,
// and returns what the model says; once the pages are resident, reads use
// the mapping or the cache, and ReadAt is not called.
func TestColdPointReads(t *testing.T) {
	es := randomEntries(rand.New(rand.NewPCG(7, 7)), 3000, 2000)
	for _, wo := range []WriterOptions{
		{BlockSize: 256, BitsPerKey: 10},
		{BlockSize: 256, BitsPerKey: 10, Compression: SnappyCompression},
	} {
		t.Run(wo.Compression.String(), func(t *testing.T) {
			r, f, c, resident, _ := coldReader(t, es, wo, NewCache(1<<20))
			lookups := checkLookups(t, r, es)
			want := lookups - int(c.BlockCacheHits.Load())
			if reads := f.set(func(*coldFile) {}); reads != want || c.ColdReads.Load() != uint64(want) || want < len(r.index)/2 {
				t.Fatalf("%d cold lookups (%d cache hits) made %d reads, counted %d cold reads; want one per lookup not cached",
					lookups, c.BlockCacheHits.Load(), reads, c.ColdReads.Load())
			}
			// Each cold read is a block read too, counted once.
			if got := c.BlockReads.Load(); got != uint64(want) {
				t.Fatalf("%d cold reads counted as %d block reads", want, got)
			}
			*resident = true
			checkLookups(t, r, es)
			if reads := f.set(func(*coldFile) {}); reads != 0 {
				t.Fatalf("lookups of resident or cached blocks made %d reads, want 0", reads)
			}
		})
	}
}

// TestColdStateLearned: a segment's reads ask the page cache only now and
// then. Warm, reads of verified blocks ask one time in coldSample; the
// first "not resident" answer makes the segment cold: reads then go to the
// file (here with no block cache: every read) and ask one time in coldAsk,
// until coldWindow answers in a row say resident, and the segment is warm
// again: the mapping, no file reads.
func TestColdStateLearned(t *testing.T) {
	es := randomEntries(rand.New(rand.NewPCG(8, 8)), 1000, 600)
	r, f, _, resident, asked := coldReader(t, es, WriterOptions{BlockSize: 512}, nil)
	*resident = true
	checkLookups(t, r, es) // verifies every block: each asked once
	const rounds = 12
	phase := func() (lookups, reads, questions int) {
		*asked = 0
		f.set(func(*coldFile) {})
		for range rounds {
			lookups += checkLookups(t, r, es)
		}
		return lookups, f.set(func(*coldFile) {}), *asked
	}
	if n, reads, q := phase(); q == 0 || q > n/8 || reads != 0 {
		t.Fatalf("warm: %d lookups asked %d times and read the file %d times; want about %d questions, no reads", n, q, reads, n/coldSample)
	}

	*resident = false // evicted
	if n, reads, q := phase(); reads < n-4*coldSample || q < n/(4*coldAsk) || q > n/4 {
		t.Fatalf("evicted: %d lookups read the file %d times and asked %d times; want nearly all reads, about %d questions", n, reads, q, n/coldAsk)
	}

	*resident = true // back in the page cache
	if n, reads, q := phase(); reads == 0 || reads > 4*coldAsk*coldWindow || q < coldWindow || q > 4*coldWindow+n/8 {
		t.Fatalf("resident again: %d lookups read the file %d times and asked %d times; want about %d reads, then none",
			n, reads, q, coldAsk*coldWindow)
	}
	if n, reads, q := phase(); reads != 0 || q > n/8 {
		t.Fatalf("warm again: %d lookups read the file %d times and asked %d times; want no reads, about %d questions", n, reads, q, n/coldSample)
	}
}

// TestColdReadErrors: a failing, short or corrupted pread on the cold
// path is an error naming the file and the block's offset (corrupt data:
// ErrCorrupt), never a panic or a wrong value, and nothing bad is kept:
// the block reads correctly once the file does.
func TestColdReadErrors(t *testing.T) {
	es := randomEntries(rand.New(rand.NewPCG(9, 9)), 1000, 600)
	for _, tc := range []struct {
		name    string
		fault   func(f *coldFile, blockOff int64)
		corrupt bool
	}{
		{"EIO", func(f *coldFile, _ int64) { f.err = syscall.EIO }, false},
		{"short", func(f *coldFile, _ int64) { f.short = true }, true},
		{"flipped", func(f *coldFile, off int64) { f.flip = off + 7 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, f, _, _, _ := coldReader(t, es, WriterOptions{BlockSize: 512}, nil)
			key := es[len(es)/2].key
			h := r.index[r.searchIndex(key, base.MakeTrailer(base.MaxSeq, 0xff))].h
			f.set(func(f *coldFile) { tc.fault(f, int64(h.offset)) })
			_, _, _, found, err := r.Lookup(key, bloom.Hash(key), base.MaxSeq)
			var ce *base.CorruptError
			switch {
			case err == nil || found:
				t.Fatalf("Lookup with a %s read: found %v, err %v", tc.name, found, err)
			case errors.Is(err, base.ErrCorrupt) != tc.corrupt:
				t.Fatalf("Lookup with a %s read: %v; corrupt %v, want %v", tc.name, err, errors.Is(err, base.ErrCorrupt), tc.corrupt)
			case tc.corrupt && (!errors.As(err, &ce) || ce.File != "cold.seg" || ce.Offset != int64(h.offset)):
				t.Fatalf("Lookup with a %s read: %#v, want cold.seg at offset %d", tc.name, err, h.offset)
			case !tc.corrupt && (!errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "cold.seg") ||
				!strings.Contains(err.Error(), fmt.Sprintf(" at %d", h.offset))):
				t.Fatalf("Lookup with a failing read: %v, want EIO naming cold.seg and offset %d", err, h.offset)
			}
			f.set(func(f *coldFile) { f.err, f.short, f.flip = nil, false, -1 })
			checkLookups(t, r, es)
		})
	}
}

// largeValueEntries is n puts of distinct keys, in order, each with a
// value of 600 bytes: a writer with SeparateValues 500 stores every one
// as a value record.
func largeValueEntries(n int) []entry {
	es := make([]entry, n)
	for i := range es {
		v := bytes.Repeat([]byte{byte(i), byte(i >> 8), 'v'}, 200)
		es[i] = entry{key: fmt.Appendf(nil, "key-%06d", i), seq: uint64(i + 1), kind: base.KindPut, value: v}
	}
	return es
}

// lookupEach looks up every key of es once, in order, checking the value,
// and counts the lookups that read the file (ReadAt), not only the
// mapping.
func lookupEach(t *testing.T, r *Reader, f *coldFile, es []entry) (readers int) {
	t.Helper()
	for _, e := range es {
		before := f.set(func(*coldFile) {})
		v, _, _, found, err := r.Lookup(e.key, bloom.Hash(e.key), base.MaxSeq)
		if err != nil || !found || !bytes.Equal(v, e.value) {
			t.Fatalf("Lookup(%q) = %q, %v, %v; want %q", e.key, v, found, err, e.value)
		}
		if n := f.set(func(*coldFile) {}); n > 0 {
			readers++
		}
		f.set(func(f *coldFile) { f.reads = before }) // set cleared the count
	}
	return readers
}

// TestFirstReadsTrustWarmSegment: the first reads of blocks and value
// records ask the page cache on every read until warmTrust answers in a
// row said resident, and then one time in firstSample. When such a
// trusted segment loses its pages, a sampled question soon notices: the
// segment turns cold and its reads use pread.
func TestFirstReadsTrustWarmSegment(t *testing.T) {
	es := largeValueEntries(4000)
	r, f, _, resident, asked := coldReader(t, es, WriterOptions{BlockSize: 512, SeparateValues: 500}, nil)
	*resident = true
	half := len(es) / 2
	// Each lookup reads its record for the first time, and every few
	// lookups a block: fewer than warmTrust first reads in all.
	untrusted := warmTrust - 16
	n := lookupEach(t, r, f, es[:untrusted])
	blocks := 0
	for i := range r.index {
		if r.index[i].verified.Load() {
			blocks++
		}
	}
	if first := untrusted + blocks; n != 0 || *asked != first || first >= warmTrust {
		t.Fatalf("untrusted: %d first reads asked %d times and read the file in %d lookups; want a question each, no reads",
			first, *asked, n)
	}
	*asked = 0
	// Over 2,000 more first reads, which ask about 1 in firstSample once
	// the segment is trusted.
	if n := lookupEach(t, r, f, es[untrusted:half]); n != 0 || *asked == 0 || *asked > half/4 {
		t.Fatalf("trusted: %d lookups asked %d times and read the file in %d; want about %d questions, no reads",
			half-untrusted, *asked, n, half/firstSample)
	}
	*resident = false // evicted
	// Lookups of keys not read yet: the first read that asks makes the
	// segment cold, and every lookup from then on reads the file. Those
	// before it read the mapping: about firstSample first reads; 20 times
	// as many happen with a probability below 1e-8.
	rest := es[half:]
	if n := lookupEach(t, r, f, rest); n < len(rest)-20*firstSample {
		t.Fatalf("evicted: %d of %d lookups read the file, want all but the few before a question noticed", n, len(rest))
	}
	if r.warmAnswers.Load() != 0 || r.coldAnswers.Load() == 0 {
		t.Fatalf("evicted: warmAnswers %d, coldAnswers %d; want untrusted and cold", r.warmAnswers.Load(), r.coldAnswers.Load())
	}
}

// TestFirstReadOfEvictedRecordUsesPread: a point read of a value record
// the page cache does not hold, in a segment whose data blocks it holds,
// reads the record with ReadAt (pread), not through the mapping, and the
// segment turns cold. The test's "mapping" has each record damaged, so a
// read of one there would be ErrCorrupt; the file is intact.
func TestFirstReadOfEvictedRecordUsesPread(t *testing.T) {
	es := largeValueEntries(300)
	r, f, _, resident, _ := coldReader(t, es, WriterOptions{BlockSize: 512, SeparateValues: 500}, nil)
	*resident = true
	records := make(map[uint64]bool)
	for _, rec := range valueRecords(t, r) { // reads every data block through the mapping
		records[rec.h.offset] = true
		r.opts.Mapped[rec.h.offset+7] ^= 0x40
	}
	if len(records) != len(es) || r.coldAnswers.Load() != 0 {
		t.Fatalf("%d value records, want %d; coldAnswers %d, want 0", len(records), len(es), r.coldAnswers.Load())
	}
	asked := 0
	r.inCache = func(m []byte, off, n uint64) bool {
		asked++
		return !records[off] // data blocks resident, value records not
	}
	f.set(func(f *coldFile) { f.reads = 0 })
	for i, e := range es {
		v, _, _, found, err := r.Lookup(e.key, bloom.Hash(e.key), base.MaxSeq)
		if err != nil || !found || !bytes.Equal(v, e.value) {
			t.Fatalf("Lookup %d of an evicted record: %q, %v, %v; want the file's value", i, v, found, err)
		}
		if reads := f.set(func(*coldFile) {}); i == 0 && (reads != 1 || asked != 1 || r.coldAnswers.Load() == 0) {
			t.Fatalf("the first lookup of an evicted record read the file %d times and asked %d times, coldAnswers %d; want 1, 1 and cold",
				reads, asked, r.coldAnswers.Load())
		}
	}
}
