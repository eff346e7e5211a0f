package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

var (
	bootA = [16]byte{'a'}
	bootB = [16]byte{'b'}
)

// markedLog writes groups of two records each with a marked writer, syncing
// after the groups listed in syncAfter, and returns the bytes and the
// offset of every batch record.
func markedLog(t *testing.T, groups int, syncAfter func(g int) bool) ([]byte, []int64) {
	t.Helper()
	f := &fakeFile{}
	w, err := NewMarkedWriter(f, "000007.wal", Mark{BootID: bootA})
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for g := range groups {
		a, b := fmt.Appendf(nil, "group %d record a", g), fmt.Appendf(nil, "group %d record b", g)
		if _, err := w.WriteRecords(a, b); err != nil {
			t.Fatal(err)
		}
		// The group's records are its last two; a mark may precede them.
		end := w.Size()
		rb := int64(recordHeaderSize + len(b))
		ra := int64(recordHeaderSize + len(a))
		offs = append(offs, end-rb-ra, end-rb)
		if syncAfter(g) {
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return bytes.Clone(f.Bytes()), offs
}

// recoverWith runs Recover on data with the given options.
func recoverWith(t *testing.T, data []byte, opts RecoverOptions) (int, Result, error) {
	t.Helper()
	n := 0
	res, err := Recover(testFS, writeFile(t, data), opts, func([]byte, int64) error { n++; return nil })
	return n, res, err
}

// TestMarksTellPowerCutFromCorruption damages one record in the middle of a
// log and checks each way recovery may judge it.
func TestMarksTellPowerCutFromCorruption(t *testing.T) {
	const groups = 10
	always := func(int) bool { return true }
	never := func(int) bool { return false }
	tests := []struct {
		name    string
		sync    func(int) bool
		damage  int // group whose first record is damaged
		opts    RecoverOptions
		outcome string // "corrupt", "unsynced"
	}{
		{"strict reader", never, 4, RecoverOptions{}, "corrupt"},
		{"never synced, rebooted", never, 4, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootB}, "unsynced"},
		{"never synced, boot unknown", never, 4, RecoverOptions{UnsyncedMayBeLost: true}, "unsynced"},
		{"never synced, same boot", never, 4, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootA}, "corrupt"},
		{"synced every group, rebooted", always, 4, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootB}, "corrupt"},
		{"synced up to group 6, damage in 4", func(g int) bool { return g == 6 }, 4, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootB}, "corrupt"},
		{"synced up to group 3, damage in 4", func(g int) bool { return g == 3 }, 4, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootB}, "unsynced"},
		{"synced every group, damage in the last", always, groups - 1, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootB}, "unsynced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, offs := markedLog(t, groups, tt.sync)
			at := offs[2*tt.damage]
			data[at+recordHeaderSize+2] ^= 0x40 // the payload of the group's first record
			n, res, err := recoverWith(t, data, tt.opts)
			var ce *base.CorruptError
			switch tt.outcome {
			case "corrupt":
				if !errors.As(err, &ce) || ce.Offset != at {
					t.Fatalf("Recover = %+v, %v; want corruption at %d", res, err, at)
				}
			case "unsynced":
				if err != nil || !res.Unsynced || res.ValidSize != at || n != 2*tt.damage {
					t.Fatalf("Recover = %d records, %+v, %v; want the %d records before offset %d", n, res, err, 2*tt.damage, at)
				}
			}
		})
	}
}

// TestMarkLayout pins the mark record to FORMAT.md: the first record of a
// marked log, and a mark before the first write after a sync.
func TestMarkLayout(t *testing.T) {
	f := &fakeFile{}
	w, err := NewMarkedWriter(f, "x.wal", Mark{BootID: bootA, Synced: 99, PrevSynced: true})
	if err != nil {
		t.Fatal(err)
	}
	mark := func(synced uint64, prev byte) []byte {
		body := binary.LittleEndian.AppendUint32(nil, markLen)
		body = append(body, 2)
		body = append(body, bootA[:]...)
		body = binary.LittleEndian.AppendUint64(body, synced)
		body = append(body, prev)
		return append(binary.LittleEndian.AppendUint32(nil, crc32.Checksum(body, crcTable)), body...)
	}
	want := append(appendFileHeader(nil), mark(0, 1)...) // Synced is 0 at creation
	if !bytes.Equal(f.Bytes(), want) {
		t.Fatalf("new log\n got %x\nwant %x", f.Bytes(), want)
	}
	mustWrite := func() {
		if _, err := w.WriteRecords([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	synced := uint64(w.Size())
	mustWrite()
	mustWrite() // no sync since the last mark: no new mark
	want = append(want, appendRecord(nil, []byte("x"))...)
	want = append(want, mark(synced, 0)...)
	want = append(want, appendRecord(nil, []byte("x"))...)
	want = append(want, appendRecord(nil, []byte("x"))...)
	if !bytes.Equal(f.Bytes(), want) {
		t.Fatalf("after a sync\n got %x\nwant %x", f.Bytes(), want)
	}
	r := NewReader(bytes.NewReader(f.Bytes()), "x.wal")
	for range 3 {
		if p, err := r.Next(); err != nil || string(p) != "x" {
			t.Fatalf("Next = %q, %v", p, err)
		}
	}
	if m, ok := r.FirstMark(); !ok || m.BootID != bootA || !m.PrevSynced || m.Synced != 0 {
		t.Fatalf("FirstMark = %+v, %v", m, ok)
	}
}

// TestVersion1LogStillReads: a log written before marks existed (format
// version 1) is read, strictly.
func TestVersion1LogStillReads(t *testing.T) {
	f := &fakeFile{}
	w, err := NewWriter(f, "old.wal")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteRecords([]byte("one"), []byte("two")); err != nil {
		t.Fatal(err)
	}
	data := bytes.Clone(f.Bytes())
	binary.LittleEndian.PutUint32(data[8:], legacyFormatVersion)
	binary.LittleEndian.PutUint32(data[12:], crc32.Checksum(data[:12], crcTable))
	if n, res, err := recoverWith(t, data, RecoverOptions{UnsyncedMayBeLost: true}); err != nil || n != 2 || res.TornTail {
		t.Fatalf("Recover = %d, %+v, %v", n, res, err)
	}
	// A mark in a version-1 log is an unknown record type.
	data = append(data, appendMark(nil, Mark{})...)
	if _, _, err := recoverWith(t, data, RecoverOptions{}); !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("mark in a version-1 log: %v", err)
	}
}

// TestMalformedMark: a mark with a valid checksum but an impossible payload
// is corruption.
func TestMalformedMark(t *testing.T) {
	data := appendFileHeader(nil)
	bad := make([]byte, markLen)
	bad[24] = 8 // flag bits 0 to 2 only
	data = appendTyped(data, recordMark, bad)
	if _, _, err := recoverWith(t, data, RecoverOptions{UnsyncedMayBeLost: true}); !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("Recover = %v, want corruption", err)
	}
}

// TestMarkPayloadBounds pins which mark payloads parse, at each bound
// FORMAT.md sets: exactly 25 bytes, synced below 2^62, and no flag bit but
// prev synced (bit 0), seal (bit 1) and prev sealed (bit 2).
func TestMarkPayloadBounds(t *testing.T) {
	payload := func(n int, synced uint64, flags byte) []byte {
		p := make([]byte, max(n, markLen))
		copy(p, bootA[:])
		binary.LittleEndian.PutUint64(p[16:], synced)
		p[24] = flags
		return p[:n]
	}
	for _, tc := range []struct {
		name string
		p    []byte
		want Mark // zero: refused
	}{
		{"synced 0", payload(markLen, 0, 0), Mark{BootID: bootA}},
		{"synced 2^62-1", payload(markLen, 1<<62-1, 0), Mark{BootID: bootA, Synced: 1<<62 - 1}},
		{"prev synced", payload(markLen, 5, markPrevSynced), Mark{BootID: bootA, Synced: 5, PrevSynced: true}},
		{"seal", payload(markLen, 5, markSeal), Mark{BootID: bootA, Synced: 5, Seal: true}},
		{"both flags", payload(markLen, 5, markPrevSynced|markSeal), Mark{BootID: bootA, Synced: 5, PrevSynced: true, Seal: true}},
		{"synced 2^62", payload(markLen, 1<<62, 0), Mark{}},
		{"synced 2^62+1", payload(markLen, 1<<62+1, 0), Mark{}},
		{"synced 2^63", payload(markLen, 1<<63, 0), Mark{}},
		{"synced 2^64-1", payload(markLen, 1<<64-1, 0), Mark{}},
		{"prev sealed", payload(markLen, 5, markPrevSealed), Mark{BootID: bootA, Synced: 5, PrevSealed: true}},
		{"three flags", payload(markLen, 5, markPrevSynced|markSeal|markPrevSealed), Mark{BootID: bootA, Synced: 5, PrevSynced: true, Seal: true, PrevSealed: true}},
		{"flag bit 3", payload(markLen, 5, 1<<3), Mark{}},
		{"flag bit 7", payload(markLen, 5, 1<<7|markPrevSynced), Mark{}},
		{"24 bytes", payload(markLen-1, 5, 0), Mark{}},
		{"26 bytes", payload(markLen+1, 5, 0), Mark{}},
	} {
		m, ok := parseMark(tc.p)
		if ok != (tc.want != Mark{}) || m != tc.want {
			t.Errorf("%s: parseMark = %+v, %v; want %+v, %v", tc.name, m, ok, tc.want, tc.want != Mark{})
		}
	}
}

// TestSealedLogLastRecordDamageIsCorrupt: the last record of a log is
// dropped as a torn tail when damaged — what a crash mid-write leaves —
// unless the log was sealed by a clean close, or its successor vouches it
// was fsynced to its end (RecoverOptions.Complete): then the damage is to
// durable data, and recovery reports it instead of losing the record.
func TestSealedLogLastRecordDamageIsCorrupt(t *testing.T) {
	write := func(seal bool) ([]byte, int64) {
		f := &fakeFile{}
		w, err := NewMarkedWriter(f, "000007.wal", Mark{BootID: bootA})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteRecords([]byte("first batch"), []byte("last batch")); err != nil {
			t.Fatal(err)
		}
		last := w.Size() - int64(recordHeaderSize+len("last batch"))
		if seal {
			if err := w.Seal(); err != nil {
				t.Fatal(err)
			}
		}
		return bytes.Clone(f.Bytes()), last
	}
	for _, tc := range []struct {
		name        string
		seal        bool
		opts        RecoverOptions
		wantCorrupt bool
	}{
		{"unsealed newest log: a torn tail", false, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootB}, false},
		{"unsealed, same boot: a torn tail", false, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootA}, false},
		{"sealed newest log, another boot", true, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootB}, true},
		{"sealed newest log, same boot", true, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootA}, true},
		{"unsealed, but complete by its successor", false, RecoverOptions{Complete: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, last := write(tc.seal)
			for _, d := range []int64{0, 4, 8, recordHeaderSize + 3} { // checksum, length, type, payload
				bad := bytes.Clone(data)
				bad[last+d] ^= 0x10
				n, res, err := recoverWith(t, bad, tc.opts)
				var ce *base.CorruptError
				switch {
				case tc.wantCorrupt && (!errors.As(err, &ce) || ce.Offset != last):
					t.Fatalf("byte +%d: %v (%d records), want corruption at %d", d, err, n, last)
				case !tc.wantCorrupt && (err != nil || n != 1 || !res.TornTail):
					t.Fatalf("byte +%d: %v, %d records, %+v; want the first record and a torn tail", d, err, n, res)
				}
			}
			// Undamaged, a sealed log replays whole; a damaged seal loses
			// no record.
			if n, _, err := recoverWith(t, data, tc.opts); err != nil || n != 2 {
				t.Fatalf("undamaged: %d records, %v", n, err)
			}
			if tc.seal {
				bad := bytes.Clone(data)
				bad[len(bad)-3] ^= 1
				if n, res, err := recoverWith(t, bad, tc.opts); err != nil || n != 2 || !res.TornTail {
					t.Fatalf("damaged seal: %d records, %+v, %v", n, res, err)
				}
			}
		})
	}
	// Zero bytes after a complete log (unused preallocated space) are not
	// damage.
	data, _ := write(false)
	if n, _, err := recoverWith(t, append(data, make([]byte, 4096)...), RecoverOptions{Complete: true}); err != nil || n != 2 {
		t.Fatalf("complete log with a zero tail: %d records, %v", n, err)
	}
}

// TestRecoverReportsSealAndBoot: Result.Sealed is true only for a log whose
// last record is a seal, and not for one whose last surviving record is an
// ordinary mark that also claims every byte before it synced (the mark a
// writer puts before the first write after an fsync) with the write after
// it lost: recovery trusts a later log only if the earlier one is whole.
// ThisBoot tells a log written under the current boot.
func TestRecoverReportsSealAndBoot(t *testing.T) {
	f := &fakeFile{}
	w, err := NewMarkedWriter(f, "000007.wal", Mark{BootID: bootA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteRecords([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	before := len(f.Bytes())
	if _, err := w.WriteRecords([]byte("second")); err != nil { // a mark, then the record
		t.Fatal(err)
	}
	withMark := bytes.Clone(f.Bytes())
	lost := append(bytes.Clone(withMark[:before+recordHeaderSize+markLen]), make([]byte, len(withMark)-before-recordHeaderSize-markLen)...)
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	sealed := bytes.Clone(f.Bytes())
	if m, ok := parseMark(sealed[len(sealed)-markLen:]); !ok || !m.Seal || m.Synced != int64(len(withMark)) {
		t.Fatalf("seal = %+v, %v; want a seal claiming %d bytes", m, ok, len(withMark))
	}
	for _, tc := range []struct {
		name         string
		data         []byte
		boot         [16]byte
		records      int
		wantSealed   bool
		wantThisBoot bool
	}{
		{"sealed", sealed, bootB, 2, true, false},
		{"sealed, this boot", sealed, bootA, 2, true, true},
		{"ends in a record", withMark, bootB, 2, false, false},
		{"ends in a mark, the record after it lost", lost, bootB, 1, false, false},
		{"unknown boot", withMark, [16]byte{}, 2, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, res, err := recoverWith(t, tc.data, RecoverOptions{UnsyncedMayBeLost: true, BootID: tc.boot})
			if err != nil || n != tc.records || !res.Marked || res.Sealed != tc.wantSealed || res.ThisBoot != tc.wantThisBoot {
				t.Fatalf("Recover = %d records, %+v, %v; want %d records, sealed %v, this boot %v",
					n, res, err, tc.records, tc.wantSealed, tc.wantThisBoot)
			}
		})
	}
	// A seal in a version-2 log, which had no seals, is corruption.
	v2 := bytes.Clone(sealed)
	binary.LittleEndian.PutUint32(v2[8:], markFormatVersion)
	binary.LittleEndian.PutUint32(v2[12:], crc32.Checksum(v2[:12], crcTable))
	if _, _, err := recoverWith(t, v2, RecoverOptions{}); !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("seal in a version-2 log: %v, want corruption", err)
	}
	// Version 3 brought seals: a version-3 log ending in one reads as
	// sealed.
	v3s := bytes.Clone(sealed)
	binary.LittleEndian.PutUint32(v3s[8:], sealFormatVersion)
	binary.LittleEndian.PutUint32(v3s[12:], crc32.Checksum(v3s[:12], crcTable))
	if n, res, err := recoverWith(t, v3s, RecoverOptions{}); err != nil || n != 2 || !res.Sealed {
		t.Fatalf("sealed version-3 log: %d records, %+v, %v; want 2 records, sealed", n, res, err)
	}
	// A prev-sealed mark in a version-3 log, which had none, is corruption.
	v3 := appendFileHeader(nil)
	binary.LittleEndian.PutUint32(v3[8:], sealFormatVersion)
	binary.LittleEndian.PutUint32(v3[12:], crc32.Checksum(v3[:12], crcTable))
	v3 = appendMark(appendMark(v3, Mark{BootID: bootA}), Mark{BootID: bootA, PrevSealed: true})
	if _, _, err := recoverWith(t, v3, RecoverOptions{}); !errors.Is(err, base.ErrCorrupt) {
		t.Fatalf("prev-sealed mark in a version-3 log: %v, want corruption", err)
	}
	v2 = v2[:len(withMark)]
	if n, res, err := recoverWith(t, v2, RecoverOptions{}); err != nil || n != 2 || res.Sealed {
		t.Fatalf("version-2 log without a seal: %d records, %+v, %v", n, res, err)
	}
}

// boolArray returns n random bytes of 0 and 1: a batch of such values has
// a plausible record header (type 1, a short length) at about one position
// in eight.
func boolArray(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(2))
	}
	return b
}

// TestDenseHeadersPastFindRecordBudget: the search for a valid record in
// the bytes a record claims (findRecord) caps its work, and bytes with a
// plausible header at most positions reach the cap. Past it the search
// answered as if it had found a record, so a crash in the middle of
// writing a 1 MiB batch of byte-sized booleans was reported as corruption,
// not a torn tail: a store that would not open. It now looks on for marks
// only, so the torn write is a torn tail, and damage followed by a mark
// that claims the damaged record synced is still found and is corruption.
func TestDenseHeadersPastFindRecordBudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	f := &fakeFile{}
	w, err := NewMarkedWriter(f, "000042.wal", Mark{BootID: bootA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteRecords([]byte("first")); err != nil {
		t.Fatal(err)
	}
	bools := w.Size()
	if _, err := w.WriteRecords(boolArray(rng, 1<<20)); err != nil {
		t.Fatal(err)
	}
	whole := bytes.Clone(f.Bytes())
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteRecords([]byte("after the sync")); err != nil { // a mark claiming the booleans synced, then the record
		t.Fatal(err)
	}
	synced := bytes.Clone(f.Bytes())
	modes := []RecoverOptions{{}, {UnsyncedMayBeLost: true, BootID: bootA}, {UnsyncedMayBeLost: true, BootID: bootB}}

	// Torn: the write of the booleans cut short.
	for _, cut := range []int64{bools + 1<<19, int64(len(whole)) - 1} {
		for _, opts := range modes {
			n, res, err := recoverWith(t, whole[:cut], opts)
			if err != nil || !res.TornTail || n != 1 || res.ValidSize != bools {
				t.Fatalf("cut at %d, %+v: %d records, %+v, %v; want 1 and a torn tail at %d", cut, opts, n, res, err, bools)
			}
		}
	}
	// Damaged: the booleans' length runs past the end of the file, over
	// the mark and the record after them.
	bad := bytes.Clone(synced)
	bad[bools+7] ^= 0x08 // length + 128 MiB
	for _, opts := range modes {
		n, res, err := recoverWith(t, bad, opts)
		var ce *base.CorruptError
		if !errors.As(err, &ce) || ce.Offset != bools || n != 1 {
			t.Fatalf("%+v: %d records, %+v, %v; want corruption at %d", opts, n, res, err, bools)
		}
	}
}

// TestDamagedLengthIntoPreallocatedZeros: a log the store writes through
// a mapping lies in a preallocated file, so zero bytes follow its last
// record. A damaged length field then makes a record claim the records
// after it and run into those zeros rather than past the end of the file:
// the record fails its checksum and only zeros follow the bytes it
// claims, which read as a torn tail and dropped every later record, even
// under the same boot and where later marks claim the damaged bytes
// synced. The valid records inside the claimed bytes make it damage
// followed by data, judged as damage to a record of a trimmed log is.
func TestDamagedLengthIntoPreallocatedZeros(t *testing.T) {
	const groups = 10
	always := func(int) bool { return true }
	never := func(int) bool { return false }
	rebooted := RecoverOptions{UnsyncedMayBeLost: true, BootID: bootB}
	tests := []struct {
		name    string
		sync    func(int) bool
		damage  int // group whose first record is damaged
		opts    RecoverOptions
		outcome string // "corrupt", "unsynced"
	}{
		{"strict reader", always, 2, RecoverOptions{}, "corrupt"},
		{"synced every group, same boot", always, 2, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootA}, "corrupt"},
		{"synced every group, rebooted", always, 2, rebooted, "corrupt"},
		{"synced every group, boot unknown", always, 2, RecoverOptions{UnsyncedMayBeLost: true}, "corrupt"},
		{"never synced, same boot", never, 2, RecoverOptions{UnsyncedMayBeLost: true, BootID: bootA}, "corrupt"},
		{"never synced, rebooted", never, 2, rebooted, "unsynced"},
		{"synced up to group 6, damage in 2", func(g int) bool { return g == 6 }, 2, rebooted, "corrupt"},
		{"synced up to group 1, damage in 2", func(g int) bool { return g == 1 }, 2, rebooted, "unsynced"},
		{"synced every group, damage in the last", always, groups - 1, rebooted, "unsynced"},
	}
	for _, tt := range tests {
		for _, pad := range []int{0, 1 << 20} { // a trimmed log, a preallocated one
			t.Run(fmt.Sprintf("%s/%d zeros after", tt.name, pad), func(t *testing.T) {
				data, offs := markedLog(t, groups, tt.sync)
				at := offs[2*tt.damage]
				data = append(data, make([]byte, pad)...)
				l := binary.LittleEndian.Uint32(data[at+4:])
				binary.LittleEndian.PutUint32(data[at+4:], l|1<<16) // one bit: 64 KiB more
				n, res, err := recoverWith(t, data, tt.opts)
				var ce *base.CorruptError
				switch tt.outcome {
				case "corrupt":
					if !errors.As(err, &ce) || ce.Offset != at || ce.File != "000042.wal" || n != 2*tt.damage {
						t.Fatalf("Recover = %d records, %+v, %v; want corruption at %d", n, res, err, at)
					}
				case "unsynced":
					if err != nil || !res.Unsynced || res.ValidSize != at || n != 2*tt.damage {
						t.Fatalf("Recover = %d records, %+v, %v; want the %d records before offset %d", n, res, err, 2*tt.damage, at)
					}
				}
			})
		}
	}
}

// TestProvesPrevSealed: a log proves the older logs sealed with a mark
// written after an fsync that covered a write to it, or with the mark
// MarkPrevSealed writes. The mark before its first write claims what its
// creation synced (the file header and the first mark), and so does the
// seal of a log never written; neither is proof that an older log was
// sealed.
func TestProvesPrevSealed(t *testing.T) {
	created := func(t *testing.T) (*fakeFile, *Writer) {
		f := &fakeFile{}
		w, err := NewMarkedWriter(f, "000007.wal", Mark{BootID: bootA})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(); err != nil { // as the store creates a log
			t.Fatal(err)
		}
		return f, w
	}
	write := func(t *testing.T, w *Writer, p string) {
		if _, err := w.WriteRecords([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		steps func(t *testing.T, w *Writer)
		want  bool
		// first: the proof comes before the first batch, which damage
		// then cannot hide.
		first bool
	}{
		{"created", func(*testing.T, *Writer) {}, false, false},
		{"written", func(t *testing.T, w *Writer) { write(t, w, "a"); write(t, w, "b") }, false, false},
		{"written, synced", func(t *testing.T, w *Writer) { write(t, w, "a"); mustSync(t, w) }, false, false},
		{"written, synced, written", func(t *testing.T, w *Writer) { write(t, w, "a"); mustSync(t, w); write(t, w, "b") }, true, false},
		{"sealed unwritten", func(t *testing.T, w *Writer) { mustSeal(t, w) }, false, false},
		{"written, sealed", func(t *testing.T, w *Writer) { write(t, w, "a"); mustSeal(t, w) }, true, false},
		{"written, marked prev sealed", func(t *testing.T, w *Writer) { write(t, w, "a"); mustMarkPrevSealed(t, w) }, true, false},
		{"marked prev sealed, written, synced", func(t *testing.T, w *Writer) {
			mustMarkPrevSealed(t, w)
			write(t, w, "a")
			mustSync(t, w)
		}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, w := created(t)
			tc.steps(t, w)
			data := bytes.Clone(f.Bytes())
			got, err := ProvesPrevSealed(testFS, writeFile(t, data))
			if err != nil || got != tc.want {
				t.Fatalf("ProvesPrevSealed = %v, %v; want %v", got, err, tc.want)
			}
			if tc.want && !tc.first {
				// Damage before the mark hides it: only marks read in
				// order count, never bytes that look like one.
				data[fileHeaderSize+recordHeaderSize+markLen+recordHeaderSize+markLen+recordHeaderSize] ^= 1
				if got, err := ProvesPrevSealed(testFS, writeFile(t, data)); err != nil || got {
					t.Fatalf("with the first batch damaged: ProvesPrevSealed = %v, %v; want false", got, err)
				}
			}
		})
	}
}

func mustSync(t *testing.T, w *Writer) {
	t.Helper()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
}

func mustMarkPrevSealed(t *testing.T, w *Writer) {
	t.Helper()
	if err := w.MarkPrevSealed(); err != nil {
		t.Fatal(err)
	}
}

func mustSeal(t *testing.T, w *Writer) {
	t.Helper()
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
}

// TestReadFirstMark pins what ReadFirstMark answers: the first mark of a
// marked log, and nothing for a log without marks, one without a valid
// header, or a file that does not exist.
func TestReadFirstMark(t *testing.T) {
	f := &fakeFile{}
	first := Mark{BootID: bootA, PrevSynced: true}
	w, err := NewMarkedWriter(f, "000007.wal", first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteRecords([]byte("x")); err != nil {
		t.Fatal(err)
	}
	marked := bytes.Clone(f.Bytes())
	unmarked, _ := encodeLog(t, rand.New(rand.NewPCG(21, 22)), [][]byte{[]byte("x")})
	for _, tc := range []struct {
		name   string
		path   string
		want   Mark
		wantOK bool
	}{
		{"marked log", writeFile(t, marked), first, true},
		{"log without marks", writeFile(t, unmarked), Mark{}, false},
		{"bad header", writeFile(t, append([]byte("not a log header"), marked[fileHeaderSize:]...)), Mark{}, false},
		{"missing file", "/no/such/000008.wal", Mark{}, false},
	} {
		if m, ok := ReadFirstMark(testFS, tc.path); m != tc.want || ok != tc.wantOK {
			t.Errorf("%s: ReadFirstMark = %+v, %v; want %+v, %v", tc.name, m, ok, tc.want, tc.wantOK)
		}
	}
}

// TestMarkPrevSealedBesideWrites: the store's sync role writes the
// prev-sealed mark while the commit leader appends groups to the same
// log, so the two appends must not interleave. Every batch and every mark
// reads back whole, in the order each goroutine wrote them, and the log
// proves the older logs sealed. (Under the race detector, an append
// without the Writer's lock is also reported as a race.)
func TestMarkPrevSealedBesideWrites(t *testing.T) {
	f := &fakeFile{}
	w, err := NewMarkedWriter(f, "000007.wal", Mark{BootID: bootA})
	if err != nil {
		t.Fatal(err)
	}
	const batches, marks = 2000, 50
	done := make(chan error, 1)
	go func() {
		for range marks {
			if err := w.MarkPrevSealed(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range batches {
		if _, err := w.WriteRecords(fmt.Appendf(nil, "batch %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	data := bytes.Clone(f.Bytes())
	var got []string
	if _, err := Recover(testFS, writeFile(t, data), RecoverOptions{}, func(p []byte, _ int64) error {
		got = append(got, string(p))
		return nil
	}); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if len(got) != batches {
		t.Fatalf("recovered %d batches, want %d", len(got), batches)
	}
	for i, p := range got {
		if want := fmt.Sprintf("batch %d", i); p != want {
			t.Fatalf("batch %d reads %q, want %q", i, p, want)
		}
	}
	want := int64(fileHeaderSize + (1+marks)*(recordHeaderSize+markLen))
	for _, p := range got {
		want += int64(recordHeaderSize + len(p))
	}
	if int64(len(data)) != want {
		t.Fatalf("log of %d bytes; want %d: the first mark, %d prev-sealed marks and %d batches", len(data), want, marks, batches)
	}
	if ok, err := ProvesPrevSealed(testFS, writeFile(t, data)); err != nil || !ok {
		t.Fatalf("ProvesPrevSealed = %v, %v; want true", ok, err)
	}
}

// TestMarkPrevSealedAfterFailedWrite: after a failed write the log may
// end in a partial record, and a mark after it would make that tail look
// like damage to durable data; MarkPrevSealed refuses, writing nothing.
func TestMarkPrevSealedAfterFailedWrite(t *testing.T) {
	f := &fakeFile{}
	w, err := NewMarkedWriter(f, "000007.wal", Mark{BootID: bootA})
	if err != nil {
		t.Fatal(err)
	}
	f.failWrites, f.writeLimit, f.writeErr = true, 3, errors.New("disk full")
	if _, err := w.WriteRecords([]byte("a batch that fails part way")); err == nil {
		t.Fatal("WriteRecords succeeded on a failing file")
	}
	size := f.Len()
	f.failWrites = false
	if err := w.MarkPrevSealed(); err == nil {
		t.Fatal("MarkPrevSealed after a failed write succeeded")
	}
	if f.Len() != size {
		t.Fatalf("MarkPrevSealed after a failed write wrote %d bytes", f.Len()-size)
	}
}

// naiveSyncedClaim is the plain search claimScan must agree with: every
// position of b, no cap.
func naiveSyncedClaim(b []byte) int64 {
	best := int64(-1)
	for i := 0; i+recordHeaderSize+markLen <= len(b); i++ {
		end := i + recordHeaderSize + markLen
		if b[i+8] != recordMark || binary.LittleEndian.Uint32(b[i+4:]) != markLen ||
			crc32.Checksum(b[i+4:end], crcTable) != binary.LittleEndian.Uint32(b[i:]) {
			continue
		}
		if m, ok := parseMark(b[i+recordHeaderSize : end]); ok {
			best = max(best, m.Synced)
		}
	}
	return best
}

// TestClaimScanPieces: claimScan finds the same largest claim whatever
// pieces the bytes come in, marks split between pieces (even across
// several one-byte pieces) included.
func TestClaimScanPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	for round := range 300 {
		var b []byte
		for range rng.IntN(6) {
			b = append(b, make([]byte, rng.IntN(100))...) // zeros
			junk := make([]byte, rng.IntN(60))
			for i := range junk {
				junk[i] = byte(rng.IntN(4)) // small bytes: many near-miss headers
			}
			b = append(b, junk...)
			m := appendMark(nil, Mark{BootID: bootA, Synced: rng.Int64N(1 << 40)})
			if rng.IntN(4) == 0 {
				m[rng.IntN(len(m))] ^= 1 // a damaged mark claims nothing
			}
			b = append(b, m...)
		}
		want := naiveSyncedClaim(b)
		for _, maxPiece := range []int{1, 2, 33, 34, 35, 70, len(b) + 1} {
			var c claimScan
			for rest := b; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(maxPiece))
				if rng.IntN(8) == 0 {
					c.write(nil)
				}
				c.write(rest[:n])
				rest = rest[n:]
			}
			if got := c.best(); got != want {
				t.Fatalf("round %d, pieces up to %d bytes: claim %d, want %d (%d bytes)", round, maxPiece, got, want, len(b))
			}
		}
	}
}

// zeroReader reads as n zero bytes without holding them.
type zeroReader struct{ n int64 }

func (z *zeroReader) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), z.n)]
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

// TestDamageBeforeLongTailInBoundedMemory: judging damage after a power cut
// searches the whole rest of the log for a mark claiming the damaged bytes
// synced. The rest may be long (a preallocated file, a hole in a sparse
// one), so it is searched a piece at a time: a mark after 64 MiB of zeros
// still decides, and the search holds no copy of what it read.
func TestDamageBeforeLongTailInBoundedMemory(t *testing.T) {
	const tail = 64 << 20
	for _, claimed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mark at the end %v", claimed), func(t *testing.T) {
			data, offs := markedLog(t, 10, func(int) bool { return false })
			at := offs[8]
			data[at+recordHeaderSize+2] ^= 0x40 // group 4's first record
			var end []byte
			if claimed {
				end = appendMark(nil, Mark{BootID: bootA, Synced: at + recordHeaderSize})
			}
			r := NewReader(io.MultiReader(bytes.NewReader(data), &zeroReader{tail}, bytes.NewReader(end)), "000042.wal")
			r.AllowUnsyncedLoss(bootB)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			records, err := readAll(r)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
				t.Errorf("reading the log allocated %d bytes; its tail is %d", alloc, tail)
			}
			var ce *base.CorruptError
			switch {
			case len(records) != 8:
				t.Fatalf("read %d records before the damage, want 8", len(records))
			case claimed && (!errors.As(err, &ce) || ce.Offset != at):
				t.Fatalf("err = %v; want corruption at %d: the mark at the end claims it synced", err, at)
			case !claimed && !errors.Is(err, ErrUnsyncedTail):
				t.Fatalf("err = %v; want ErrUnsyncedTail", err)
			}
		})
	}
}
