package segment

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/golang/snappy"
)

// Hostile segments: files crafted so that small length fields claim huge
// keys or blocks. Prefix compression is the amplifier: an entry of a few
// bytes can say "the previous key's first 4 MiB, plus one byte", so a
// reader that materializes or copies whole keys does work proportional to
// the claimed sizes, not to the bytes in the file. FORMAT.md, "Limits a
// reader enforces", lists what stops each of these.

// appendRawEntry appends a block entry with an explicit shared length, as
// a hostile writer may choose it (blockWriter always shares the longest
// common prefix and starts restart points with whole keys).
func appendRawEntry(b []byte, shared int, delta, value []byte) []byte {
	b = binary.AppendUvarint(b, uint64(shared))
	b = binary.AppendUvarint(b, uint64(len(delta)))
	b = binary.AppendUvarint(b, uint64(len(value)))
	b = append(b, delta...)
	return append(b, value...)
}

// finishRawBlock appends a restart array with the single restart point 0:
// nothing bounds how many entries follow it.
func finishRawBlock(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint32(b, 1)
}

// rawSegment assembles a segment from block contents, with valid
// checksums everywhere, so that only the reader's limits can object.
type rawSegment struct {
	data     []byte      // the data region, trailers included
	blocks   int         // data blocks in it
	filter   []byte      // filter block contents; nil for none
	props    Properties  // sizes and block count are filled in by assemble
	extra    [][2][]byte // more properties, after props (see rawProperties)
	index    []byte      // index block contents
	compress bool        // store the properties and index blocks with snappy
	// fix, if set, changes the properties after assemble has filled in
	// the sizes, for a file whose properties contradict its blocks.
	fix func(*Properties)
}

func (s rawSegment) assemble() []byte {
	file := bytes.Clone(s.data)
	typ := byte(compressionNone)
	encode := func(b []byte) []byte { return b }
	if s.compress {
		typ = compressionSnappy
		encode = func(b []byte) []byte { return snappy.Encode(nil, b) }
	}
	ft := footer{version: FormatVersion}
	add := func(contents []byte, typ byte) blockHandle {
		h := blockHandle{uint64(len(file)), uint64(len(contents))}
		file = append(file, storedBlock(contents, typ)...)
		return h
	}
	p := s.props
	p.DataBlocks, p.DataSize = s.blocks, uint64(len(s.data))
	if s.filter != nil {
		ft.filter = add(s.filter, compressionNone)
		p.FilterSize = ft.filter.length
	}
	index := encode(s.index)
	p.IndexSize = uint64(len(index))
	if s.fix != nil {
		s.fix(&p)
	}
	ft.properties = add(encode(rawProperties(&p, s.extra)), typ)
	ft.index = add(index, typ)
	return append(file, ft.encode()...)
}

// rawProperties encodes p followed by extra entries, each given as (delta,
// value) and sharing all of the previous name: extra names grow by their
// delta, so each is larger than the one before.
func rawProperties(p *Properties, extra [][2][]byte) []byte {
	var it blockIter
	if err := it.init(bytes.Clone(encodeProperties(&blockWriter{restartInterval: 16}, p)), false, "", 0); err != nil {
		panic(err)
	}
	var b []byte
	nameLen := 0
	for ok := it.first(); ok; ok = it.next() {
		b = appendRawEntry(b, 0, it.key, it.val)
		nameLen = len(it.key)
	}
	for i, e := range extra {
		shared := nameLen
		if i == 0 {
			shared = 0 // the first extra name starts afresh (with "z", above "tombstones")
		}
		b = appendRawEntry(b, shared, e[0], e[1])
		nameLen = shared + len(e[0])
	}
	return finishRawBlock(b)
}

// zeroDataBlocks returns n stored data blocks of blockLen zero bytes
// each: Open never reads them, and their handles tile the data region as
// the index requires.
func zeroDataBlocks(n, blockLen int) []byte {
	var data []byte
	for range n {
		data = append(data, storedBlock(make([]byte, blockLen), compressionNone)...)
	}
	return data
}

// hostileIndex is a segment whose index has seps separators of keyLen
// bytes of 'a' plus a 2-byte counter, for data blocks of blockLen bytes:
// the first stores its key whole (and snappy squeezes it 21-fold), every
// later one shares all but the counter.
func hostileIndex(seps, keyLen, blockLen int) []byte {
	stride := blockLen + blockTrailerLen
	trailer := binary.LittleEndian.AppendUint64(nil, base.MakeTrailer(1, base.KindPut))
	var index []byte
	for j := range seps {
		delta := append([]byte{byte(j >> 8), byte(j)}, trailer...)
		shared := keyLen
		if j == 0 {
			delta = append(bytes.Repeat([]byte("a"), keyLen), delta...)
			shared = 0
		}
		index = appendRawEntry(index, shared, delta, appendHandle(nil, blockHandle{uint64(j * stride), uint64(blockLen)}))
	}
	return rawSegment{
		data:     zeroDataBlocks(seps, blockLen),
		blocks:   seps,
		props:    Properties{Entries: uint64(seps), DistinctKeys: uint64(seps)},
		index:    finishRawBlock(index),
		compress: true,
	}.assemble()
}

// hostileProperties is a segment whose properties block adds n unknown
// properties after the real ones: the first named nameLen bytes of 'z',
// each later one its predecessor plus one byte.
func hostileProperties(n, nameLen int) []byte {
	extra := make([][2][]byte, n)
	extra[0][0] = bytes.Repeat([]byte("z"), nameLen)
	for i := 1; i < n; i++ {
		extra[i][0] = []byte{1}
	}
	return rawSegment{index: finishRawBlock(nil), extra: extra, compress: true}.assemble()
}

// hostileFilter is an empty segment whose filter block claims bits bits
// but holds a 64-byte bit array, with the properties agreeing.
func hostileFilter(bits uint64) []byte {
	enc, err := bloom.NewBitsPerKey(1, 10).MarshalBinary()
	if err != nil {
		panic(err)
	}
	g := bloom.NewBitsPerKey(1, 10).Geometry()
	binary.LittleEndian.PutUint64(enc[8:], bits)
	end := len(enc) - 4
	binary.LittleEndian.PutUint32(enc[end:], crc32.Checksum(enc[:end], castagnoli))
	p := Properties{FilterBits: bits, FilterK: uint8(g.K), FilterLayout: uint8(g.Layout)}
	return rawSegment{filter: enc, props: p, index: finishRawBlock(nil)}.assemble()
}

// hostileSnappyFilter is an empty segment whose filter block is a snappy
// block of a few bytes that claims to decode to MaxBlockSize bytes.
func hostileSnappyFilter() []byte {
	file := rawSegment{filter: []byte("placeholder"), index: finishRawBlock(nil)}.assemble()
	// Replace the filter block by a snappy one of the same length (11
	// bytes: a 4-byte length header and 7 bytes of body), keeping every
	// handle and size valid.
	stored := append(binary.AppendUvarint(nil, MaxBlockSize), "\x00abcdef"...)
	f := file[len(file)-footerLen:]
	off := binary.LittleEndian.Uint64(f)
	copy(file[off:], storedBlock(stored, compressionSnappy))
	return file
}

type hostileCase struct {
	name  string
	file  func() []byte
	opens bool // within every limit: Open must succeed, cheaply
}

// hostileCases are the files of the "never bricked" issue (item 5), and
// relatives that get past the first limit to reach the next.
var hostileCases = []hostileCase{
	{"index 1024 separators of 1 MiB", func() []byte { return hostileIndex(1024, 1<<20, 1) }, false},
	{"index 2048 separators of 2 MiB", func() []byte { return hostileIndex(2048, 2<<20, 1) }, false},
	// Keys within MaxKeySize, but longer than their 1-byte data blocks
	// could hold: without that limit, 4096 x 60 KiB = 240 MiB of index.
	{"index 4096 separators of 60 KiB", func() []byte { return hostileIndex(4096, 60<<10, 1) }, false},
	// The worst a file of about 1 MB can do within the limits: 2,000
	// separators of 8,533 bytes, as long as 400 stored bytes can decode
	// to, cost 17 MB of index.
	{"index 2000 separators of 8533 bytes", func() []byte { return hostileIndex(2000, 400*64/3-10, 400) }, true},
	{"properties 200000 names of 4 MiB", func() []byte { return hostileProperties(200_000, 4<<20) }, false},
	{"filter of 2^40 bits", func() []byte { return hostileFilter(1 << 40) }, false},
	{"filter of 2^38 bits", func() []byte { return hostileFilter(1 << 38) }, false},
	{"snappy filter claiming 64 MiB", hostileSnappyFilter, false},
}

// measure runs f and returns how long it took and how many bytes it
// allocated (runtime.MemStats.TotalAlloc, which counts every allocation,
// freed or not).
func measure(f func()) (time.Duration, uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return elapsed, after.TotalAlloc - before.TotalAlloc
}

// TestHostileSegments opens each hostile file: it must be rejected as
// corrupt (or, within the limits, opened), quickly and with little memory.
// The bounds are generous so that a loaded CI machine (or -race) does not
// flake; a reader without the limits takes seconds to minutes and
// gigabytes.
func TestHostileSegments(t *testing.T) {
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file()
			var err error
			elapsed, alloc := measure(func() {
				_, err = Open(bytes.NewReader(file), int64(len(file)), ReaderOptions{Name: corruptName})
			})
			t.Logf("%d-byte file: %v in %v, %d bytes allocated", len(file), err, elapsed, alloc)
			var ce *base.CorruptError
			switch {
			case tc.opens && err != nil:
				t.Fatalf("Open = %v, want success", err)
			case !tc.opens && (!errors.As(err, &ce) || !errors.Is(err, base.ErrCorrupt) || ce.File != corruptName):
				t.Fatalf("Open = %v, want a corruption error naming %s", err, corruptName)
			}
			if elapsed > 2*time.Second {
				t.Errorf("Open took %v", elapsed)
			}
			if limit := uint64(200 << 20); alloc > limit {
				t.Errorf("Open allocated %d bytes, more than %d", alloc, limit)
			}
		})
	}
}

// TestHostileMeasure reports time and peak memory of opening one hostile
// file, for comparing readers; run it alone, under /usr/bin/time -v, with
// BLOOMKV_HOSTILE set to the case's name.
func TestHostileMeasure(t *testing.T) {
	name := os.Getenv("BLOOMKV_HOSTILE")
	if name == "" {
		t.Skip("BLOOMKV_HOSTILE not set")
	}
	for _, tc := range hostileCases {
		if tc.name != name {
			continue
		}
		file := tc.file()
		var err error
		elapsed, alloc := measure(func() {
			_, err = Open(bytes.NewReader(file), int64(len(file)), ReaderOptions{Name: corruptName})
		})
		t.Logf("%s: %d-byte file: Open = %v in %v, %d bytes allocated", name, len(file), err, elapsed, alloc)
		return
	}
	t.Fatalf("no case %q", name)
}

// longPrefixSegment is a valid segment of one data block of n entries,
// whose user keys are prefixLen bytes of 'k' and a 4-byte counter: every
// entry after the first shares the prefix and stores 17 bytes. With
// filter, it has a filter with every bit set (so it passes any key), and
// Verify must hash every key.
func longPrefixSegment(n, prefixLen int, filter bool) []byte {
	prefix := bytes.Repeat([]byte("k"), prefixLen)
	userKey := func(j int) []byte { return binary.BigEndian.AppendUint32(bytes.Clone(prefix), uint32(j)) }
	trailer := binary.LittleEndian.AppendUint64(nil, base.MakeTrailer(1, base.KindPut))
	var block []byte
	for j := range n {
		delta := append(binary.BigEndian.AppendUint32(nil, uint32(j)), trailer...)
		shared := prefixLen
		if j == 0 {
			delta, shared = append(bytes.Clone(prefix), delta...), 0
		}
		block = appendRawEntry(block, shared, delta, nil)
	}
	last := append(userKey(n-1), trailer...)
	s := rawSegment{
		data:   storedBlock(finishRawBlock(block), compressionNone),
		blocks: 1,
		props: Properties{Entries: uint64(n), DistinctKeys: uint64(n), MinSeq: 1, MaxSeq: 1,
			Smallest: userKey(0), Largest: userKey(n - 1)},
		index: finishRawBlock(appendRawEntry(nil, 0, last, appendHandle(nil, blockHandle{0, uint64(len(block) + 8)}))),
	}
	if filter {
		f := bloom.NewBitsPerKey(1, 10)
		enc, err := f.MarshalBinary()
		if err != nil {
			panic(err)
		}
		end := len(enc) - 4
		for i := 32; i < end; i++ { // the bit array (bloom/FORMAT.md)
			enc[i] = 0xff
		}
		binary.LittleEndian.PutUint32(enc[end:], crc32.Checksum(enc[:end], castagnoli))
		g := f.Geometry()
		s.filter = enc
		s.props.FilterBits, s.props.FilterK, s.props.FilterLayout = g.Bits, uint8(g.K), uint8(g.Layout)
	}
	return s.assemble()
}

// TestVerifyLongSharedPrefixes verifies a valid block whose 400,000
// entries each repeat a 60 KiB prefix, in a segment with no filter: its
// work must follow the 7 MB the block stores, not the 24 GB of keys it
// describes. (With a filter each key is hashed, all of it: 2.5 s here,
// as a Get of each would cost.) 40 ms here; a reader that copies whole
// keys took 6 s, one that hashed them though nothing asked 2.5 s.
func TestVerifyLongSharedPrefixes(t *testing.T) {
	file := longPrefixSegment(400_000, 60<<10, false)
	r := openSegment(t, file, ReaderOptions{Name: corruptName})
	var err error
	var used float64
	elapsed, alloc := measure(func() {
		cpu := cpuSeconds()
		err = r.Verify()
		used = cpuSeconds() - cpu
	})
	if used > 0 {
		// The process's CPU time, where the platform reports it: on a
		// machine shared with other work the wall time doubled (and
		// failed the bound) with no change in the work done.
		elapsed = time.Duration(used * float64(time.Second))
	}
	t.Logf("%d-byte file: Verify = %v in %v, %d bytes allocated", len(file), err, elapsed, alloc)
	if err != nil {
		t.Fatal(err)
	}
	limit := time.Second
	if raceEnabled {
		limit *= 10
	}
	if elapsed > limit || alloc > 200<<20 {
		t.Errorf("Verify took %v and allocated %d bytes", elapsed, alloc)
	}
}

// cancelAfter is a context that reports cancellation from its calls-th
// call of Err on: a deterministic stand-in for a cancel arriving mid-block.
type cancelAfter struct {
	context.Context
	calls int
}

func (c *cancelAfter) Err() error {
	if c.calls--; c.calls <= 0 {
		return context.Canceled
	}
	return nil
}

// TestVerifyCancelWithinBlock checks that VerifyContext looks at its
// context inside a block, not only between blocks.
func TestVerifyCancelWithinBlock(t *testing.T) {
	file := longPrefixSegment(3*verifyCheckEvery, 100, false)
	r := openSegment(t, file, ReaderOptions{Name: corruptName})
	if r.Blocks() != 1 {
		t.Fatalf("%d blocks, want 1", r.Blocks())
	}
	ctx := &cancelAfter{Context: context.Background(), calls: 2} // the check before block 0 passes
	if blocks, err := r.VerifyContext(ctx); blocks != 0 || err != context.Canceled {
		t.Fatalf("VerifyContext = %d, %v; want 0, context.Canceled", blocks, err)
	}
	if blocks, err := r.VerifyContext(context.Background()); blocks != 1 || err != nil {
		t.Fatalf("VerifyContext = %d, %v; want 1, nil", blocks, err)
	}
}

// TestVerifyCancelPrompt cancels the verification of one block that takes
// seconds (400,000 distinct 60 KiB keys to hash for the filter check): it
// must stop within a fraction of a second of the deadline.
func TestVerifyCancelPrompt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 7 MB segment")
	}
	file := longPrefixSegment(400_000, 60<<10, true)
	r := openSegment(t, file, ReaderOptions{Name: corruptName})
	const deadline = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	blocks, err := r.VerifyContext(ctx)
	elapsed := time.Since(start)
	t.Logf("VerifyContext = %d, %v after %v", blocks, err, elapsed)
	if blocks != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("VerifyContext = %d, %v; want 0, context.DeadlineExceeded", blocks, err)
	}
	if elapsed > deadline+time.Second {
		t.Errorf("VerifyContext returned %v after a %v deadline", elapsed, deadline)
	}
}

// TestDataKeyTooLong plants a key one byte over MaxKeySize in a data block
// behind a short separator, so that Open succeeds: Get, iteration and
// Verify must all report corruption.
func TestDataKeyTooLong(t *testing.T) {
	key := append(bytes.Repeat([]byte("k"), MaxKeySize+1), make([]byte, base.TrailerLen)...)
	binary.LittleEndian.PutUint64(key[MaxKeySize+1:], base.MakeTrailer(1, base.KindPut))
	block := finishRawBlock(appendRawEntry(nil, 0, key, nil))
	sep := appendInternalKey(nil, []byte("l"), base.MakeTrailer(1, base.KindPut))
	file := rawSegment{
		data:   storedBlock(block, compressionNone),
		blocks: 1,
		props:  Properties{Entries: 1, DistinctKeys: 1, MinSeq: 1, MaxSeq: 1, Smallest: []byte("k"), Largest: []byte("k")},
		index:  finishRawBlock(appendRawEntry(nil, 0, sep, appendHandle(nil, blockHandle{0, uint64(len(block))}))),
	}.assemble()
	r := openSegment(t, file, ReaderOptions{Name: corruptName})
	if _, _, _, err := r.Get([]byte("k"), base.MaxSeq); !errors.Is(err, base.ErrCorrupt) {
		t.Errorf("Get = %v, want ErrCorrupt", err)
	}
	it := r.NewIter(false)
	it.First()
	if err := it.Close(); !errors.Is(err, base.ErrCorrupt) {
		t.Errorf("iteration = %v, want ErrCorrupt", err)
	}
	if err := r.Verify(); !errors.Is(err, base.ErrCorrupt) {
		t.Errorf("Verify = %v, want ErrCorrupt", err)
	}
}

// TestMaxKeySizeRoundTrip writes keys of exactly MaxKeySize, compressed
// (so separators are far longer than their blocks' stored bytes), and
// reads them back: the limits must not reject what the writer writes.
func TestMaxKeySizeRoundTrip(t *testing.T) {
	var es []entry
	for i := range 8 {
		key := bytes.Repeat([]byte{'a' + byte(i)}, MaxKeySize)
		es = append(es, entry{key: key, seq: uint64(i + 1), kind: base.KindPut, value: []byte("v")})
	}
	for _, compress := range allCompressions {
		data, _ := writeSegment(t, es, WriterOptions{BlockSize: 1, Compression: compress, BitsPerKey: 10})
		r := openSegment(t, data, ReaderOptions{Name: corruptName})
		for _, e := range es {
			checkGet(t, r, es, e.key, base.MaxSeq)
		}
		if err := r.Verify(); err != nil {
			t.Fatal(err)
		}
	}
}

// cpuTime runs f and returns the CPU time the process used meanwhile, or
// the wall time where the platform does not report it: on a machine
// shared with other work the wall time varies with the load.
func cpuTime(f func()) time.Duration {
	start, cpu := time.Now(), cpuSeconds()
	f()
	if used := cpuSeconds() - cpu; cpu > 0 {
		return time.Duration(used * float64(time.Second))
	}
	return time.Since(start)
}

// TestBackwardScanLongPrefixInterval scans backward a valid segment whose
// one data block is one restart interval of 4,000 entries that each
// repeat a 64 KiB prefix (a writer told to restart rarely, with large
// blocks and no hash index, writes such a block): its work must follow
// the 68 KB the block stores, as a forward scan's does, not the 256 MB
// of keys it describes. A prev cache that copied keys whole held 16 of
// these at a time and decoded the interval again for every 16: seconds
// here, and the square of the entries.
func TestBackwardScanLongPrefixInterval(t *testing.T) {
	const n = 4000
	file := longPrefixSegment(n, MaxKeySize-4, false)
	r := openSegment(t, file, ReaderOptions{Name: corruptName})
	scan := func(reverse bool) (steps int) {
		it := r.NewIter(false)
		first, step := it.First, it.Next
		if reverse {
			first, step = it.Last, it.Prev
		}
		for ok := first(); ok; ok = step() {
			want := steps
			if reverse {
				want = n - 1 - steps
			}
			if k := it.Key(); len(k) != MaxKeySize || binary.BigEndian.Uint32(k[len(k)-4:]) != uint32(want) {
				t.Fatalf("reverse %v: entry %d has a %d-byte key ending %x", reverse, want, len(k), k[max(len(k)-4, 0):])
			}
			steps++
		}
		if err := it.Close(); err != nil || steps != n {
			t.Fatalf("reverse %v: %d of %d entries, err %v", reverse, steps, n, err)
		}
		return steps
	}
	scan(false) // reads the block
	fwd := cpuTime(func() { scan(false) })
	bwd := cpuTime(func() { scan(true) })
	t.Logf("%d-byte file: forward %v, backward %v", len(file), fwd, bwd)
	limit := 10*fwd + 100*time.Millisecond
	if raceEnabled {
		limit *= 10
	}
	if bwd > limit {
		t.Errorf("backward scan took %v, forward %v", bwd, fwd)
	}
}

// TestSeekLongPrefixInterval seeks to the last keys of a block like
// TestBackwardScanLongPrefixInterval's, of 20,000 entries: each Lookup,
// SeekGE and SeekLT decodes the interval from its restart point, and must
// compare each entry with the key sought only past the bytes it shares
// with the entry before (as Verify does), not whole: 1.3 GB of keys to
// compare per seek otherwise.
func TestSeekLongPrefixInterval(t *testing.T) {
	const n = 20000
	prefix := bytes.Repeat([]byte("k"), MaxKeySize-4)
	userKey := func(j int) []byte { return binary.BigEndian.AppendUint32(bytes.Clone(prefix), uint32(j)) }
	file := longPrefixSegment(n, len(prefix), false)
	r := openSegment(t, file, ReaderOptions{Name: corruptName})
	it := r.NewIter(false)
	defer it.Close()
	scan := func() {
		for ok := it.First(); ok; ok = it.Next() {
		}
	}
	scan() // reads the block
	fwd := cpuTime(scan)
	limit := 6*fwd + 10*time.Millisecond // SeekLT decodes the interval twice
	if raceEnabled {
		limit += 45 * time.Millisecond
	}
	var slowest time.Duration
	defer func() { t.Logf("%d-byte file: slowest seek %v, forward scan %v", len(file), slowest, fwd) }()
	for j := n - 3; j < n; j++ {
		k := userKey(j)
		for _, op := range []struct {
			name string
			seek func() (ok bool, got []byte, err error)
		}{
			{"Lookup", func() (bool, []byte, error) {
				_, _, _, found, err := r.Lookup(k, bloom.Hash(k), base.MaxSeq)
				return found, k, err
			}},
			{"SeekGE", func() (bool, []byte, error) { return it.SeekGE(k), it.Key(), it.Error() }},
			{"SeekLT", func() (bool, []byte, error) { return it.SeekLT(k), it.Key(), it.Error() }},
		} {
			var ok bool
			var got []byte
			var err error
			took := cpuTime(func() { ok, got, err = op.seek() })
			slowest = max(slowest, took)
			want := k
			if op.name == "SeekLT" {
				want = userKey(j - 1)
			}
			if !ok || err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s(key %d) = %v, %v, key ending %x", op.name, j, ok, err, got[max(len(got)-4, 0):])
			}
			if took > limit {
				t.Errorf("%s(key %d) took %v; a forward scan of the block %v", op.name, j, took, fwd)
			}
		}
	}
}

// oneBlockSegment is a segment of one data block holding ikeys (internal
// keys, in order) with values vals, restartInterval entries to a restart
// point, and properties props, which are not checked against the
// entries: a file whose properties may lie.
func oneBlockSegment(ikeys, vals [][]byte, restartInterval int, props Properties) []byte {
	bw := &blockWriter{restartInterval: restartInterval}
	for i, k := range ikeys {
		bw.add(k, vals[i])
	}
	blk := bytes.Clone(bw.finish())
	ib := &blockWriter{restartInterval: 1}
	ib.add(ikeys[len(ikeys)-1], appendHandle(nil, blockHandle{0, uint64(len(blk))}))
	return rawSegment{data: storedBlock(blk, compressionNone), blocks: 1, props: props, index: bytes.Clone(ib.finish())}.assemble()
}

// requireCorruptNaming fails unless err is a corruption error that names
// corruptName.
func requireCorruptNaming(t *testing.T, what string, err error) {
	t.Helper()
	var ce *base.CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, base.ErrCorrupt) || ce.File != corruptName {
		t.Errorf("%s: %v, want a corruption error naming %s", what, err, corruptName)
	}
}

// TestIterRejectsUnknownKind plants an entry of a kind no writer writes in
// a data block (a range tombstone's, which belongs in the range-deletion
// block, one past every kind, and a value handle's in a file without
// value records): Lookup and LookupKey report it as corruption, and so must every
// move of an Iter that reaches it, forward, backward, by a seek, and with
// value records left unread (SkipValueRecords); none may show it as an
// entry.
func TestIterRejectsUnknownKind(t *testing.T) {
	for _, kind := range []base.Kind{base.KindRangeDelete, kindValueHandle, 4, 0xff} {
		a := appendInternalKey(nil, []byte("a"), base.MakeTrailer(2, base.KindPut))
		k := appendInternalKey(nil, []byte("k"), base.MakeTrailer(1, kind))
		file := oneBlockSegment([][]byte{a, k}, [][]byte{[]byte("va"), []byte("v")}, 16,
			Properties{Entries: 2, DistinctKeys: 2, MinSeq: 1, MaxSeq: 2, Smallest: []byte("a"), Largest: []byte("k")})
		r := openSegment(t, file, ReaderOptions{Name: corruptName})
		name := fmt.Sprintf("kind %d", kind)
		_, _, _, _, err := r.Lookup([]byte("k"), bloom.Hash([]byte("k")), base.MaxSeq)
		requireCorruptNaming(t, name+": Lookup", err)
		_, _, _, _, err = r.LookupKey([]byte("k"), bloom.Hash([]byte("k")), base.MaxSeq)
		requireCorruptNaming(t, name+": LookupKey", err)
		for _, keysOnly := range []bool{false, true} {
			for _, move := range []struct {
				name string
				do   func(it *Iter) bool
			}{
				{"First, Next", func(it *Iter) bool { return it.First() && it.Next() }},
				{"First, NextVisible", func(it *Iter) bool { return it.First() && it.NextVisible(base.MaxSeq, nil) }},
				{"Last", (*Iter).Last},
				{"SeekGE", func(it *Iter) bool { return it.SeekGE([]byte("b")) }},
			} {
				it := r.NewIter(false)
				if keysOnly {
					it.SkipValueRecords()
				}
				what := fmt.Sprintf("%s, keys only %v: %s", name, keysOnly, move.name)
				if move.do(it) {
					t.Errorf("%s: at %q (kind %d) = %q", what, it.Key(), it.Kind(), it.Value())
				}
				requireCorruptNaming(t, what, it.Close())
			}
		}
	}
}

// blocksSegment is oneBlockSegment over several data blocks: blocks[i]
// are the indexes into ikeys of block i's entries.
func blocksSegment(ikeys, vals [][]byte, blocks [][]int, restartInterval int, props Properties) []byte {
	var data []byte
	ib := &blockWriter{restartInterval: 1}
	for _, b := range blocks {
		bw := &blockWriter{restartInterval: restartInterval}
		for _, i := range b {
			bw.add(ikeys[i], vals[i])
		}
		blk := bw.finish()
		ib.add(ikeys[b[len(b)-1]], appendHandle(nil, blockHandle{uint64(len(data)), uint64(len(blk))}))
		data = append(data, storedBlock(blk, compressionNone)...)
	}
	return rawSegment{data: data, blocks: len(blocks), props: props, index: bytes.Clone(ib.finish())}.assemble()
}

// TestIterChecksTrustedProperties plants entries that contradict the
// properties an Iter trusts: distinct-keys equal to entries (a segment
// of one entry per user key, whose steps need not learn whether they
// land on another version of the key they leave), and, where AllVisible
// lets a store show every entry as it is, tombstones 0 with a tombstone
// and max-seq below an entry's. A store's step over the segment
// (NextVisible) must never show a deleted key's older put, a key's older
// version after its newer one, or a version newer than it reads; and a
// walk that trusts the properties, forward or backward (Next, Prev, after
// AllVisible where it holds), must end in corruption naming the file: in
// one restart interval, in intervals of one entry, and across data
// blocks. (Backward, an entry's predecessor is decoded only at the step
// to it: a step that lands on a key's older version reports its newer
// one at the next step.)
func TestIterChecksTrustedProperties(t *testing.T) {
	ik := func(k string, seq uint64, kind base.Kind) []byte {
		return appendInternalKey(nil, []byte(k), base.MakeTrailer(seq, kind))
	}
	props := func(entries, tombstones, distinct, maxSeq uint64, smallest, largest string) Properties {
		return Properties{Entries: entries, Tombstones: tombstones, DistinctKeys: distinct, MinSeq: 1, MaxSeq: maxSeq,
			Smallest: []byte(smallest), Largest: []byte(largest)}
	}
	for _, c := range []struct {
		name       string
		ikeys      [][]byte
		vals       [][]byte
		props      Properties
		seq        uint64 // the store reads at seq
		allVisible bool   // AllVisible(seq)
	}{
		// k was deleted; its older put must not reappear.
		{"distinct-keys", [][]byte{ik("k", 2, base.KindDelete), ik("k", 1, base.KindPut)}, [][]byte{nil, []byte("old")},
			props(2, 1, 2, 2, "k", "k"), base.MaxSeq, false},
		{"distinct-keys, newer put", [][]byte{ik("k", 2, base.KindPut), ik("k", 1, base.KindPut)}, [][]byte{[]byte("new"), []byte("old")},
			props(2, 0, 2, 2, "k", "k"), 2, true},
		{"tombstones", [][]byte{ik("a", 1, base.KindPut), ik("b", 2, base.KindDelete)}, [][]byte{[]byte("va"), nil},
			props(2, 0, 2, 2, "a", "b"), 2, true},
		{"max-seq", [][]byte{ik("a", 1, base.KindPut), ik("b", 5, base.KindPut)}, [][]byte{[]byte("va"), []byte("vb")},
			props(2, 0, 2, 1, "a", "b"), 1, true},
	} {
		for _, layout := range []struct {
			name            string
			blocks          [][]int
			restartInterval int
		}{
			{"one interval", [][]int{{0, 1}}, 16},
			{"an interval each", [][]int{{0, 1}}, 1},
			{"a block each", [][]int{{0}, {1}}, 16},
		} {
			name := c.name + ", " + layout.name
			file := blocksSegment(c.ikeys, c.vals, layout.blocks, layout.restartInterval, c.props)
			r := openSegment(t, file, ReaderOptions{Name: corruptName})
			// A store's steps over the segment where it checks versions,
			// kinds and sequence numbers itself.
			it := r.NewIter(false)
			for ok := it.First() && it.SkipToVisible(c.seq, nil); ok; ok = it.NextVisible(c.seq, nil) {
				if k, seq := string(it.Key()), it.Seq(); k == "k" && seq == 1 || it.Kind() != base.KindPut || seq > c.seq {
					t.Errorf("%s: NextVisible(%d) shows %q@%d (%v) = %q", name, c.seq, k, seq, it.Kind(), it.Value())
				}
			}
			if err := it.Close(); err != nil {
				requireCorruptNaming(t, name+": NextVisible", err)
			}
			// Walks that trust the properties, as a store's steps over a
			// segment of AllVisible do.
			for _, reverse := range []bool{false, true} {
				it := r.NewIter(false)
				if all := it.AllVisible(c.seq); all != c.allVisible {
					t.Fatalf("%s: AllVisible(%d) = %v", name, c.seq, all)
				}
				first, step := it.First, it.Next
				if reverse {
					first, step = it.Last, it.Prev
				}
				for ok := first(); ok; ok = step() {
				}
				requireCorruptNaming(t, fmt.Sprintf("%s: reverse %v", name, reverse), it.Close())
			}
		}
	}
}

// TestScanCheckedBlocks checks when a block of a segment whose
// properties say it holds one entry per user key is trusted to: once a
// walk of it found every entry to agree and decoded every entry a step
// can, forward from its first entry to its end passing every restart
// point, or backward from its last entry to its first. Every block of a
// valid segment is after a scan either way. A block whose second restart
// point lies inside the first entry's value, where entries that repeat a
// user key start, is not after a forward scan, which never decodes them;
// a backward scan does (from that restart point), and must report them
// rather than show the key's older version.
func TestScanCheckedBlocks(t *testing.T) {
	var es []entry
	for i := range 300 {
		es = append(es, entry{key: fmt.Appendf(nil, "key%05d", i), seq: uint64(i + 1), kind: base.KindPut, value: []byte("value")})
	}
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 512})
	r := openSegment(t, data, ReaderOptions{Name: corruptName})
	it := r.NewIter(false)
	n := 0
	for ok := it.Last(); ok; ok = it.Prev() {
		n++
	}
	if err := it.Close(); err != nil || n != len(es) {
		t.Fatalf("backward scan: %d of %d entries, err %v", n, len(es), err)
	}
	for i := range r.index {
		if !r.index[i].scanChecked.Load() {
			t.Fatalf("block %d of %d not checked after a backward scan", i, len(r.index))
		}
	}
	r = openSegment(t, data, ReaderOptions{Name: corruptName})
	checked := func() (n int) {
		for i := range r.index {
			if r.index[i].scanChecked.Load() {
				n++
			}
		}
		return n
	}
	if n := checked(); n != 0 || len(r.index) < 3 {
		t.Fatalf("%d of %d blocks checked before any scan", n, len(r.index))
	}
	it = r.NewIter(false)
	for ok := it.First(); ok; ok = it.Next() {
	}
	if err := it.Close(); err != nil || checked() != len(r.index) {
		t.Fatalf("after a forward scan (err %v), %d of %d blocks checked", err, checked(), len(r.index))
	}
	n = 0
	it = r.NewIter(false)
	for ok := it.Last(); ok; ok = it.Prev() {
		n++
	}
	if err := it.Close(); err != nil || n != len(es) {
		t.Fatalf("backward scan of checked blocks: %d of %d entries, err %v", n, len(es), err)
	}

	// The hidden entries: k@2 = "new", then k@1 = "old", the value of
	// a@1; then z@3, after them as after a@1.
	ik := func(k string, seq uint64) []byte {
		return appendInternalKey(nil, []byte(k), base.MakeTrailer(seq, base.KindPut))
	}
	hidden := appendRawEntry(nil, 0, ik("k", 2), []byte("new"))
	hidden = appendRawEntry(hidden, 1, ik("k", 1)[1:], []byte("old"))
	blk := appendRawEntry(nil, 0, ik("a", 1), hidden)
	at := len(blk) - len(hidden)
	blk = appendRawEntry(blk, 0, ik("z", 3), []byte("vz"))
	blk = binary.LittleEndian.AppendUint32(blk, 0)
	blk = binary.LittleEndian.AppendUint32(blk, uint32(at))
	blk = binary.LittleEndian.AppendUint32(blk, 2)
	if reason := checkBlock(blk); reason != "" {
		t.Fatal(reason)
	}
	ib := &blockWriter{restartInterval: 1}
	ib.add(ik("z", 3), appendHandle(nil, blockHandle{0, uint64(len(blk))}))
	file := rawSegment{data: storedBlock(blk, compressionNone), blocks: 1, index: bytes.Clone(ib.finish()),
		props: Properties{Entries: 2, DistinctKeys: 2, MinSeq: 1, MaxSeq: 3, Smallest: []byte("a"), Largest: []byte("z")}}.assemble()
	r = openSegment(t, file, ReaderOptions{Name: corruptName})
	var keys []string
	it = r.NewIter(false)
	for ok := it.First(); ok; ok = it.Next() {
		keys = append(keys, string(it.Key()))
	}
	if err := it.Close(); err != nil || strings.Join(keys, ",") != "a,z" || r.index[0].scanChecked.Load() {
		t.Fatalf("forward scan: %q, err %v; block checked %v", keys, err, r.index[0].scanChecked.Load())
	}
	it = r.NewIter(false)
	for ok := it.Last(); ok; ok = it.Prev() {
		if string(it.Key()) == "k" && it.Seq() == 1 {
			t.Errorf("backward scan shows k@1 = %q, an older version", it.Value())
		}
	}
	requireCorruptNaming(t, "backward scan", it.Close())
}
