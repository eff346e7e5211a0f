package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/invariants"
)

// largeEntries is randomEntries with values of 0 to 3,000 bytes, so that
// a threshold separates some values and keeps others in their blocks.
func largeEntries(rng *rand.Rand, n, keySpace int) []entry {
	es := randomEntries(rng, n, keySpace)
	for i := range es {
		if es[i].kind == base.KindPut && rng.IntN(2) == 0 {
			v := make([]byte, rng.IntN(3000))
			for j := range v {
				v[j] = byte(rng.UintN(256))
				if rng.IntN(3) == 0 {
					v[j] = 'x' // snappy shrinks some of them
				}
			}
			es[i].value = v
		}
	}
	return es
}

// separated counts the puts whose value a writer with threshold stores
// apart.
func separated(es []entry, threshold int) (n uint64) {
	for _, e := range es {
		if e.kind == base.KindPut && threshold > 0 && len(e.value) >= threshold {
			n++
		}
	}
	return n
}

// TestValueRecords writes segments whose large values are stored apart
// and reads them every way: Get at random snapshots, forward and backward
// scans, seeks, Verify; mapped and not, with and without compression. The
// answers must be those of the model, and the properties and format
// version must say what was written.
func TestValueRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, threshold := range []int{0, 1, 100, 2000} {
		for _, c := range []Compression{NoCompression, SnappyCompression} {
			t.Run(fmt.Sprintf("apart>=%d/%v", threshold, c), func(t *testing.T) {
				es := largeEntries(rng, 1200, 300)
				data, props := writeSegment(t, es, WriterOptions{BlockSize: 1024, Compression: c, BitsPerKey: 10, SeparateValues: threshold})
				want := separated(es, threshold)
				if props.Values != want {
					t.Fatalf("writer stored %d values apart, want %d", props.Values, want)
				}
				if v := props.FormatVersion; (v == formatVersionValues) != (want > 0) {
					t.Fatalf("format version %d with %d value records", v, want)
				}
				for _, mapped := range []bool{false, true} {
					ro := ReaderOptions{Name: "v.seg", Cache: NewCache(1 << 20)}
					if mapped {
						ro.Mapped = data
					}
					r := openSegment(t, data, ro)
					if r.Properties().Values != want {
						t.Fatalf("reader: %d value records, want %d", r.Properties().Values, want)
					}
					if err := r.Verify(); err != nil {
						t.Fatalf("Verify: %v", err)
					}
					for range 1500 {
						checkGet(t, r, es, es[rng.IntN(len(es))].key, rng.Uint64N(2*uint64(len(es))+2))
					}
					it := r.NewIter(false)
					checkForward(t, it, es)
					checkBackward(t, it, es)
					checkSeeks(t, rng, it, es)
					if err := it.Close(); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// TestValueRecordsDenseBlocks checks what separation is for: with 4 KiB
// values inline, a data block holds one entry; apart, a block holds the
// keys of many.
func TestValueRecordsDenseBlocks(t *testing.T) {
	var es []entry
	for i := range 400 {
		es = append(es, entry{key: fmt.Appendf(nil, "key%05d", i), seq: uint64(i + 1), kind: base.KindPut, value: bytes.Repeat([]byte{byte(i)}, 4096)})
	}
	_, inline := writeSegment(t, es, WriterOptions{})
	_, apart := writeSegment(t, es, WriterOptions{SeparateValues: 1024})
	if inline.DataBlocks != 400 || apart.DataBlocks > 10 || apart.Values != 400 {
		t.Fatalf("data blocks: %d inline, %d apart (%d value records)", inline.DataBlocks, apart.DataBlocks, apart.Values)
	}
}

// TestValueRecordDamage flips a byte in every value record, one at a
// time, and checks that each reader of the value reports ErrCorrupt with
// the file and the record's offset, mapped or not: Get, a scan, Verify.
func TestValueRecordDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	es := largeEntries(rng, 300, 100)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 512, SeparateValues: 500})
	r := openSegment(t, data, ReaderOptions{Name: "v.seg"})
	recs := valueRecords(t, r)
	if len(recs) < 20 {
		t.Fatalf("only %d value records", len(recs))
	}
	for _, rec := range recs {
		bad := bytes.Clone(data)
		bad[rec.h.offset+uint64(rng.Int64N(int64(rec.h.length+blockTrailerLen)))] ^= 0x10
		for _, mapped := range []bool{false, true} {
			r := openValuesSegment(t, bad, mapped)
			_, _, _, err := r.Get(rec.key, rec.seq)
			checkCorruptAt(t, "Get", err, rec.h.offset)
			it := r.NewIter(false)
			for ok := it.First(); ok; ok = it.Next() {
			}
			checkCorruptAt(t, "scan", it.Close(), rec.h.offset)
			checkCorruptAt(t, "Verify", r.Verify(), rec.h.offset)
		}
	}
}

func checkCorruptAt(t *testing.T, what string, err error, off uint64) {
	t.Helper()
	var ce *base.CorruptError
	if !errors.Is(err, base.ErrCorrupt) || !errors.As(err, &ce) || ce.File != "v.seg" || ce.Offset != int64(off) {
		t.Fatalf("%s of a damaged value record at %d: %v", what, off, err)
	}
}

// openValuesSegment opens data as "v.seg", through a mapping of it if
// mapped.
func openValuesSegment(t *testing.T, data []byte, mapped bool) *Reader {
	t.Helper()
	ro := ReaderOptions{Name: "v.seg"}
	if mapped {
		ro.Mapped = data
	}
	return openSegment(t, data, ro)
}

// valueRecord is a value record and the newest version that names it.
type valueRecord struct {
	key []byte
	seq uint64
	h   valueHandle
}

// value reads rec's value through Reader.value (rec is of block i).
func (rec valueRecord) value(t testing.TB, r *Reader, i int) []byte {
	t.Helper()
	v, err := r.value(i, appendValueHandle(nil, rec.h), cacheLookup, false)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// valueRecords lists r's value records from its data blocks.
func valueRecords(t testing.TB, r *Reader) []valueRecord {
	t.Helper()
	var recs []valueRecord
	var it blockIter
	for i := range r.index {
		b, err := r.dataBlock(i, cacheBypass, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := it.init(b, true, "v.seg", 0); err != nil {
			t.Fatal(err)
		}
		for ok := it.first(); ok; ok = it.next() {
			if isValueHandle(it.key) {
				h, ok := decodeValueHandle(it.val)
				if !ok {
					t.Fatal("bad handle")
				}
				k, tr := splitInternalKey(it.key)
				seq, _ := base.SplitTrailer(tr)
				recs = append(recs, valueRecord{bytes.Clone(k), seq, h})
			}
		}
	}
	return recs
}

// TestValueHandleBounds hands Reader.value handles that a damaged or
// hostile block could hold: each must be refused as corruption before any
// byte outside the gap before its block is read.
func TestValueHandleBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	es := largeEntries(rng, 300, 100)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 512, SeparateValues: 500})
	for _, mapped := range []bool{false, true} {
		r := openValuesSegment(t, data, mapped)
		recs := valueRecords(t, r)
		// Find a block with a record, and the record's block index.
		blockOf := func(off uint64) int {
			for i := range r.index {
				if r.index[i].h.offset > off {
					return i
				}
			}
			t.Fatalf("no block after %d", off)
			return 0
		}
		rec := recs[len(recs)/2]
		i := blockOf(rec.h.offset)
		if _, err := r.value(i, appendValueHandle(nil, rec.h), cacheLookup, false); err != nil {
			t.Fatalf("the record's own handle: %v", err)
		}
		// A scan resolves a handle of the block it is in through its own
		// fast path (Iter.valueMapped) where the record was verified: a
		// first scan verifies them all, so that the path is taken.
		scan := r.NewIter(false)
		for ok := scan.First(); ok; ok = scan.Next() {
		}
		if err := scan.Close(); err != nil {
			t.Fatal(err)
		}
		viaIter := func(enc []byte) ([]byte, error) {
			it := r.NewIter(false)
			defer it.Close()
			if !it.load(i) {
				t.Fatalf("load block %d: %v", i, it.err)
			}
			// enc as a value in a block, more entries after it
			data := append(bytes.Clone(enc), make([]byte, 32)...)
			it.blk.data, it.blk.nextOffset, it.blk.val = data, len(enc), data[:len(enc)]
			if !it.settleApart() {
				return nil, it.err
			}
			return it.Value(), nil
		}
		if v, err := viaIter(appendValueHandle(nil, rec.h)); err != nil || !bytes.Equal(v, rec.value(t, r, i)) {
			t.Fatalf("the record's own handle through an Iter: %v", err)
		}
		lo := r.index[i-1].h.end()
		hi := r.index[i].h.offset
		for _, h := range []valueHandle{
			{blockHandle{rec.h.offset, rec.h.length}, r.props.Values},                 // ordinal past the count
			{blockHandle{lo - 1, rec.h.length}, rec.h.ordinal},                        // starts in the block before
			{blockHandle{hi - 4, 0}, rec.h.ordinal},                                   // trailer runs into the block
			{blockHandle{rec.h.offset, hi - rec.h.offset}, rec.h.ordinal},             // ends inside the block
			{blockHandle{hi, 0}, rec.h.ordinal},                                       // the block itself
			{blockHandle{hi + 10, 1}, rec.h.ordinal},                                  // inside the block
			{blockHandle{rec.h.offset, rec.h.length}, r.props.Values + 64},            // past the verified marks
			{blockHandle{rec.h.offset, ^uint64(0) - rec.h.offset + 1}, rec.h.ordinal}, // wraps around
		} {
			if _, err := r.value(i, appendValueHandle(nil, h), cacheLookup, false); !errors.Is(err, base.ErrCorrupt) {
				t.Fatalf("handle %+v in gap [%d, %d): %v", h, lo, hi, err)
			}
			if _, err := viaIter(appendValueHandle(nil, h)); !errors.Is(err, base.ErrCorrupt) {
				t.Fatalf("handle %+v in gap [%d, %d) through an Iter: %v", h, lo, hi, err)
			}
		}
		if _, err := r.value(i, append(appendValueHandle(nil, rec.h), 0), cacheLookup, false); !errors.Is(err, base.ErrCorrupt) {
			t.Fatalf("handle with a trailing byte: %v", err)
		}
	}
}

// TestValueRecordsVerifiedOnce checks that a mapped segment checks each
// raw value record once: a scan marks every one, and a record whose mark
// is set is sliced from the mapping without a second checksum.
func TestValueRecordsVerifiedOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	es := largeEntries(rng, 300, 100)
	data, props := writeSegment(t, es, WriterOptions{BlockSize: 512, SeparateValues: 500})
	mapped := bytes.Clone(data)
	r := openSegment(t, data, ReaderOptions{Name: "v.seg", Mapped: mapped})
	if n := r.valuesVerified.count(); n != 0 {
		t.Fatalf("%d records marked before any read", n)
	}
	it := r.NewIter(false)
	for ok := it.First(); ok; ok = it.Next() {
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.valuesVerified.count(); uint64(n) != props.Values {
		t.Fatalf("a full scan marked %d of %d records", n, props.Values)
	}
}

// BenchmarkValueHandle is the decoding of a handle and the checks of a
// verified record that a scan of separated values pays per key.
func BenchmarkValueHandle(b *testing.B) {
	var es []entry
	for i := range 2000 {
		es = append(es, entry{key: fmt.Appendf(nil, "key%05d", i), seq: uint64(i + 1), kind: base.KindPut, value: bytes.Repeat([]byte{byte(i)}, 4096)})
	}
	data, _ := writeSegment(b, es, WriterOptions{SeparateValues: 1024})
	r := openSegment(b, data, ReaderOptions{Name: "v.seg", Mapped: data})
	recs := valueRecords(b, r)
	type ref struct {
		block int
		enc   []byte
	}
	var refs []ref
	for _, rec := range recs {
		i := r.searchIndex(rec.key, maxTrailer)
		refs = append(refs, ref{i, appendValueHandle(nil, rec.h)})
		if _, err := r.value(i, refs[len(refs)-1].enc, cacheLookup, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	n := 0
	for i := 0; b.Loop(); i++ {
		f := &refs[i%len(refs)]
		v, err := r.value(f.block, f.enc, cacheLookup, false)
		if err != nil {
			b.Fatal(err)
		}
		n += len(v)
	}
}

// TestValueRecordCachedUnmapped checks that without a mapping a value
// record read by Lookup enters the block cache: a second Lookup of the
// same large value reads nothing from the file.
func TestValueRecordCachedUnmapped(t *testing.T) {
	es := []entry{{key: []byte("big"), seq: 1, kind: base.KindPut, value: bytes.Repeat([]byte("0123456789"), 10000)}}
	data, _ := writeSegment(t, es, WriterOptions{SeparateValues: 1024})
	var c Counters
	r := openSegment(t, data, ReaderOptions{Name: "v.seg", Cache: NewCache(16 << 20), Counters: &c})
	get := func() uint64 {
		before := c.BytesRead.Load()
		if v, _, found, err := r.Get([]byte("big"), base.MaxSeq); err != nil || !found || !bytes.Equal(v, es[0].value) {
			t.Fatalf("Get = %d bytes, %v, %v", len(v), found, err)
		}
		return c.BytesRead.Load() - before
	}
	if n := get(); n < 100000 {
		t.Fatalf("first Get read %d bytes", n)
	}
	if n := get(); n != 0 {
		t.Fatalf("second Get read %d bytes: the record did not stay in the cache", n)
	}
}

// TestLookupKeySkipsValueRecord checks that LookupKey (the store's Has)
// answers from the entry alone: with the value record damaged, Lookup
// reports corruption and LookupKey still finds the key.
func TestLookupKeySkipsValueRecord(t *testing.T) {
	es := []entry{{key: []byte("big"), seq: 1, kind: base.KindPut, value: bytes.Repeat([]byte("x"), 4096)}}
	data, _ := writeSegment(t, es, WriterOptions{SeparateValues: 1024})
	data[100] ^= 1 // the record starts the file
	r := openSegment(t, data, ReaderOptions{Name: "v.seg"})
	k := []byte("big")
	if _, _, _, _, err := r.Lookup(k, bloom.Hash(k), base.MaxSeq); !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("Lookup of a damaged record: %v", err)
	}
	if v, seq, kind, found, err := r.LookupKey(k, bloom.Hash(k), base.MaxSeq); err != nil || !found || v != nil || seq != 1 || kind != base.KindPut {
		t.Fatalf("LookupKey = %q, %d, %v, %v, %v", v, seq, kind, found, err)
	}
}

// TestSkipValueRecords checks that an Iter told to skip value records
// walks every key without reading one: with every record damaged it still
// sees all the keys, with empty values where the records are.
func TestSkipValueRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	es := largeEntries(rng, 300, 100)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 512, SeparateValues: 500})
	r := openSegment(t, data, ReaderOptions{Name: "v.seg"})
	bad := bytes.Clone(data)
	for _, rec := range valueRecords(t, r) {
		bad[rec.h.offset] ^= 0x10
	}
	r = openSegment(t, bad, ReaderOptions{Name: "v.seg"})
	it := r.NewIter(false)
	it.SkipValueRecords()
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		want := es[i].value
		if len(want) >= 500 {
			want = nil
		}
		if !bytes.Equal(it.Key(), es[i].key) || it.Seq() != es[i].seq || it.Kind() != es[i].kind || !bytes.Equal(it.Value(), want) {
			t.Fatalf("entry %d: %q@%d %v, %d bytes; want %q@%d %v, %d bytes", i, it.Key(), it.Seq(), it.Kind(), len(it.Value()), es[i].key, es[i].seq, es[i].kind, len(want))
		}
		i++
	}
	if err := it.Close(); err != nil || i != len(es) {
		t.Fatalf("saw %d of %d entries: %v", i, len(es), err)
	}
}

// count is the number of records marked.
func (v verifiedRecords) count() (n int) {
	for i := range v {
		if v[i].Load() != 0 {
			n++
		}
	}
	return n
}

// TestDataBlocksBesideRecordsRaw: a data block whose value records take
// at least 7 times its bytes is stored raw even when it compresses (a
// scan would decompress it each time to save next to nothing of the
// region), while blocks of compressible inline values are still
// compressed, and value records too. Both segments read back.
func TestDataBlocksBesideRecordsRaw(t *testing.T) {
	for _, c := range []struct {
		name      string
		valueLen  int
		apart     int
		wantBlock byte // the compression type of every data block
	}{
		{"apart", 4096, 1024, compressionNone},
		{"inline", 100, 0, compressionSnappy},
		{"inline-large", 4096, 0, compressionSnappy},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, WriterOptions{Compression: SnappyCompression, SeparateValues: c.apart})
			var es []entry
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 2000 {
				v := bytes.Repeat([]byte{byte('a' + i%26)}, c.valueLen) // compressible
				if c.apart > 0 {
					// A quarter random: records compress to about that, and
					// still take over 7 times their block's bytes (values
					// of one byte repeated compress to 5%, records to about
					// 6 times the entries, whose keys each start a restart
					// point beside a value handle).
					for j := range c.valueLen / 4 {
						v[j] = byte(rng.Uint32())
					}
				}
				es = append(es, entry{key: fmt.Appendf(nil, "key%08d", i), seq: uint64(i + 1), kind: base.KindPut, value: v})
				mustAdd(t, w, es[i])
			}
			if _, err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			data := buf.Bytes()
			r := openSegment(t, data, ReaderOptions{})
			for i := range r.index {
				if typ := data[r.index[i].h.end()-blockTrailerLen]; typ != c.wantBlock {
					t.Fatalf("data block %d of %d stored with type %d, want %d", i, len(r.index), typ, c.wantBlock)
				}
			}
			if c.apart > 0 {
				lo := r.index[0].h.offset // the gap before block 0 holds its records
				if h, ok := decodeValueHandle(firstValue(t, r)); !ok || h.offset >= lo || data[h.offset+h.length] != compressionSnappy {
					t.Fatalf("first value record %+v (ok %v) not a snappy record before block 0 at %d", h, ok, lo)
				}
			}
			it := r.NewIter(false)
			i := 0
			for ok := it.First(); ok; ok = it.Next() {
				if !bytes.Equal(it.Key(), es[i].key) || !bytes.Equal(it.Value(), es[i].value) {
					t.Fatalf("entry %d: %q, %d bytes; want %q", i, it.Key(), len(it.Value()), es[i].key)
				}
				i++
			}
			if err := it.Close(); err != nil || i != len(es) {
				t.Fatalf("scan: %d entries, %v", i, err)
			}
		})
	}
}

// firstValue returns the stored value (a handle, for a value record) of
// the first entry of r's first data block.
func firstValue(t *testing.T, r *Reader) []byte {
	t.Helper()
	b, err := r.dataBlock(0, cacheBypass, nil)
	if err != nil {
		t.Fatal(err)
	}
	var bi blockIter
	if err := bi.init(b, true, "", 0); err != nil || !bi.first() {
		t.Fatalf("block 0: %v", err)
	}
	return bi.val
}

// TestDecodeValueHandleAt decodes handles whose fields take every varint
// length, at each of the three places, followed by random bytes (a
// block's next entries): the scan's decoder must agree with
// decodeValueHandle, which FuzzValueHandle checks against
// binary.Uvarint, and refuse a handle cut short or followed by a byte.
func TestDecodeValueHandleAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var vals []uint64
	for s := 0; s <= 63; s += 7 { // the edges of each varint length
		vals = append(vals, 1<<s-1, 1<<s-2, 1<<s, 1<<s+rng.Uint64N(1<<s), 1<<s+rng.Uint64N(1<<s), 1<<s+rng.Uint64N(1<<s), 1<<s|0x55555555555555&(1<<s-1), 1<<s|0x2aaaaaaaaaaaaa&(1<<s-1))
	}
	vals = append(vals, ^uint64(0))
	for _, a := range vals {
		for _, b := range vals {
			// The third field is read as the first two are: a few
			// lengths of it suffice.
			for _, c := range []uint64{0, 1<<14 - 2, 1<<35 - 2, 1 << 56, ^uint64(0)} {
				h := valueHandle{blockHandle{a, b}, c}
				enc := appendValueHandle(nil, h)
				for _, n := range []int{len(enc), len(enc) - 1, len(enc) + 1} {
					data := make([]byte, 3+len(enc)+int(rng.UintN(24)))
					for i := range data {
						data[i] = byte(rng.Uint32())
					}
					copy(data[3:], enc)
					if n > len(data)-3 {
						continue
					}
					want, wantOK := decodeValueHandle(data[3 : 3+n])
					got, ok := decodeValueHandleAt(data, 3, data[3:3+n])
					if ok != wantOK || ok && got != want || n == len(enc) && (!ok || got != h) {
						t.Fatalf("decodeValueHandleAt(%x, 3, %d) = %+v, %v; want %+v, %v (encoded %+v)", data, n, got, ok, want, wantOK, h)
					}
				}
			}
		}
	}
}

// handleSegment builds a segment whose data region is recs, a gap of
// value records as the test lays them out, followed by one raw data block
// that holds the keys "a", "b", … in order, the value of the i-th being
// the value handle hs[i]; values is the values property. Every checksum
// in it but those of recs is valid. The handles may do what no writer
// does (share an ordinal or an offset), as a hostile file's may.
func handleSegment(recs []byte, hs []valueHandle, values uint64) []byte {
	bw := &blockWriter{restartInterval: 16}
	var last []byte
	for i, h := range hs {
		last = appendInternalKey(nil, []byte{byte('a' + i)}, base.MakeTrailer(uint64(len(hs)-i), kindValueHandle))
		bw.addEntry(last, appendValueHandle(nil, h), true)
	}
	blk := bytes.Clone(bw.finish())
	ib := &blockWriter{restartInterval: 1}
	ib.add(last, appendHandle(nil, blockHandle{uint64(len(recs)), uint64(len(blk))}))
	n := uint64(len(hs))
	s := rawSegment{
		data:   append(bytes.Clone(recs), storedBlock(blk, compressionNone)...),
		blocks: 1,
		props: Properties{Entries: n, DistinctKeys: n, MinSeq: 1, MaxSeq: n,
			Smallest: []byte("a"), Largest: []byte{byte('a' + len(hs) - 1)}, Values: values},
		index: bytes.Clone(ib.finish()),
	}
	return s.assemble()
}

// lookupValue is r's Lookup of key at the newest snapshot, its value
// copied.
func lookupValue(r *Reader, key string) ([]byte, error) {
	k := []byte(key)
	v, _, _, found, err := r.Lookup(k, bloom.Hash(k), base.MaxSeq)
	if err == nil && !found {
		return nil, fmt.Errorf("%q not found", key)
	}
	return bytes.Clone(v), err
}

// wantCorruptAt fails t unless err is corruption of file name at offset
// off.
func wantCorruptAt(t *testing.T, what string, err error, name string, off uint64) {
	t.Helper()
	var ce *base.CorruptError
	if !errors.Is(err, base.ErrCorrupt) || !errors.As(err, &ce) || ce.File != name || ce.Offset != int64(off) {
		t.Errorf("%s: %v; want corruption of %s at %d", what, err, name, off)
	}
}

// sharedOrdinalSegment is a file whose handles give ordinal 0 to three
// records: a's ("GOOD") and c's ("ALSO") sound, b's ("EVIL") with a bad
// checksum. It returns the file and b's offset.
func sharedOrdinalSegment() ([]byte, uint64) {
	good := storedBlock([]byte("GOOD"), compressionNone)
	bad := storedBlock([]byte("EVIL"), compressionNone)
	bad[len(bad)-1] ^= 0xff
	also := storedBlock([]byte("ALSO"), compressionNone)
	recs := slices.Concat(good, bad, also)
	hs := []valueHandle{
		{blockHandle{0, 4}, 0},
		{blockHandle{uint64(len(good)), 4}, 0},
		{blockHandle{uint64(len(good) + len(bad)), 4}, 0},
	}
	return handleSegment(recs, hs, 1), hs[1].offset
}

// openWarmMapped opens file mapped (a copy of it), with the page cache
// taken to hold all of it, so that point reads use the mapping and mark
// the records they check.
func openWarmMapped(t *testing.T, file []byte) *Reader {
	t.Helper()
	r := openSegment(t, file, ReaderOptions{Name: "v.seg", Mapped: bytes.Clone(file)})
	r.inCache = func([]byte, uint64, uint64) bool { return true }
	return r
}

// TestVerifiedMarkCoversOneRecord guards the mark that lets reads of a
// mapped segment skip the checksum of a value record checked before: it
// must cover that one record (its offset and length), not whatever record
// another handle names under the same ordinal, which only Verify ties to
// one record. In sharedOrdinalSegment's file, b's record fails its
// checksum; once a's record was read and marked, b must still be reported
// corrupt, at b's offset, by Lookup, by a scan (Iter.valueMapped, then
// Reader.value) and by a scan that keeps records as stored
// (Reader.valueRecord), while c's sound record still reads.
func TestVerifiedMarkCoversOneRecord(t *testing.T) {
	file, badOff := sharedOrdinalSegment()

	r := openWarmMapped(t, file)
	_, err := lookupValue(r, "b")
	wantCorruptAt(t, "Lookup(b) first", err, "v.seg", badOff)
	for _, k := range []string{"a", "b", "c"} {
		v, err := lookupValue(r, k)
		switch k {
		case "b":
			wantCorruptAt(t, "Lookup(b) after Lookup(a)", err, "v.seg", badOff)
		default:
			if want := map[string]string{"a": "GOOD", "c": "ALSO"}[k]; err != nil || string(v) != want {
				t.Errorf("Lookup(%s) = %q, %v; want %q", k, v, err, want)
			}
		}
	}

	for _, raw := range []bool{false, true} {
		r := openWarmMapped(t, file)
		it := r.NewIter(false)
		if raw {
			it.KeepValueRecords(1)
		}
		var got []string
		for ok := it.First(); ok; ok = it.Next() {
			v := it.Value()
			if raw {
				rec, n, _ := it.RawValue()
				v = rec[:n]
			}
			got = append(got, string(it.Key())+"="+string(v))
		}
		err := it.Close()
		wantCorruptAt(t, fmt.Sprintf("scan (records kept as stored: %v) after %q", raw, got), err, "v.seg", badOff)
		if len(got) != 1 || got[0] != "a=GOOD" {
			t.Errorf("scan (records kept as stored: %v) yielded %q before stopping, want [a=GOOD]", raw, got)
		}
	}
}

// TestVerifiedMarkConcurrentReaders has readers race to mark the one
// ordinal of sharedOrdinalSegment's three records, on a fresh Reader each
// round: whichever sound record marks it first, the other is checked at
// each read and read whole, and b is reported corrupt at every read.
func TestVerifiedMarkConcurrentReaders(t *testing.T) {
	file, badOff := sharedOrdinalSegment()
	want := map[string]string{"a": "GOOD", "c": "ALSO"}
	for range 100 {
		r := openWarmMapped(t, file)
		var wg sync.WaitGroup
		for g := range 6 {
			k := string(rune('a' + g%3))
			wg.Go(func() {
				for range 10 {
					v, err := lookupValue(r, k)
					if k == "b" {
						var ce *base.CorruptError
						if !errors.As(err, &ce) || ce.Offset != int64(badOff) {
							t.Errorf("Lookup(b) = %q, %v; want corruption at %d", v, err, badOff)
							return
						}
					} else if err != nil || string(v) != want[k] {
						t.Errorf("Lookup(%s) = %q, %v; want %q", k, v, err, want[k])
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// TestRecordMarkExact checks the packing of a verified mark at its
// bounds: distinct records get distinct marks, none of them 0 (unmarked)
// or noMark, and a record the packing cannot hold exactly gets noMark,
// which mark does not store.
func TestRecordMarkExact(t *testing.T) {
	const maxOff, maxLen = 1<<38 - 2, 1<<26 - 1
	seen := map[uint64]blockHandle{}
	for _, h := range []blockHandle{
		{0, 0}, {0, 1}, {1, 0}, {0, maxLen}, {1, maxLen}, {maxOff, 0}, {maxOff, maxLen}, {maxOff - 1, maxLen},
	} {
		k := recordMark(h)
		if k == 0 || k == noMark {
			t.Fatalf("recordMark(%+v) = %#x", h, k)
		}
		if o, ok := seen[k]; ok {
			t.Fatalf("recordMark(%+v) = recordMark(%+v) = %#x", h, o, k)
		}
		seen[k] = h
	}
	v := make(verifiedRecords, 1)
	for _, h := range []blockHandle{{maxOff + 1, 0}, {0, maxLen + 1}, {1 << 40, 4}, {^uint64(0), ^uint64(0)}} {
		if k := recordMark(h); k != noMark {
			t.Fatalf("recordMark(%+v) = %#x, want noMark", h, k)
		}
		v.mark(0, h)
		if v[0].Load() != 0 || v.has(0, h) {
			t.Fatalf("record %+v, which cannot be packed, was marked", h)
		}
	}
	v.mark(0, blockHandle{5, 7})
	v.mark(0, blockHandle{5, 8}) // a second record under the ordinal: not marked
	if !v.has(0, blockHandle{5, 7}) || v.has(0, blockHandle{5, 8}) || v.has(0, blockHandle{4, 7}) {
		t.Fatal("the mark covers another record than the first one marked")
	}
}

// TestValueRecordCacheKeyedByLength guards the block cache's key for
// value records: two handles at one offset with different lengths name
// two records, each with a valid checksum here (a's record, its bytes and
// trailer, is the start of b's), and a value cached for one must not
// answer a read of the other. Without a mapping, and with one whose
// segment is cold (point reads go through pread and the cache), Lookup
// of b after Lookup of a filled the cache must return b's own value; so
// must a scan that fills the cache, and a Lookup after it.
func TestValueRecordCacheKeyedByLength(t *testing.T) {
	a := storedBlock([]byte("GOOD"), compressionNone)
	b := storedBlock(append(bytes.Clone(a), "XXXX"...), compressionNone)
	ha := valueHandle{blockHandle{0, 4}, 0}
	hb := valueHandle{blockHandle{0, uint64(len(a) + 4)}, 1}
	file := handleSegment(b, []valueHandle{ha, hb}, 2)
	want := map[string]string{"a": "GOOD", "b": string(b[:hb.length])}
	for _, mapped := range []bool{false, true} {
		open := func() *Reader {
			ro := ReaderOptions{Name: "v.seg", Cache: NewCache(1 << 20), FileNum: 7}
			if mapped {
				ro.Mapped = bytes.Clone(file)
			}
			r := openSegment(t, file, ro)
			r.inCache = func([]byte, uint64, uint64) bool { return false }
			r.coldAnswers.Store(coldWindow)
			return r
		}
		for _, order := range [][]string{{"a", "b"}, {"b", "a"}} {
			r := open()
			for _, k := range order {
				if v, err := lookupValue(r, k); err != nil || string(v) != want[k] {
					t.Errorf("mapped=%v: Lookup(%s) after %v = %q, %v; want %q", mapped, k, order, v, err, want[k])
				}
			}
		}
		r := open()
		it := r.NewIter(true)
		for ok := it.First(); ok; ok = it.Next() {
			if k := string(it.Key()); string(it.Value()) != want[k] {
				t.Errorf("mapped=%v: a scan filling the cache reads %s = %q; want %q", mapped, k, it.Value(), want[k])
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"b", "a"} {
			if v, err := lookupValue(r, k); err != nil || string(v) != want[k] {
				t.Errorf("mapped=%v: Lookup(%s) after a scan = %q, %v; want %q", mapped, k, v, err, want[k])
			}
		}
	}
}

// TestDeferValueRecords checks deferred value records: walking a segment
// backward with DeferValueRecords, each entry whose value is a record says
// so and reads, through DeferredValue and LoadValue, the value the eager
// walk read — also once the Iter has moved on past it; other entries read
// as ever. A damaged record is reported by LoadValue, not by the step;
// and in an invariants build Value at a deferred entry panics.
func TestDeferValueRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	es := largeEntries(rng, 400, 120)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 512, SeparateValues: 500})
	for _, mapped := range []bool{false, true} {
		r := openValuesSegment(t, data, mapped)
		it := r.NewIter(false)
		it.DeferValueRecords(true)
		var refs []ValueRef
		var want [][]byte
		deferred, i := 0, len(es)-1
		for ok := it.Last(); ok; ok = it.Prev() {
			e := es[i]
			if !bytes.Equal(it.Key(), e.key) || it.Seq() != e.seq {
				t.Fatalf("entry %d: %q@%d, want %q@%d", i, it.Key(), it.Seq(), e.key, e.seq)
			}
			ref, ok := it.DeferredValue()
			if ok != (it.ValueDeferred()) || ok != (e.kind == base.KindPut && len(e.value) >= 500) {
				t.Fatalf("entry %d (%d-byte value): deferred %v", i, len(e.value), ok)
			}
			if ok {
				deferred++
				refs, want = append(refs, ref), append(want, e.value)
			} else if e.kind == base.KindPut && !bytes.Equal(it.Value(), e.value) {
				t.Fatalf("entry %d: value %q, want %q", i, it.Value(), e.value)
			}
			i--
		}
		if err := it.Error(); err != nil || i != -1 || deferred == 0 {
			t.Fatalf("mapped=%v: walk ended at entry %d with %d deferred: %v", mapped, i, deferred, err)
		}
		for j := range refs { // the Iter has long moved on
			v, err := it.LoadValue(&refs[j])
			if err != nil || !bytes.Equal(v, want[j]) {
				t.Fatalf("mapped=%v: deferred value %d: %d bytes, %v; want %d bytes", mapped, j, len(v), err, len(want[j]))
			}
		}
		// Forward, each deferred record loaded where the Iter stands
		// (LoadDeferred), twice: the second walk finds the records of a
		// mapped segment verified.
		for range 2 {
			i = 0
			for ok := it.First(); ok; ok = it.Next() {
				deferred := it.ValueDeferred()
				v, err := it.LoadDeferred()
				if e := es[i]; e.kind == base.KindPut && (err != nil || !bytes.Equal(v, e.value) || !bytes.Equal(it.Value(), e.value) || it.ValueDeferred()) {
					t.Fatalf("mapped=%v: entry %d (deferred %v): LoadDeferred %d bytes, %v, then Value %d bytes; want %d", mapped, i, deferred, len(v), err, len(it.Value()), len(e.value))
				}
				i++
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}

		if invariants.Enabled {
			it := r.NewIter(false)
			it.DeferValueRecords(true)
			for ok := it.Last(); ok && !it.ValueDeferred(); ok = it.Prev() {
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("Value at a deferred entry did not panic")
					}
				}()
				_ = it.Value()
			}()
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}

	bad := bytes.Clone(data)
	r := openSegment(t, data, ReaderOptions{Name: "v.seg"})
	recs := valueRecords(t, r)
	for _, rec := range recs {
		bad[rec.h.offset] ^= 0x10
	}
	r = openSegment(t, bad, ReaderOptions{Name: "v.seg"})
	it := r.NewIter(false)
	it.DeferValueRecords(true)
	for ok := it.Last(); ok; ok = it.Prev() {
		if ref, ok := it.DeferredValue(); ok {
			// The backward walk's first record is the file's last.
			_, err := it.LoadValue(&ref)
			checkCorruptAt(t, "LoadValue", err, recs[len(recs)-1].h.offset)
			if it.Valid() || it.Error() != err {
				t.Fatalf("after a failed LoadValue the Iter is valid=%v with error %v", it.Valid(), it.Error())
			}
			return
		}
	}
	t.Fatalf("no deferred record in the damaged segment: %v", it.Error())
}
