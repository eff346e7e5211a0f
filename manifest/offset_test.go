package manifest

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
	bolt "go.etcd.io/bbolt"
)

// TestDamagedRecordNamesItsOffset: a record whose bytes no longer match
// their checksum, or that fails a check of its contents, is reported as
// corruption at its place in the file, as every other file of a store
// reports damage: the offset of the value's byte where the decoder
// stopped, not "offset unknown". The damaged value is written through
// bbolt, so the file stays a valid bbolt database and only the record is
// wrong; its place is found by searching the file for its bytes. The
// small buckets are stored inline in their parent, where bbolt may read a
// copy; a bucket of 200 segments has pages of its own, read in place.
func TestDamagedRecordNamesItsOffset(t *testing.T) {
	seg := sampleMeta()
	var many []base.SegmentMeta
	for i := range 200 {
		m := sampleMeta()
		m.FileNum = uint64(i + 1)
		many = append(many, m)
	}
	for _, tc := range []struct {
		name        string
		bucket, key []byte
		setup       Edit
		damage      func(v []byte)
	}{
		{"segment record of many, checksum", []byte(segmentsBucket), u64(seg.FileNum), Edit{Add: many}, func(v []byte) { v[len(v)/2] ^= 0x10 }},
		// The value then appears more than once in the file, as file
		// 42's and 43's (and in pages bbolt freed): only the value's own
		// place in the mapping tells which is 42's, and the error must
		// give one where the value starts, not "offset unknown".
		{"segment record of many, a copy of the next", []byte(segmentsBucket), u64(seg.FileNum), Edit{Add: many}, func(v []byte) {
			next := seg
			next.FileNum++
			copy(v, encodeSegmentMeta(next))
		}},
		{"segment record, checksum", []byte(segmentsBucket), u64(seg.FileNum), Edit{Add: []base.SegmentMeta{seg}}, func(v []byte) { v[len(v)/2] ^= 0x10 }},
		{"segment record, other file", []byte(segmentsBucket), u64(seg.FileNum), Edit{Add: []base.SegmentMeta{seg}}, func(v []byte) {
			other := seg
			other.FileNum++
			copy(v, encodeSegmentMeta(other))
		}},
		{"counters", []byte(metaBucket), []byte(keyCounters), Edit{}, func(v []byte) { v[2] ^= 0x01 }},
		{"prefix extractor", []byte(metaBucket), []byte(keyPrefixExtractor), Edit{PrefixExtractor: "colon"}, func(v []byte) { v[3] ^= 0x20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, path := createTemp(t)
			next := uint64(1000)
			tc.setup.NextFileNum = &next
			mustApply(t, m, tc.setup)
			var bad []byte
			if err := m.db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(tc.bucket)
				bad = bytes.Clone(b.Get(tc.key))
				if bad == nil {
					return errors.New("no such record")
				}
				tc.damage(bad)
				return b.Put(tc.key, bad)
			}); err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			copied := strings.Contains(tc.name, "a copy")
			at := bytes.Index(data, bad)
			if n := bytes.Count(data, bad); at < 0 || n == 1 == copied {
				t.Fatalf("the damaged value is in the file %d times: not the case under test", n)
			}
			_, err = Open(vfs.Default, path)
			var ce *base.CorruptError
			if !errors.As(err, &ce) || ce.File != "MANIFEST" {
				t.Fatalf("Open = %v, want corruption of MANIFEST", err)
			}
			if copied {
				if ce.Offset < 0 || !bytes.HasPrefix(data[ce.Offset:], bad) {
					t.Fatalf("Open = %v: offset %d, want the start of one of the value's copies", err, ce.Offset)
				}
				return
			}
			if ce.Offset < int64(at) || ce.Offset >= int64(at+len(bad)) {
				t.Fatalf("Open = %v: offset %d, want within the damaged value at [%d, %d)", err, ce.Offset, at, at+len(bad))
			}
		})
	}
}
