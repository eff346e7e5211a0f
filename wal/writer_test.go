package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"testing"
)

// fakeFile is an in-memory File that counts calls and can inject faults.
type fakeFile struct {
	bytes.Buffer
	writes, syncs, closes int

	// When failWrites is set, each Write stores at most writeLimit bytes and
	// returns writeErr (which may be nil, producing a short write).
	failWrites bool
	writeLimit int
	writeErr   error
	syncErr    error
}

func (f *fakeFile) Write(p []byte) (int, error) {
	f.writes++
	if f.failWrites && len(p) > f.writeLimit {
		f.Buffer.Write(p[:f.writeLimit])
		return f.writeLimit, f.writeErr
	}
	return f.Buffer.Write(p)
}

func (f *fakeFile) Sync() error  { f.syncs++; return f.syncErr }
func (f *fakeFile) Close() error { f.closes++; return nil }

// discardFile accepts and drops every write, for benchmarks.
type discardFile struct{}

func (discardFile) Write(p []byte) (int, error) { return len(p), nil }
func (discardFile) Sync() error                 { return nil }
func (discardFile) Close() error                { return nil }

var errBoom = errors.New("boom")

func newFakeWriter(t *testing.T) (*Writer, *fakeFile) {
	t.Helper()
	f := &fakeFile{}
	w, err := NewWriter(f, "000001.wal")
	if err != nil {
		t.Fatal(err)
	}
	return w, f
}

// TestFormatLayout pins the byte layout to FORMAT.md, computed here
// independently of the encoder.
func TestFormatLayout(t *testing.T) {
	w, f := newFakeWriter(t)
	if _, err := w.WriteRecords([]byte("hi"), nil); err != nil {
		t.Fatal(err)
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	var want []byte
	want = append(want, "bkvwal\x00\x00"...)
	want = append(want, 4, 0, 0, 0)
	want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(want, castagnoli))
	for _, p := range []string{"hi", ""} {
		body := append([]byte{byte(len(p)), 0, 0, 0, 1}, p...)
		want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(body, castagnoli))
		want = append(want, body...)
	}
	if !bytes.Equal(f.Bytes(), want) {
		t.Fatalf("encoded log\n got %x\nwant %x", f.Bytes(), want)
	}
	if w.Size() != int64(len(want)) {
		t.Fatalf("Size() = %d, want %d", w.Size(), len(want))
	}
}

func TestWriteRecordsIssuesOneWrite(t *testing.T) {
	w, f := newFakeWriter(t)
	for _, count := range []int{1, 2, 16} {
		payloads := make([][]byte, count)
		want := 0
		for i := range payloads {
			payloads[i] = bytes.Repeat([]byte{byte(i)}, i*7)
			want += recordHeaderSize + i*7
		}
		before, sizeBefore := f.writes, w.Size()
		n, err := w.WriteRecords(payloads...)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.writes - before; got != 1 {
			t.Errorf("%d payloads: %d Write calls, want 1", count, got)
		}
		if n != int64(want) || w.Size()-sizeBefore != int64(want) {
			t.Errorf("%d payloads: n = %d, size grew %d, want %d", count, n, w.Size()-sizeBefore, want)
		}
	}
	if n, err := w.WriteRecords(); n != 0 || err != nil || f.writes != 4 {
		t.Errorf("WriteRecords() = %d, %v with %d writes; want a no-op", n, err, f.writes)
	}
	if int64(f.Len()) != w.Size() {
		t.Errorf("file holds %d bytes, Size() = %d", f.Len(), w.Size())
	}
}

func TestWriterStickyWriteError(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		err   error
		want  error
	}{
		{"write fails", 0, errBoom, errBoom},
		{"partial write fails", 5, errBoom, errBoom},
		{"short write without error", 5, nil, io.ErrShortWrite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, f := newFakeWriter(t)
			if _, err := w.WriteRecords([]byte("ok")); err != nil {
				t.Fatal(err)
			}
			size := w.Size()
			f.failWrites, f.writeLimit, f.writeErr = true, tt.limit, tt.err

			n, err := w.WriteRecords([]byte("first"), []byte("second"))
			if !errors.Is(err, tt.want) || n != int64(tt.limit) || w.Size() != size+int64(tt.limit) {
				t.Fatalf("WriteRecords = %d, %v (size %d); want %d, %v (size %d)",
					n, err, w.Size(), tt.limit, tt.want, size+int64(tt.limit))
			}
			f.failWrites = false // the fault is gone, but the Writer stays broken
			writes := f.writes
			if n, err2 := w.WriteRecords([]byte("later")); err2 != err || n != 0 {
				t.Errorf("later WriteRecords = %d, %v; want 0, %v", n, err2, err)
			}
			if f.writes != writes {
				t.Errorf("broken Writer reached the file: %d writes", f.writes-writes)
			}
			// Sync still works: the records before the failure belong to
			// writers it did not affect, and can still be made durable.
			if err2 := w.Sync(); err2 != nil || f.syncs != 1 || w.Synced() != w.Size() {
				t.Errorf("Sync after a failed write = %v after %d syncs, Synced %d of %d; want nil, 1, all",
					err2, f.syncs, w.Synced(), w.Size())
			}
			if err := w.Close(); err != nil || f.closes != 1 {
				t.Errorf("Close = %v with %d closes; want the file closed", err, f.closes)
			}
			if _, err2 := w.WriteRecords([]byte("x")); err2 != err {
				t.Errorf("WriteRecords after Close = %v, want the original %v", err2, err)
			}
		})
	}
}

func TestWriterStickySyncError(t *testing.T) {
	w, f := newFakeWriter(t)
	f.syncErr = errBoom
	err := w.Sync()
	if !errors.Is(err, errBoom) {
		t.Fatalf("Sync = %v, want %v", err, errBoom)
	}
	f.syncErr = nil
	if err2 := w.Sync(); err2 != err || f.syncs != 1 {
		t.Errorf("second Sync = %v after %d syncs; want %v without reaching the file", err2, f.syncs, err)
	}
	if _, err2 := w.WriteRecords([]byte("x")); err2 != err {
		t.Errorf("WriteRecords after failed Sync = %v, want %v", err2, err)
	}
}

func TestNewWriterError(t *testing.T) {
	f := &fakeFile{failWrites: true, writeLimit: 3, writeErr: errBoom}
	if w, err := NewWriter(f, "x.wal"); w != nil || !errors.Is(err, errBoom) {
		t.Fatalf("NewWriter = %v, %v; want nil, %v", w, err, errBoom)
	}
}

func TestWriteRecordsTooLarge(t *testing.T) {
	w, f := newFakeWriter(t)
	huge := make([]byte, MaxRecordSize+1)
	n, err := w.WriteRecords([]byte("fine"), huge)
	if n != 0 || !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("WriteRecords(huge) = %d, %v; want 0, ErrRecordTooLarge", n, err)
	}
	if f.writes != 1 || w.Size() != fileHeaderSize {
		t.Errorf("rejected batch reached the file: %d writes, size %d", f.writes, w.Size())
	}
	if _, err := w.WriteRecords([]byte("fine")); err != nil {
		t.Errorf("Writer broken by a rejected payload: %v", err)
	}
}

func TestWriterClose(t *testing.T) {
	w, f := newFakeWriter(t)
	if err := w.Close(); err != nil || f.closes != 1 || f.syncs != 0 {
		t.Fatalf("Close = %v (%d closes, %d syncs); want one close and no sync", err, f.closes, f.syncs)
	}
	if err := w.Close(); !errors.Is(err, os.ErrClosed) || f.closes != 1 {
		t.Errorf("second Close = %v (%d closes); want os.ErrClosed", err, f.closes)
	}
	if _, err := w.WriteRecords([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("WriteRecords after Close = %v, want os.ErrClosed", err)
	}
	if err := w.Sync(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Sync after Close = %v, want os.ErrClosed", err)
	}
}

func TestWriteRecordsSteadyStateAllocs(t *testing.T) {
	w, err := NewWriter(discardFile{}, "bench.wal")
	if err != nil {
		t.Fatal(err)
	}
	batch := make([][]byte, 16)
	for i := range batch {
		batch[i] = make([]byte, 150)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := w.WriteRecords(batch...); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("WriteRecords allocates %.1f times per call in steady state, want 0", allocs)
	}
}

func BenchmarkWriteRecords(b *testing.B) {
	for _, bc := range []struct {
		name  string
		count int
	}{{"1x150B", 1}, {"16x150B", 16}} {
		b.Run(bc.name, func(b *testing.B) {
			w, err := NewWriter(discardFile{}, "bench.wal")
			if err != nil {
				b.Fatal(err)
			}
			batch := make([][]byte, bc.count)
			for i := range batch {
				batch[i] = bytes.Repeat([]byte{'v'}, 150)
			}
			b.SetBytes(int64(bc.count * 150))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.WriteRecords(batch...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
