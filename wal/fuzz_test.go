package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/iotest"

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

	// A marked log, synced halfway, with a record damaged before the
	// sync's mark, and the same followed by zeros.
	marked := &fakeFile{}
	mw, err := NewMarkedWriter(marked, "seed.wal", Mark{BootID: bootA})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 6 {
		if _, err := mw.WriteRecords(fmt.Appendf(nil, "record %d", i)); err != nil {
			f.Fatal(err)
		}
		if i == 3 {
			if err := mw.Sync(); err != nil {
				f.Fatal(err)
			}
		}
	}
	damaged := bytes.Clone(marked.Bytes())
	damaged[len(damaged)/3] ^= 0x10
	f.Add(marked.Bytes())
	f.Add(damaged)
	f.Add(append(bytes.Clone(damaged), make([]byte, 100)...))

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
		// After a power cut the reader judges damage by the marks in the
		// rest of the log, read a piece at a time: one byte per read
		// gives the same answer as the whole.
		for _, boot := range [][16]byte{bootA, bootB} {
			whole := NewReader(bytes.NewReader(data), "fuzz.wal")
			whole.AllowUnsyncedLoss(boot)
			wholeGot, wholeErr := readAll(whole)
			bytewise := NewReader(iotest.OneByteReader(bytes.NewReader(data)), "fuzz.wal")
			bytewise.AllowUnsyncedLoss(boot)
			byteGot, byteErr := readAll(bytewise)
			if !equalPayloads(wholeGot, byteGot) || fmt.Sprint(wholeErr) != fmt.Sprint(byteErr) {
				t.Fatalf("read whole: %d records, %v; a byte at a time: %d records, %v", len(wholeGot), wholeErr, len(byteGot), byteErr)
			}
			if !(wholeErr == io.EOF || errors.Is(wholeErr, ErrTornTail) || errors.Is(wholeErr, ErrUnsyncedTail) || errors.Is(wholeErr, base.ErrCorrupt)) {
				t.Fatalf("unexpected error kind after a power cut: %v", wholeErr)
			}
		}
		if _, marked := r.FirstMark(); end == 0 || marked {
			return // the plain Writer below writes no marks
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
