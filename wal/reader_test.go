package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/memfs"
)

// randomPayloads returns n payloads of varied sizes: many empty or small,
// some larger than the reader's 64 KiB growth chunk.
func randomPayloads(rng *rand.Rand, n int) [][]byte {
	payloads := make([][]byte, n)
	for i := range payloads {
		var size int
		switch r := rng.IntN(20); {
		case r < 3:
			size = 0
		case r < 18:
			size = rng.IntN(300)
		default:
			size = rng.IntN(200 << 10)
		}
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		payloads[i] = p
	}
	return payloads
}

// encodeLog writes payloads with a Writer in random group sizes and returns
// the log bytes and the offset at which each record starts.
func encodeLog(t testing.TB, rng *rand.Rand, payloads [][]byte) ([]byte, []int64) {
	t.Helper()
	f := &fakeFile{}
	w, err := NewWriter(f, "test.wal")
	if err != nil {
		t.Fatal(err)
	}
	offsets := make([]int64, 0, len(payloads))
	for i := 0; i < len(payloads); {
		group := payloads[i:min(len(payloads), i+1+rng.IntN(4))]
		off := w.Size()
		for _, p := range group {
			offsets = append(offsets, off)
			off += recordHeaderSize + int64(len(p))
		}
		if _, err := w.WriteRecords(group...); err != nil {
			t.Fatal(err)
		}
		i += len(group)
	}
	return f.Bytes(), offsets
}

// testFS holds the logs the tests write: Recover reads, truncates and
// syncs them through the vfs seam, so they need no disk (TestRecoverRealFile
// is the one that does).
var (
	testFS    = memfs.New()
	testFiles atomic.Int64
)

// writeFile writes data as a log in testFS and returns its name.
func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := fmt.Sprintf("/wal-test/%d/000042.wal", testFiles.Add(1))
	if err := testFS.MkdirAll(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	w, err := testFS.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { testFS.Remove(path) })
	return path
}

// recoverAll runs Recover on path in testFS and returns copies of the
// payloads.
func recoverAll(t *testing.T, path string) ([][]byte, Result, error) {
	t.Helper()
	return recoverAllIn(t, testFS, path)
}

// recoverAllIn is recoverAll for a log in fsys.
func recoverAllIn(t *testing.T, fsys vfs.FS, path string) ([][]byte, Result, error) {
	t.Helper()
	var got [][]byte
	res, err := Recover(fsys, path, RecoverOptions{}, func(p []byte, _ int64) error {
		got = append(got, bytes.Clone(p))
		return nil
	})
	return got, res, err
}

// readAll drains a Reader over data, returning copies of the payloads and
// the terminating error.
func readAll(r *Reader) ([][]byte, error) {
	var got [][]byte
	for {
		p, err := r.Next()
		if err != nil {
			return got, err
		}
		got = append(got, bytes.Clone(p))
	}
}

func equalPayloads(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func fileContents(t *testing.T, path string) []byte {
	t.Helper()
	f, err := testFS.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	payloads := randomPayloads(rng, 500)
	data, _ := encodeLog(t, rng, payloads)

	readers := map[string]io.Reader{
		"bytes":    bytes.NewReader(data),
		"one byte": iotest.OneByteReader(bytes.NewReader(data)),
		"data+EOF": iotest.DataErrReader(bytes.NewReader(data)),
	}
	for name, src := range readers {
		r := NewReader(src, "test.wal")
		got, err := readAll(r)
		if err != io.EOF || !equalPayloads(got, payloads) || r.Offset() != int64(len(data)) {
			t.Errorf("%s: read %d of %d records, offset %d of %d, err %v",
				name, len(got), len(payloads), r.Offset(), len(data), err)
		}
	}

	path := writeFile(t, data)
	got, res, err := recoverAll(t, path)
	want := Result{Records: len(payloads), ValidSize: int64(len(data))}
	if err != nil || res != want || !equalPayloads(got, payloads) {
		t.Fatalf("Recover = %+v, %v (payloads equal: %v); want %+v", res, err, equalPayloads(got, payloads), want)
	}
	if !bytes.Equal(fileContents(t, path), data) {
		t.Error("Recover modified a clean log")
	}
}

func TestRecoverRealFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "000001.wal")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, filepath.Base(path))
	if err != nil {
		t.Fatal(err)
	}
	payloads := [][]byte{[]byte("a"), nil, []byte("ccc")}
	if _, err := w.WriteRecords(payloads...); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	size := w.Size()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, res, err := recoverAllIn(t, vfs.Default, path)
	if err != nil || res != (Result{Records: 3, ValidSize: size}) || !equalPayloads(got, payloads) {
		t.Fatalf("Recover = %q, %+v, %v", got, res, err)
	}
}

// TestTornTailEveryCut cuts the log at every byte offset across its last
// three records (as a crash in the middle of a group write could) and checks
// that exactly the complete records survive and the rest is cut off.
func TestTornTailEveryCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	payloads := [][]byte{[]byte("alpha"), []byte("bravo"), nil, bytes.Repeat([]byte("x"), 40), []byte("echo")}
	data, offsets := encodeLog(t, rng, payloads)
	ends := append(offsets[1:], int64(len(data)))

	for cut := offsets[len(offsets)-3]; cut <= int64(len(data)); cut++ {
		complete := 0
		for complete < len(ends) && ends[complete] <= cut {
			complete++
		}
		valid := ends[complete-1]
		want := Result{Records: complete, ValidSize: valid, TornTail: cut != valid, TornBytes: cut - valid}

		path := writeFile(t, data[:cut])
		got, res, err := recoverAll(t, path)
		if err != nil || res != want || !equalPayloads(got, payloads[:complete]) {
			t.Fatalf("cut at %d: Recover = %d records, %+v, %v; want %+v", cut, len(got), res, err, want)
		}
		if size := int64(len(fileContents(t, path))); size != cut {
			t.Fatalf("cut at %d: file is %d bytes after Recover: it must not be modified", cut, size)
		}
	}
}

// TestBadFinalRecord damages the last record in place: since nothing but
// zeros (or nothing) follows it, it is a torn tail and is cut off.
func TestBadFinalRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	payloads := randomPayloads(rng, 10)
	payloads[9] = []byte("the last record")
	data, offsets := encodeLog(t, rng, payloads)
	last := offsets[9]

	tests := []struct {
		name   string
		at     int64 // byte to flip, relative to the last record
		suffix int   // zero bytes appended
	}{
		{"checksum", 0, 0},
		{"length grows past EOF", 4, 0},
		{"type", 8, 0},
		{"payload", recordHeaderSize + 3, 0},
		{"payload, zeros follow", recordHeaderSize + 3, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := append(bytes.Clone(data), make([]byte, tt.suffix)...)
			bad[last+tt.at] ^= 0x80
			path := writeFile(t, bad)
			got, res, err := recoverAll(t, path)
			want := Result{Records: 9, ValidSize: last, TornTail: true, TornBytes: int64(len(bad)) - last}
			if err != nil || res != want || !equalPayloads(got, payloads[:9]) {
				t.Fatalf("Recover = %+v, %v; want %+v", res, err, want)
			}
			if !bytes.Equal(fileContents(t, path), bad) {
				t.Error("Recover modified the file")
			}
		})
	}
}

// TestMidFileCorruption damages each non-final record in turn: acknowledged
// records follow it, so this must be reported, and the file left alone.
func TestMidFileCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	payloads := randomPayloads(rng, 30)
	payloads[0] = []byte("non-empty")
	data, offsets := encodeLog(t, rng, payloads)

	for i, off := range offsets[:len(offsets)-1] {
		flips := map[string]int64{"checksum": 0, "length": 4, "type": 8}
		if len(payloads[i]) > 0 {
			flips["payload"] = recordHeaderSize + int64(len(payloads[i])-1)
		}
		for field, at := range flips {
			bad := bytes.Clone(data)
			bad[off+at] ^= 0x01
			path := writeFile(t, bad)
			got, _, err := recoverAll(t, path)

			var ce *base.CorruptError
			if !errors.As(err, &ce) || ce.Offset != off || ce.File != "000042.wal" {
				t.Fatalf("record %d, %s flipped: err = %v; want CorruptError at %d", i, field, err, off)
			}
			if !errors.Is(err, base.ErrCorrupt) || !equalPayloads(got, payloads[:i]) {
				t.Fatalf("record %d, %s flipped: %d records before %v", i, field, len(got), err)
			}
			if !bytes.Equal(fileContents(t, path), bad) {
				t.Fatalf("record %d, %s flipped: Recover modified a corrupt file", i, field)
			}
		}
	}
}

func TestHeaderDamage(t *testing.T) {
	good, _ := encodeLog(t, rand.New(rand.NewPCG(9, 10)), [][]byte{[]byte("rec")})
	withHeader := func(mutate func(h []byte)) []byte {
		b := bytes.Clone(good)
		mutate(b[:fileHeaderSize])
		return b
	}
	version4 := withHeader(func(h []byte) {
		binary.LittleEndian.PutUint32(h[8:], formatVersion+1)
		binary.LittleEndian.PutUint32(h[12:], crc32.Checksum(h[:12], crcTable))
	})

	empty := Result{}
	tests := []struct {
		name    string
		data    []byte
		want    Result
		corrupt bool
	}{
		{"empty file", nil, empty, false},
		{"1-byte header", good[:1], empty, false},
		{"15-byte header", good[:15], empty, false},
		{"header only", good[:fileHeaderSize], Result{ValidSize: fileHeaderSize}, false},
		{"all zeros, header size", make([]byte, fileHeaderSize), empty, false},
		{"all zeros, 5000 bytes", make([]byte, 5000), empty, false},
		{"zero header then data", append(make([]byte, fileHeaderSize), good[fileHeaderSize:]...), empty, true},
		{"bad magic", withHeader(func(h []byte) { h[0] = 'B' }), empty, true},
		{"bad header checksum", withHeader(func(h []byte) { h[13] ^= 0x80 }), empty, true},
		{"unchecksummed version change", withHeader(func(h []byte) { h[8] = 1 }), empty, true},
		{"unsupported version", version4, empty, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.data)
			_, res, err := recoverAll(t, path)
			var ce *base.CorruptError
			if tt.corrupt != errors.As(err, &ce) || (tt.corrupt && ce.Offset != 0) || (!tt.corrupt && err != nil) {
				t.Fatalf("Recover err = %v, want corrupt at offset 0: %v", err, tt.corrupt)
			}
			if res != tt.want {
				t.Errorf("Recover = %+v, want %+v", res, tt.want)
			}
			if !bytes.Equal(fileContents(t, path), tt.data) {
				t.Error("Recover modified the file")
			}
		})
	}
}

func TestZeroFilledTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	payloads := randomPayloads(rng, 20)
	data, _ := encodeLog(t, rng, payloads)
	n := int64(len(data))

	for _, zeros := range []int{1, 8, 9, 10, 4096, 100_000} {
		withZeros := append(bytes.Clone(data), make([]byte, zeros)...)
		path := writeFile(t, withZeros)
		got, res, err := recoverAll(t, path)
		want := Result{Records: 20, ValidSize: n, TornTail: true, TornBytes: int64(zeros)}
		if err != nil || res != want || !equalPayloads(got, payloads) {
			t.Errorf("%d zeros: Recover = %+v, %v; want %+v", zeros, res, err, want)
		}
		if !bytes.Equal(fileContents(t, path), withZeros) {
			t.Errorf("%d zeros: Recover modified the file", zeros)
		}
	}

	// Zeros followed by data are not a tail: the data may be acknowledged.
	bad := append(append(bytes.Clone(data), make([]byte, 50)...), 1)
	_, _, err := recoverAll(t, writeFile(t, bad))
	var ce *base.CorruptError
	if !errors.As(err, &ce) || ce.Offset != n {
		t.Errorf("zeros then data: err = %v, want CorruptError at %d", err, n)
	}
}

// rawRecord encodes a record with an arbitrary type and length field.
func rawRecord(typ byte, length uint32, payload []byte) []byte {
	body := binary.LittleEndian.AppendUint32(nil, length)
	body = append(append(body, typ), payload...)
	return append(binary.LittleEndian.AppendUint32(nil, crc32.Checksum(body, crcTable)), body...)
}

func TestHostileRecords(t *testing.T) {
	header := appendFileHeader(nil)
	tests := []struct {
		name   string
		record []byte
		torn   bool
	}{
		{"unknown type 2", rawRecord(2, 3, []byte("abc")), false},
		{"reserved type 0", rawRecord(0, 3, []byte("abc")), false},
		{"length above maximum", rawRecord(1, MaxRecordSize+1, []byte("abc")), false},
		{"length 0xffffffff", rawRecord(1, 0xffffffff, []byte("abc")), false},
		{"maximum length, short file", rawRecord(1, MaxRecordSize, make([]byte, 300_000)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := append(bytes.Clone(header), tt.record...)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			r := NewReader(bytes.NewReader(data), "hostile.wal")
			_, err := r.Next()
			runtime.ReadMemStats(&after)

			if got := errors.Is(err, ErrTornTail); got != tt.torn || (!tt.torn && !errors.Is(err, base.ErrCorrupt)) {
				t.Fatalf("Next = %v, want torn tail: %v", err, tt.torn)
			}
			if r.Offset() != fileHeaderSize {
				t.Errorf("Offset = %d, want %d", r.Offset(), fileHeaderSize)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(data))+(1<<20) {
				t.Errorf("reading %d bytes allocated %d bytes", len(data), alloc)
			}
			if _, err2 := r.Next(); err2 != err {
				t.Errorf("second Next = %v, want the sticky %v", err2, err)
			}
		})
	}
}

func TestReaderIOError(t *testing.T) {
	data, _ := encodeLog(t, rand.New(rand.NewPCG(13, 14)), [][]byte{[]byte("one")})
	r := NewReader(io.MultiReader(bytes.NewReader(data), iotest.ErrReader(errBoom)), "io.wal")
	got, err := readAll(r)
	if len(got) != 1 || !errors.Is(err, errBoom) || errors.Is(err, ErrTornTail) || errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("read %d records, err %v; want 1 record then the I/O error", len(got), err)
	}
}

func TestRecoverStopsOnCallbackError(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	data, offsets := encodeLog(t, rng, randomPayloads(rng, 10))
	torn := append(bytes.Clone(data), 0, 0, 0) // must not be truncated
	path := writeFile(t, torn)
	calls := 0
	res, err := Recover(testFS, path, RecoverOptions{}, func([]byte, int64) error {
		if calls++; calls == 4 {
			return errBoom
		}
		return nil
	})
	if err != errBoom || res != (Result{Records: 3, ValidSize: offsets[3]}) {
		t.Fatalf("Recover = %+v, %v; want 3 records then %v", res, err, errBoom)
	}
	if !bytes.Equal(fileContents(t, path), torn) {
		t.Error("Recover truncated the file despite the callback error")
	}
}

func TestRecoverMissingFile(t *testing.T) {
	_, err := Recover(vfs.Default, filepath.Join(t.TempDir(), "nope.wal"), RecoverOptions{}, func([]byte, int64) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Recover = %v, want fs.ErrNotExist", err)
	}
}

// TestLengthPastEOFBeforeValidRecords: a damaged length that makes a
// record claim bytes past the end of the file looks like a torn write, but
// valid records inside the claimed bytes show it is not: corruption, not a
// silent cut that would drop them.
func TestLengthPastEOFBeforeValidRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	payloads := [][]byte{[]byte("first"), []byte("second"), []byte("third")}
	data, offsets := encodeLog(t, rng, payloads)
	for i, off := range offsets {
		bad := bytes.Clone(data)
		bad[off+7] ^= 0x08 // length + 128 MiB: past the end, below the maximum
		got, _, err := recoverAll(t, writeFile(t, bad))
		var ce *base.CorruptError
		if i < len(offsets)-1 {
			if !errors.As(err, &ce) || ce.Offset != off || !equalPayloads(got, payloads[:i]) {
				t.Fatalf("record %d: %v after %d records; want corruption at %d", i, err, len(got), off)
			}
		} else if err != nil || !equalPayloads(got, payloads[:i]) {
			// The last record: indistinguishable from a torn write.
			t.Fatalf("last record: %v after %d records; want a torn tail", err, len(got))
		}
	}
}

// TestTornLargeRandomRecord: a crash in the middle of writing a large
// record of random bytes (a batch of compressed or encrypted values) is a
// torn tail. Its bytes are searched for a valid record (findRecord), and
// that search gave up on 8 MiB of random bytes as if it had found one,
// reporting the torn write as corruption: a store that would not open
// after a crash.
func TestTornLargeRandomRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	big := make([]byte, 12<<20)
	for i := 0; i+8 <= len(big); i += 8 {
		binary.LittleEndian.PutUint64(big[i:], rng.Uint64())
	}
	payloads := [][]byte{[]byte("first"), []byte("second"), big}
	data, offsets := encodeLog(t, rng, payloads)
	for _, cut := range []int{9 << 20, len(data) - 1} {
		r := NewReader(bytes.NewReader(data[:cut]), "000042.wal")
		got, err := readAll(r)
		if !errors.Is(err, ErrTornTail) || len(got) != 2 || r.Offset() != offsets[2] {
			t.Fatalf("cut at %d: %d records, %v; want 2 records and a torn tail at %d", cut, len(got), err, offsets[2])
		}
	}
}

// TestReaderIOErrorInsideARecord pins that a read error partway through a
// record's header or payload is returned as that I/O error, never judged
// as a torn tail or as corruption from the bytes read so far.
func TestReaderIOErrorInsideARecord(t *testing.T) {
	data, offsets := encodeLog(t, rand.New(rand.NewPCG(17, 18)), [][]byte{[]byte("one"), []byte("two, longer")})
	for _, cut := range []int64{offsets[1] + 4, offsets[1] + recordHeaderSize + 3} {
		r := NewReader(io.MultiReader(bytes.NewReader(data[:cut]), iotest.ErrReader(errBoom)), "io.wal")
		got, err := readAll(r)
		if len(got) != 1 || !errors.Is(err, errBoom) || errors.Is(err, ErrTornTail) || errors.Is(err, base.ErrCorrupt) {
			t.Errorf("error after %d bytes: read %d records, err %v; want 1 record then the I/O error", cut, len(got), err)
		}
	}
}

// TestDamagedEmptyRecordBeforeValidRecords pins that a record whose bytes
// a damaged length claims is found even where it starts at the first
// claimed byte (the damaged record was empty), whether the length runs
// past the end of the file or the claimed bytes fail the checksum: damage
// followed by data is corruption, not a torn tail that would drop what
// follows.
func TestDamagedEmptyRecordBeforeValidRecords(t *testing.T) {
	payloads := [][]byte{[]byte("first"), {}, []byte("third")}
	data, offsets := encodeLog(t, rand.New(rand.NewPCG(19, 20)), payloads)
	bad := bytes.Clone(data)
	bad[offsets[1]+7] ^= 0x08 // length 0 + 128 MiB: past the end, below the maximum
	// Or grown to claim exactly the record after it, which fails its
	// checksum with nothing after the claimed bytes.
	exact := bytes.Clone(data)
	binary.LittleEndian.PutUint32(exact[offsets[1]+4:], uint32(len(data)-int(offsets[2])))
	for _, bad := range [][]byte{bad, exact} {
		got, _, err := recoverAll(t, writeFile(t, bad))
		var ce *base.CorruptError
		if !errors.As(err, &ce) || ce.Offset != offsets[1] || !equalPayloads(got, payloads[:1]) {
			t.Errorf("%v after %d records; want corruption at %d after 1", err, len(got), offsets[1])
		}
	}
}

// TestFindRecordKnownTypesOnly pins what counts as a valid record inside
// the bytes a damaged record claims: a complete record of a known type
// (full or mark) with a matching checksum, wherever it starts; not one of
// an unknown type, a bad checksum or cut short. findMark, the search past
// findRecord's budget, finds marks only.
func TestFindRecordKnownTypesOnly(t *testing.T) {
	full := appendRecord(nil, []byte("payload"))
	mark := appendMark(nil, Mark{BootID: bootA, Synced: 100})
	badSum := bytes.Clone(full)
	badSum[0] ^= 1
	junk := []byte{9, 9, 9}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	for _, tc := range []struct {
		name               string
		b                  []byte
		wantFind, wantMark int
	}{
		{"full record at 0", full, 0, -1},
		{"full record after junk", cat(junk, full), 3, -1},
		{"mark at 0", mark, 0, 0},
		{"mark after junk", cat(junk, mark), 3, 3},
		{"full record, then a mark", cat(full, mark), 0, len(full)},
		{"unknown type", appendTyped(nil, recordMark+1, []byte("payload")), -1, -1},
		{"unknown type, then a mark", cat(appendTyped(nil, recordMark+1, []byte("payload")), mark), len(full), len(full)},
		{"bad checksum", badSum, -1, -1},
		{"cut short", full[:len(full)-1], -1, -1},
		{"mark cut short", mark[:len(mark)-1], -1, -1},
		{"zeros", make([]byte, 64), -1, -1},
		// A record of a mark's length is a mark only if its type says so.
		{"full record of a mark's length", appendRecord(nil, make([]byte, markLen)), 0, -1},
	} {
		if got := findRecord(tc.b); got != tc.wantFind {
			t.Errorf("%s: findRecord = %d, want %d", tc.name, got, tc.wantFind)
		}
		if got := findMark(tc.b); got != tc.wantMark {
			t.Errorf("%s: findMark = %d, want %d", tc.name, got, tc.wantMark)
		}
	}
}
