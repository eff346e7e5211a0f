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
