package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// rangeCoveredEntries returns 10 keys of two versions each and a
// tombstone: 21 entries, 11 distinct keys, 20 puts.
func rangeCoveredEntries() []entry {
	var es []entry
	for i := range 10 {
		k := fmt.Appendf(nil, "k%02d", i)
		es = append(es, entry{k, 20, base.KindPut, []byte("new")}, entry{k, 10, base.KindPut, []byte("old")})
	}
	return append(es, entry{[]byte("z"), 30, base.KindDelete, nil})
}

// writeRangeCovered writes rangeCoveredEntries with RangeCovered n.
func writeRangeCovered(t *testing.T, n uint64) ([]byte, Properties, error) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BitsPerKey: 10})
	for _, e := range rangeCoveredEntries() {
		if err := w.Add(e.key, e.seq, e.kind, e.value); err != nil {
			t.Fatal(err)
		}
	}
	w.SetRangeCovered(n)
	p, err := w.Finish()
	return buf.Bytes(), p, err
}

// TestRangeCoveredProperty: the count a writer is given is stored, read
// back and passes Verify; absent, it reads as 0 and is not written; a
// count no segment can hold is refused by the writer.
func TestRangeCoveredProperty(t *testing.T) {
	for _, n := range []uint64{0, 1, 10} {
		file, props, err := writeRangeCovered(t, n)
		if err != nil {
			t.Fatalf("n=%d: Finish: %v", n, err)
		}
		r := openSegment(t, file, ReaderOptions{Name: corruptName})
		if props.RangeCovered != n || r.Properties().RangeCovered != n {
			t.Fatalf("n=%d: Finish says %d, the reader %d", n, props.RangeCovered, r.Properties().RangeCovered)
		}
		if !equalProps(r.Properties(), props) {
			t.Fatalf("n=%d: read %+v, wrote %+v", n, r.Properties(), props)
		}
		if err := r.Verify(); err != nil {
			t.Fatalf("n=%d: Verify: %v", n, err)
		}
		if has := bytes.Contains(file, []byte(propRangeCovered)); has != (n > 0) {
			t.Fatalf("n=%d: property written: %v", n, has)
		}
	}
	// 11 distinct keys, but only 10 can hold a put (the tombstone's key
	// has no other version); the bound is on keys and on puts.
	if _, _, err := writeRangeCovered(t, 12); err == nil {
		t.Fatal("Finish accepted 12 range-covered versions among 11 keys")
	}
}

// TestRangeCoveredHostile: a range-covered count above the keys or the
// puts, or a malformed uvarint, is corruption naming the file and the
// properties block's offset, never a panic.
func TestRangeCoveredHostile(t *testing.T) {
	var w blockWriter
	w.restartInterval = 16
	good := Properties{Entries: 5, Tombstones: 2, DistinctKeys: 4, Smallest: []byte("a"), Largest: []byte("b")}
	for _, tc := range []struct {
		name string
		val  []byte
	}{
		{"above puts", binary.AppendUvarint(nil, 4)},
		{"above keys", binary.AppendUvarint(nil, 5)},
		{"huge", binary.AppendUvarint(nil, ^uint64(0))},
		{"truncated uvarint", []byte{0x80}},
		{"trailing bytes", []byte{1, 0}},
		{"overlong uvarint", bytes.Repeat([]byte{0xff}, 11)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			block := replaceProperty(t, encodeProperties(&w, &good), propRangeCovered, tc.val)
			_, err := decodeProperties(block, corruptName, 1234)
			var ce *base.CorruptError
			if !errors.As(err, &ce) || ce.File != corruptName || ce.Offset != 1234 {
				t.Fatalf("decodeProperties = %v, want a corruption error at %s offset 1234", err, corruptName)
			}
		})
	}
	p, err := decodeProperties(replaceProperty(t, encodeProperties(&w, &good), propRangeCovered, []byte{3}), corruptName, 0)
	if err != nil || p.RangeCovered != 3 {
		t.Fatalf("range-covered 3 of 3 puts: %d, %v", p.RangeCovered, err)
	}
}

// replaceProperty returns the properties block with name set to val
// (added where the order puts it if absent).
func replaceProperty(t *testing.T, block []byte, name string, val []byte) []byte {
	t.Helper()
	var it blockIter
	if err := it.init(bytes.Clone(block), false, "", 0); err != nil {
		t.Fatal(err)
	}
	var out blockWriter
	out.restartInterval = 16
	done := false
	for ok := it.first(); ok; ok = it.next() {
		if !done && string(it.key) >= name {
			out.add([]byte(name), val)
			done = true
			if string(it.key) == name {
				continue
			}
		}
		out.add(bytes.Clone(it.key), bytes.Clone(it.val))
	}
	if !done {
		out.add([]byte(name), val)
	}
	return bytes.Clone(out.finish())
}
