package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// pageEntries returns n puts of distinct keys in order, with values from
// value.
func pageEntries(n int, value func(i int) []byte) []entry {
	es := make([]entry, n)
	for i := range es {
		es[i] = entry{key: fmt.Appendf(nil, "key/%09d", i), seq: uint64(i + 1), kind: base.KindPut, value: value(i)}
	}
	return es
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// crosses reports whether the stored block h (trailer included) spans a
// page boundary.
func crosses(h blockHandle) bool {
	return h.offset/PageSize != (h.end()-1)/PageSize
}

// TestPageAlign writes segments with PageAlign and checks the layout it
// promises: no data block passes a page with its trailer; a block stored
// raw crosses a page boundary only where starting it at the next page
// would have left more than maxPadding bytes unused; no padding is longer
// than maxPadding; a segment that pads is of version 6; and the segment
// reads back (Get, forward and backward iteration) and verifies as the
// model says, in little more space than without PageAlign. With incompressible values no block of two entries or more
// crosses a page at all: that is the cold read of one page instead of two.
func TestPageAlign(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	tests := []struct {
		name      string
		es        []entry
		opts      WriterOptions
		noCrosses bool    // every block fits in its page
		overhead  float64 // most bytes against the file written without PageAlign
	}{
		{"random 100-byte values", pageEntries(20000, func(int) []byte { return randomBytes(rng, 100) }),
			WriterOptions{Compression: SnappyCompression, BitsPerKey: 10}, true, 1.04},
		{"random values, no hash index", pageEntries(20000, func(int) []byte { return randomBytes(rng, 100) }),
			WriterOptions{Compression: SnappyCompression, NoHashIndex: true}, true, 1.04},
		{"random values, 1 KiB blocks", pageEntries(20000, func(int) []byte { return randomBytes(rng, 100) }),
			WriterOptions{BlockSize: 1024}, true, 1.11},
		{"values of 0 to 600 bytes", pageEntries(20000, func(int) []byte { return randomBytes(rng, rng.IntN(600)) }),
			WriterOptions{Compression: SnappyCompression}, true, 1.06},
		{"4 KiB values apart", pageEntries(3000, func(int) []byte { return randomBytes(rng, 4000) }),
			WriterOptions{Compression: SnappyCompression, SeparateValues: 1024}, false, 1.01},
		{"compressible values", pageEntries(20000, func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 100) }),
			WriterOptions{Compression: SnappyCompression}, false, 1.01},
		{"mixed values", randomEntries(rng, 20000, 5000), WriterOptions{Compression: ZstdCompression, SeparateValues: 100}, false, 1.01},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.PageAlign = true
			file, _ := writeSegment(t, tc.es, tc.opts)
			r := openSegment(t, file, ReaderOptions{Name: "p.seg"})
			if tc.noCrosses && r.footer.version != formatVersionPadding {
				t.Errorf("format version %d, want %d", r.footer.version, formatVersionPadding)
			}
			crossed := 0
			for i := range r.index {
				h := r.index[i].h
				stored := h.length + blockTrailerLen
				if stored > PageSize {
					t.Fatalf("data block %d: %d bytes with its trailer, more than a page", i, stored)
				}
				if room := PageSize - h.offset%PageSize; crosses(h) {
					crossed++
					// A block held to the rest of its page crosses it only
					// if its first entry alone does not fit.
					raw := file[h.offset+h.length] == compressionNone
					if tc.noCrosses && blockEntries(t, r, i) > 1 || room <= maxPadding && raw {
						t.Fatalf("data block %d at %d (%d bytes) crosses a page boundary %d bytes on", i, h.offset, stored, room)
					}
				}
				if i > 0 && r.props.Values == 0 {
					if pad := h.offset - r.index[i-1].h.end(); pad > maxPadding {
						t.Fatalf("data block %d: %d bytes of padding before it", i, pad)
					}
				}
			}
			plain := tc.opts
			plain.PageAlign = false
			unaligned, _ := writeSegment(t, tc.es, plain)
			ratio := float64(len(file)) / float64(len(unaligned))
			t.Logf("%d blocks, %d cross a page boundary, %d bytes (%.3fx unaligned)", len(r.index), crossed, len(file), ratio)
			if ratio > tc.overhead {
				t.Errorf("%d bytes, %.3f times the %d written without PageAlign; want at most %.2f", len(file), ratio, len(unaligned), tc.overhead)
			}
			if err := r.Verify(); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			it := r.NewIter(true)
			checkForward(t, it, tc.es)
			checkBackward(t, it, tc.es)
			for i := 0; i < len(tc.es); i += 7 {
				checkGet(t, r, tc.es, tc.es[i].key, base.MaxSeq)
			}
		})
	}
}

// blockEntries returns how many entries data block i holds.
func blockEntries(t *testing.T, r *Reader, i int) int {
	t.Helper()
	_, it := openDataBlock(t, r, i)
	n := 0
	for ok := it.first(); ok; ok = it.next() {
		n++
	}
	return n
}

// TestPageAlignOff: without PageAlign, and with blocks larger than a
// page, data blocks tile the data region as before version 6.
func TestPageAlignOff(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	es := pageEntries(20000, func(int) []byte { return randomBytes(rng, 100) })
	for _, opts := range []WriterOptions{{}, {PageAlign: true, BlockSize: 2 * PageSize}} {
		file, _ := writeSegment(t, es, opts)
		r := openSegment(t, file, ReaderOptions{})
		if r.footer.version >= formatVersionPadding {
			t.Errorf("%+v: format version %d", opts, r.footer.version)
		}
		for i := 1; i < len(r.index); i++ {
			if r.index[i].h.offset != r.index[i-1].h.end() {
				t.Fatalf("%+v: data block %d at %d, the one before ends at %d", opts, i, r.index[i].h.offset, r.index[i-1].h.end())
			}
		}
	}
}

// TestPaddingCorrupt: padding that holds anything but zeros fails Verify
// with ErrCorrupt at the byte; a gap before a block, with no value
// records, of a page or more in a version-6 file, or of any length in a
// version-5 file, fails Open.
func TestPaddingCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	es := pageEntries(5000, func(int) []byte { return randomBytes(rng, 100) })
	file, _ := writeSegment(t, es, WriterOptions{PageAlign: true})
	r := openSegment(t, file, ReaderOptions{})
	padAt, block := uint64(0), 0
	for i := 1; i < len(r.index) && padAt == 0; i++ {
		if end := r.index[i-1].h.end(); r.index[i].h.offset > end {
			padAt, block = end+(r.index[i].h.offset-end)/2, i
		}
	}
	if padAt == 0 {
		t.Fatal("no padding in the file")
	}

	bad := bytes.Clone(file)
	bad[padAt] = 1
	r = openSegment(t, bad, ReaderOptions{Name: corruptName})
	err := r.Verify()
	var ce *base.CorruptError
	if !errors.As(err, &ce) || ce.File != corruptName || ce.Offset != int64(padAt) {
		t.Fatalf("Verify with a byte of padding set = %v, want ErrCorrupt in %s at %d", err, corruptName, padAt)
	}

	p := splitParts(t, file)
	p.version = formatVersionValues
	bad = p.assemble()
	if _, err := Open(bytes.NewReader(bad), int64(len(bad)), ReaderOptions{}); !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("Open of a version-5 file with padding = %v, want ErrCorrupt", err)
	}

	p = splitParts(t, file)
	p.data = append(bytes.Clone(p.data), make([]byte, PageSize)...)
	moved := p.index[block:]
	for _, e := range moved {
		e.h.offset += PageSize
	}
	tail := bytes.Clone(p.data[moved[0].h.offset-PageSize : len(p.data)-PageSize])
	clear(p.data[moved[0].h.offset-PageSize:])
	copy(p.data[moved[0].h.offset:], tail)
	p.props.DataSize += PageSize
	bad = p.assemble()
	if _, err := Open(bytes.NewReader(bad), int64(len(bad)), ReaderOptions{}); !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("Open of a file with more than a page of padding = %v, want ErrCorrupt", err)
	}
}
