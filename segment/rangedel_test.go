package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// randomRangeDels returns a fragmented list of up to n tombstones over the
// keys of randomEntries, with sequence numbers from seq up.
func randomRangeDels(rng *rand.Rand, n int, seq uint64) *rangedel.List {
	ts := make([]rangedel.Tombstone, n)
	for i := range ts {
		a, b := rng.IntN(500), rng.IntN(500)
		ts[i] = rangedel.Tombstone{
			Start: fmt.Appendf(nil, "key%06d", min(a, b)),
			End:   fmt.Appendf(nil, "key%06d", max(a, b)+1),
			Seq:   seq + uint64(i),
		}
	}
	return rangedel.Build(ts)
}

// writeWithRangeDels writes es and rd as one segment.
func writeWithRangeDels(t testing.TB, es []entry, rd *rangedel.List, opts WriterOptions) ([]byte, Properties) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for _, e := range es {
		if err := w.Add(e.key, e.seq, e.kind, e.value); err != nil {
			t.Fatal(err)
		}
	}
	w.SetRangeDels(rd)
	props, err := w.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return buf.Bytes(), props
}

func TestRangeDelsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 20 {
		es := randomEntries(rng, rng.IntN(300), 500)
		rd := randomRangeDels(rng, 1+rng.IntN(30), 1<<20)
		data, props := writeWithRangeDels(t, es, rd, WriterOptions{BlockSize: 256, Compression: allCompressions[trial%3], BitsPerKey: 10})
		if props.RangeDels != uint64(rd.Len()) || props.MaxSeq < 1<<20 {
			t.Fatalf("properties %+v for %d range tombstones from seq %d", props, rd.Len(), 1<<20)
		}
		for _, mapped := range []bool{false, true} {
			opts := ReaderOptions{Name: "rd.seg"}
			if mapped {
				opts.Mapped = data
			}
			r := openSegment(t, data, opts)
			if got := r.RangeDels(); !reflect.DeepEqual(got.Fragments(), rd.Fragments()) {
				t.Fatalf("trial %d: read %v, wrote %v", trial, got.Tombstones(), rd.Tombstones())
			}
			if got := r.Properties(); !equalProps(got, props) || got.FormatVersion != props.FormatVersion {
				t.Fatalf("trial %d: properties %+v, want %+v", trial, got, props)
			}
			if err := r.Verify(); err != nil {
				t.Fatalf("trial %d: Verify: %v", trial, err)
			}
			for _, e := range es {
				checkGet(t, r, es, e.key, base.MaxSeq)
			}
		}
	}
}

// TestRangeDelsOnly: a segment can hold range tombstones and no entry (a
// flushed memtable that only deleted ranges).
func TestRangeDelsOnly(t *testing.T) {
	rd := rangedel.Build([]rangedel.Tombstone{{Start: []byte("a"), End: []byte("m"), Seq: 7}})
	data, props := writeWithRangeDels(t, nil, rd, WriterOptions{BitsPerKey: 10})
	r := openSegment(t, data, ReaderOptions{Name: "rd.seg"})
	if props.Entries != 0 || props.RangeDels != 1 || props.MinSeq != 7 || props.MaxSeq != 7 || r.RangeDels().Covering([]byte("c"), 10) != 7 {
		t.Fatalf("properties %+v, tombstones %v", props, r.RangeDels().Tombstones())
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
}

// setVersion rewrites the footer's format version (and its checksum).
func setVersion(data []byte, v uint32) []byte {
	data = bytes.Clone(data)
	f := data[len(data)-footerLen:]
	binary.LittleEndian.PutUint32(f[48:], v)
	binary.LittleEndian.PutUint32(f[52:], blockChecksum(f[:52]))
	return data
}

// TestVersion1StillOpens: a version-1 file is a version-2 file without the
// optional blocks; one that claims them is corrupt, and a version from the
// future is refused.
func TestVersion1StillOpens(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	es := randomEntries(rng, 200, 500)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 256, BitsPerKey: 10, NoHashIndex: true})
	r := openSegment(t, setVersion(data, 1), ReaderOptions{Name: "v1.seg"})
	if r.Properties().FormatVersion != 1 || !r.RangeDels().Empty() {
		t.Fatalf("version %d, %d range tombstones", r.Properties().FormatVersion, r.RangeDels().Len())
	}
	for _, e := range es {
		checkGet(t, r, es, e.key, base.MaxSeq)
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}

	withRD, _ := writeWithRangeDels(t, es, randomRangeDels(rng, 5, 1<<20), WriterOptions{BitsPerKey: 10})
	for _, v := range []uint32{1, FormatVersion + 1, 0} {
		_, err := Open(bytes.NewReader(setVersion(withRD, v)), int64(len(withRD)), ReaderOptions{Name: "v.seg"})
		var ce *base.CorruptError
		if !errors.As(err, &ce) || ce.File != "v.seg" {
			t.Errorf("version %d with a range-deletion block: %v, want a CorruptError naming v.seg", v, err)
		}
	}
}

// TestRangeDelBlockDamage flips every byte of the range-deletion block and
// its trailer: Open must fail with a CorruptError at the block's offset —
// a damaged tombstone that opened would delete the wrong keys, or none.
func TestRangeDelBlockDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	data, _ := writeWithRangeDels(t, randomEntries(rng, 50, 500), randomRangeDels(rng, 8, 1<<20), WriterOptions{BitsPerKey: 10})
	r := openSegment(t, data, ReaderOptions{Name: "rd.seg"})
	h := r.rangeDelBlock
	if h.length == 0 {
		t.Fatal("no range-deletion block written")
	}
	for off := h.offset; off < h.end(); off++ {
		bad := bytes.Clone(data)
		bad[off] ^= 0x10
		_, err := Open(bytes.NewReader(bad), int64(len(bad)), ReaderOptions{Name: "rd.seg"})
		var ce *base.CorruptError
		if !errors.As(err, &ce) || ce.File != "rd.seg" || ce.Offset != int64(h.offset) {
			t.Fatalf("byte %d of the block flipped: %v, want a CorruptError at offset %d", off-h.offset, err, h.offset)
		}
	}
}

// TestDecodeRangeDelsRejects builds blocks a writer never writes and checks
// each is refused for its reason.
func TestDecodeRangeDelsRejects(t *testing.T) {
	type rec struct {
		start, end string
		seq        uint64
		kind       base.Kind
	}
	build := func(recs ...rec) []byte {
		var bw blockWriter
		bw.restartInterval = 16
		for _, r := range recs {
			bw.add(appendInternalKey(nil, []byte(r.start), base.MakeTrailer(r.seq, r.kind)), []byte(r.end))
		}
		return bytes.Clone(bw.finish())
	}
	rd := base.KindRangeDelete
	tests := []struct {
		name  string
		block []byte
		count uint64
	}{
		{"point kind", build(rec{"a", "b", 5, base.KindPut}), 1},
		{"empty range", build(rec{"b", "b", 5, rd}), 1},
		{"reversed range", build(rec{"c", "b", 5, rd}), 1},
		{"seq out of range", build(rec{"a", "b", 500, rd}), 1},
		{"two ends for one start", build(rec{"a", "b", 6, rd}, rec{"a", "c", 5, rd}), 2},
		{"overlapping fragments", build(rec{"a", "c", 6, rd}, rec{"b", "d", 5, rd}), 2},
		{"count disagrees", build(rec{"a", "b", 6, rd}), 2},
		{"not a block", []byte{1, 2, 3}, 1},
	}
	for _, tc := range tests {
		p := &Properties{RangeDels: tc.count, MinSeq: 1, MaxSeq: 100}
		if _, err := decodeRangeDels(tc.block, p, "x.seg", 42); !errors.Is(err, base.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		}
	}
	good := build(rec{"a", "c", 6, rd}, rec{"a", "c", 5, rd}, rec{"c", "d", 5, rd})
	l, err := decodeRangeDels(good, &Properties{RangeDels: 3, MinSeq: 1, MaxSeq: 100}, "x.seg", 0)
	if err != nil || l.Covering([]byte("b"), 100) != 6 || l.Covering([]byte("c"), 100) != 5 {
		t.Fatalf("a valid block: %v, %v", l.Tombstones(), err)
	}
}

// FuzzRangeDels feeds arbitrary blocks to the range-deletion decoder: it
// reports corruption or returns a list that is fragmented as a List must
// be, and encodes back to a block that decodes to the same list.
func FuzzRangeDels(f *testing.F) {
	var bw blockWriter
	bw.restartInterval = 2
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 3, 12} {
		f.Add(bytes.Clone(encodeRangeDels(&bw, randomRangeDels(rng, n, 10))), uint8(n))
	}
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, count uint8) {
		p := &Properties{RangeDels: uint64(count), MinSeq: 0, MaxSeq: base.MaxSeq}
		l, err := decodeRangeDels(data, p, "fuzz", 0)
		requireCorrupt(t, err)
		if err != nil {
			return
		}
		frags := l.Fragments()
		for i, fr := range frags {
			if bytes.Compare(fr.Start, fr.End) >= 0 || (i > 0 && bytes.Compare(frags[i-1].End, fr.Start) > 0) {
				t.Fatalf("decoded fragments out of order: %v", l.Tombstones())
			}
		}
		again, err := decodeRangeDels(encodeRangeDels(&bw, l), p, "fuzz", 0)
		if err != nil || !reflect.DeepEqual(again.Fragments(), frags) {
			t.Fatalf("re-encoding gives %v, %v", again.Tombstones(), err)
		}
	})
}
