package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

// upToColon is a test extractor: the prefix runs up to and including the
// first ':'; a key without one has none.
func upToColon(key []byte) int { return bytes.IndexByte(key, ':') + 1 }

func prefixedEntries(prefixes, perPrefix int) []entry {
	var es []entry
	seq := uint64(1)
	for p := range prefixes {
		for k := range perPrefix {
			es = append(es, entry{key: fmt.Appendf(nil, "p%04d:%03d", p, k), seq: seq, kind: base.KindPut, value: []byte("v")})
			seq++
		}
	}
	es = append(es, entry{key: []byte("zzz-no-prefix"), seq: seq, kind: base.KindPut})
	return es
}

func TestPrefixFilterRoundTrip(t *testing.T) {
	es := prefixedEntries(300, 5)
	opts := WriterOptions{BlockSize: 512, Compression: SnappyCompression, BitsPerKey: 10, Prefix: upToColon, PrefixName: "colon"}
	data, props := writeSegment(t, es, opts)
	if props.PrefixExtractor != "colon" || props.PrefixFilterSize == 0 || props.FormatVersion != formatVersionHashIndex {
		t.Fatalf("writer's properties: extractor %q, prefix filter %d bytes, version %d", props.PrefixExtractor, props.PrefixFilterSize, props.FormatVersion)
	}
	for _, mapped := range []bool{false, true} {
		ro := ReaderOptions{Name: "p.seg", Prefix: upToColon, PrefixName: "colon"}
		if mapped {
			ro.Mapped = data
		}
		r := openSegment(t, data, ro)
		if got := r.Properties(); !equalProps(got, props) {
			t.Fatalf("reader's properties %+v, writer's %+v", got, props)
		}
		f, name := r.PrefixFilter()
		if f == nil || name != "colon" {
			t.Fatalf("PrefixFilter() = %v, %q", f, name)
		}
		for p := range 300 {
			if !r.mayContainPrefix(bloom.Hash(fmt.Appendf(nil, "p%04d:", p))) {
				t.Fatalf("prefix p%04d: missing from the prefix filter", p)
			}
		}
		passed := 0
		for p := 300; p < 10300; p++ {
			if r.mayContainPrefix(bloom.Hash(fmt.Appendf(nil, "p%04d:", p))) {
				passed++
			}
		}
		if passed > 300 { // 3%: the expected rate at 10 bits per prefix is about 1%
			t.Fatalf("%d of 10000 absent prefixes pass the prefix filter", passed)
		}
		if err := r.Verify(); err != nil {
			t.Fatalf("Verify: %v", err)
		}
		// Whole keys are not prefixes: the key filter holds those.
		if !r.MayContain(bloom.Hash([]byte("p0001:001"))) {
			t.Fatal("key filter misses a key")
		}
	}
}

// TestPrefixFilterNeedsBitsPerKey: without a key filter there is no
// prefix filter either, and the segment is written as before.
func TestPrefixFilterNeedsBitsPerKey(t *testing.T) {
	data, props := writeSegment(t, prefixedEntries(3, 2), WriterOptions{Prefix: upToColon, PrefixName: "colon"})
	r := openSegment(t, data, ReaderOptions{})
	if f, _ := r.PrefixFilter(); f != nil || props.PrefixFilterSize != 0 {
		t.Fatal("a prefix filter without BitsPerKey")
	}
	if !r.mayContainPrefix(bloom.Hash([]byte("nothing:"))) {
		t.Fatal("a segment without a prefix filter must say maybe")
	}
}

func TestPrefixFilterEmptySegment(t *testing.T) {
	data, props := writeSegment(t, nil, WriterOptions{BitsPerKey: 10, Prefix: upToColon, PrefixName: "colon"})
	r := openSegment(t, data, ReaderOptions{Prefix: upToColon, PrefixName: "colon"})
	if props.PrefixFilterSize == 0 || r.mayContainPrefix(bloom.Hash([]byte("a:"))) {
		t.Fatal("an empty segment's prefix filter should exist and say no")
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestPrefixFilterWriterRejectsUnnamed(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BitsPerKey: 10, Prefix: upToColon})
	if err := w.Add([]byte("a:1"), 1, base.KindPut, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(); err == nil {
		t.Fatal("Finish accepted a prefix extractor without a name")
	}
}

// TestVerifyDetectsPrefixFalseNegative: a segment whose prefix filter was
// built by another split than the one Verify is given (as if the filter
// had lost prefixes) is reported.
func TestVerifyDetectsPrefixFalseNegative(t *testing.T) {
	firstByte := func(key []byte) int { return min(1, len(key)) }
	data, _ := writeSegment(t, prefixedEntries(50, 2), WriterOptions{BitsPerKey: 10, Prefix: firstByte, PrefixName: "colon"})
	r := openSegment(t, data, ReaderOptions{Name: "pfn.seg", Prefix: upToColon, PrefixName: "colon"})
	err := r.Verify()
	var ce *base.CorruptError
	if !errors.As(err, &ce) || ce.File != "pfn.seg" || !strings.Contains(err.Error(), "prefix filter misses") {
		t.Fatalf("Verify = %v, want a corruption error about the prefix filter", err)
	}
	// With the split that built it, it is fine.
	r = openSegment(t, data, ReaderOptions{Name: "pfn.seg", Prefix: firstByte, PrefixName: "colon"})
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestV1GoldenOpens reads a segment written by the version-1 writer
// (testdata/v1-golden.seg: 200 keys user:NNNN:name at seqs 1000+N, every
// 17th a tombstone, 256-byte blocks, snappy, 10 bits per key).
func TestV1GoldenOpens(t *testing.T) {
	data, err := os.ReadFile("testdata/v1-golden.seg")
	if err != nil {
		t.Fatal(err)
	}
	r := openSegment(t, data, ReaderOptions{Name: "v1-golden.seg", Prefix: upToColon, PrefixName: "colon"})
	p := r.Properties()
	if p.FormatVersion != 1 || p.Entries != 200 || p.Tombstones != 12 || p.PrefixFilterSize != 0 {
		t.Fatalf("properties %+v", p)
	}
	if f, _ := r.PrefixFilter(); f != nil || !r.mayContainPrefix(bloom.Hash([]byte("none:"))) {
		t.Fatal("a version-1 segment has no prefix filter and must say maybe")
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
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckLayout drives the contiguity check of the optional blocks with
// hand-made footers and properties.
func TestCheckLayout(t *testing.T) {
	const data, filterLen, prefixLen = 1000, 100, 50
	filter := blockHandle{offset: data, length: filterLen}
	propsAt := filter.end() + prefixLen + blockTrailerLen
	for _, tc := range []struct {
		name      string
		version   uint32
		filter    blockHandle
		dataSize  uint64
		prefixLen uint64
		propsAt   uint64
		ok        bool
		wantAt    uint64 // the prefix block's offset when ok
	}{
		{"v2 filter+prefix", 2, filter, data, prefixLen, propsAt, true, filter.end()},
		{"v2 prefix only", 2, blockHandle{}, data, prefixLen, data + prefixLen + blockTrailerLen, true, data},
		{"v2 none", 2, filter, data, 0, filter.end(), true, 0},
		{"v1 filter", 1, filter, data, 0, filter.end(), true, 0},
		{"v1 with a prefix block", 1, filter, data, prefixLen, propsAt, false, 0},
		{"gap after prefix", 2, filter, data, prefixLen, propsAt + 1, false, 0},
		{"prefix overruns properties", 2, filter, data, prefixLen + 1, propsAt, false, 0},
		{"prefix without room for its trailer", 2, filter, data, prefixLen + 4, propsAt, false, 0},
		{"gap without a prefix block", 2, filter, data, 0, propsAt, false, 0},
		{"data size off the filter", 2, filter, data - 5, prefixLen, propsAt, false, 0},
		{"data size beyond properties", 2, blockHandle{}, propsAt + 1, 0, propsAt, false, 0},
		{"huge prefix length", 2, filter, data, ^uint64(0) - 2, propsAt, false, 0},
	} {
		r := &Reader{footer: footer{version: tc.version, filter: tc.filter, properties: blockHandle{offset: tc.propsAt, length: 10}}}
		r.props.DataSize, r.props.PrefixFilterSize = tc.dataSize, tc.prefixLen
		err := r.checkLayout()
		if (err == nil) != tc.ok {
			t.Errorf("%s: checkLayout = %v, want ok %v", tc.name, err, tc.ok)
			continue
		}
		if err != nil && !errors.Is(err, base.ErrCorrupt) {
			t.Errorf("%s: %v is not ErrCorrupt", tc.name, err)
		}
		if tc.ok && tc.prefixLen > 0 && r.prefix.h != (blockHandle{offset: tc.wantAt, length: tc.prefixLen}) {
			t.Errorf("%s: prefix block at %+v", tc.name, r.prefix.h)
		}
	}
}

// TestPrefixFilterDamage: a flipped byte in the prefix filter block is
// caught by its checksum when the segment opens.
func TestPrefixFilterDamage(t *testing.T) {
	data, props := writeSegment(t, prefixedEntries(20, 2), WriterOptions{BitsPerKey: 10, Prefix: upToColon, PrefixName: "colon"})
	r := openSegment(t, data, ReaderOptions{})
	off := r.prefix.h.offset + props.PrefixFilterSize/2
	bad := bytes.Clone(data)
	bad[off] ^= 1
	_, err := Open(bytes.NewReader(bad), int64(len(bad)), ReaderOptions{Name: "bad.seg"})
	var ce *base.CorruptError
	if !errors.As(err, &ce) || ce.Offset != int64(r.prefix.h.offset) {
		t.Fatalf("Open of a damaged prefix filter = %v, want corruption at %d", err, r.prefix.h.offset)
	}
}
