package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

const (
	benchEntries  = 100_000
	benchValueLen = 100
)

// benchKey is a 16-byte key; keys sort in i order.
func benchKey(dst []byte, i int) []byte {
	dst = append(dst[:0], "key:"...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(i))
	return append(dst, "\x00pad0000"...)
}

func benchWrite(b testing.TB, w io.Writer, opts WriterOptions) Properties {
	return benchWriteValues(b, w, opts, benchValueLen)
}

// benchWriteValues is benchWrite with values of valueLen (a multiple of
// 10, at least 10) bytes.
func benchWriteValues(b testing.TB, w io.Writer, opts WriterOptions, valueLen int) Properties {
	value := bytes.Repeat([]byte("0123456789"), valueLen/10)
	sw := NewWriter(w, opts)
	var key []byte
	for i := range benchEntries {
		key = benchKey(key, i)
		binary.BigEndian.PutUint32(value, uint32(i)) // not all values equal
		if err := sw.Add(key, uint64(i+1), base.KindPut, value); err != nil {
			b.Fatal(err)
		}
	}
	props, err := sw.Finish()
	if err != nil {
		b.Fatal(err)
	}
	return props
}

var benchOpts = WriterOptions{Compression: SnappyCompression, BitsPerKey: 10}

func BenchmarkWrite(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(benchEntries * (16 + benchValueLen))
	for b.Loop() {
		benchWrite(b, io.Discard, benchOpts)
	}
}

func benchReader(b *testing.B, cache *Cache) *Reader {
	var buf bytes.Buffer
	benchWrite(b, &buf, benchOpts)
	r, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), ReaderOptions{Cache: cache, Counters: &Counters{}, FileNum: 1})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func benchGet(b *testing.B, r *Reader) {
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = benchKey(nil, (i*7919)%benchEntries)
	}
	dst := make([]byte, 0, 256)
	for _, k := range keys { // warm whatever cache there is
		r.GetAppend(dst, k, base.MaxSeq)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, _, found, err := r.GetAppend(dst[:0], keys[i&(len(keys)-1)], base.MaxSeq)
		if !found || err != nil {
			b.Fatal(found, err)
		}
		i++
	}
}

func BenchmarkGetHitWarmCache(b *testing.B) {
	benchGet(b, benchReader(b, NewCache(64<<20)))
}

func BenchmarkGetCacheMiss(b *testing.B) {
	benchGet(b, benchReader(b, nil))
}

// BenchmarkGetMissFilter is the common case of a Get probing a segment
// that lacks the key: the DB hashes once and the filter answers.
func BenchmarkGetMissFilter(b *testing.B) {
	r := benchReader(b, NewCache(64<<20))
	hashes := make([]uint64, 4096)
	for i := range hashes {
		hashes[i] = bloom.Hash([]byte(fmt.Sprintf("absent-key-%07d", i)))
	}
	b.ReportAllocs()
	i, maybe := 0, 0
	for b.Loop() {
		if r.MayContain(hashes[i&(len(hashes)-1)]) {
			maybe++
		}
		i++
	}
	b.ReportMetric(float64(maybe)/float64(i), "fpr")
}

func BenchmarkIterate(b *testing.B) { benchIterate(b, false) }

// BenchmarkIterateReverse is BenchmarkIterate backward, from Last with
// Prev: the prev cache decodes each restart interval once.
func BenchmarkIterateReverse(b *testing.B) { benchIterate(b, true) }

func benchIterate(b *testing.B, reverse bool) {
	r := benchReader(b, nil)
	b.ReportAllocs()
	b.SetBytes(benchEntries * (16 + benchValueLen))
	for b.Loop() {
		it := r.NewIter(false)
		n := 0
		ok, step := it.First, it.Next
		if reverse {
			ok, step = it.Last, it.Prev
		}
		for valid := ok(); valid; valid = step() {
			n++
		}
		if err := it.Close(); err != nil || n != benchEntries {
			b.Fatal(n, err)
		}
	}
}
