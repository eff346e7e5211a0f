package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

func sampleMeta() base.SegmentMeta {
	return base.SegmentMeta{
		FileNum: 42, Size: 1 << 20, Entries: 1000, Tombstones: 10,
		MinSeq: 5, MaxSeq: 900, Smallest: []byte("apple"), Largest: []byte("zebra"),
		FilterLayout: 1, FilterK: 7, FilterBits: 9600, Tier: 2,
	}
}

func TestSegmentMetaRoundTrip(t *testing.T) {
	tests := []base.SegmentMeta{
		sampleMeta(),
		{FileNum: 1},
		{FileNum: 7, Smallest: []byte("k"), Largest: []byte("k")},
		{FileNum: 7, Largest: []byte("only-largest")},
		{
			FileNum: math.MaxUint64 - 1, Size: math.MaxInt64, Entries: math.MaxUint64,
			Tombstones: math.MaxUint64, MinSeq: base.MaxSeq, MaxSeq: base.MaxSeq,
			Smallest: bytes.Repeat([]byte{0}, 300), Largest: bytes.Repeat([]byte{0xff}, maxKeyLen),
			FilterLayout: 255, FilterK: 255, FilterBits: math.MaxUint64, Tier: math.MaxUint32,
		},
	}
	for _, want := range tests {
		enc := encodeSegmentMeta(want)
		got, err := decodeSegmentMeta(enc)
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", want, err)
		}
		if !sameMeta(got, want) {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
	}
}

// sameMeta compares metas treating nil and empty keys alike.
func sameMeta(a, b base.SegmentMeta) bool {
	if !bytes.Equal(a.Smallest, b.Smallest) || !bytes.Equal(a.Largest, b.Largest) {
		return false
	}
	a.Smallest, a.Largest, b.Smallest, b.Largest = nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// TestSegmentMetaLayout pins the byte layout documented in FORMAT.md.
func TestSegmentMetaLayout(t *testing.T) {
	m := base.SegmentMeta{
		FileNum: 300, Size: 5, Entries: 4, Tombstones: 1, MinSeq: 2, MaxSeq: 3,
		Smallest: []byte("a"), Largest: []byte("bc"), FilterLayout: 1, FilterK: 6, FilterBits: 128, Tier: 9,
	}
	body := []byte{
		1,          // version
		0xac, 0x02, // file number 300
		5, 4, 1, 2, 3, // size, entries, tombstones, min seq, max seq
		1, 'a', // smallest
		2, 'b', 'c', // largest
		1, 6, // filter layout, k
		0x80, 0x01, // filter bits 128
		9, // tier
	}
	want := binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	if got := encodeSegmentMeta(m); !bytes.Equal(got, want) {
		t.Fatalf("encoding:\n got %x\nwant %x", got, want)
	}
}

// withCRC returns body followed by its correct CRC-32C trailer, to build
// inputs that get past the checksum and exercise the field checks.
func withCRC(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))
}

func TestDecodeSegmentMetaRejects(t *testing.T) {
	good := encodeSegmentMeta(sampleMeta())
	goodBody := good[:len(good)-crcLen]
	tests := []struct {
		name, want string // want: part of the error message
		in         []byte
	}{
		{"empty", "too short", nil},
		{"short", "too short", []byte{1, 0, 0, 0}},
		{"version 2", "unknown version", append([]byte{2}, good[1:]...)},
		{"version 0", "unknown version", withCRC(append([]byte{0}, goodBody[1:]...))},
		{"bad crc", "checksum", append(bytes.Clone(goodBody), 0, 0, 0, 0)},
		{"trailing byte", "trailing", withCRC(append(bytes.Clone(goodBody), 0))},
		{"truncated body", "truncated", withCRC(goodBody[:len(goodBody)-1])},
		{"non-minimal uvarint", "non-minimal", withCRC([]byte{1, 0x81, 0x00})},
		{"uvarint overflow", "overflows", withCRC([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})},
		{"size over int64", "exceeds 9223372036854775807", withCRC(binary.AppendUvarint([]byte{1, 1}, math.MaxUint64))},
		{"key length past end", "remaining bytes", withCRC([]byte{1, 1, 0, 0, 0, 0, 0, 100, 'a'})},
		{"key length over max", fmt.Sprint("exceeds ", maxKeyLen), withCRC(binary.AppendUvarint([]byte{1, 1, 0, 0, 0, 0, 0}, maxKeyLen+1))},
		{"tier over uint32", "exceeds 4294967295", withCRC(binary.AppendUvarint([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, math.MaxUint32+1))},
		{"file number 0", "reserved", encodeSegmentMeta(base.SegmentMeta{})},
		{"min seq > max seq", "min seq", encodeSegmentMeta(base.SegmentMeta{FileNum: 1, MinSeq: 2, MaxSeq: 1})},
		{"tombstones > entries", "tombstones", encodeSegmentMeta(base.SegmentMeta{FileNum: 1, Tombstones: 1})},
		{"smallest > largest", "smallest key", encodeSegmentMeta(base.SegmentMeta{FileNum: 1, Smallest: []byte("b"), Largest: []byte("a")})},
		{"max seq over 56 bits", "56 bits", encodeSegmentMeta(base.SegmentMeta{FileNum: 1, MaxSeq: base.MaxSeq + 1})},
		{"negative size", "exceeds 9223372036854775807", encodeSegmentMeta(base.SegmentMeta{FileNum: 1, Size: -1})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeSegmentMeta(tt.in)
			var ce *base.CorruptError
			if !errors.As(err, &ce) || !strings.Contains(ce.Reason, tt.want) {
				t.Fatalf("got %v, want a *base.CorruptError saying %q", err, tt.want)
			}
		})
	}
}

// TestDecodeSegmentMetaDamage checks that every truncation and every single
// bit flip of a valid encoding is detected.
func TestDecodeSegmentMetaDamage(t *testing.T) {
	good := encodeSegmentMeta(sampleMeta())
	for n := range len(good) {
		if _, err := decodeSegmentMeta(good[:n]); !errors.Is(err, base.ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: got %v", n, err)
		}
	}
	for i := range len(good) * 8 {
		b := bytes.Clone(good)
		b[i/8] ^= 1 << (i % 8)
		if _, err := decodeSegmentMeta(b); !errors.Is(err, base.ErrCorrupt) {
			t.Fatalf("bit %d flipped: got %v", i, err)
		}
	}
}

func TestDecodeSegmentMetaDoesNotAlias(t *testing.T) {
	enc := encodeSegmentMeta(sampleMeta())
	got, err := decodeSegmentMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	clear(enc)
	if !sameMeta(got, sampleMeta()) {
		t.Fatalf("decoded meta changed with its input: %+v", got)
	}
	// Appending to Smallest must not overwrite Largest, which shares its
	// allocation.
	_ = append(got.Smallest, "XXXXX"...)
	if string(got.Largest) != "zebra" {
		t.Fatalf("Largest = %q after appending to Smallest", got.Largest)
	}
}

func TestDecodeSegmentMetaRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		want := randomMeta(rng, rng.Uint64N(1<<40)+1)
		got, err := decodeSegmentMeta(encodeSegmentMeta(want))
		if err != nil || !sameMeta(got, want) {
			t.Fatalf("round trip of %+v: got %+v, %v", want, got, err)
		}
	}
}

// randomMeta returns a valid SegmentMeta with file number fn.
func randomMeta(rng *rand.Rand, fn uint64) base.SegmentMeta {
	minSeq := rng.Uint64N(1 << 30)
	maxSeq := minSeq + rng.Uint64N(1<<20)
	entries := rng.Uint64N(1 << 20)
	k1, k2 := randomKey(rng), randomKey(rng)
	if bytes.Compare(k1, k2) > 0 {
		k1, k2 = k2, k1
	}
	return base.SegmentMeta{
		FileNum: fn, Size: rng.Int64N(1 << 32), Entries: entries, Tombstones: rng.Uint64N(entries + 1),
		MinSeq: minSeq, MaxSeq: maxSeq, Smallest: k1, Largest: k2,
		FilterLayout: uint8(rng.UintN(3)), FilterK: uint8(rng.UintN(20)), FilterBits: rng.Uint64N(1 << 24),
		Tier: rng.Uint32N(8),
	}
}

func randomKey(rng *rand.Rand) []byte {
	k := make([]byte, rng.IntN(24))
	for i := range k {
		k[i] = byte(rng.UintN(256))
	}
	return k
}

func FuzzDecodeSegmentMeta(f *testing.F) {
	f.Add(encodeSegmentMeta(sampleMeta()))
	f.Add(encodeSegmentMeta(base.SegmentMeta{FileNum: 1}))
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 100, 'a', 0, 0, 0, 0})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 1, 'a', 1, 'b', 1, 7, 0x80, 0x01, 0}) // valid once a CRC is appended
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
		// Random bytes almost never carry a valid checksum, so also try b
		// with one to reach the field checks behind it.
		checkDecode(t, withCRC(b))
	})
}

func checkDecode(t *testing.T, b []byte) {
	m, err := decodeSegmentMeta(b)
	if err != nil {
		if !errors.Is(err, base.ErrCorrupt) {
			t.Fatalf("error %v does not match base.ErrCorrupt", err)
		}
		return
	}
	if err := checkSegment(&m); err != nil {
		t.Fatalf("decoded an invalid meta: %v", err)
	}
	// Encodings are canonical, so anything accepted re-encodes to exactly
	// the input.
	if enc := encodeSegmentMeta(m); !bytes.Equal(enc, b) {
		t.Fatalf("re-encoding differs:\n got %x\nwant %x", enc, b)
	}
}

func BenchmarkEncodeSegmentMeta(b *testing.B) {
	m := sampleMeta()
	b.ReportAllocs()
	for b.Loop() {
		encodeSegmentMeta(m)
	}
}

func BenchmarkDecodeSegmentMeta(b *testing.B) {
	enc := encodeSegmentMeta(sampleMeta())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeSegmentMeta(enc); err != nil {
			b.Fatal(err)
		}
	}
}
