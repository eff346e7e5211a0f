package wal

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// FuzzReader feeds arbitrary bytes to the Reader. It must never panic, must
// end with one of its documented errors, and whatever records it accepts
// must be exactly what the Writer would have written: re-encoding them
// reproduces the accepted prefix byte for byte.
func FuzzReader(f *testing.F) {
	valid := &fakeFile{}
	w, err := NewWriter(valid, "seed.wal")
	if err != nil {
		f.Fatal(err)
	}
	if _, err := w.WriteRecords([]byte("hello"), nil, bytes.Repeat([]byte("z"), 100)); err != nil {
		f.Fatal(err)
	}
	seed := valid.Bytes()
	f.Add([]byte{})
	f.Add(seed[:fileHeaderSize])
	f.Add(seed)
	f.Add(seed[:len(seed)-7])
	f.Add(append(bytes.Clone(seed), make([]byte, 20)...))
	f.Add(append(bytes.Clone(seed[:fileHeaderSize]), rawRecord(1, MaxRecordSize+1, nil)...))
	f.Add(append(bytes.Clone(seed[:fileHeaderSize]), rawRecord(7, 2, []byte("hi"))...))

	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), "fuzz.wal")
		got, err := readAll(r)
		end := r.Offset()
		if !(err == io.EOF || errors.Is(err, ErrTornTail) || errors.Is(err, base.ErrCorrupt)) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if end < 0 || end > int64(len(data)) || (end == 0 && len(got) > 0) {
			t.Fatalf("Offset %d outside [0, %d] with %d records", end, len(data), len(got))
		}
		if end == 0 {
			return
		}
		out := &fakeFile{}
		w, err := NewWriter(out, "fuzz.wal")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 {
			if _, err := w.WriteRecords(got...); err != nil {
				t.Fatal(err)
			}
		}
		enc, want := out.Bytes(), data[:end]
		if r.version != formatVersion {
			// A log of an earlier version (a seed written then): the
			// Writer writes today's file header, then the same records.
			enc, want = enc[fileHeaderSize:], want[fileHeaderSize:]
		}
		if !bytes.Equal(enc, want) {
			t.Fatalf("re-encoding %d records gives %x, want %x", len(got), enc, want)
		}
	})
}
