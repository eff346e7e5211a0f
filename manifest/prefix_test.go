package manifest

import (
	"bytes"
	"errors"
	"github.com/bloomkv/bloomkv/internal/base"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/vfs"
)

func TestPrefixExtractorRecord(t *testing.T) {
	for _, name := range []string{"x", "bloomkv.FixedPrefix(8)", strings.Repeat("n", MaxPrefixExtractorLen)} {
		b := encodePrefixExtractor(name)
		got, _, err := decodePrefixExtractor(b)
		if err != nil || got != name {
			t.Fatalf("round trip of %q: %q, %v", name, got, err)
		}
		// Every flipped bit and every truncation is caught.
		for i := range b {
			for bit := range 8 {
				bad := bytes.Clone(b)
				bad[i] ^= 1 << bit
				if got, _, err := decodePrefixExtractor(bad); err == nil {
					t.Fatalf("%q: flip of bit %d of byte %d decoded as %q", name, bit, i, got)
				}
			}
			if _, _, err := decodePrefixExtractor(b[:i]); err == nil {
				t.Fatalf("%q: truncation to %d bytes decoded", name, i)
			}
		}
	}
}

func TestPrefixExtractorApply(t *testing.T) {
	m, path := createTemp(t)
	if got := m.State().PrefixExtractor; got != "" {
		t.Fatalf("new manifest has extractor %q", got)
	}
	mustApply(t, m, Edit{PrefixExtractor: "colon", FlushedSeq: ptr(3)})
	mustApply(t, m, Edit{PrefixExtractor: "colon"}) // the same again: a no-op
	mustApply(t, m, Edit{Add: []base.SegmentMeta{seg(5, 1, 3)}})
	for _, bad := range []string{"other", strings.Repeat("n", MaxPrefixExtractorLen+1)} {
		if err := m.Apply(Edit{PrefixExtractor: bad}); !errors.Is(err, ErrInvalidEdit) {
			t.Fatalf("Apply changing the extractor to %.10q: %v, want ErrInvalidEdit", bad, err)
		}
	}
	m = reopen(t, m, path)
	if st := m.State(); st.PrefixExtractor != "colon" || len(st.Segments) != 1 {
		t.Fatalf("after reopen: %+v", st)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := ReadState(vfs.Default, path)
	if err != nil || st.PrefixExtractor != "colon" {
		t.Fatalf("ReadState: extractor %q, %v", st.PrefixExtractor, err)
	}
}

func TestPrefixExtractorDamaged(t *testing.T) {
	m, path := createTemp(t)
	mustApply(t, m, Edit{PrefixExtractor: "colon"})
	if err := m.db.Update(func(tx *bolt.Tx) error {
		v := bytes.Clone(tx.Bucket([]byte(metaBucket)).Get([]byte(keyPrefixExtractor)))
		v[3] ^= 0x20 // "colon" -> "cOlon": the CRC no longer matches
		return tx.Bucket([]byte(metaBucket)).Put([]byte(keyPrefixExtractor), v)
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(vfs.Default, path)
	wantCorrupt(t, err, "MANIFEST")
}

func FuzzDecodePrefixExtractor(f *testing.F) {
	f.Add(encodePrefixExtractor("bloomkv.FixedPrefix(8)"))
	f.Add(encodePrefixExtractor("x"))
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, _, err := decodePrefixExtractor(b)
		if err != nil {
			return
		}
		if !bytes.Equal(encodePrefixExtractor(name), b) {
			t.Fatalf("%x decodes to %q, which encodes differently", b, name)
		}
	})
}
