package bloomkv

import (
	"bytes"
	"errors"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
)

func TestBatchRoundTrip(t *testing.T) {
	b := NewBatch()
	b.Put([]byte("a"), []byte("1"))
	b.Delete([]byte("b"))
	b.Put([]byte("c"), nil)
	rec := b.setSeq(42)
	var got []string
	err := batch.Decode(rec, "x.wal", 16, func(seq uint64, op batch.Op) {
		got = append(got, string(rune('0'+seq-42))+op.Kind.String()+string(op.Key)+string(op.Value))
	})
	want := []string{"0puta1", "1deleteb", "2putc"}
	if err != nil || len(got) != len(want) {
		t.Fatalf("decode: %v, %q", err, got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("op %d = %q, want %q", i, got[i], want[i])
		}
	}
	for cut := range len(rec) {
		if err := batch.Decode(rec[:cut], "x.wal", 16, func(uint64, batch.Op) {}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated at %d: %v, want ErrCorrupt", cut, err)
		}
	}
}

// FuzzDecodeBatch feeds arbitrary WAL payloads to the batch decoder: it must
// reject or decode, never panic, and what it decodes must re-encode to the
// same bytes.
func FuzzDecodeBatch(f *testing.F) {
	b := NewBatch()
	b.Put([]byte("key"), []byte("value"))
	b.Delete([]byte("gone"))
	f.Add(bytes.Clone(b.setSeq(7)))
	b.DeleteRange(nil, []byte("m"))
	b.DeleteRange([]byte("p"), []byte("q"))
	f.Add(bytes.Clone(b.setSeq(9)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, rec []byte) {
		re := NewBatch()
		var first uint64
		err := batch.Decode(rec, "fuzz.wal", 0, func(seq uint64, op batch.Op) {
			if first == 0 {
				first = seq
			}
			switch op.Kind {
			case base.KindPut:
				re.Put(op.Key, op.Value)
			case base.KindRangeDelete:
				if err := re.DeleteRange(op.Key, op.Value); err != nil || re.count == 0 {
					t.Fatalf("decoded a range deletion [%q, %q) that DeleteRange refuses or drops: %v", op.Key, op.Value, err)
				}
			default:
				re.Delete(op.Key)
			}
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if re.count == 0 {
			return
		}
		if re.err == nil && !bytes.Equal(re.setSeq(first), rec) {
			t.Fatalf("re-encoding differs")
		}
	})
}
