package segment

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// countingReaderAt counts ReadAt calls.
type countingReaderAt struct {
	r     *bytes.Reader
	calls atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.calls.Add(1)
	return c.r.ReadAt(p, off)
}

func TestReadaheadFewReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	t.Run("tiled", func(t *testing.T) {
		es := randomEntries(rng, 20000, 20000)
		data, _ := writeSegment(t, es, WriterOptions{BlockSize: 1024})
		testReadaheadFewReads(t, rng, es, data)
	})
	// Padding between blocks (PageAlign) leaves the run sequential.
	t.Run("padded", func(t *testing.T) {
		es := pageEntries(20000, func(int) []byte { return randomBytes(rng, 100) })
		data, _ := writeSegment(t, es, WriterOptions{BlockSize: 1024, PageAlign: true})
		if r := openSegment(t, data, ReaderOptions{}); r.footer.version != formatVersionPadding {
			t.Fatalf("format version %d: no padding", r.footer.version)
		}
		testReadaheadFewReads(t, rng, es, data)
	})
}

func testReadaheadFewReads(t *testing.T, rng *rand.Rand, es []entry, data []byte) {
	f := &countingReaderAt{r: bytes.NewReader(data)}
	cache := NewCache(8 << 20)
	r, err := Open(f, int64(len(data)), ReaderOptions{Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	blocks := int64(len(r.index))
	for pass, fill := range []bool{false, true, false} {
		before := f.calls.Load()
		it := r.NewIter(fill)
		checkForward(t, it, es)
		it.Close()
		calls := f.calls.Load() - before
		switch pass {
		case 0, 1: // nothing cached yet: readahead must batch the reads
			// raMinRun single reads, then windows growing from raInitial
			// to raMax: about one read per raMax once the run is found,
			// and never a new run in the middle.
			if want := int64(raMinRun + 2 + (len(data)+raMax-1)/raMax); calls > want {
				t.Fatalf("pass %d: %d reads for %d blocks (%d bytes), want at most %d", pass, calls, blocks, len(data), want)
			}
		case 2: // the fill pass cached every block: no reads at all
			if calls != 0 {
				t.Fatalf("scan after a filling scan made %d reads, want 0", calls)
			}
		}
	}
	// Backward and seeks read block by block (no sequential run), and
	// still see the right entries.
	it := r.NewIter(false)
	checkBackward(t, it, es)
	checkSeeks(t, rng, it, es)
	it.Close()
}

func TestReadaheadDetectsCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	es := randomEntries(rng, 5000, 5000)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 1024})
	r := openSegment(t, data, ReaderOptions{})
	h := r.index[len(r.index)/2].h // a block well inside a readahead window
	bad := bytes.Clone(data)
	bad[h.offset+h.length/2] ^= 0x40
	r = openSegment(t, bad, ReaderOptions{Name: "000007.seg"})
	it := r.NewIter(false)
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	var ce *base.CorruptError
	if err := it.Error(); !errors.As(err, &ce) || ce.File != "000007.seg" || ce.Offset != int64(h.offset) {
		t.Fatalf("scan over a damaged block: %v after %d entries; want corruption of 000007.seg at %d", err, n, h.offset)
	}
}
