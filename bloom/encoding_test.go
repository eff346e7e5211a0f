package bloom

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// encodeSpec builds an encoding from FORMAT.md alone — header fields, bits
// from specProbes, CRC-32C — without the package's encoder, so the golden
// files, the spec and the code are checked against each other.
func encodeSpec(g Geometry, reserved byte, keys []string) []byte {
	body := make([]byte, g.Bits/8)
	for _, k := range keys {
		for _, p := range specProbes(g, HashSeed([]byte(k), g.Seed)) {
			body[p/8] |= 1 << (p % 8)
		}
	}
	return forge("bkvf", 1, byte(g.Layout), byte(g.K), reserved, g.Bits, g.Seed, uint64(len(keys)), body)
}

// forge assembles an encoding from raw field values and appends a valid
// CRC-32C, so that tests reach the checks behind the checksum.
func forge(magic string, version, layout, k, reserved byte, bits, seed, count uint64, body []byte) []byte {
	b := append([]byte(magic), version, layout, k, reserved)
	b = binary.LittleEndian.AppendUint64(b, bits)
	b = binary.LittleEndian.AppendUint64(b, seed)
	b = binary.LittleEndian.AppendUint64(b, count)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// goldenKeys and goldenFiles are the filters stored in testdata: a change
// of the encoding, the hash or the probe derivation breaks them.
var goldenKeys = []string{"apple", "banana", "cherry"}

var goldenFiles = map[string]Geometry{
	"golden-v1-blocked.bin": {Layout: Blocked, Bits: 1024, K: 3},
	"golden-v1-classic.bin": {Layout: Classic, Bits: 128, K: 2, Seed: 5},
}

// TestFormatWorkedExample checks the intermediate values of FORMAT.md's
// Classic example — each key's hash and h2 — and the Blocked example's x:
// the golden files alone, at 128 and 1024 bits, do not see a change to
// the low bits of h2, which moves a probe only in a large filter.
func TestFormatWorkedExample(t *testing.T) {
	for _, tc := range []struct {
		key    string
		h, h2  uint64
		probes []uint64
	}{
		{"apple", 0x9bda87acf7d7b741, 0xc67128fd0323e495, []uint64{77, 49}},
		{"banana", 0xb7b71abba2e49a78, 0xc8ec1a486c00c985, []uint64{91, 64}},
		{"cherry", 0x11422e1a89b31419, 0x770f336f8538feb3, []uint64{8, 68}},
	} {
		h := HashSeed([]byte(tc.key), 5)
		if h != tc.h || remix(h) != tc.h2 {
			t.Errorf("%s: h %#x h2 %#x, FORMAT.md says %#x %#x", tc.key, h, remix(h), tc.h, tc.h2)
		}
		g := goldenFiles["golden-v1-classic.bin"]
		if got := g.probes(h, nil); !slicesEqual(got, tc.probes) {
			t.Errorf("%s: Classic positions %v, FORMAT.md says %v", tc.key, got, tc.probes)
		}
	}
	if x := uint32(HashSeed([]byte("apple"), 0)); x != 0x5c94729f {
		t.Errorf("apple: Blocked x %#x, FORMAT.md says 0x5c94729f", x)
	}
	// The three keys' t happen to be odd already; h2 = t | 1 must be odd
	// for every hash, as FORMAT.md's formula makes it.
	rng := rand.New(rand.NewPCG(3, 3))
	for range 1000 {
		h := rng.Uint64()
		t1 := h ^ h>>33
		t1 *= 0xff51afd7ed558ccd
		t1 ^= t1 >> 33
		if remix(h) != t1|1 {
			t.Fatalf("h %#x: h2 %#x, FORMAT.md gives %#x", h, remix(h), t1|1)
		}
	}
}

func TestGoldenEncodings(t *testing.T) {
	for name, g := range goldenFiles {
		golden, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if spec := encodeSpec(g, 0, goldenKeys); !bytes.Equal(spec, golden) {
			t.Errorf("%s: FORMAT.md gives\n%x\nwant\n%x", name, spec, golden)
		}
		f := mustGeometry(t, g)
		for _, k := range goldenKeys {
			f.Add([]byte(k))
		}
		if enc, _ := f.MarshalBinary(); !bytes.Equal(enc, golden) {
			t.Errorf("%s: MarshalBinary gives\n%x\nwant\n%x", name, enc, golden)
		}
		d, err := Decode(golden)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameBits(t, name, d, f)
	}
}

func TestEncodingRoundTrip(t *testing.T) {
	for _, g := range testGeometries {
		f := buildFilter(t, g, testKeys(0, 500))
		data, err := f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != EncodedLen(g) {
			t.Errorf("%+v: encoded %d bytes, EncodedLen says %d", g, len(data), EncodedLen(g))
		}
		if data[4] != FormatVersion {
			t.Errorf("%+v: version byte %d, want %d", g, data[4], FormatVersion)
		}
		d, err := Decode(data)
		if err != nil {
			t.Fatalf("%+v: Decode: %v", g, err)
		}
		sameBits(t, "decoded", d, f)
		var u Filter
		if err := u.UnmarshalBinary(data); err != nil {
			t.Fatalf("%+v: UnmarshalBinary: %v", g, err)
		}
		sameBits(t, "unmarshaled", &u, f)
		if d.Count() != 500 || u.Count() != 500 {
			t.Errorf("%+v: counts %d and %d after decoding, want 500", g, d.Count(), u.Count())
		}
		if again := d.AppendBinary(nil); !bytes.Equal(again, data) {
			t.Errorf("%+v: re-encoding a decoded filter changed it", g)
		}
		if app := f.AppendBinary([]byte("prefix")); !bytes.Equal(app, append([]byte("prefix"), data...)) {
			t.Errorf("%+v: AppendBinary after a prefix differs from prefix + MarshalBinary", g)
		}
	}
}

func TestDecodeAliasesInput(t *testing.T) {
	f := buildFilter(t, GeometryFor(Blocked, 10_000, 10), testKeys(0, 10_000))
	data, _ := f.MarshalBinary()
	d, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if &d.bits[0] != &data[headerLen] || len(d.bits) != len(data)-headerLen-trailerLen {
		t.Fatal("Decode copied the bit array")
	}
	if cap(d.bits) != len(d.bits) {
		t.Error("decoded bit array has spare capacity over the checksum")
	}
	// Zero-copy means one allocation (the Filter), whatever the size.
	if n := testing.AllocsPerRun(50, func() { Decode(data) }); n > 1 {
		t.Errorf("Decode of a %d-byte filter: %v allocations, want ≤ 1", len(data), n)
	}
	// Writes through the decoded filter land in the input.
	k := []byte("absent key")
	for i := byte(0); d.Contains(k); i++ {
		k = append(k[:len(k)-1], i)
	}
	before := bytes.Clone(data)
	d.Add(k)
	if bytes.Equal(data, before) {
		t.Error("Add on a decoded filter did not write into the input")
	}
}

func TestUnmarshalBinaryCopies(t *testing.T) {
	f := buildFilter(t, GeometryFor(Classic, 100, 10), testKeys(0, 100))
	data, _ := f.MarshalBinary()
	var u Filter
	if err := u.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	clear(data)
	sameBits(t, "unmarshaled filter after clearing the input", &u, f)

	// On error the receiver is unchanged.
	before := clone(&u)
	if err := u.UnmarshalBinary([]byte("bkvf")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("UnmarshalBinary of 4 bytes: %v", err)
	}
	sameBits(t, "after failed UnmarshalBinary", &u, before)
}

func TestDecodeTruncated(t *testing.T) {
	for _, g := range []Geometry{{Layout: Blocked, Bits: 1024, K: 4}, {Layout: Classic, Bits: 192, K: 3, Seed: 8}} {
		data, _ := buildFilter(t, g, testKeys(0, 20)).MarshalBinary()
		for n := range len(data) {
			if f, err := Decode(data[:n]); !errors.Is(err, ErrCorrupt) || f != nil {
				t.Errorf("%s, %d of %d bytes: Decode = %v, %v; want ErrCorrupt", g.Layout, n, len(data), f, err)
			}
		}
		for _, extra := range [][]byte{{0}, make([]byte, 8), make([]byte, 64)} {
			if _, err := Decode(append(bytes.Clone(data), extra...)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s with %d trailing bytes: %v, want ErrCorrupt", g.Layout, len(extra), err)
			}
		}
	}
}

func TestDecodeByteFlips(t *testing.T) {
	for _, g := range []Geometry{{Layout: Blocked, Bits: 512, K: 4}, {Layout: Classic, Bits: 128, K: 3, Seed: 8}} {
		data, _ := buildFilter(t, g, testKeys(0, 20)).MarshalBinary()
		for i := range data {
			for _, mask := range []byte{0x01, 0x10, 0x80, 0xff} {
				bad := bytes.Clone(data)
				bad[i] ^= mask
				if f, err := Decode(bad); !errors.Is(err, ErrCorrupt) || f != nil {
					t.Errorf("%s, byte %d ^ %#x: Decode = %v, %v; want ErrCorrupt", g.Layout, i, mask, f, err)
				}
			}
		}
	}
}

// TestDecodeInvalidHeaders forges headers with a valid checksum, so each
// must be refused by a validation rule of FORMAT.md, not by the CRC.
func TestDecodeInvalidHeaders(t *testing.T) {
	body := make([]byte, 64)
	tests := []struct {
		name string
		data []byte
	}{
		{"magic", forge("bkvF", 1, 1, 3, 0, 512, 0, 0, body)},
		{"version 0", forge("bkvf", 0, 1, 3, 0, 512, 0, 0, body)},
		{"version 2", forge("bkvf", 2, 1, 3, 0, 512, 0, 0, body)},
		{"layout 0", forge("bkvf", 1, 0, 3, 0, 512, 0, 0, body)},
		{"layout 3", forge("bkvf", 1, 3, 3, 0, 512, 0, 0, body)},
		{"k 0", forge("bkvf", 1, 1, 0, 0, 512, 0, 0, body)},
		{"k 33", forge("bkvf", 1, 1, 33, 0, 512, 0, 0, body)},
		{"k 255", forge("bkvf", 1, 2, 255, 0, 512, 0, 0, body)},
		{"reserved", forge("bkvf", 1, 1, 3, 1, 512, 0, 0, body)},
		{"bits 0", forge("bkvf", 1, 2, 3, 0, 0, 0, 0, nil)},
		{"blocked bits not a multiple of 512", forge("bkvf", 1, 1, 3, 0, 64, 0, 0, body[:8])},
		{"classic bits not a multiple of 64", forge("bkvf", 1, 2, 3, 0, 8, 0, 0, body[:1])},
		{"bits over MaxBits", forge("bkvf", 1, 2, 3, 0, MaxBits+64, 0, 0, body)},
		{"bits 2^63", forge("bkvf", 1, 2, 3, 0, 1<<63, 0, 0, body)},
		{"bits 2^64-512", forge("bkvf", 1, 1, 3, 0, math.MaxUint64-511, 0, 0, body)},
		{"bits larger than the body", forge("bkvf", 1, 1, 3, 0, 1024, 0, 0, body)},
		{"bits smaller than the body", forge("bkvf", 1, 2, 3, 0, 448, 0, 0, body)},
		{"bits MaxBits, body small", forge("bkvf", 1, 1, 3, 0, MaxBits, 0, 0, body)},
	}
	// The forger itself must produce valid encodings when fields are valid.
	if _, err := Decode(forge("bkvf", 1, 1, 3, 0, 512, 7, 9, body)); err != nil {
		t.Fatalf("forged valid encoding: %v", err)
	}
	for _, tt := range tests {
		if f, err := Decode(tt.data); f != nil {
			t.Errorf("%s: decoded as %+v, want ErrCorrupt", tt.name, f.Geometry())
		} else if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v, want ErrCorrupt", tt.name, err)
		}
	}
}

// TestDecodeHostileSizeAllocatesNothing: a header claiming 32 GiB of bits
// in a 36-byte input is refused from the lengths alone. The error message
// itself allocates a few small objects; what must not happen is an
// allocation sized by the header, so allocated bytes are measured.
func TestDecodeHostileSizeAllocatesNothing(t *testing.T) {
	data := forge("bkvf", 1, 1, 7, 0, MaxBits, 0, 1<<40, nil)
	if _, err := Decode(data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode: %v, want ErrCorrupt", err)
	}
	const runs = 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		Decode(data)
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	allocs := testing.AllocsPerRun(runs, func() { Decode(data) })
	t.Logf("hostile header: %d bytes in %v allocations per Decode (error formatting)", perRun, allocs)
	if perRun > 512 {
		t.Errorf("Decode of a hostile header allocated %d bytes per call", perRun)
	}
}

func FuzzDecode(f *testing.F) {
	for name, g := range goldenFiles {
		golden, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(golden)
		f.Add(encodeSpec(g, 0, nil))
	}
	for _, g := range testGeometries[:3] {
		data, _ := buildFilter(f, g, testKeys(0, 30)).MarshalBinary()
		f.Add(data)
		f.Add(data[:len(data)/2])
	}
	f.Add([]byte{})
	f.Add([]byte("bkvf"))
	f.Add(forge("bkvf", 1, 1, 7, 0, MaxBits, 0, 0, nil))

	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		// Most mutations only break the checksum; decoding again with a
		// repaired checksum lets the fuzzer reach the checks behind it.
		if len(data) >= trailerLen {
			fixed := bytes.Clone(data)
			end := len(fixed) - trailerLen
			binary.LittleEndian.PutUint32(fixed[end:], crc32.Checksum(fixed[:end], castagnoli))
			checkDecode(t, fixed)
		}
	})
}

// checkDecode decodes data and checks what a successful decode promises.
func checkDecode(t *testing.T, data []byte) {
	f, err := Decode(data)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) || f != nil {
			t.Fatalf("Decode = %v, %v; want nil and ErrCorrupt", f, err)
		}
		return
	}
	if enc, _ := f.MarshalBinary(); !bytes.Equal(enc, data) {
		t.Fatalf("re-encoding differs from the decoded input:\n%x\n%x", enc, data)
	}
	for _, k := range [][]byte{nil, []byte("a"), data} {
		f.Contains(k)
	}
	for h := range uint64(64) {
		f.ContainsHash(h * 0x9e3779b97f4a7c15)
	}
	f.EstimatedCount()
	f.EstimatedFPR()
	f.TheoreticalFPR()
	var u Filter
	if err := u.UnmarshalBinary(data); err != nil {
		t.Fatalf("Decode succeeded, UnmarshalBinary failed: %v", err)
	}
}
