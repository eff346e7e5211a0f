package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// fuzzSegments are small valid segments used as seeds.
func fuzzSegments(t testing.TB) [][]byte {
	es := []entry{
		{key: []byte("a"), seq: 5, kind: base.KindPut, value: []byte("one")},
		{key: []byte("a"), seq: 2, kind: base.KindDelete},
		{key: []byte("abc"), seq: 3, kind: base.KindPut, value: bytes.Repeat([]byte("x"), 40)},
		{key: []byte("b"), seq: 4, kind: base.KindPut, value: []byte("two")},
	}
	plain, _ := writeSegment(t, es, WriterOptions{BlockSize: 32, RestartInterval: 2})
	packed, _ := writeSegment(t, es, WriterOptions{Compression: SnappyCompression, BitsPerKey: 10})
	empty, _ := writeSegment(t, nil, WriterOptions{BitsPerKey: 10})
	// Version 2 with a prefix filter block (prefix: the first byte).
	firstByte := func(k []byte) int { return min(1, len(k)) }
	prefixed, _ := writeSegment(t, es, WriterOptions{BitsPerKey: 10, Prefix: firstByte, PrefixName: "first-byte"})
	prefixSmall, _ := writeSegment(t, es, WriterOptions{BlockSize: 32, BitsPerKey: 4, Prefix: firstByte, PrefixName: "1"})
	// And with both optional blocks: the prefix filter and range tombstones.
	rd := rangedel.Build([]rangedel.Tombstone{{Start: []byte("a"), End: []byte("ab"), Seq: 6}, {Start: []byte("aa"), End: []byte("c"), Seq: 7}})
	withRangeDels, _ := writeWithRangeDels(t, es, rd, WriterOptions{BitsPerKey: 10})
	both, _ := writeWithRangeDels(t, es, rd, WriterOptions{BitsPerKey: 10, Prefix: firstByte, PrefixName: "first-byte"})
	// Version 3: zstd data and index blocks (enough entries that the
	// codec pays), and zstd beside snappy where a block is too dense for
	// zstd alone (TestZstdHeldToSnappyRatio).
	zstdOnly, _ := writeSegment(t, compressibleEntries(12), WriterOptions{BlockSize: 128, Compression: ZstdCompression, BitsPerKey: 10})
	mixed := compressibleEntries(6)
	mixed[2].value = bytes.Repeat([]byte{'z'}, 2000)
	zstdMixed, _ := writeWithRangeDels(t, mixed, rd, WriterOptions{BlockSize: 256, Compression: ZstdCompression, BitsPerKey: 10})
	// Version 5: values stored apart, raw and compressed, beside values
	// kept in their blocks and tombstones; mapped too, below.
	apart, _ := writeSegment(t, es, WriterOptions{BlockSize: 32, RestartInterval: 2, SeparateValues: 3})
	apartPacked, _ := writeWithRangeDels(t, mixed, rd, WriterOptions{Compression: SnappyCompression, BitsPerKey: 10, SeparateValues: 10})
	// Version 6: raw data blocks moved to the next page by padding
	// (PageAlign), in a file of two pages.
	rng := rand.New(rand.NewPCG(41, 42))
	padded, _ := writeSegment(t, pageEntries(60, func(int) []byte { return randomBytes(rng, 120) }), WriterOptions{BlockSize: 1024, PageAlign: true})
	if v := binary.LittleEndian.Uint32(padded[len(padded)-footerLen+48:]); v != formatVersionPadding {
		t.Fatalf("padded seed of version %d", v)
	}
	return [][]byte{plain, packed, empty, prefixed, prefixSmall, withRangeDels, both, zstdOnly, zstdMixed, apart, apartPacked, padded}
}

func requireCorrupt(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("error %v is not ErrCorrupt", err)
	}
}

// fixChecksums recomputes the footer's checksum and, where the footer's
// handles allow, the metadata blocks' checksums, so that the fuzzer can
// reach the properties, index and filter decoders behind them.
func fixChecksums(data []byte) []byte {
	data = bytes.Clone(data)
	if len(data) < footerLen {
		return data
	}
	f := data[len(data)-footerLen:]
	binary.LittleEndian.PutUint32(f[52:], blockChecksum(f[:52]))
	for i := range 3 {
		off, n := binary.LittleEndian.Uint64(f[16*i:]), binary.LittleEndian.Uint64(f[16*i+8:])
		if off < uint64(len(data)) && n < uint64(len(data)) && off+n+blockTrailerLen <= uint64(len(data)) {
			end := off + n + 1
			binary.LittleEndian.PutUint32(data[end:], blockChecksum(data[off:end]))
		}
	}
	return data
}

// exercise reads everything a Reader offers; only corruption errors may
// come out.
func exercise(t *testing.T, r *Reader) {
	for range 2 { // the second pass reads blocks the first read and kept (indexEntry.layout)
		for _, k := range []string{"", "a", "abc", "b", "zz"} {
			_, _, _, err := r.Get([]byte(k), base.MaxSeq)
			requireCorrupt(t, err)
			r.MayContain(uint64(len(k)))
			r.mayContainPrefix(uint64(len(k)))
		}
	}
	it := r.NewIter(true)
	for ok := it.First(); ok; ok = it.Next() {
	}
	for ok := it.Last(); ok; ok = it.Prev() {
	}
	it.SeekGE([]byte("ab"))
	it.SeekLT([]byte("ab"))
	requireCorrupt(t, it.Close())
	requireCorrupt(t, r.Verify())
}

func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSegments(f) {
		f.Add(s)
	}
	f.Add([]byte(magic))
	// Small relatives of the hostile files (hostile_test.go), which lean
	// on the limits of FORMAT.md, "Limits a reader enforces".
	f.Add(hostileIndex(8, 1<<10, 1))
	f.Add(hostileIndex(8, 40, 4))
	f.Add(hostileProperties(8, 100))
	f.Add(hostileFilter(1 << 40))
	f.Add(longPrefixSegment(40, 100, true))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range [][]byte{data, fixChecksums(data)} {
			for _, m := range [][]byte{nil, d} { // with pread, and mapped
				r, err := Open(bytes.NewReader(d), int64(len(d)), ReaderOptions{Cache: NewCache(1 << 16), Name: "fuzz.seg", Mapped: m})
				requireCorrupt(t, err)
				if err == nil {
					checkIndexSize(t, r, len(d))
					exercise(t, r)
				}
			}
		}
	})
}

// checkIndexSize checks the bound that keeps an opened index small: its
// separators take at most maxSnappyLen of the file's size in all, however
// the index block's prefix compression amplifies them.
func checkIndexSize(t *testing.T, r *Reader, fileSize int) {
	t.Helper()
	total := uint64(0)
	for i := range r.index {
		e := &r.index[i]
		total += uint64(len(e.userKey) + base.TrailerLen)
	}
	if limit := uint64(fileSize) * 64 / 3; total > limit {
		t.Fatalf("index of %d separator bytes for a %d-byte file (limit %d)", total, fileSize, limit)
	}
}

// FuzzBlock feeds arbitrary bytes to the block decoder, validated or not:
// it must report corruption, never panic or loop.
func FuzzBlock(f *testing.F) {
	var w blockWriter
	w.restartInterval = 2
	for _, k := range []string{"apple\x00\x00\x00\x00\x00\x00\x00\x01", "apricot\x00\x00\x00\x00\x00\x00\x01\x01", "banana\x00\x00\x00\x00\x00\x00\x02\x01"} {
		w.add([]byte(k), []byte("v"))
	}
	f.Add(bytes.Clone(w.finish()))
	w.reset()
	f.Add(bytes.Clone(w.finish()))
	f.Add([]byte{1, 2, 3, 0, 0, 0, 0, 1, 0, 0, 0})
	// A data block with a hash index.
	w = blockWriter{restartInterval: 16, hashIndex: true}
	for _, k := range []string{"apple", "apricot", "banana", "cherry"} {
		w.add(append([]byte(k), 0, 0, 0, 0, 0, 0, 1, 1), bytes.Repeat([]byte("v"), 40))
		w.addHash(bloom.Hash([]byte(k)))
	}
	f.Add(bytes.Clone(w.finish()))
	// A data block of keys beside value handles, each its own restart
	// interval (restartApart), and one of three to an interval.
	for _, apart := range []bool{true, false} {
		w = blockWriter{restartInterval: 16, hashIndex: true, restartApart: apart}
		for i, k := range []string{"apple", "apricot", "banana", "cherry", "damson"} {
			h := appendValueHandle(nil, valueHandle{blockHandle{uint64(i) * 4101, 4096}, uint64(i)})
			w.addEntry(append([]byte(k), byte(kindValueHandle), 0, 0, 0, 0, 0, 0, 1), h, true)
			w.addHash(bloom.Hash([]byte(k)))
		}
		f.Add(bytes.Clone(w.finish()))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checked := checkBlock(data) == ""
		for _, internal := range []bool{false, true} {
			var it blockIter
			if err := it.init(data, internal, "fuzz", 0); err != nil {
				requireCorrupt(t, err)
				if checked {
					t.Fatal("checkBlock accepted a block init rejects")
				}
				return
			}
			var fwd [][2][]byte // the forward pass's keys and values
			for ok := it.first(); ok; ok = it.next() {
				// Entries take at least 3 bytes, keys at most maxKey:
				// the decoder's work is bounded by the block's bytes.
				if n := len(fwd) + 1; 3*n > len(data) || len(it.key) > it.maxKey {
					t.Fatalf("entry %d with a %d-byte key in a %d-byte block", n, len(it.key), len(data))
				}
				fwd = append(fwd, [2][]byte{bytes.Clone(it.key), it.val})
			}
			var bwd [][2][]byte
			for ok := it.last(); ok; ok = it.prev() {
				if 3*(len(bwd)+1) > len(data) {
					t.Fatalf("backward entry %d in a %d-byte block", len(bwd)+1, len(data))
				}
				bwd = append(bwd, [2][]byte{bytes.Clone(it.key), it.val})
			}
			requireCorrupt(t, it.err)
			// Where both passes find no damage, they read the same
			// entries, each to the byte.
			if checked && it.err == nil {
				if len(bwd) != len(fwd) {
					t.Fatalf("forward and backward passes disagree by %d entries", len(fwd)-len(bwd))
				}
				for i, e := range bwd {
					if f := fwd[len(fwd)-1-i]; !bytes.Equal(e[0], f[0]) || !bytes.Equal(e[1], f[1]) {
						t.Fatalf("entry %d: %q = %q backward, %q = %q forward", len(fwd)-1-i, e[0], e[1], f[0], f[1])
					}
				}
			}
			if internal {
				it.err = nil
				it.seekGE([]byte("apr"), maxTrailer)
				requireCorrupt(t, it.err)
				for _, k := range []string{"apr", "apricot", "banana"} {
					it.err = nil
					it.seekHash([]byte(k), bloom.Hash([]byte(k)), maxTrailer)
					requireCorrupt(t, it.err)
					it.err = nil
					it.seekUser([]byte(k))
					requireCorrupt(t, it.err)
				}
			}
		}
	})
}

func FuzzProperties(f *testing.F) {
	var w blockWriter
	w.restartInterval = 16
	f.Add(bytes.Clone(encodeProperties(&w, &Properties{Entries: 3, DistinctKeys: 2, Smallest: []byte("a"), Largest: []byte("b")})))
	f.Add(bytes.Clone(encodeProperties(&w, &Properties{Entries: 3, DistinctKeys: 2, RangeCovered: 1, Smallest: []byte("a"), Largest: []byte("b")})))
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := decodeProperties(data, "fuzz", 0)
		requireCorrupt(t, err)
		if err == nil {
			if reason := p.check(); reason != "" {
				t.Fatalf("accepted inconsistent properties: %s", reason)
			}
			again, err := decodeProperties(encodeProperties(&w, &p), "fuzz", 0)
			if err != nil || !equalProps(again, p) {
				t.Fatalf("re-encoding %+v gives %+v, %v", p, again, err)
			}
		}
	})
}

// FuzzValueHandle checks decodeValueHandle against three calls of
// binary.Uvarint that must consume the input exactly, and that what it
// accepts encodes back to a handle that decodes the same. A scan's
// decodeValueHandleAt must agree with it whatever bytes follow the
// handle in its block, and wherever in the block it starts.
func FuzzValueHandle(f *testing.F) {
	f.Add(appendValueHandle(nil, valueHandle{blockHandle{1 << 30, 4096}, 70000}))
	f.Add(appendValueHandle(nil, valueHandle{blockHandle{^uint64(0), ^uint64(0)}, ^uint64(0)}))
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 0, 0})       // past 64 bits
	f.Add(appendValueHandle(nil, valueHandle{blockHandle{1<<56 - 1, 1<<49 - 1}, 1 << 7})) // 8 + 7 + 2 bytes
	f.Add(appendValueHandle(nil, valueHandle{blockHandle{1 << 56, 0}, 0}))                // a 9-byte varint
	f.Add([]byte{0x81, 0x80, 0x00, 0x05, 0x06})                                           // an overlong varint
	f.Add([]byte{5, 6})                                                                   // two varints, not three
	f.Add([]byte{5, 6, 7, 8})                                                             // one byte too many
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := decodeValueHandle(b)
		var x [3]uint64
		rest, want := b, true
		for i := range x {
			v, n := binary.Uvarint(rest)
			if n <= 0 {
				want = false
				break
			}
			x[i], rest = v, rest[n:]
		}
		want = want && len(rest) == 0
		if ok != want || ok && h != (valueHandle{blockHandle{x[0], x[1]}, x[2]}) {
			t.Fatalf("decodeValueHandle(%x) = %+v, %v; binary.Uvarint: %v, %v", b, h, ok, x, want)
		}
		for _, pad := range [][]byte{make([]byte, 16), bytes.Repeat([]byte{0xff}, 16), bytes.Repeat(b, 16/max(len(b), 1)+1), nil} {
			for _, lead := range []int{0, 3} {
				data := append(append(make([]byte, lead), b...), pad...)
				if got, gotOK := decodeValueHandleAt(data, lead, data[lead:lead+len(b)]); gotOK != ok || ok && got != h {
					t.Fatalf("decodeValueHandleAt(%x, %d, %d) = %+v, %v; decodeValueHandle: %+v, %v", data, lead, len(b), got, gotOK, h, ok)
				}
			}
		}
		if ok {
			if again, ok := decodeValueHandle(appendValueHandle(nil, h)); !ok || again != h {
				t.Fatalf("round trip of %+v: %+v, %v", h, again, ok)
			}
		}
	})
}
