package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

// entry is one internal key and its value, as the model holds it.
type entry struct {
	key   []byte
	seq   uint64
	kind  base.Kind
	value []byte
}

func compareEntries(a, b entry) int {
	return base.Compare(a.key, base.MakeTrailer(a.seq, a.kind), b.key, base.MakeTrailer(b.seq, b.kind))
}

// randomEntries returns n entries in internal-key order. Keys come from a
// small space with shared prefixes, so most keys have several versions;
// sequence numbers are unique; about 1 in 5 entries is a tombstone.
func randomEntries(rng *rand.Rand, n, keySpace int) []entry {
	es := make([]entry, n)
	seqs := rng.Perm(n * 2)
	for i := range es {
		k := rng.IntN(keySpace)
		es[i] = entry{
			key:  []byte(fmt.Sprintf("key/%03d/%x", k%97, k)),
			seq:  uint64(seqs[i] + 1),
			kind: base.KindPut,
		}
		if rng.IntN(5) == 0 {
			es[i].kind = base.KindDelete
		} else {
			es[i].value = randomValue(rng)
		}
	}
	slices.SortFunc(es, compareEntries)
	return es
}

// randomValue is sometimes empty, sometimes compressible, sometimes not.
func randomValue(rng *rand.Rand) []byte {
	v := make([]byte, rng.IntN(120))
	if rng.IntN(2) == 0 {
		for i := range v {
			v[i] = byte(rng.UintN(256))
		}
	} else {
		for i := range v {
			v[i] = "abcd"[i%4]
		}
	}
	return v
}

func writeSegment(t testing.TB, es []entry, opts WriterOptions) ([]byte, Properties) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for _, e := range es {
		if err := w.Add(e.key, e.seq, e.kind, e.value); err != nil {
			t.Fatalf("Add(%q, %d): %v", e.key, e.seq, err)
		}
	}
	props, err := w.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return buf.Bytes(), props
}

func openSegment(t testing.TB, data []byte, opts ReaderOptions) *Reader {
	t.Helper()
	r, err := Open(bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

// openDataBlock reads data block i of r from the file and returns it
// with an iterator over it.
func openDataBlock(t testing.TB, r *Reader, i int) ([]byte, *blockIter) {
	t.Helper()
	b, err := r.dataBlock(i, cacheBypass, nil)
	if err != nil {
		t.Fatal(err)
	}
	it := new(blockIter)
	if err := it.init(b, true, r.opts.Name, int64(r.index[i].h.offset)); err != nil {
		t.Fatal(err)
	}
	return b, it
}

// modelGet is the specification of Reader.Get: the newest version of key
// with seq <= maxSeq. es is in the order a Writer takes (by key), so the
// versions of key are found by a binary search: a scan of every entry per
// lookup made tests that check thousands of keys quadratic (a minute
// under the race detector).
func modelGet(es []entry, key []byte, maxSeq uint64) (entry, bool) {
	var best entry
	found := false
	i, _ := slices.BinarySearchFunc(es, key, func(e entry, k []byte) int { return bytes.Compare(e.key, k) })
	for _, e := range es[i:] {
		if !bytes.Equal(e.key, key) {
			break
		}
		if e.seq <= maxSeq && (!found || e.seq > best.seq) {
			best, found = e, true
		}
	}
	return best, found
}

var writerConfigs = []WriterOptions{
	{},
	{BlockSize: 64, RestartInterval: 1},
	{BlockSize: 256, RestartInterval: 3, Compression: SnappyCompression, BitsPerKey: 10},
	{BlockSize: 4096, RestartInterval: 16, Compression: SnappyCompression, BitsPerKey: 10},
	{BlockSize: 512, RestartInterval: 8, Compression: ZstdCompression, BitsPerKey: 10},
	{BlockSize: 1, RestartInterval: 2, BitsPerKey: 4}, // one entry per block
	// Values stored apart (version 5): every non-empty value, raw; and
	// values of 60 bytes and more, compressed where that pays, beside
	// smaller ones kept in their blocks.
	{BlockSize: 64, RestartInterval: 1, SeparateValues: 1},
	{BlockSize: 512, RestartInterval: 16, Compression: SnappyCompression, BitsPerKey: 10, SeparateValues: 60},
}

func TestRoundTripGet(t *testing.T) {
	testRoundTripGet(t, false)
}

// TestRoundTripGetMapped reads through ReaderOptions.Mapped, as the DB does
// with mmap: same answers, and uncompressed blocks never enter the cache.
func TestRoundTripGetMapped(t *testing.T) {
	testRoundTripGet(t, true)
}

func testRoundTripGet(t *testing.T, mapped bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	for ci, opts := range writerConfigs {
		t.Run(fmt.Sprint(ci), func(t *testing.T) {
			es := randomEntries(rng, 2000, 300)
			data, _ := writeSegment(t, es, opts)
			ro := ReaderOptions{Cache: NewCache(1 << 20), Name: "rt.seg"}
			if mapped {
				ro.Mapped = data
			}
			r := openSegment(t, data, ro)
			if mapped && opts.Compression == NoCompression {
				defer func() {
					if n := ro.Cache.Size(); n != 0 {
						t.Errorf("mapped uncompressed blocks took %d bytes of cache", n)
					}
				}()
			}
			if err := r.Verify(); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			maxSeq := uint64(len(es) * 2)
			for range 3000 {
				var key []byte
				if rng.IntN(4) == 0 { // absent key, possibly between present ones
					key = []byte(fmt.Sprintf("key/%03d/%x~", rng.IntN(97), rng.IntN(300)))
				} else {
					key = es[rng.IntN(len(es))].key
				}
				seq := rng.Uint64N(maxSeq + 2)
				if rng.IntN(10) == 0 {
					seq = base.MaxSeq + 7 // above the trailer's range: clamped
				}
				checkGet(t, r, es, key, seq)
			}
		})
	}
}

func checkGet(t *testing.T, r *Reader, es []entry, key []byte, maxSeq uint64) {
	t.Helper()
	want, wantFound := modelGet(es, key, maxSeq)
	v, kind, found, err := r.Get(key, maxSeq)
	if err != nil {
		t.Fatalf("Get(%q, %d): %v", key, maxSeq, err)
	}
	if found != wantFound || (found && (kind != want.kind || !bytes.Equal(v, want.value))) {
		t.Fatalf("Get(%q, %d) = %q, %v, %v; want %q, %v, %v", key, maxSeq, v, kind, found, want.value, want.kind, wantFound)
	}
}

func TestGetAppendReusesBuffer(t *testing.T) {
	es := []entry{{key: []byte("a"), seq: 1, kind: base.KindPut, value: []byte("value")}}
	data, _ := writeSegment(t, es, WriterOptions{})
	r := openSegment(t, data, ReaderOptions{})
	dst := []byte("prefix:")
	v, _, found, err := r.GetAppend(dst, []byte("a"), 10)
	if err != nil || !found || string(v) != "prefix:value" {
		t.Fatalf("GetAppend = %q, %v, %v", v, found, err)
	}
	v, _, found, err = r.GetAppend(dst, []byte("b"), 10)
	if err != nil || found || string(v) != "prefix:" {
		t.Fatalf("GetAppend(absent) = %q, %v, %v", v, found, err)
	}
}

func TestIteration(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for ci, opts := range writerConfigs {
		t.Run(fmt.Sprint(ci), func(t *testing.T) {
			es := randomEntries(rng, 1500, 200)
			data, _ := writeSegment(t, es, opts)
			r := openSegment(t, data, ReaderOptions{Cache: NewCache(1 << 16)})
			for _, fill := range []bool{false, true} {
				it := r.NewIter(fill)
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

func checkEntry(t *testing.T, it *Iter, want entry, what string) {
	t.Helper()
	if !it.Valid() {
		t.Fatalf("%s: iterator invalid (err %v), want %q@%d", what, it.Error(), want.key, want.seq)
	}
	if !bytes.Equal(it.Key(), want.key) || it.Seq() != want.seq || it.Kind() != want.kind || !bytes.Equal(it.Value(), want.value) {
		t.Fatalf("%s: at %q@%d %v %q, want %q@%d %v %q", what, it.Key(), it.Seq(), it.Kind(), it.Value(), want.key, want.seq, want.kind, want.value)
	}
}

func checkForward(t *testing.T, it *Iter, es []entry) {
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		checkEntry(t, it, es[i], fmt.Sprintf("forward %d", i))
		i++
	}
	if it.Error() != nil || i != len(es) {
		t.Fatalf("forward iteration saw %d of %d entries (err %v)", i, len(es), it.Error())
	}
}

func checkBackward(t *testing.T, it *Iter, es []entry) {
	i := len(es) - 1
	for ok := it.Last(); ok; ok = it.Prev() {
		checkEntry(t, it, es[i], fmt.Sprintf("backward %d", i))
		i--
	}
	if it.Error() != nil || i != -1 {
		t.Fatalf("backward iteration stopped at %d (err %v)", i, it.Error())
	}
}

func checkSeeks(t *testing.T, rng *rand.Rand, it *Iter, es []entry) {
	for range 500 {
		key := es[rng.IntN(len(es))].key
		switch rng.IntN(3) {
		case 0:
			key = append(bytes.Clone(key), 0) // just after a present key
		case 1:
			key = key[:rng.IntN(len(key)+1)] // a prefix: before or at a present key
		}
		ge, _ := slices.BinarySearchFunc(es, key, func(e entry, k []byte) int { return bytes.Compare(e.key, k) })
		if ge < len(es) {
			it.SeekGE(key)
			checkEntry(t, it, es[ge], fmt.Sprintf("SeekGE(%q)", key))
			if ge+1 < len(es) { // moving on from a seek
				it.Next()
				checkEntry(t, it, es[ge+1], fmt.Sprintf("SeekGE(%q)+Next", key))
			}
		} else if it.SeekGE(key) {
			t.Fatalf("SeekGE(%q) past the end is valid at %q", key, it.Key())
		}
		if lt := ge - 1; lt >= 0 {
			it.SeekLT(key)
			checkEntry(t, it, es[lt], fmt.Sprintf("SeekLT(%q)", key))
			if lt > 0 {
				it.Prev()
				checkEntry(t, it, es[lt-1], fmt.Sprintf("SeekLT(%q)+Prev", key))
			}
		} else if it.SeekLT(key) {
			t.Fatalf("SeekLT(%q) before the start is valid at %q", key, it.Key())
		}
	}
}

func TestProperties(t *testing.T) {
	es := []entry{
		{key: []byte("apple"), seq: 9, kind: base.KindPut, value: []byte("red")},
		{key: []byte("apple"), seq: 4, kind: base.KindDelete},
		{key: []byte("banana"), seq: 7, kind: base.KindPut, value: []byte("yellow")},
		{key: []byte("cherry"), seq: 2, kind: base.KindDelete},
	}
	data, props := writeSegment(t, es, WriterOptions{BitsPerKey: 10, BlockSize: 16})
	r := openSegment(t, data, ReaderOptions{})
	got := r.Properties()
	if !equalProps(got, props) {
		t.Fatalf("reader properties %+v differ from writer's %+v", got, props)
	}
	g := r.Filter().Geometry()
	want := Properties{
		Entries: 4, Tombstones: 2, DistinctKeys: 3, MinSeq: 2, MaxSeq: 9,
		Smallest: []byte("apple"), Largest: []byte("cherry"),
		DataBlocks: len(r.index), DataSize: r.footer.filter.offset,
		IndexSize: r.footer.index.length, FilterSize: r.footer.filter.length,
		FilterLayout: uint8(g.Layout), FilterK: uint8(g.K), FilterBits: g.Bits,
		FormatVersion: formatVersionHashIndex, // data blocks with hash indexes
	}
	if !equalProps(got, want) {
		t.Fatalf("properties %+v, want %+v", got, want)
	}
	if got.DataBlocks < 3 || g.Layout != bloom.Blocked || g.Bits == 0 {
		t.Fatalf("expected several blocks and a blocked filter, got %d blocks, %+v", got.DataBlocks, g)
	}
}

// equalProps compares properties, treating nil and empty keys alike.
func equalProps(a, b Properties) bool {
	for _, p := range []*Properties{&a, &b} {
		if len(p.Smallest) == 0 {
			p.Smallest = nil
		}
		if len(p.Largest) == 0 {
			p.Largest = nil
		}
	}
	return reflect.DeepEqual(a, b)
}

func TestEmptySegment(t *testing.T) {
	for _, bpk := range []float64{0, 10} {
		data, props := writeSegment(t, nil, WriterOptions{BitsPerKey: bpk})
		r := openSegment(t, data, ReaderOptions{Name: "empty.seg"})
		if props.Entries != 0 || props.DataBlocks != 0 {
			t.Fatalf("props of empty segment: %+v", props)
		}
		if _, _, found, err := r.Get([]byte("x"), 5); found || err != nil {
			t.Fatalf("Get on empty segment: %v, %v", found, err)
		}
		if bpk > 0 && r.MayContain(bloom.Hash([]byte("x"))) {
			t.Fatal("empty filter claims a key")
		}
		it := r.NewIter(true)
		if it.First() || it.Last() || it.SeekGE([]byte("a")) || it.SeekLT([]byte("z")) {
			t.Fatal("iterator over empty segment is valid")
		}
		if err := r.Verify(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	es := randomEntries(rng, 5000, 3000)
	data, props := writeSegment(t, es, WriterOptions{BitsPerKey: 10})
	r := openSegment(t, data, ReaderOptions{})
	if props.DistinctKeys == 0 || props.FilterBits < props.DistinctKeys*10 {
		t.Fatalf("filter of %d bits for %d keys", props.FilterBits, props.DistinctKeys)
	}
	for _, e := range es {
		if !r.MayContain(bloom.Hash(e.key)) {
			t.Fatalf("false negative for %q", e.key)
		}
	}
	fp := 0
	const absent = 20000
	for i := range absent {
		if r.MayContain(bloom.Hash([]byte(fmt.Sprintf("absent-%d", i)))) {
			fp++
		}
	}
	if rate := float64(fp) / absent; rate > 0.03 {
		t.Fatalf("false-positive rate %.4f at 10 bits/key", rate)
	}

	noFilter := openSegment(t, func() []byte { d, _ := writeSegment(t, es, WriterOptions{}); return d }(), ReaderOptions{})
	if noFilter.Filter() != nil || !noFilter.MayContain(bloom.Hash([]byte("absent"))) {
		t.Fatal("a segment without a filter must report every key as possible")
	}
}

func TestSetFilter(t *testing.T) {
	es := []entry{
		{key: []byte("a"), seq: 1, kind: base.KindPut},
		{key: []byte("b"), seq: 2, kind: base.KindPut},
	}
	union := bloom.NewBitsPerKey(1000, 10) // larger than what the keys need, as after a union
	for _, k := range []string{"a", "b", "z"} {
		union.AddHash(bloom.Hash([]byte(k)))
	}
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BitsPerKey: 10})
	w.SetFilter(union)
	for _, e := range es {
		if err := w.Add(e.key, e.seq, e.kind, e.value); err != nil {
			t.Fatal(err)
		}
	}
	props, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if props.FilterBits != union.Geometry().Bits {
		t.Fatalf("filter bits %d, want the supplied filter's %d", props.FilterBits, union.Geometry().Bits)
	}
	r := openSegment(t, buf.Bytes(), ReaderOptions{})
	if !r.MayContain(bloom.Hash([]byte("z"))) {
		t.Fatal("the supplied filter was not written")
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyDetectsFilterFalseNegative(t *testing.T) {
	es := []entry{{key: []byte("a"), seq: 1, kind: base.KindPut}, {key: []byte("b"), seq: 2, kind: base.KindPut}}
	f := bloom.NewBitsPerKey(2, 10)
	f.AddHash(bloom.Hash([]byte("a"))) // "b" missing
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{})
	w.SetFilter(f)
	for _, e := range es {
		if err := w.Add(e.key, e.seq, e.kind, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	r := openSegment(t, buf.Bytes(), ReaderOptions{Name: "fn.seg"})
	err := r.Verify()
	var ce *base.CorruptError
	if !errors.As(err, &ce) || ce.File != "fn.seg" {
		t.Fatalf("Verify = %v, want a corruption error about the filter", err)
	}
}

func TestWriterRejects(t *testing.T) {
	tests := []struct {
		name  string
		first entry
		next  entry
	}{
		{"smaller user key", entry{key: []byte("b"), seq: 1}, entry{key: []byte("a"), seq: 2}},
		{"older version first", entry{key: []byte("a"), seq: 1}, entry{key: []byte("a"), seq: 2}},
		{"duplicate", entry{key: []byte("a"), seq: 1}, entry{key: []byte("a"), seq: 1}},
		{"seq too large", entry{key: []byte("a"), seq: 1}, entry{key: []byte("b"), seq: base.MaxSeq + 1}},
		{"bad kind", entry{key: []byte("a"), seq: 1}, entry{key: []byte("b"), seq: 1, kind: 7}},
		{"huge entry", entry{key: []byte("a"), seq: 1}, entry{key: []byte("b"), seq: 1, value: make([]byte, MaxEntrySize)}},
		{"huge key", entry{key: []byte("a"), seq: 1}, entry{key: bytes.Repeat([]byte("b"), MaxKeySize+1), seq: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWriter(&bytes.Buffer{}, WriterOptions{})
			if err := w.Add(tc.first.key, tc.first.seq, tc.first.kind, tc.first.value); err != nil {
				t.Fatal(err)
			}
			if err := w.Add(tc.next.key, tc.next.seq, tc.next.kind, tc.next.value); err == nil {
				t.Fatal("Add accepted it")
			}
			if _, err := w.Finish(); err == nil {
				t.Fatal("Finish succeeded after a failed Add")
			}
		})
	}
	w := NewWriter(&bytes.Buffer{}, WriterOptions{})
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add([]byte("a"), 1, base.KindPut, nil); err == nil {
		t.Fatal("Add after Finish accepted")
	}
}

// countingWriter records the size of each Write.
type countingWriter struct{ writes []int }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes = append(c.writes, len(p))
	return len(p), nil
}

func TestWriterMakesFewLargeWrites(t *testing.T) {
	var cw countingWriter
	w := NewWriter(&cw, WriterOptions{BitsPerKey: 10})
	value := bytes.Repeat([]byte("v"), 100)
	for i := range 20000 {
		if err := w.Add([]byte(fmt.Sprintf("key%08d", i)), 1, base.KindPut, value); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range cw.writes {
		total += n
	}
	if limit := total/DefaultChunkSize + 2; len(cw.writes) > limit {
		t.Fatalf("%d writes for %d bytes, want at most %d", len(cw.writes), total, limit)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriterReportsWriteError(t *testing.T) {
	boom := errors.New("disk full")
	w := NewWriter(failingWriter{boom}, WriterOptions{})
	if err := w.Add([]byte("a"), 1, base.KindPut, nil); err != nil {
		t.Fatal(err) // buffered: nothing written yet
	}
	if _, err := w.Finish(); !errors.Is(err, boom) {
		t.Fatalf("Finish = %v, want %v", err, boom)
	}
}

func TestSeparator(t *testing.T) {
	ik := func(k string, seq uint64) []byte {
		return appendInternalKey(nil, []byte(k), base.MakeTrailer(seq, base.KindPut))
	}
	tests := []struct {
		last []byte
		next string
		want []byte
	}{
		{ik("abc", 5), "abz", appendInternalKey(nil, []byte("abd"), maxTrailer)},
		{ik("abc", 5), "abd", ik("abc", 5)},                                        // no room between c and d, nothing after c
		{ik("abc", 5), "abcd", ik("abc", 5)},                                       // last is a prefix of next
		{ik("abc", 5), "abc", ik("abc", 5)},                                        // versions of one key span the blocks
		{ik("a\xff", 5), "b\x00", appendInternalKey(nil, []byte("b"), maxTrailer)}, // a prefix of next
		{ik("helloworld", 1), "hz", appendInternalKey(nil, []byte("hf"), maxTrailer)},
		// A counter in a long key: a prefix of next.
		{ik("user/0041/profile", 1), "user/0042/profile", appendInternalKey(nil, []byte("user/0042"), maxTrailer)},
		// No room at byte i and next ends there: last's next byte that
		// is not 0xff, incremented.
		{ik("ab\xff\xffq", 1), "ac", appendInternalKey(nil, []byte("ab\xff\xffr"), maxTrailer)},
		{ik("ab\xff\xff", 1), "ac", ik("ab\xff\xff", 1)}, // none
		{ik("ab", 1), "ac", ik("ab", 1)},
	}
	for _, tc := range tests {
		got := appendSeparator(nil, tc.last, []byte(tc.next))
		if !bytes.Equal(got, tc.want) {
			t.Errorf("separator(%q, %q) = %q, want %q", tc.last, tc.next, got, tc.want)
		}
		gk, gt := splitInternalKey(got)
		lk, lt := splitInternalKey(tc.last)
		if base.Compare(lk, lt, gk, gt) > 0 || base.Compare(gk, gt, []byte(tc.next), 0) >= 0 {
			t.Errorf("separator(%q, %q) = %q is not in [last, next)", tc.last, tc.next, got)
		}
	}
	// Pairs of keys over a few bytes, 0xff among them: the separator lies
	// in [last, next) and is no longer than last.
	rng := rand.New(rand.NewPCG(5, 6))
	key := func() []byte {
		k := make([]byte, 1+rng.IntN(5))
		for i := range k {
			k[i] = []byte{0, 'a', 'b', 0xfe, 0xff}[rng.IntN(5)]
		}
		return k
	}
	for range 20000 {
		a, b := key(), key()
		if bytes.Compare(a, b) > 0 {
			a, b = b, a
		}
		last := appendInternalKey(nil, a, base.MakeTrailer(rng.Uint64N(100), base.KindPut))
		got := appendSeparator(nil, last, b)
		gk, gt := splitInternalKey(got)
		_, lt := splitInternalKey(last)
		if base.Compare(a, lt, gk, gt) > 0 || base.Compare(gk, gt, b, 0) >= 0 || len(got) > len(last) {
			t.Fatalf("separator(%q, %q) = %q is not in [last, next), or longer than last", last, b, got)
		}
	}
}

// TestLargeValues covers blocks far above BlockSize, including ones that
// bypass the Writer's output buffer, with and without compression.
func TestLargeValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	random := make([]byte, 3*HugeChunkSize)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	es := []entry{
		{key: []byte("a"), seq: 1, kind: base.KindPut, value: []byte("small")},
		{key: []byte("b"), seq: 2, kind: base.KindPut, value: random[:HugeChunkSize+1]},
		{key: []byte("c"), seq: 3, kind: base.KindPut, value: bytes.Repeat([]byte("z"), 2*HugeChunkSize)},
		{key: []byte("d"), seq: 4, kind: base.KindPut, value: random},
	}
	for _, compress := range allCompressions {
		data, _ := writeSegment(t, es, WriterOptions{Compression: compress, BitsPerKey: 10})
		r := openSegment(t, data, ReaderOptions{Cache: NewCache(16 << 20)})
		for _, e := range es {
			checkGet(t, r, es, e.key, 10)
		}
		if err := r.Verify(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConcurrentReaders runs Gets and scans on one Reader and cache from
// several goroutines (meaningful under -race).
func TestConcurrentReaders(t *testing.T) {
	es := randomEntries(rand.New(rand.NewPCG(15, 16)), 3000, 500)
	data, _ := writeSegment(t, es, WriterOptions{BlockSize: 512, Compression: SnappyCompression, BitsPerKey: 10})
	r := openSegment(t, data, ReaderOptions{Cache: NewCache(32 << 10), Counters: &Counters{}})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 17))
			for range 500 {
				e := es[rng.IntN(len(es))]
				want, _ := modelGet(es, e.key, e.seq)
				v, kind, found, err := r.Get(e.key, e.seq)
				if err != nil || !found || kind != want.kind || !bytes.Equal(v, want.value) {
					errs <- fmt.Errorf("Get(%q, %d) = %q, %v, %v, %v", e.key, e.seq, v, kind, found, err)
					return
				}
			}
			it := r.NewIter(g%2 == 0)
			n := 0
			for ok := it.First(); ok; ok = it.Next() {
				n++
			}
			if err := it.Close(); err != nil || n != len(es) {
				errs <- fmt.Errorf("scan saw %d of %d entries: %v", n, len(es), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCompressionSkipsIncompressibleRuns: after a run of incompressible
// blocks the writer stops trying snappy on most blocks, but data that
// compresses again is compressed again within skipProbe blocks, and every
// block reads back.
func TestCompressionSkipsIncompressibleRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	const perHalf = 4000 // about 100 blocks of 4 KiB each
	var es []entry
	for i := range 2 * perHalf {
		v := make([]byte, 100)
		if i < perHalf {
			for j := range v {
				v[j] = byte(rng.UintN(256))
			}
		} else {
			copy(v, bytes.Repeat([]byte("compressible "), 8))
		}
		es = append(es, entry{key: fmt.Appendf(nil, "k%06d", i), seq: uint64(i + 1), kind: base.KindPut, value: v})
	}
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BlockSize: 4096, Compression: SnappyCompression})
	compressedAt := -1
	for i, e := range es {
		mustAdd(t, w, e)
		if i >= perHalf && compressedAt < 0 && w.incompressible == 0 && w.props.DataBlocks > 0 {
			compressedAt = w.props.DataBlocks
		}
	}
	props, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	half := props.DataBlocks / 2
	if compressedAt < 0 || compressedAt > half+skipProbe+1 {
		t.Fatalf("compression resumed at block %d of %d, want within %d blocks of %d", compressedAt, props.DataBlocks, skipProbe, half)
	}
	r := openSegment(t, buf.Bytes(), ReaderOptions{})
	for _, e := range es {
		v, _, ok, err := r.Get(e.key, base.MaxSeq)
		if err != nil || !ok || !bytes.Equal(v, e.value) {
			t.Fatalf("Get(%q) = %v, %v, %v", e.key, ok, err, len(v))
		}
	}
}

func mustAdd(t *testing.T, w *Writer, e entry) {
	t.Helper()
	if err := w.Add(e.key, e.seq, e.kind, e.value); err != nil {
		t.Fatal(err)
	}
}

// offsetWriter records the file offset at which each Write ends.
type offsetWriter struct {
	n    int
	ends []int
}

func (o *offsetWriter) Write(p []byte) (int, error) {
	o.n += len(p)
	o.ends = append(o.ends, o.n)
	return len(p), nil
}

// TestWriterWritesAlignedChunks: every Write but the last ends at a
// multiple of the chunk size in the file, so that a page cache can hold
// each chunk in one folio (see HugeChunkSize), the value records written
// past the buffer included.
func TestWriterWritesAlignedChunks(t *testing.T) {
	for _, c := range []struct{ apart, chunk, want int }{
		{0, 0, DefaultChunkSize}, {512, 0, DefaultChunkSize}, {0, HugeChunkSize, HugeChunkSize}, {512, HugeChunkSize, HugeChunkSize},
	} {
		apart := c.apart
		var ow offsetWriter
		w := NewWriter(&ow, WriterOptions{BitsPerKey: 10, SeparateValues: apart, ChunkSize: c.chunk})
		value := make([]byte, 1000)
		for i := range 9000 {
			binary.LittleEndian.PutUint64(value, uint64(i))
			if err := w.Add([]byte(fmt.Sprintf("key%08d", i)), 1, base.KindPut, value); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if len(ow.ends) < 4 {
			t.Fatalf("values apart from %d: %d writes of %d bytes, want 4 or more", apart, len(ow.ends), ow.n)
		}
		for i, end := range ow.ends[:len(ow.ends)-1] {
			if end%c.want != 0 {
				t.Fatalf("values apart from %d: write %d of %d ends at %d, not a multiple of %d", apart, i, len(ow.ends), end, c.want)
			}
		}
	}
}

// TestKeysHint: a segment written with a hint of its key count, short,
// exact or far over, is byte for byte the one written without, and with
// an exact hint the hash list is allocated once.
func TestKeysHint(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	es := randomEntries(rng, 3000, 2000)
	distinct := 0
	for i := range es {
		if i == 0 || !bytes.Equal(es[i].key, es[i-1].key) {
			distinct++
		}
	}
	want, _ := writeSegment(t, es, WriterOptions{BitsPerKey: 10})
	for _, hint := range []int{1, distinct / 2, distinct, 10 * distinct} {
		if got, _ := writeSegment(t, es, WriterOptions{BitsPerKey: 10, KeysHint: hint}); !bytes.Equal(got, want) {
			t.Fatalf("KeysHint %d (%d keys): the segment differs from one written without a hint", hint, distinct)
		}
	}
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BitsPerKey: 10, KeysHint: distinct})
	first := &w.hashes[:1][0]
	for _, e := range es {
		mustAdd(t, w, e)
	}
	if len(w.hashes) != distinct || &w.hashes[0] != first {
		t.Fatalf("%d hashes for %d keys, reallocated %v; want the hinted list filled in place", len(w.hashes), distinct, &w.hashes[0] != first)
	}
}

// TestLongKeysShortIndex: a segment of keys longer than a block, which
// first differ in a counter near their start, keeps an index of short
// separators: its reader holds a few bytes a block, not a key. The
// separator was the block's last key wherever the counter's digit went
// up by one, as it does between most neighbours, so the index a reader
// keeps held every key whole: 4 MiB here, as much as the data blocks
// (and the index block as much again in the file, 8.4 MB instead of
// 4.3). Every key is still found, and the segment verifies.
func TestLongKeysShortIndex(t *testing.T) {
	var es []entry
	for i := range 256 {
		k := make([]byte, 16<<10) // four blocks' worth: one entry a block
		copy(k, fmt.Sprintf("user/%06d/", i))
		es = append(es, entry{key: k, seq: uint64(i + 1), kind: base.KindPut, value: []byte("v")})
	}
	data, props := writeSegment(t, es, WriterOptions{BitsPerKey: 10})
	r := openSegment(t, data, ReaderOptions{})
	defer r.Close()
	keys := 0
	for i := range r.index {
		keys += len(r.index[i].userKey)
	}
	// The last block's separator is its last key.
	if props.DataBlocks < 256 || keys > 16*props.DataBlocks+len(es[len(es)-1].key) {
		t.Errorf("%d data blocks, whose separators' user keys take %d bytes in the reader's index", props.DataBlocks, keys)
	}
	for _, e := range es {
		checkGet(t, r, es, e.key, e.seq)
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
}
