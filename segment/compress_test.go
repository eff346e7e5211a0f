package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/klauspost/compress/zstd"
)

// allCompressions lists every codec, for tests that try each.
var allCompressions = []Compression{NoCompression, SnappyCompression, ZstdCompression}

// blockTypes counts the data and index blocks of a segment by the
// compression type byte of their trailers.
func blockTypes(r *Reader, data []byte) map[byte]int {
	n := map[byte]int{}
	for i := range r.index {
		e := &r.index[i]
		n[data[e.h.offset+e.h.length]]++
	}
	n[data[r.footer.index.offset+r.footer.index.length]]++
	return n
}

// compressibleEntries are entries whose values repeat words, so that
// every codec shrinks their blocks, but not beyond snappy's densest ratio.
func compressibleEntries(n int) []entry {
	rng := rand.New(rand.NewPCG(7, 8))
	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
	es := make([]entry, n)
	for i := range es {
		var v []byte
		for range 10 + rng.IntN(30) {
			v = append(v, words[rng.IntN(len(words))]...)
			v = append(v, byte('0'+rng.IntN(10)))
		}
		es[i] = entry{key: fmt.Appendf(nil, "key-%06d", i), seq: uint64(i + 1), kind: base.KindPut, value: v}
	}
	return es
}

// TestCompressionRoundTrip writes the same entries with each codec: every
// block records its codec, the file's version is 3 exactly when a block
// is zstd, zstd's file is the smallest, and every entry reads back,
// mapped or not.
func TestCompressionRoundTrip(t *testing.T) {
	es := compressibleEntries(2000)
	sizes := map[Compression]int{}
	for _, c := range allCompressions {
		data, props := writeSegment(t, es, WriterOptions{Compression: c, BitsPerKey: 10})
		sizes[c] = len(data)
		for _, mapped := range []bool{false, true} {
			ro := ReaderOptions{Name: "c.seg", Cache: NewCache(1 << 20)}
			if mapped {
				ro.Mapped = data
			}
			r := openSegment(t, data, ro)
			types := blockTypes(r, data)
			wantVersion := uint32(formatVersionHashIndex)
			if got := r.Properties().FormatVersion; got != wantVersion || props.FormatVersion != wantVersion {
				t.Fatalf("%v: version %d (writer said %d), want %d", c, got, props.FormatVersion, wantVersion)
			}
			if types[byte(c)] != len(r.index)+1 {
				t.Fatalf("%v: block types %v, want all %d of type %d", c, types, len(r.index)+1, c)
			}
			for _, e := range es {
				checkGet(t, r, es, e.key, base.MaxSeq)
			}
			if err := r.Verify(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !(sizes[ZstdCompression] < sizes[SnappyCompression] && sizes[SnappyCompression] < sizes[NoCompression]) {
		t.Fatalf("sizes %v: want zstd < snappy < none", sizes)
	}
}

// TestZstdHeldToSnappyRatio writes blocks that zstd shrinks far more than
// snappy's densest ratio (values of one repeated byte): the writer must
// store them with snappy, so that every block meets the bound readers
// enforce (maxSnappyLen), and mixing codecs in one file must read back.
func TestZstdHeldToSnappyRatio(t *testing.T) {
	es := compressibleEntries(300)
	for i := range es {
		if i%2 == 0 {
			es[i].value = bytes.Repeat([]byte{'z'}, 3000)
		}
	}
	data, _ := writeSegment(t, es, WriterOptions{Compression: ZstdCompression, BlockSize: 4096})
	r := openSegment(t, data, ReaderOptions{Name: "dense.seg"})
	types := blockTypes(r, data)
	if types[compressionSnappy] == 0 || types[compressionZstd] == 0 {
		t.Fatalf("block types %v: want both snappy (the dense blocks) and zstd", types)
	}
	for i := range r.index {
		e := &r.index[i]
		b, err := r.readStored(e.h)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(b)) > maxContentLen(e.h.length) {
			t.Fatalf("block at %d: %d bytes stored as %d, beyond the readers' bound %d", e.h.offset, len(b), e.h.length, maxContentLen(e.h.length))
		}
	}
	for _, e := range es {
		checkGet(t, r, es, e.key, base.MaxSeq)
	}
}

// TestReadStoredZstd drives the zstd decoder of readBlock with valid and
// hostile blocks: every bad one is corruption naming the file and the
// block's offset, and none may allocate for what it claims. A block is
// one frame and nothing after it (FORMAT.md, "Block trailer"), not even
// a frame that decodes to nothing.
func TestReadStoredZstd(t *testing.T) {
	enc, err := zstdEncoder()
	if err != nil {
		t.Fatal(err)
	}
	text := []byte("hello hello hello hello hello hello hello hello")
	frame := enc.EncodeAll(text, nil)
	// A frame declaring 1 MiB from a few dozen bytes: beyond the bound.
	dense := enc.EncodeAll(make([]byte, 1<<20), nil)
	// A frame of under 256 bytes from an encoder that omits the size.
	plain, _ := zstd.NewWriter(nil, zstd.WithEncoderCRC(false))
	noSize := plain.EncodeAll(text[:20], nil)
	// A valid frame followed by a second one: more than the first declares.
	twoFrames := append(bytes.Clone(frame), enc.EncodeAll(bytes.Repeat([]byte("x"), 500), nil)...)
	// The declared size (a 1-byte field after the 4-byte magic and the
	// descriptor) raised by one.
	lying := bytes.Clone(frame)
	lying[5]++
	garbage := bytes.Clone(frame)
	for i := 7; i < len(garbage); i++ {
		garbage[i] ^= 0x5a
	}
	// Frames that add nothing to the output: DecodeAll decodes them after
	// the block's frame, and the decoded length alone does not tell.
	emptyAfter := append(bytes.Clone(frame), enc.EncodeAll(nil, nil)...)
	skippable := []byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4}
	skippableAfter := append(bytes.Clone(frame), skippable...)
	byteAfter := append(bytes.Clone(frame), 0)
	// What the reader must still accept: a frame with its checksum (the
	// format allows it; this writer omits it), a frame of several zstd
	// blocks (raw and compressed), and one of an RLE block (made by hand:
	// magic, a single-segment descriptor, content size 100, then the
	// block's header, last and RLE of 100, and its byte).
	withSum, _ := zstd.NewWriter(nil, zstd.WithEncoderCRC(true), zstd.WithSingleSegment(true))
	summed := withSum.EncodeAll(text, nil)
	big := make([]byte, 300<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 << 10 {
		big[i] = byte(rng.Uint32())
	}
	blocks := enc.EncodeAll(big, nil)
	const rleHeader = 100<<3 | 1<<1 | 1 // size 100, type 1 (RLE), last
	rle := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 100, rleHeader & 0xff, rleHeader >> 8, 0, 'x'}
	tests := []struct {
		name    string
		stored  []byte
		version uint32
		want    []byte // nil: corruption expected
	}{
		{"zstd", storedBlock(frame, compressionZstd), formatVersionZstd, text},
		{"zstd in a version-2 file", storedBlock(frame, compressionZstd), formatVersionBase, nil},
		{"not a frame", storedBlock([]byte("hello, not zstd"), compressionZstd), formatVersionZstd, nil},
		{"garbage after the header", storedBlock(garbage, compressionZstd), formatVersionZstd, nil},
		{"declares too much", storedBlock(dense, compressionZstd), formatVersionZstd, nil},
		{"declares no size", storedBlock(noSize, compressionZstd), formatVersionZstd, nil},
		{"two frames", storedBlock(twoFrames, compressionZstd), formatVersionZstd, nil},
		{"size lie", storedBlock(lying, compressionZstd), formatVersionZstd, nil},
		{"empty", storedBlock(nil, compressionZstd), formatVersionZstd, nil},
		{"an empty frame after the frame", storedBlock(emptyAfter, compressionZstd), formatVersionZstd, nil},
		{"a skippable frame after the frame", storedBlock(skippableAfter, compressionZstd), formatVersionZstd, nil},
		{"a byte after the frame", storedBlock(byteAfter, compressionZstd), formatVersionZstd, nil},
		{"a skippable frame", storedBlock(skippable, compressionZstd), formatVersionZstd, nil},
		{"frame cut short", storedBlock(frame[:len(frame)-1], compressionZstd), formatVersionZstd, nil},
		{"with its checksum", storedBlock(summed, compressionZstd), formatVersionZstd, text},
		{"checksum cut short", storedBlock(summed[:len(summed)-1], compressionZstd), formatVersionZstd, nil},
		{"several zstd blocks", storedBlock(blocks, compressionZstd), formatVersionZstd, big},
		{"an RLE block", storedBlock(rle, compressionZstd), formatVersionZstd, bytes.Repeat([]byte("x"), 100)},
		{"a byte after an RLE block", storedBlock(append(bytes.Clone(rle), 'x'), compressionZstd), formatVersionZstd, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const at = 100 // the block's offset in the file
			file := append(make([]byte, at), tc.stored...)
			r := &Reader{f: bytes.NewReader(file), opts: ReaderOptions{Name: "z.seg"}, footer: footer{version: tc.version}}
			got, err := r.readStored(blockHandle{at, uint64(len(tc.stored) - blockTrailerLen)})
			if tc.want != nil {
				if err != nil || !bytes.Equal(got, tc.want) {
					t.Fatalf("readStored = %q, %v", got, err)
				}
				return
			}
			var ce *base.CorruptError
			if !errors.As(err, &ce) || ce.File != "z.seg" || ce.Offset != at {
				t.Fatalf("readStored = %q, %v; want corruption of z.seg at %d", got, err, at)
			}
		})
	}
}

// TestZstdNoAllocations checks that compressing and decompressing a block
// reuses the process's codec and the caller's buffers: a codec made per
// block would allocate hundreds of KiB each time.
func TestZstdNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random, so pooled state is reallocated")
	}
	es := compressibleEntries(100)
	var bw blockWriter
	bw.restartInterval = 16
	for _, e := range es[:40] {
		bw.add(appendInternalKey(nil, e.key, base.MakeTrailer(e.seq, e.kind)), e.value)
	}
	raw := bw.finish()
	w := NewWriter(new(bytes.Buffer), WriterOptions{Compression: ZstdCompression})
	var stored []byte
	allocs := testing.AllocsPerRun(50, func() {
		b, typ := w.maybeCompress(raw, ZstdCompression)
		if typ != compressionZstd {
			t.Fatalf("type %d, want zstd", typ)
		}
		stored = b
	})
	if allocs > 0 {
		t.Errorf("compressing a %d-byte block: %.1f allocations", len(raw), allocs)
	}
	file := storedBlock(stored, compressionZstd)
	r := &Reader{f: bytes.NewReader(file), opts: ReaderOptions{Name: "z.seg", Mapped: file}, footer: footer{version: formatVersionZstd}}
	ra := &readahead{reuseDecoded: true}
	h := blockHandle{0, uint64(len(stored))}
	allocs = testing.AllocsPerRun(50, func() {
		b, _, err := r.readBlock(h, ra)
		if err != nil || !bytes.Equal(b, raw) {
			t.Fatalf("readBlock = %d bytes, %v", len(b), err)
		}
	})
	if allocs > 0 {
		t.Errorf("decompressing a %d-byte block into a reused buffer: %.1f allocations", len(raw), allocs)
	}
}

// TestGoldenSegmentsOpen reads segments written by earlier writers:
// testdata/v2-golden.seg by the version-2 writer before zstd existed
// (snappy), v3-zstd-golden.seg by the first writer with zstd,
// v4-golden.seg by the first writer of hash indexes (snappy),
// v5-golden.seg by the first writer of value records (snappy; values of 8
// bytes and more apart: keys 10 on). All hold
// 200 keys user:NNNN:name at seqs 1000+N, every 17th a tombstone, a range
// tombstone [user:0100, user:0110) at seq 1500, 256-byte blocks, 10 bits
// per key and a prefix filter ("colon").
func TestGoldenSegmentsOpen(t *testing.T) {
	for _, tc := range []struct {
		file    string
		version uint32
		codec   byte
	}{
		{"v2-golden.seg", 2, compressionSnappy},
		{"v3-zstd-golden.seg", 3, compressionZstd},
		{"v4-golden.seg", 4, compressionSnappy},
		{"v5-golden.seg", 5, compressionSnappy},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			r := openSegment(t, data, ReaderOptions{Name: tc.file, Prefix: upToColon, PrefixName: "colon"})
			p := r.Properties()
			if p.FormatVersion != tc.version || p.Entries != 200 || p.Tombstones != 12 || p.RangeDels != 1 || p.PrefixFilterSize == 0 {
				t.Fatalf("properties %+v", p)
			}
			if n := blockTypes(r, data)[tc.codec]; n == 0 {
				t.Fatalf("no block of type %d", tc.codec)
			}
			if want := uint64(200 - 12 - 9); tc.version >= formatVersionValues && p.Values != want {
				t.Fatalf("%d value records, want %d", p.Values, want)
			}
			if indexed, _, _, _ := hashIndexStats(t, r); (indexed > 0) != (tc.version >= formatVersionHashIndex) {
				t.Fatalf("%d blocks with a hash index in a version-%d file", indexed, tc.version)
			}
			for i := range 200 {
				k := fmt.Appendf(nil, "user:%04d:name", i)
				v, kind, found, err := r.Get(k, base.MaxSeq)
				wantKind := base.KindPut
				if i%17 == 0 {
					wantKind = base.KindDelete
				}
				if err != nil || !found || kind != wantKind || (kind == base.KindPut && string(v) != fmt.Sprintf("value-%d", i)) {
					t.Fatalf("Get(%s) = %q, %v, %v, %v", k, v, kind, found, err)
				}
			}
			if r.RangeDels().Len() != 1 {
				t.Fatalf("range tombstones %v", r.RangeDels().Tombstones())
			}
			if err := r.Verify(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFooterVersionBound checks the footer rule that lets a build fail at
// Open, naming the version, on a segment newer than it reads (as builds
// before version 3 do on a zstd segment) rather than at its first block.
func TestFooterVersionBound(t *testing.T) {
	data, _ := writeSegment(t, compressibleEntries(10), WriterOptions{Compression: ZstdCompression})
	ft := data[len(data)-footerLen:]
	binary.LittleEndian.PutUint32(ft[48:], FormatVersion+1)
	binary.LittleEndian.PutUint32(ft[52:], blockChecksum(ft[:52]))
	_, err := Open(bytes.NewReader(data), int64(len(data)), ReaderOptions{Name: "v4.seg"})
	if !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("Open of a version-%d file = %v", FormatVersion+1, err)
	}
}

// TestFuzzSeedsHaveZstd keeps FuzzOpen's seeds honest: they must include
// a version-3 segment with zstd blocks, and one mixing zstd and snappy.
func TestFuzzSeedsHaveZstd(t *testing.T) {
	var zstdOnly, mixed bool
	for _, d := range fuzzSegments(t) {
		r := openSegment(t, d, ReaderOptions{})
		types := blockTypes(r, d)
		if r.Properties().FormatVersion >= formatVersionZstd && types[compressionZstd] > 0 {
			zstdOnly = zstdOnly || types[compressionSnappy] == 0
			mixed = mixed || types[compressionSnappy] > 0
		}
	}
	if !zstdOnly || !mixed {
		t.Fatalf("zstd seeds: zstd only %v, mixed with snappy %v", zstdOnly, mixed)
	}
}

// kvbenchBlocks returns n data blocks of about 4 KiB built like kvbench's
// data set: sorted 16-byte random keys, 100-byte values of 16 random bytes
// repeated once per 32 (which snappy compresses to about half).
func kvbenchBlocks(n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var blocks [][]byte
	var bw blockWriter
	bw.restartInterval = 16
	key := make([]byte, 16)
	hi := uint64(0)
	for len(blocks) < n {
		hi += 1 + rng.Uint64N(1<<40)
		binary.BigEndian.PutUint64(key, hi)
		binary.BigEndian.PutUint64(key[8:], rng.Uint64())
		value := make([]byte, 0, 128)
		for len(value) < 100 {
			half := binary.LittleEndian.AppendUint64(nil, rng.Uint64())
			half = binary.LittleEndian.AppendUint64(half, rng.Uint64())
			value = append(append(value, half...), half...)
		}
		bw.add(appendInternalKey(nil, key, base.MakeTrailer(hi, base.KindPut)), value[:100])
		if bw.estimatedSize() >= 4096 {
			blocks = append(blocks, bytes.Clone(bw.finish()))
			bw.reset()
		}
	}
	return blocks
}

// BenchmarkCodec compresses and decompresses 4 KiB data blocks of
// kvbench-like data and of text-like data with each codec: MB/s of raw block bytes, per second
// of wall time and of the process's CPU time (cpuMB/s, steadier on a
// shared machine), and the stored size as a fraction of the raw size
// (stored/raw).
func BenchmarkCodec(b *testing.B) {
	for _, data := range []struct {
		name   string
		blocks [][]byte
	}{{"kvbench", kvbenchBlocks(256)}, {"text", textBlocks(256)}} {
		b.Run(data.name, func(b *testing.B) { benchCodec(b, data.blocks) })
	}
}

// textBlocks returns n data blocks of about 4 KiB of compressibleEntries:
// values of repeated words, as text or JSON values are.
func textBlocks(n int) [][]byte {
	var blocks [][]byte
	var bw blockWriter
	bw.restartInterval = 16
	for _, e := range compressibleEntries(200 * n) {
		bw.add(appendInternalKey(nil, e.key, base.MakeTrailer(e.seq, e.kind)), e.value)
		if bw.estimatedSize() >= 4096 {
			if blocks = append(blocks, bytes.Clone(bw.finish())); len(blocks) == n {
				break
			}
			bw.reset()
		}
	}
	return blocks
}

func benchCodec(b *testing.B, blocks [][]byte) {
	raw := 0
	for _, blk := range blocks {
		raw += len(blk)
	}
	for _, c := range []Compression{SnappyCompression, ZstdCompression} {
		w := NewWriter(io.Discard, WriterOptions{Compression: c})
		var stored [][]byte
		size := 0
		for _, blk := range blocks {
			p, typ := w.maybeCompress(blk, c)
			if typ != byte(c) {
				b.Fatalf("%v stored a block as type %d", c, typ)
			}
			stored = append(stored, storedBlock(p, typ))
			size += len(p)
		}
		b.Run(c.String()+"/encode", func(b *testing.B) {
			b.SetBytes(int64(raw))
			b.ReportAllocs()
			c0 := cpuSeconds()
			for b.Loop() {
				for _, blk := range blocks {
					w.maybeCompress(blk, c)
				}
			}
			reportCPU(b, c0, raw)
			b.ReportMetric(float64(size)/float64(raw), "stored/raw")
		})
		b.Run(c.String()+"/decode", func(b *testing.B) {
			b.SetBytes(int64(raw))
			b.ReportAllocs()
			readers := make([]*Reader, len(stored))
			for i, s := range stored {
				readers[i] = &Reader{opts: ReaderOptions{Mapped: s}, footer: footer{version: formatVersionZstd}}
			}
			c0 := cpuSeconds()
			defer reportCPU(b, c0, raw)
			for b.Loop() {
				for i, r := range readers {
					if _, _, err := r.readBlock(blockHandle{0, uint64(len(stored[i]) - blockTrailerLen)}, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// reportCPU reports raw bytes per op against the CPU time used since c0.
func reportCPU(b *testing.B, c0 float64, raw int) {
	if cpu := cpuSeconds() - c0; cpu > 0 {
		b.ReportMetric(float64(raw)*float64(b.N)/cpu/1e6, "cpuMB/s")
	}
}

// TestStoredRawUnlessAnEighthSaved: a block is stored compressed only when
// its codec saves at least 1/8 of it, with either codec: decompressing a
// block costs more than reading the few bytes less would save. Blocks of
// random bytes after a run of zeros compress by about the run's share.
func TestStoredRawUnlessAnEighthSaved(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	block := func(zeros int) []byte {
		b := make([]byte, 16<<10)
		for i := zeros; i < len(b); i++ {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for _, c := range []Compression{SnappyCompression, ZstdCompression} {
		for _, tc := range []struct {
			zeros int // of 16 KiB
			raw   bool
		}{{0, true}, {1 << 10, true}, {1 << 11, true}, {3 << 10, false}, {8 << 10, false}} {
			w := NewWriter(new(bytes.Buffer), WriterOptions{Compression: c})
			raw := block(tc.zeros)
			stored, typ := w.maybeCompress(raw, c)
			saved := 1 - float64(len(stored))/float64(len(raw))
			if (typ == compressionNone) != tc.raw || typ == compressionNone && !bytes.Equal(stored, raw) {
				t.Errorf("%v, %d of %d bytes zero: stored as type %d, %d bytes (%.1f%% saved); want raw %v",
					c, tc.zeros, len(raw), typ, len(stored), 100*saved, tc.raw)
			}
			if typ != compressionNone && 8*len(stored) > 7*len(raw) {
				t.Errorf("%v: a block compressed to %d of %d bytes, less than 1/8 saved, stored compressed", c, len(stored), len(raw))
			}
		}
	}
}
