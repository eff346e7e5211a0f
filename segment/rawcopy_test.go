package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// rawCopyEntries returns n entries in internal-key order with the values
// a compaction of separated values meets: 4 KiB values that compress and
// 4 KiB values that do not (so that records of both stored types are
// copied), values of 500 to 3,000 bytes, either way, small values and
// tombstones, several versions of some keys.
func rawCopyEntries(rng *rand.Rand, n int) []entry {
	es := make([]entry, n)
	seqs := rng.Perm(n * 2)
	for i := range es {
		k := rng.IntN(n / 2)
		es[i] = entry{key: fmt.Appendf(nil, "key/%06d", k), seq: uint64(seqs[i] + 1), kind: base.KindPut}
		size := 4096
		switch rng.IntN(6) {
		case 0:
			es[i].kind = base.KindDelete
			continue
		case 1:
			size = rng.IntN(100)
		case 2:
			size = 500 + rng.IntN(2500)
		}
		v := make([]byte, size)
		compressible := rng.IntN(2) == 0
		for j := range v {
			v[j] = byte(rng.UintN(256))
			if compressible && j%8 != 0 {
				v[j] = 'x'
			}
		}
		es[i].value = v
	}
	slices.SortFunc(es, compareEntries)
	return es
}

// rawCopyStats counts what rawCopy did.
type rawCopyStats struct {
	copied  map[byte]int // value records copied as stored, by type byte
	decoded int          // values added through Add
}

// rawCopy reads segment data with an Iter that keeps value records of at
// least keep bytes as stored (mapped or not) and writes every entry to a
// new segment with wo, as a compaction does: a kept record the writer
// stores apart goes through AddValueRecord, anything else through Add.
// keep must be wo.SeparateValues, as a compaction's is: Value is nil at a
// kept record.
func rawCopy(t testing.TB, data []byte, mapped bool, keep int, wo WriterOptions) ([]byte, Properties, rawCopyStats, error) {
	t.Helper()
	ro := ReaderOptions{Name: "v.seg", Cache: NewCache(1 << 20)}
	if mapped {
		ro.Mapped = data
	}
	r := openSegment(t, data, ro)
	defer r.Close()
	it := r.NewIter(false)
	it.KeepValueRecords(keep)
	var buf bytes.Buffer
	w := NewWriter(&buf, wo)
	st := rawCopyStats{copied: map[byte]int{}}
	for ok := it.First(); ok; ok = it.Next() {
		k, tr := it.InternalKey()
		seq, kind := base.SplitTrailer(tr)
		if rec, n, ok := it.RawValue(); ok {
			if it.Value() != nil {
				t.Fatalf("Value at a record kept as stored: %d bytes", len(it.Value()))
			}
			st.copied[rec[len(rec)-blockTrailerLen]]++
			if err := w.AddValueRecord(k, seq, rec, n); err != nil {
				t.Fatalf("AddValueRecord(%q, %d): %v", k, seq, err)
			}
			continue
		}
		st.decoded++
		if err := w.Add(k, seq, kind, it.Value()); err != nil {
			t.Fatalf("Add(%q, %d): %v", k, seq, err)
		}
	}
	if err := it.Close(); err != nil {
		return nil, Properties{}, st, err
	}
	props, err := w.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return buf.Bytes(), props, st, nil
}

// checkSegmentModel reads every entry of data every way (Get, forward and
// backward, Verify), mapped and not, against es.
func checkSegmentModel(t *testing.T, rng *rand.Rand, data []byte, es []entry) {
	t.Helper()
	for _, mapped := range []bool{false, true} {
		ro := ReaderOptions{Name: "out.seg", Cache: NewCache(1 << 20)}
		if mapped {
			ro.Mapped = data
		}
		r := openSegment(t, data, ro)
		if err := r.Verify(); err != nil {
			t.Fatalf("Verify: %v", err)
		}
		for _, e := range es {
			checkGet(t, r, es, e.key, e.seq)
		}
		for range 200 {
			checkGet(t, r, es, es[rng.IntN(len(es))].key, rng.Uint64N(2*uint64(len(es))+2))
		}
		it := r.NewIter(false)
		checkForward(t, it, es)
		checkBackward(t, it, es)
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
}

// TestRawCopyMatchesFreshWrite copies segments through the raw path with
// the options they were written with: the copy must be the same file,
// byte for byte (so its properties are those of a fresh write of the
// entries, and every reader reads it as one), and records of every stored
// type must have been copied as stored, none decoded.
func TestRawCopyMatchesFreshWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []Compression{NoCompression, SnappyCompression, ZstdCompression} {
		for _, mapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/mapped=%v", c, mapped), func(t *testing.T) {
				es := rawCopyEntries(rng, 600)
				wo := WriterOptions{BlockSize: 4096, Compression: c, BitsPerKey: 10, SeparateValues: 1024}
				fresh, freshProps := writeSegment(t, es, wo)
				out, props, st, err := rawCopy(t, fresh, mapped, wo.SeparateValues, wo)
				if err != nil {
					t.Fatal(err)
				}
				want := separated(es, wo.SeparateValues)
				copied := 0
				for _, n := range st.copied {
					copied += n
				}
				if uint64(copied) != want || props.Values != want {
					t.Fatalf("copied %d records as stored (%v), %d in the properties; %d values are stored apart", copied, st.copied, props.Values, want)
				}
				if st.copied[compressionNone] == 0 || c != NoCompression && st.copied[byte(c)] == 0 {
					t.Fatalf("records copied by type: %v; want raw and %v ones", st.copied, c)
				}
				if !equalProps(props, freshProps) {
					t.Fatalf("properties of the copy:\n%+v\nof a fresh write:\n%+v", props, freshProps)
				}
				if !bytes.Equal(out, fresh) {
					i := 0
					for i < min(len(out), len(fresh)) && out[i] == fresh[i] {
						i++
					}
					t.Fatalf("the copy (%d bytes) differs from a fresh write (%d bytes) from offset %d", len(out), len(fresh), i)
				}
				checkSegmentModel(t, rng, out, es)
			})
		}
	}
}

// TestRawCopyKeepsIncompressibleRun copies a run of incompressible
// records followed by small values: a writer given the values has met
// the run when it comes to the small values' blocks, and skips the codec
// for them (maybeCompress); a copy must make the same choice, so that it
// stays the file a fresh write makes.
func TestRawCopyKeepsIncompressibleRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	var es []entry
	for i := range 60 {
		v := make([]byte, 4096)
		if i >= 20 {
			v = bytes.Repeat([]byte{'x'}, 100)
		}
		for j := range v {
			if i < 20 || j%10 == 0 {
				v[j] = byte(rng.UintN(256))
			}
		}
		es = append(es, entry{key: fmt.Appendf(nil, "key/%04d", i), seq: uint64(i + 1), kind: base.KindPut, value: v})
	}
	wo := WriterOptions{BlockSize: 256, Compression: SnappyCompression, SeparateValues: 1024}
	fresh, _ := writeSegment(t, es, wo)
	out, _, st, err := rawCopy(t, fresh, true, 1024, wo)
	if err != nil {
		t.Fatal(err)
	}
	if st.copied[compressionNone] != 20 {
		t.Fatalf("records copied: %v, want 20 raw", st.copied)
	}
	if !bytes.Equal(out, fresh) {
		t.Fatalf("the copy (%d bytes) differs from a fresh write (%d bytes)", len(out), len(fresh))
	}
}

// TestRawCopyAcrossOptions copies segments into writers whose options
// differ from the input's: another codec (records keep theirs: a zstd
// record in a snappy writer's file, a snappy one in an uncompressed
// writer's), and another threshold, above the input's (records below it
// are decoded and stored in the data blocks) and below it (values the
// input kept in its blocks are stored apart).
// The output must read as the model, and its properties must be those of
// a fresh write of the entries with the output's options, but for the
// sizes that the codecs' choices change.
func TestRawCopyAcrossOptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, tc := range []struct {
		in, out Compression
		inApart int
		outApa  int
	}{
		{ZstdCompression, SnappyCompression, 500, 2000},
		{SnappyCompression, NoCompression, 2000, 500},
		{SnappyCompression, ZstdCompression, 500, 500},
		{NoCompression, SnappyCompression, 500, 1024},
	} {
		for _, mapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v>=%d/%v>=%d/mapped=%v", tc.in, tc.inApart, tc.out, tc.outApa, mapped), func(t *testing.T) {
				es := rawCopyEntries(rng, 600)
				in, _ := writeSegment(t, es, WriterOptions{Compression: tc.in, BitsPerKey: 10, SeparateValues: tc.inApart})
				wo := WriterOptions{Compression: tc.out, BitsPerKey: 10, SeparateValues: tc.outApa}
				out, props, st, err := rawCopy(t, in, mapped, tc.outApa, wo)
				if err != nil {
					t.Fatal(err)
				}
				if want := separated(es, max(tc.inApart, tc.outApa)); uint64(st.copied[0]+st.copied[1]+st.copied[2]) != want {
					t.Fatalf("copied %v records as stored, want %d", st.copied, want)
				}
				_, fresh := writeSegment(t, es, wo)
				for _, p := range []*Properties{&props, &fresh} {
					p.DataSize, p.IndexSize, p.DataBlocks = 0, 0, 0
				}
				if !equalProps(props, fresh) {
					t.Fatalf("properties of the copy:\n%+v\nof a fresh write:\n%+v", props, fresh)
				}
				checkSegmentModel(t, rng, out, es)
			})
		}
	}
}

// TestRawCopyDamage flips a byte of a value record (its stored bytes, type
// or CRC), one record at a time: the Iter that keeps records as stored
// must stop with ErrCorrupt naming the file and the record's offset,
// mapped or not, and never hand the record out.
func TestRawCopyDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	es := rawCopyEntries(rng, 300)
	wo := WriterOptions{Compression: SnappyCompression, SeparateValues: 1024}
	data, _ := writeSegment(t, es, wo)
	recs := valueRecords(t, openSegment(t, data, ReaderOptions{Name: "v.seg"}))
	types := map[byte]int{}
	for _, rec := range recs {
		types[data[rec.h.offset+rec.h.length]]++
	}
	if types[compressionNone] < 10 || types[compressionSnappy] < 10 {
		t.Fatalf("value records by type: %v; want both", types)
	}
	for i, rec := range recs {
		if i%3 != 0 && testing.Short() {
			continue
		}
		bad := bytes.Clone(data)
		bad[rec.h.offset+uint64(rng.Int64N(int64(rec.h.length+blockTrailerLen)))] ^= 1 << rng.IntN(8)
		for _, mapped := range []bool{false, true} {
			_, _, _, err := rawCopy(t, bad, mapped, 1024, wo)
			checkCorruptAt(t, fmt.Sprintf("raw copy (mapped %v)", mapped), err, rec.h.offset)
		}
	}
}

// TestAddValueRecordRejects checks the writer's checks of a record it is
// handed: one it would not store apart, an unknown type byte, a raw record
// whose length is not the value's, one shorter than a trailer.
func TestAddValueRecordRejects(t *testing.T) {
	raw := append(bytes.Repeat([]byte{'v'}, 2000), compressionNone, 0, 0, 0, 0)
	for _, tc := range []struct {
		name string
		rec  []byte
		n    int
	}{
		{"below the threshold", raw[:1000+blockTrailerLen], 1000},
		{"unknown type", append(bytes.Repeat([]byte{'v'}, 2000), 7, 0, 0, 0, 0), 2000},
		{"raw length", raw, 2001},
		{"short", []byte{0, 0}, 2000},
	} {
		w := NewWriter(&bytes.Buffer{}, WriterOptions{SeparateValues: 1024})
		if err := w.AddValueRecord([]byte("k"), 1, tc.rec, tc.n); err == nil {
			t.Errorf("%s: AddValueRecord accepted it", tc.name)
		}
	}
	w := NewWriter(&bytes.Buffer{}, WriterOptions{SeparateValues: 1024})
	if err := w.AddValueRecord([]byte("k"), 1, raw, 2000); err != nil {
		t.Fatalf("a good record: %v", err)
	}
}

// BenchmarkCompactionCopy copies a mapped segment of 4 KiB values stored
// apart (snappy writer, 1 KiB threshold) into a new one as a compaction
// does, with the value records copied as stored (raw) or decoded and
// written again (decode: an Iter without KeepValueRecords, Writer.Add).
// The reader is opened again for each copy, so that every record's
// checksum is verified once, as a compaction's single pass does.
func BenchmarkCompactionCopy(b *testing.B) {
	for _, compressible := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(19, 20))
		es := make([]entry, 2000)
		for i := range es {
			v := make([]byte, 4096)
			for j := range v {
				v[j] = byte(rng.UintN(256))
				if compressible && j%8 != 0 {
					v[j] = 'x'
				}
			}
			es[i] = entry{key: fmt.Appendf(nil, "key/%06d", i), seq: uint64(i + 1), kind: base.KindPut, value: v}
		}
		wo := WriterOptions{Compression: SnappyCompression, BitsPerKey: 10, SeparateValues: 1024}
		data, _ := writeSegment(b, es, wo)
		for _, raw := range []bool{true, false} {
			b.Run(fmt.Sprintf("compressible=%v/raw=%v", compressible, raw), func(b *testing.B) {
				var out bytes.Buffer
				b.SetBytes(int64(len(data)))
				for range b.N {
					r := openSegment(b, data, ReaderOptions{Name: "v.seg", Mapped: data})
					it := r.NewIter(false)
					if raw {
						it.KeepValueRecords(wo.SeparateValues)
					}
					out.Reset()
					w := NewWriter(&out, wo)
					for ok := it.First(); ok; ok = it.Next() {
						k, tr := it.InternalKey()
						seq, kind := base.SplitTrailer(tr)
						var err error
						if rec, n, ok := it.RawValue(); ok && w.storesApart(n) {
							err = w.AddValueRecord(k, seq, rec, n)
						} else {
							err = w.Add(k, seq, kind, it.Value())
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					if err := it.Close(); err != nil {
						b.Fatal(err)
					}
					if _, err := w.Finish(); err != nil {
						b.Fatal(err)
					}
					r.Close()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(es)), "ns/value")
			})
		}
	}
}
