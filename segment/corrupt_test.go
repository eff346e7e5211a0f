package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/golang/snappy"
)

const corruptName = "000042.seg"

// corruptFixture is a small segment with several compressed data blocks
// and a filter, and the entries it holds.
func corruptFixture(t *testing.T) ([]byte, []entry) {
	t.Helper()
	es := randomEntries(rand.New(rand.NewPCG(11, 12)), 120, 60)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 512, Compression: SnappyCompression, BitsPerKey: 10})
	return data, es
}

// checkDamaged opens a damaged file and reads everything from it. Every
// failure must be a corruption error naming the file; every answer given
// must be right. It reports whether the damage was detected.
func checkDamaged(t *testing.T, data []byte, es []entry, what string) bool {
	t.Helper()
	isCorrupt := func(err error) bool {
		t.Helper()
		var ce *base.CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, base.ErrCorrupt) || ce.File != corruptName {
			t.Fatalf("%s: error %v is not a corruption error naming %s", what, err, corruptName)
		}
		return true
	}
	r, err := Open(bytes.NewReader(data), int64(len(data)), ReaderOptions{Name: corruptName})
	if err != nil {
		return isCorrupt(err)
	}
	detected := false
	for _, e := range es {
		v, kind, found, err := r.Get(e.key, base.MaxSeq)
		if err != nil {
			detected = isCorrupt(err)
			continue
		}
		want, _ := modelGet(es, e.key, base.MaxSeq)
		if !found || kind != want.kind || !bytes.Equal(v, want.value) {
			t.Fatalf("%s: Get(%q) returned wrong data %q, %v, %v", what, e.key, v, kind, found)
		}
	}
	if err := r.Verify(); err != nil {
		detected = isCorrupt(err)
	}
	return detected
}

// regions names the byte ranges of each part of the fixture.
func regions(t *testing.T, data []byte) map[string][2]int {
	r := openSegment(t, data, ReaderOptions{})
	ft := r.footer
	span := func(h blockHandle) [2]int { return [2]int{int(h.offset), int(h.end())} }
	return map[string][2]int{
		"data":       span(r.index[len(r.index)/2].h),
		"filter":     span(ft.filter),
		"properties": span(ft.properties),
		"index":      span(ft.index),
		"footer":     {len(data) - footerLen, len(data)},
	}
}

func TestCorruptionFlipByte(t *testing.T) {
	data, es := corruptFixture(t)
	for name, rg := range regions(t, data) {
		t.Run(name, func(t *testing.T) {
			step := max(1, (rg[1]-rg[0])/40) // about 40 positions per region, ends included
			for pos := rg[0]; pos < rg[1]; pos += step {
				for _, mask := range []byte{0x01, 0x80, 0xff} {
					bad := bytes.Clone(data)
					bad[pos] ^= mask
					if !checkDamaged(t, bad, es, fmt.Sprintf("byte %d ^ %#x", pos, mask)) {
						t.Fatalf("flipping byte %d (^%#x) in the %s went unnoticed", pos, mask, name)
					}
				}
			}
		})
	}
}

func TestCorruptionTruncate(t *testing.T) {
	data, _ := corruptFixture(t)
	rg := regions(t, data)
	cuts := []int{0, 1, footerLen - 1, footerLen, len(data) / 2, len(data) - footerLen - 1,
		len(data) - footerLen, len(data) - 1, rg["index"][0], rg["filter"][0] + 3}
	for _, n := range cuts {
		_, err := Open(bytes.NewReader(data[:n]), int64(n), ReaderOptions{Name: corruptName})
		var ce *base.CorruptError
		if !errors.As(err, &ce) || ce.File != corruptName {
			t.Errorf("Open of the first %d of %d bytes = %v, want a corruption error", n, len(data), err)
		}
	}
	// A size larger than the file (the reader is told the wrong size).
	_, err := Open(bytes.NewReader(data), int64(len(data)+10), ReaderOptions{Name: corruptName})
	if !errors.Is(err, base.ErrCorrupt) {
		t.Errorf("Open with a wrong size = %v, want ErrCorrupt", err)
	}
}

// errReaderAt fails every read before the footer.
type errReaderAt struct {
	data []byte
	err  error
}

func (e errReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < int64(len(e.data))-footerLen {
		return 0, e.err
	}
	return copy(p, e.data[off:]), nil
}

func TestReadErrorIsWrapped(t *testing.T) {
	data, _ := corruptFixture(t)
	ioErr := errors.New("EIO")
	_, err := Open(errReaderAt{data, ioErr}, int64(len(data)), ReaderOptions{Name: corruptName})
	if !errors.Is(err, ioErr) || errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("Open = %v, want the I/O error, not corruption", err)
	}
}

// storedBlock frames contents as a stored block with a valid trailer.
func storedBlock(contents []byte, typ byte) []byte {
	b := append(bytes.Clone(contents), typ)
	return binary.LittleEndian.AppendUint32(b, blockChecksum(b))
}

func TestReadStoredBlock(t *testing.T) {
	huge := binary.AppendUvarint(nil, MaxBlockSize+1) // snappy header claiming 64 MiB + 1
	tests := []struct {
		name    string
		stored  []byte
		want    []byte // nil: corruption expected
		corrupt bool
	}{
		{"raw", storedBlock([]byte("hello"), compressionNone), []byte("hello"), false},
		{"snappy", storedBlock(snappy.Encode(nil, []byte("hello hello hello")), compressionSnappy), []byte("hello hello hello"), false},
		{"unknown type", storedBlock([]byte("hello"), 7), nil, true},
		{"bad snappy", storedBlock([]byte("\x05garbage"), compressionSnappy), nil, true},
		{"snappy too large", storedBlock(append(huge, 0), compressionSnappy), nil, true},
		{"bad checksum", append(storedBlock([]byte("hello"), compressionNone)[:9], 0), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reader{f: bytes.NewReader(tc.stored), opts: ReaderOptions{Name: "b.seg"}}
			got, err := r.readStored(blockHandle{0, uint64(len(tc.stored) - blockTrailerLen)})
			if tc.corrupt != errors.Is(err, base.ErrCorrupt) || !bytes.Equal(got, tc.want) {
				t.Fatalf("readStored = %q, %v", got, err)
			}
		})
	}
}

func TestCheckBlock(t *testing.T) {
	valid := func(n int) []byte {
		var w blockWriter
		w.restartInterval = 2
		for i := range n {
			w.add([]byte{byte('a' + i)}, nil)
		}
		return bytes.Clone(w.finish())
	}
	setRestart := func(b []byte, i int, v uint32) []byte {
		b = bytes.Clone(b)
		n := int(binary.LittleEndian.Uint32(b[len(b)-4:]))
		binary.LittleEndian.PutUint32(b[len(b)-4-4*n+4*i:], v)
		return b
	}
	tests := []struct {
		name  string
		block []byte
		ok    bool
	}{
		{"valid", valid(5), true},
		{"empty valid", valid(0), true},
		{"too short", []byte{1, 0}, false},
		{"zero restarts", []byte{0, 0, 0, 0}, false},
		{"count too large", []byte{0, 0, 0, 0, 9, 0, 0, 0}, false},
		{"first restart not 0", setRestart(valid(5), 0, 1), false},
		{"restarts not increasing", setRestart(valid(5), 2, 0), false},
		{"restart past entries", setRestart(valid(5), 2, 1000), false},
	}
	for _, tc := range tests {
		if got := checkBlock(tc.block) == ""; got != tc.ok {
			t.Errorf("%s: checkBlock ok = %v, want %v (%q)", tc.name, got, tc.ok, checkBlock(tc.block))
		}
	}
}

// parts are the pieces of a segment that assemble reassembles into a file
// with valid checksums, so tests can plant inconsistent metadata that only
// the reader's cross-checks can catch.
type parts struct {
	version uint32 // the footer's
	data    []byte // the data region
	filter  []byte // filter block contents; nil for none
	props   Properties
	index   []*indexEntry
}

func splitParts(t *testing.T, file []byte) parts {
	r := openSegment(t, file, ReaderOptions{})
	p := parts{version: r.footer.version, data: file[:r.props.DataSize], props: r.props}
	for i := range r.index { // r is not used again: p may change them
		p.index = append(p.index, &r.index[i])
	}
	if h := r.footer.filter; h.length > 0 {
		p.filter = file[h.offset : h.offset+h.length]
	}
	return p
}

func (p parts) assemble() []byte {
	file := bytes.Clone(p.data)
	ft := footer{version: p.version}
	add := func(contents []byte) blockHandle {
		h := blockHandle{uint64(len(file)), uint64(len(contents))}
		file = append(file, storedBlock(contents, compressionNone)...)
		return h
	}
	if p.filter != nil {
		ft.filter = add(p.filter)
	}
	idx := blockWriter{restartInterval: 4}
	for _, e := range p.index {
		idx.add(appendInternalKey(nil, e.userKey, e.trailer), appendHandle(nil, e.h))
	}
	index := idx.finish()
	props := p.props
	props.IndexSize = uint64(len(index))
	ft.properties = add(encodeProperties(&blockWriter{restartInterval: 16}, &props))
	ft.index = add(index)
	return append(file, ft.encode()...)
}

func TestOpenChecksConsistency(t *testing.T) {
	file, _ := corruptFixture(t)
	// Unmodified, the reassembled file is sound; so each case below fails
	// only because of its mutation.
	if err := openSegment(t, splitParts(t, file).assemble(), ReaderOptions{}).Verify(); err != nil {
		t.Fatalf("reassembled file: %v", err)
	}
	tests := []struct {
		name       string
		mutate     func(p *parts)
		verifyOnly bool // Open cannot tell; Verify must
	}{
		{"data size", func(p *parts) { p.props.DataSize-- }, false},
		{"block count", func(p *parts) { p.props.DataBlocks++ }, false},
		{"filter k", func(p *parts) { p.props.FilterK++ }, false},
		{"filter bits", func(p *parts) { p.props.FilterBits *= 2 }, false},
		{"no filter but geometry", func(p *parts) { p.filter = nil; p.props.FilterSize = 0 }, false},
		{"tombstones above entries", func(p *parts) { p.props.Tombstones = p.props.Entries + 1 }, false},
		{"range-covered above keys", func(p *parts) { p.props.RangeCovered = p.props.DistinctKeys + 1 }, false},
		{"range-covered above puts", func(p *parts) { p.props.RangeCovered = p.props.Entries - p.props.Tombstones + 1 }, false},
		{"range-covered huge", func(p *parts) { p.props.RangeCovered = ^uint64(0) }, false},
		{"smallest above largest", func(p *parts) { p.props.Smallest = []byte("zzzz") }, false},
		{"index out of order", func(p *parts) { p.index[0], p.index[1] = p.index[1], p.index[0] }, false},
		{"index handle gap", func(p *parts) { p.index[1].h.offset++ }, false},
		{"index handle length", func(p *parts) { p.index[0].h.length-- }, false},
		{"index block dropped", func(p *parts) { p.index = p.index[1:] }, false},
		{"entry count", func(p *parts) { p.props.Entries++ }, true},
		{"largest key", func(p *parts) { p.props.Largest = append(bytes.Clone(p.props.Largest), 'x') }, true},
		{"separator below block", func(p *parts) {
			p.index[0].userKey = []byte("key/")
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := splitParts(t, file)
			tc.mutate(&p)
			bad := p.assemble()
			r, err := Open(bytes.NewReader(bad), int64(len(bad)), ReaderOptions{Name: corruptName})
			if !tc.verifyOnly {
				if !errors.Is(err, base.ErrCorrupt) {
					t.Fatalf("Open = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if err := r.Verify(); !errors.Is(err, base.ErrCorrupt) {
				t.Fatalf("Verify = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestPropertiesMissingField(t *testing.T) {
	var w blockWriter
	w.restartInterval = 16
	full := encodeProperties(&w, &Properties{})
	var it blockIter
	if err := it.init(bytes.Clone(full), false, "", 0); err != nil {
		t.Fatal(err)
	}
	var short blockWriter
	short.restartInterval = 16
	for ok := it.first(); ok; ok = it.next() {
		if string(it.key) != propTombstones {
			short.add(it.key, it.val)
		}
	}
	if _, err := decodeProperties(short.finish(), "p", 0); !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("decodeProperties without %q = %v, want ErrCorrupt", propTombstones, err)
	}
}

// TestCorruptEntryBackward damages the header of one entry at a restart
// point of a data block of keys beside value handles, in each layout
// (every entry its own restart interval, with 4 KiB blocks; two or three
// to an interval, with larger ones), and makes the block's checksum right
// again, so that only the decoder can tell. A backward scan must return
// the entries after it, each right, and then stop with a corruption
// error naming the file, the block's offset and the entry's: never a
// panic, never an entry of the damaged one or before it.
func TestCorruptEntryBackward(t *testing.T) {
	es := make([]entry, 600)
	for i := range es {
		es[i] = entry{key: fmt.Appendf(nil, "key%06d", i), seq: uint64(i + 1), kind: base.KindPut, value: bytes.Repeat([]byte{byte(i)}, 200)}
	}
	for _, blockSize := range []int{4 << 10, 8 << 10} {
		data, _ := writeSegment(t, es, WriterOptions{BlockSize: blockSize, SeparateValues: 64})
		r := openSegment(t, data, ReaderOptions{})
		b := len(r.index) / 2
		h := r.index[b].h
		_, bi := openDataBlock(t, r, b)
		// The entries of block b at restart points but its first, and how
		// many entries of the segment follow their intervals (entries
		// after the damaged one in its interval share its key's bytes).
		restarts := map[int]bool{}
		for j := range bi.numRestarts {
			restarts[bi.restart(j)] = true
		}
		type at struct{ off, after int }
		var targets []at
		for ok, n := bi.first(), 0; ok; ok, n = bi.next(), n+1 {
			idx := slices.IndexFunc(es, func(e entry) bool { return bytes.Equal(e.key, bi.key[:len(bi.key)-base.TrailerLen]) })
			if restarts[bi.offset] {
				if len(targets) > 0 {
					targets[len(targets)-1].after = len(es) - idx
				}
				if n > 0 {
					targets = append(targets, at{off: bi.offset})
				}
			}
			if len(targets) > 0 {
				targets[len(targets)-1].after = len(es) - idx - 1
			}
		}
		for _, tg := range targets[:min(len(targets), 6)] {
			for _, damage := range []struct {
				name    string
				pos     int      // header byte: 0 shared, 1 unshared
				b       byte     // its new value
				reasons []string // one of them
			}{
				{"shared prefix at a restart point", 0, 1, []string{"shared prefix longer than previous key"}},
				// The segment holds one entry per user key, so each entry of a
				// block not yet walked is checked against its properties as it
				// is decoded: the bytes past the entry, read as its trailer,
				// may fail that first.
				{"key past its entry", 1, 0x7f, []string{"entry overlaps the next one", "above the segment's max-seq"}},
			} {
				d := bytes.Clone(data)
				d[int(h.offset)+tg.off+damage.pos] = damage.b
				end := h.offset + h.length + 1 // the block and its type byte
				binary.LittleEndian.PutUint32(d[end:], blockChecksum(d[h.offset:end]))
				what := fmt.Sprintf("block size %d, %s at block offset %d", blockSize, damage.name, tg.off)
				for _, mapped := range [][]byte{nil, d} {
					r := openSegment(t, d, ReaderOptions{Name: corruptName, Mapped: mapped})
					it := r.NewIter(false)
					i := len(es) - 1
					for ok := it.Last(); ok; ok = it.Prev() {
						if len(es)-1-i >= tg.after {
							t.Fatalf("%s: returned entry %d (%q), of the damaged interval or before it", what, i, it.Key())
						}
						checkEntry(t, it, es[i], what)
						i--
					}
					var ce *base.CorruptError
					err := it.Close()
					reasonOK := errors.As(err, &ce) && slices.ContainsFunc(damage.reasons, func(reason string) bool {
						return strings.Contains(ce.Reason, reason) && strings.HasSuffix(ce.Reason, fmt.Sprintf("(entry at block offset %d)", tg.off))
					})
					if !reasonOK || !errors.Is(err, base.ErrCorrupt) || ce.File != corruptName || ce.Offset != int64(h.offset) {
						t.Fatalf("%s: backward scan ended with %v after %d entries, want a corruption error of %s at offset %d", what, err, len(es)-1-i, corruptName, h.offset)
					}
					if len(es)-1-i != tg.after {
						t.Fatalf("%s: %d entries before the error, want the %d after the damaged interval", what, len(es)-1-i, tg.after)
					}
				}
			}
		}
	}
}

// compressedChecksum returns the offset in m, r's file, of the checksum
// of its first data block stored compressed (after the block and its
// type byte).
func compressedChecksum(t *testing.T, r *Reader, m []byte) int {
	t.Helper()
	for i := range r.index {
		if h := r.index[i].h; m[h.offset+h.length] == compressionSnappy {
			return int(h.offset+h.length) + 1
		}
	}
	t.Fatal("no compressed data block")
	return 0
}

// TestCheckedBlockOnlyDecoded: once an iterator has read and checked a
// compressed block of a mapped segment, later iterators decode it without
// hashing it again (the file is immutable), while Verify still checks
// every byte. The damage is to the stored checksum alone, so the data
// decodes the same either way and only a checksum tells.
func TestCheckedBlockOnlyDecoded(t *testing.T) {
	data, es := corruptFixture(t)
	m := bytes.Clone(data)
	r := openSegment(t, data, ReaderOptions{Name: corruptName, Mapped: m})
	sumAt := compressedChecksum(t, r, m)
	checkForward(t, r.NewIter(false), es) // reads and checks every block
	m[sumAt] ^= 1
	checkForward(t, r.NewIter(false), es)
	var ce *base.CorruptError
	if err := r.Verify(); !errors.As(err, &ce) || ce.File != corruptName || !strings.Contains(ce.Reason, "checksum mismatch") {
		t.Fatalf("Verify after the checksum changed: %v, want a checksum mismatch in %s", err, corruptName)
	}
}

// TestFailedBlockNotTrusted: a compressed block that failed its checks is
// not taken as checked: every later read fails too.
func TestFailedBlockNotTrusted(t *testing.T) {
	data, _ := corruptFixture(t)
	m := bytes.Clone(data)
	r := openSegment(t, data, ReaderOptions{Name: corruptName, Mapped: m})
	sumAt := compressedChecksum(t, r, m)
	m[sumAt] ^= 1
	for try := range 3 {
		it := r.NewIter(false)
		for ok := it.First(); ok; ok = it.Next() {
		}
		if err := it.Close(); !errors.Is(err, base.ErrCorrupt) {
			t.Fatalf("scan %d of a segment with a damaged checksum: %v, want ErrCorrupt", try, err)
		}
	}
}
