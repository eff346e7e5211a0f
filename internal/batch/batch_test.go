package batch

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// decoded is one operation as Decode hands it over, with its sequence
// number, copied out of the record.
type decoded struct {
	seq        uint64
	kind       base.Kind
	key, value string
}

func (d decoded) String() string {
	short := func(s string) string {
		if len(s) > 20 {
			return fmt.Sprintf("%.20q…(%d bytes)", s, len(s))
		}
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("#%d %v %s %s", d.seq, d.kind, short(d.key), short(d.value))
}

func decodeAll(rec []byte) ([]decoded, error) {
	var got []decoded
	err := Decode(rec, "000001.log", 42, func(seq uint64, op Op) {
		got = append(got, decoded{seq, op.Kind, string(op.Key), string(op.Value)})
	})
	return got, err
}

// record builds a record of ops (kind, key, value triples as decoded)
// with the header seq and count.
func record(seq uint64, count uint32, ops ...decoded) []byte {
	rec := make([]byte, HeaderLen)
	for _, op := range ops {
		rec = AppendOp(rec, op.kind, []byte(op.key), []byte(op.value))
	}
	SetHeader(rec, seq, count)
	return rec
}

// TestDecodeReturnsWhatAppendOpWrote pins the round trip: every operation
// AppendOp wrote comes back from Decode in order, numbered from the
// header's sequence number, a deletion without a value, and the boundary
// sizes the store's API accepts (a 128-byte key, whose length takes two
// varint bytes; the largest key and value; a range deletion from the empty
// key) decode as written.
func TestDecodeReturnsWhatAppendOpWrote(t *testing.T) {
	maxKey := strings.Repeat("k", base.MaxKeySize)
	for _, tc := range []struct {
		name string
		seq  uint64
		ops  []decoded
	}{
		{"no operations", 1, nil},
		{"put", 7, []decoded{{kind: base.KindPut, key: "a", value: "v"}}},
		{"put with empty value", 7, []decoded{{kind: base.KindPut, key: "a"}}},
		{"delete then put", 9, []decoded{
			{kind: base.KindDelete, key: "a"},
			{kind: base.KindPut, key: "b", value: "vb"},
		}},
		{"mixed", 100, []decoded{
			{kind: base.KindPut, key: "a", value: "1"},
			{kind: base.KindRangeDelete, key: "b", value: "d"},
			{kind: base.KindDelete, key: "e"},
			{kind: base.KindRangeDelete, key: "", value: "a"},
			{kind: base.KindPut, key: "z", value: ""},
		}},
		{"127- and 128-byte keys", 3, []decoded{
			{kind: base.KindPut, key: strings.Repeat("x", 127), value: strings.Repeat("y", 128)},
			{kind: base.KindPut, key: strings.Repeat("x", 128), value: strings.Repeat("y", 127)},
		}},
		{"largest key", 5, []decoded{{kind: base.KindPut, key: maxKey, value: "v"}}},
		{"largest value", 5, []decoded{{kind: base.KindPut, key: "k", value: strings.Repeat("v", base.MaxValueSize)}}},
		{"range to the largest key", 5, []decoded{{kind: base.KindRangeDelete, key: "", value: maxKey}}},
		{"range from the largest key", 5, []decoded{{kind: base.KindRangeDelete, key: maxKey, value: "l"}}},
		{"last sequence numbers", base.MaxSeq - 2, []decoded{
			{kind: base.KindDelete, key: "a"},
			{kind: base.KindDelete, key: "b"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.ops {
				tc.ops[i].seq = tc.seq + uint64(i)
			}
			rec := record(tc.seq, uint32(len(tc.ops)), tc.ops...)
			got, err := decodeAll(rec)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(got) != len(tc.ops) {
				t.Fatalf("Decode gave %d operations, want %d", len(got), len(tc.ops))
			}
			for i := range got {
				if got[i] != tc.ops[i] {
					t.Errorf("operation %d = %v, want %v", i, got[i], tc.ops[i])
				}
			}
		})
	}
}

// TestAppendOpWritesNoValueForADeletion pins that a deletion is kind and
// key only, while a put and a range deletion carry a second length.
func TestAppendOpWritesNoValueForADeletion(t *testing.T) {
	for _, tc := range []struct {
		kind base.Kind
		want []byte
	}{
		{base.KindDelete, []byte{byte(base.KindDelete), 1, 'a'}},
		{base.KindPut, []byte{byte(base.KindPut), 1, 'a', 1, 'b'}},
		{base.KindRangeDelete, []byte{byte(base.KindRangeDelete), 1, 'a', 1, 'b'}},
	} {
		rec := AppendOp(nil, tc.kind, []byte("a"), []byte("b"))
		if !bytes.Equal(rec[:HeaderLen], make([]byte, HeaderLen)) || !bytes.Equal(rec[HeaderLen:], tc.want) {
			t.Errorf("AppendOp(nil, %v, a, b) = %v, want %d zero bytes then %v", tc.kind, rec, HeaderLen, tc.want)
		}
	}
}

// TestDecodeRefusesWhatTheAPINeverWrites pins each of Decode's checks at
// its boundary: every record here is one step past what AppendOp and
// SetHeader write for an operation the store accepts, and each is reported
// as corruption of the file at the offset given, with no operation of a
// refused record handed on after the bad one.
func TestDecodeRefusesWhatTheAPINeverWrites(t *testing.T) {
	put := decoded{kind: base.KindPut, key: "a", value: "v"}
	tooLongKey := strings.Repeat("k", base.MaxKeySize+1)
	withTail := func(rec []byte, tail ...byte) []byte { return append(rec, tail...) }
	for _, tc := range []struct {
		name string
		rec  []byte
	}{
		{"shorter than its header", make([]byte, HeaderLen-1)},
		{"sequence number 0", record(0, 1, put)},
		{"sequence numbers past MaxSeq", record(base.MaxSeq-1, 2, put, put)},
		{"sequence number past MaxSeq", record(base.MaxSeq, 1, put)},
		{"operation missing", record(1, 2, put)},
		{"trailing bytes", withTail(record(1, 1, put), 0)},
		{"unknown kind", withTail(record(1, 1), byte(base.KindRangeDelete)+1, 1, 'a', 1, 'b')},
		{"put with empty key", record(1, 1, decoded{kind: base.KindPut, value: "v"})},
		{"delete with empty key", record(1, 1, decoded{kind: base.KindDelete})},
		{"key too long", record(1, 1, decoded{kind: base.KindDelete, key: tooLongKey})},
		{"value too long", record(1, 1, decoded{kind: base.KindPut, key: "k", value: strings.Repeat("v", base.MaxValueSize+1)})},
		{"put without its value", withTail(record(1, 1), byte(base.KindPut), 1, 'a')},
		{"key length beyond the record", withTail(record(1, 1), byte(base.KindDelete), 2, 'a')},
		{"value length beyond the record", withTail(record(1, 1), byte(base.KindPut), 1, 'a', 2, 'v')},
		{"key length not in shortest form", withTail(record(1, 1), byte(base.KindDelete), 0x81, 0x00, 'a')},
		{"value length not in shortest form", withTail(record(1, 1), byte(base.KindPut), 1, 'a', 0x80, 0x00)},
		{"key length unterminated", withTail(record(1, 1), byte(base.KindDelete), 0x81)},
		{"range start equal to end", record(1, 1, decoded{kind: base.KindRangeDelete, key: "b", value: "b"})},
		{"range start above end", record(1, 1, decoded{kind: base.KindRangeDelete, key: "c", value: "b"})},
		{"empty range", record(1, 1, decoded{kind: base.KindRangeDelete})},
		{"range end too long", record(1, 1, decoded{kind: base.KindRangeDelete, key: "a", value: tooLongKey})},
		{"range start too long", record(1, 1, decoded{kind: base.KindRangeDelete, key: tooLongKey, value: tooLongKey + "k"})},
		{"range end missing", withTail(record(1, 1), byte(base.KindRangeDelete), 1, 'a')},
		{"range end beyond the record", withTail(record(1, 1), byte(base.KindRangeDelete), 1, 'a', 2, 'b')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeAll(tc.rec)
			var ce *base.CorruptError
			if !errors.Is(err, base.ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("Decode = %v, want a *CorruptError", err)
			}
			if ce.File != "000001.log" || ce.Offset != 42 {
				t.Errorf("corruption reported in %s at %d, want 000001.log at 42", ce.File, ce.Offset)
			}
			for _, op := range got {
				if op.kind != put.kind || op.key != put.key {
					t.Errorf("Decode handed on %v from a refused record", op)
				}
			}
		})
	}
}

// TestDecodedSlicesCannotGrowIntoTheRecord pins that a key or value handed
// to fn has no capacity past its end, so that appending to it copies
// instead of overwriting the operations after it in the record.
func TestDecodedSlicesCannotGrowIntoTheRecord(t *testing.T) {
	rec := record(1, 3,
		decoded{kind: base.KindPut, key: "a", value: "1"},
		decoded{kind: base.KindRangeDelete, key: "b", value: "c"},
		decoded{kind: base.KindDelete, key: "d"})
	var got []string
	err := Decode(rec, "f", 0, func(_ uint64, op Op) {
		got = append(got, string(op.Key)+"="+string(op.Value))
		_ = append(op.Key, 0xff, 0xff, 0xff)
		_ = append(op.Value, 0xff, 0xff, 0xff)
	})
	if err != nil || strings.Join(got, " ") != "a=1 b=c d=" {
		t.Errorf("Decode with appending fn = %q, %v; want [a=1 b=c d=], nil", got, err)
	}
}

// TestRecordLayout pins the bytes of a record to the package doc: a
// 12-byte header of seq (uint64) and count (uint32), little-endian, then
// the operations.
func TestRecordLayout(t *testing.T) {
	rec := AppendOp(nil, base.KindDelete, []byte("a"), nil)
	SetHeader(rec, 0x0807060504030201, 0x0c0b0a09)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, byte(base.KindDelete), 1, 'a'}
	if !bytes.Equal(rec, want) {
		t.Errorf("record = %v, want %v", rec, want)
	}
}

// TestOpSize: OpSize is exactly what AppendOp adds, on both sides of every
// uvarint length boundary up to the largest value, since the root
// package's Batch lets a batch grow to the last byte of MaxBatchSize by it.
func TestOpSize(t *testing.T) {
	lens := []int{0, 1}
	for n := 1 << 7; n <= base.MaxValueSize; n <<= 7 {
		lens = append(lens, n-1, n)
	}
	lens = append(lens, base.MaxKeySize, base.MaxValueSize)
	buf := make([]byte, base.MaxValueSize)
	out := make([]byte, HeaderLen, HeaderLen+base.MaxKeySize+base.MaxValueSize+16)
	for _, kind := range []base.Kind{base.KindPut, base.KindDelete, base.KindRangeDelete} {
		for _, k := range lens {
			if k > base.MaxKeySize {
				continue
			}
			for _, v := range lens {
				if kind == base.KindDelete && v > 0 {
					continue
				}
				rec := AppendOp(out[:HeaderLen], kind, buf[:k], buf[:v])
				if got, want := OpSize(kind, k, v), len(rec)-HeaderLen; got != want {
					t.Errorf("OpSize(%v, %d, %d) = %d, AppendOp added %d", kind, k, v, got, want)
				}
			}
		}
	}
}
