package bloomkv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/golang/snappy"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/wal"
)

// Corruption, region by region. The fixture is a closed store with two
// segments (the older one is damaged) and a WAL of batches. Every region
// of a segment is covered by a checksum: the footer by its CRC and magic,
// every block (data, index, filter, properties) by its trailer's CRC. So a
// flipped bit anywhere must surface as ErrCorrupt, as a *base.CorruptError
// naming the segment and the offset where the damaged structure starts:
// at Open for the footer and the metadata blocks (which Open reads — in
// particular the filter, which could otherwise answer "absent" for a key
// the segment holds), at the first read of a data block otherwise. No read
// may return a wrong value or a false "not found" meanwhile.

const (
	corruptKeys    = 400 // written first and flushed: the segment that is damaged
	corruptExtras  = 50  // written with overwrites and deletes and flushed: a newer segment
	corruptBatches = 20  // batches left in the WAL
)

func corruptKey(i int) string { return fmt.Sprintf("key%05d", i) }

func corruptValue(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 20+i%13) }

// corruptFixture is a closed store, the model of its contents and the
// layout of its files.
type corruptFixture struct {
	dir     string
	seg     string // base name of the older segment, the one damaged
	segData []byte
	layout  segLayout
	wal     string // base name of the WAL
	walData []byte
	walRecs []int               // start offset of each WAL record
	walSeal int                 // where the mark that Close appends (wal.Writer.Seal) starts
	base    map[string][]byte   // contents before the WAL's batches
	batches []map[string][]byte // each WAL batch: key → value, nil for a delete
	// fromSeg holds the keys whose newest version is in the damaged
	// segment: a read of them must touch it.
	fromSeg map[string]bool
	probes  []string // every key written, and keys never written
}

// corruptOptions keep the fixture's shape: no flush or compaction but
// those the test asks for, small blocks for many regions.
func corruptOptions(mmap bool) *Options {
	o := smallOptions()
	o.MemtableSize = 1 << 20
	o.BlockSize = 256
	o.DisableAutoCompaction = true
	o.DisableMmap = !mmap
	return o
}

func newCorruptFixture(t *testing.T) *corruptFixture {
	t.Helper()
	fx := &corruptFixture{dir: t.TempDir(), base: map[string][]byte{}, fromSeg: map[string]bool{}}
	db := mustOpen(t, fx.dir, corruptOptions(true))
	for i := range corruptKeys {
		mustDo(t, db.Put([]byte(corruptKey(i)), corruptValue(i)))
		fx.base[corruptKey(i)] = corruptValue(i)
	}
	mustDo(t, db.Flush())
	segs, _ := filepath.Glob(filepath.Join(fx.dir, "*"+base.SegmentExt))
	if len(segs) != 1 {
		t.Fatalf("want one segment after the first Flush, have %v", segs)
	}
	fx.seg = filepath.Base(segs[0])
	fx.writeNewerSegment(t, db)
	fx.writeWAL(t, db)
	mustDo(t, db.Close())

	var err error
	fx.segData, err = os.ReadFile(segs[0])
	mustDo(t, err)
	fx.layout = parseSegLayout(t, fx.segData)
	fx.wal = newestWAL(t, fx.dir)
	fx.walData, err = os.ReadFile(filepath.Join(fx.dir, fx.wal))
	mustDo(t, err)
	fx.walRecs, fx.walSeal = walRecordStarts(t, fx.walData)
	if len(fx.walRecs) != corruptBatches {
		t.Fatalf("%s holds %d records, want %d", fx.wal, len(fx.walRecs), corruptBatches)
	}
	final := fx.model(corruptBatches)
	for i := range corruptKeys + 10 { // 10 keys past the last one, never written
		fx.probes = append(fx.probes, corruptKey(i))
	}
	for k := range final {
		if !strings.HasPrefix(k, "key") {
			fx.probes = append(fx.probes, k)
		}
	}
	for i := range 20 {
		fx.probes = append(fx.probes, fmt.Sprintf("key%05d~", i*20), fmt.Sprintf("absent%03d", i))
	}
	for i := range corruptKeys { // still holding the value of the first Flush
		if v, ok := final[corruptKey(i)]; ok && bytes.Equal(v, corruptValue(i)) {
			fx.fromSeg[corruptKey(i)] = true
		}
	}
	return fx
}

// writeNewerSegment overwrites and deletes some keys of the first segment
// and adds others, and flushes them: reads of those keys stop there.
func (fx *corruptFixture) writeNewerSegment(t *testing.T, db *DB) {
	for i := range corruptKeys {
		k := corruptKey(i)
		switch i % 10 {
		case 3:
			v := fmt.Appendf(nil, "over-%05d", i)
			mustDo(t, db.Put([]byte(k), v))
			fx.base[k] = v
		case 7:
			mustDo(t, db.Delete([]byte(k)))
			delete(fx.base, k)
		}
	}
	for i := range corruptExtras {
		k := fmt.Sprintf("extra%03d", i)
		mustDo(t, db.Put([]byte(k), corruptValue(i)))
		fx.base[k] = corruptValue(i)
	}
	mustDo(t, db.Flush())
}

// writeWAL commits batches that stay in the WAL: new keys, an overwrite
// and a delete of keys of the first segment.
func (fx *corruptFixture) writeWAL(t *testing.T, db *DB) {
	for i := range corruptBatches {
		b, m := NewBatch(), map[string][]byte{}
		for j := range 3 {
			k, v := fmt.Sprintf("wal%02d-%d", i, j), corruptValue(i*3+j)
			b.Put([]byte(k), v)
			m[k] = v
		}
		over, gone := corruptKey(10*i+5), corruptKey(10*i+9)
		b.Put([]byte(over), fmt.Appendf(nil, "batch-%02d", i))
		m[over] = fmt.Appendf(nil, "batch-%02d", i)
		b.Delete([]byte(gone))
		m[gone] = nil
		mustDo(t, db.Write(b))
		fx.batches = append(fx.batches, m)
	}
}

// model returns the store's contents with the first n WAL batches applied.
func (fx *corruptFixture) model(n int) map[string][]byte {
	m := maps.Clone(fx.base)
	for _, b := range fx.batches[:n] {
		for k, v := range b {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
	}
	return m
}

// segRegion is a byte range of a segment and what damage to it must
// produce.
type segRegion struct {
	name       string
	start, end int  // the bytes [start, end)
	report     int  // the offset an error about them must name
	atOpen     bool // Open reads them, so Open must fail
	block      int  // data block number, -1 for the metadata
}

type segLayout struct {
	regions []segRegion
	seps    []string // user key of each data block's index separator
}

// blockOf returns the data block whose key range holds key, -1 if none.
func (l segLayout) blockOf(key string) int {
	i, _ := slices.BinarySearch(l.seps, key)
	if i == len(l.seps) {
		return -1
	}
	return i
}

func (l segLayout) regionAt(t *testing.T, off int) segRegion {
	t.Helper()
	for _, r := range l.regions {
		if off >= r.start && off < r.end {
			return r
		}
	}
	t.Fatalf("offset %d outside the segment", off)
	return segRegion{}
}

// parseSegLayout locates every region of a segment from its bytes, as
// segment/FORMAT.md describes them, and checks that they tile the file.
func parseSegLayout(t *testing.T, data []byte) segLayout {
	t.Helper()
	const footerLen, trailerLen = 64, 5
	footer := len(data) - footerLen
	handle := func(at int) (int, int) {
		return int(binary.LittleEndian.Uint64(data[at:])), int(binary.LittleEndian.Uint64(data[at+8:]))
	}
	var l segLayout
	block := func(name string, off, n, blk int) {
		l.regions = append(l.regions,
			segRegion{name, off, off + n, off, blk < 0, blk},
			segRegion{name + " trailer", off + n, off + n + trailerLen, off, blk < 0, blk})
	}
	iOff, iLen := handle(footer + 32)
	for i, e := range blockEntries(t, storedBlock(t, data, iOff, iLen)) {
		off, n1 := binary.Uvarint(e[1])
		n, n2 := binary.Uvarint(e[1][n1:])
		if n1 <= 0 || n2 <= 0 {
			t.Fatalf("index entry %d: bad handle %x", i, e[1])
		}
		block(fmt.Sprintf("data block %d", i), int(off), int(n), i)
		l.seps = append(l.seps, string(e[0][:len(e[0])-base.TrailerLen]))
	}
	fOff, fLen := handle(footer)
	if fLen == 0 {
		t.Fatal("the segment has no filter")
	}
	block("filter block", fOff, fLen, -1)
	pOff, pLen := handle(footer + 16)
	block("properties block", pOff, pLen, -1)
	block("index block", iOff, iLen, -1)
	for _, f := range []struct {
		name       string
		start, end int
	}{{"filter handle", 0, 16}, {"properties handle", 16, 32}, {"index handle", 32, 48},
		{"version", 48, 52}, {"checksum", 52, 56}, {"magic", 56, 64}} {
		l.regions = append(l.regions, segRegion{"footer " + f.name, footer + f.start, footer + f.end, footer, true, -1})
	}
	for i, at := 0, 0; i < len(l.regions); i++ {
		if l.regions[i].start != at || l.regions[i].end <= at {
			t.Fatalf("regions do not tile the segment: %+v at %d", l.regions[i], at)
		}
		at = l.regions[i].end
		if i == len(l.regions)-1 && at != len(data) {
			t.Fatalf("regions end at %d of %d bytes", at, len(data))
		}
	}
	return l
}

// storedBlock returns the block at [off, off+n) decompressed.
func storedBlock(t *testing.T, data []byte, off, n int) []byte {
	t.Helper()
	b := data[off : off+n]
	if data[off+n] == 1 {
		var err error
		if b, err = snappy.Decode(nil, b); err != nil {
			t.Fatalf("block at %d: %v", off, err)
		}
	}
	return b
}

// blockEntries decodes a block's entries as [key, value] pairs.
func blockEntries(t *testing.T, b []byte) [][2][]byte {
	t.Helper()
	end := len(b) - 4 - 4*int(binary.LittleEndian.Uint32(b[len(b)-4:]))
	var out [][2][]byte
	var prev []byte
	for off := 0; off < end; {
		var h [3]uint64
		for i := range h {
			v, n := binary.Uvarint(b[off:])
			if n <= 0 {
				t.Fatalf("block entry at %d: bad varint", off)
			}
			h[i], off = v, off+n
		}
		key := append(bytes.Clone(prev[:h[0]]), b[off:off+int(h[1])]...)
		off += int(h[1])
		out = append(out, [2][]byte{key, b[off : off+int(h[2])]})
		off += int(h[2])
		prev = key
	}
	return out
}

// wal/FORMAT.md: the file header, and the header of every record.
const (
	walHeaderLen       = 16
	walRecordHeaderLen = 9
)

// walRecordStarts returns where each batch record of a WAL starts (mark
// records, which the reader skips, are not listed).
func walRecordStarts(t *testing.T, data []byte) (starts []int, end int) {
	t.Helper()
	r := wal.NewReader(bytes.NewReader(data), "wal")
	for {
		p, err := r.Next()
		if err != nil {
			return starts, end
		}
		starts = append(starts, int(r.Offset())-walRecordHeaderLen-len(p))
		end = int(r.Offset())
	}
}

// wantCorrupt checks that err is ErrCorrupt, a *base.CorruptError naming
// file at an offset in [lo, hi].
func wantCorrupt(t *testing.T, err error, file string, lo, hi int, what string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: %v, want ErrCorrupt", what, err)
	}
	var ce *base.CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: %v is not a *base.CorruptError", what, err)
	}
	if ce.File != file || ce.Offset < int64(lo) || ce.Offset > int64(hi) {
		t.Fatalf("%s: %v names %s at %d; want %s at [%d, %d]", what, err, ce.File, ce.Offset, file, lo, hi)
	}
}

// copyStore copies the fixture's store to a fresh directory, with the
// files named in replace holding other bytes. Open changes a store (it
// flushes the WAL and removes files), so every trial needs its own copy.
func (fx *corruptFixture) copyStore(t *testing.T, replace map[string][]byte) string {
	t.Helper()
	cp := t.TempDir()
	entries, err := os.ReadDir(fx.dir)
	mustDo(t, err)
	for _, e := range entries {
		b, ok := replace[e.Name()]
		if !ok {
			b, err = os.ReadFile(filepath.Join(fx.dir, e.Name()))
			mustDo(t, err)
		}
		mustDo(t, os.WriteFile(filepath.Join(cp, e.Name()), b, 0o644))
	}
	return cp
}

// wantUnchanged checks that a failed Open left file as it was.
func wantUnchanged(t *testing.T, dir, file string, data []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a failed Open changed %s (%d bytes, want %d; %v)", file, len(got), len(data), err)
	}
}

func TestCorruptSegmentRegions(t *testing.T) {
	fx := newCorruptFixture(t)
	offsets := map[int]bool{}
	for _, r := range fx.layout.regions {
		if r.block > 0 && r.block != len(fx.layout.seps)/2 && r.block != len(fx.layout.seps)-1 {
			continue // data blocks 0, the middle one and the last one stand for the others
		}
		offsets[r.start], offsets[(r.start+r.end)/2], offsets[r.end-1] = true, true, true
	}
	stride := 71 // and a sweep of the whole file
	if testing.Short() {
		stride = 251
	}
	for off := 0; off < len(fx.segData); off += stride {
		offsets[off] = true
	}
	for i, off := range slices.Sorted(maps.Keys(offsets)) {
		r := fx.layout.regionAt(t, off)
		mmap := i%2 == 0
		t.Run(fmt.Sprintf("%s/+%d/mmap=%v", r.name, off-r.start, mmap), func(t *testing.T) {
			bad := bytes.Clone(fx.segData)
			bad[off] ^= 1 << (off % 8) // one bit: the smallest damage
			fx.checkSegmentDamage(t, bad, r, mmap)
		})
	}
	t.Logf("%d-byte segment, %d data blocks: %d flips, each reported at its region",
		len(fx.segData), len(fx.layout.seps), len(offsets))
}

// checkSegmentDamage opens a copy of the store whose older segment holds
// bad, damaged in r, and reads everything: Gets, a scan, a Compact, Gets
// again and after a reopen.
func (fx *corruptFixture) checkSegmentDamage(t *testing.T, bad []byte, r segRegion, mmap bool) {
	dir := fx.copyStore(t, map[string][]byte{fx.seg: bad})
	db, err := Open(dir, corruptOptions(mmap))
	if err != nil {
		wantCorrupt(t, err, fx.seg, r.report, r.report, "Open")
		wantUnchanged(t, dir, fx.seg, bad)
		return
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	if r.atOpen {
		t.Fatalf("Open accepted damage to the %s", r.name)
	}
	want := fx.model(corruptBatches)
	fx.checkGets(t, db, want, r)
	fx.checkScan(t, db, want, r)
	wantCorrupt(t, db.Compact(), fx.seg, r.report, r.report, "Compact")
	fx.checkGets(t, db, want, r)
	db.Close()
	// The failed compaction must not have lost or replaced the segment.
	if db, err = Open(dir, corruptOptions(mmap)); err != nil {
		t.Fatalf("reopen after the failed Compact: %v", err)
	}
	fx.checkGets(t, db, want, r)
}

// checkGets reads every probe: a key whose newest version sits in the
// damaged data block must fail with ErrCorrupt at that block, a key never
// written whose range falls in it may; every other read must match want.
func (fx *corruptFixture) checkGets(t *testing.T, db *DB, want map[string][]byte, r segRegion) {
	t.Helper()
	for _, k := range fx.probes {
		v, err := db.Get([]byte(k))
		inDamage := r.block >= 0 && fx.layout.blockOf(k) == r.block
		w, written := want[k]
		switch {
		case err != nil && !errors.Is(err, ErrNotFound):
			if !inDamage || (!fx.fromSeg[k] && written) {
				t.Fatalf("Get %s: %v, want %q: damage to the %s is elsewhere", k, err, w, r.name)
			}
			wantCorrupt(t, err, fx.seg, r.report, r.report, "Get "+k)
		case inDamage && fx.fromSeg[k]:
			t.Fatalf("Get %s from the damaged %s: %q, %v; want ErrCorrupt", k, r.name, v, err)
		case !written && err == nil:
			t.Fatalf("Get %s, never written or deleted: %q", k, v)
		case written && (err != nil || !bytes.Equal(v, w)):
			t.Fatalf("Get %s = %q, %v; want %q", k, v, err, w)
		}
	}
}

// checkScan scans the whole store: every pair it yields must be the next
// one of want, and it must end in ErrCorrupt at the damage if that is in a
// data block (which a full scan reads).
func (fx *corruptFixture) checkScan(t *testing.T, db *DB, want map[string][]byte, r segRegion) {
	t.Helper()
	keys := slices.Sorted(maps.Keys(want))
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	i := 0
	for k, v := range it.All() {
		if i >= len(keys) || string(k) != keys[i] || !bytes.Equal(v, want[keys[i]]) {
			t.Fatalf("scan yields %q=%q at position %d, want %q", k, v, i, keys[min(i, len(keys)-1)])
		}
		i++
	}
	err = it.Close()
	switch {
	case err != nil:
		wantCorrupt(t, err, fx.seg, r.report, r.report, "scan")
	case r.block >= 0:
		t.Fatalf("a full scan read past damage to the %s without an error", r.name)
	case i != len(keys):
		t.Fatalf("scan ends after %d of %d keys without an error", i, len(keys))
	}
}

// checkModel reads every probe and scans the store of an undamaged
// segment: everything must match want exactly.
func (fx *corruptFixture) checkModel(t *testing.T, db *DB, want map[string][]byte) {
	t.Helper()
	r := segRegion{name: "nothing", block: -1}
	fx.checkGets(t, db, want, r)
	fx.checkScan(t, db, want, r)
}

func TestCorruptSegmentTruncated(t *testing.T) {
	fx := newCorruptFixture(t)
	l := fx.layout
	at := func(name string) segRegion {
		for _, r := range l.regions {
			if r.name == name {
				return r
			}
		}
		t.Fatalf("no region %s", name)
		return segRegion{}
	}
	size := len(fx.segData)
	cuts := []struct {
		name string
		n    int
	}{
		{"zero length", 0},
		{"one byte", 1},
		{"mid data block 0", at("data block 0").end / 2},
		{"at data block 1", at("data block 1").start},
		{"mid filter block", (at("filter block").start + at("filter block").end) / 2},
		{"mid index block", (at("index block").start + at("index block").end) / 2},
		{"whole footer", size - 64},
		{"mid footer", size - 30},
		{"last byte", size - 1},
	}
	for _, c := range cuts {
		t.Run(c.name, func(t *testing.T) {
			dir := fx.copyStore(t, map[string][]byte{fx.seg: fx.segData[:c.n]})
			db, err := Open(dir, corruptOptions(true))
			if err == nil {
				db.Close()
				t.Fatalf("Open accepted %s cut to %d of %d bytes", fx.seg, c.n, size)
			}
			wantUnchanged(t, dir, fx.seg, fx.segData[:c.n])
			// The damage starts where the file now ends, or is noticed
			// at the footer read from there.
			wantCorrupt(t, err, fx.seg, 0, c.n, "Open")
		})
	}
}

// TestCorruptWAL flips a bit in every region of the WAL: the file header,
// each field of each record, and the mark a clean Close seals the log with.
// The fixture's store was closed cleanly, so damage to any record, the
// last one included, is corruption, reported at the start of the damaged
// record (0 for the header) with the file left alone: the seal proves the
// record was durable, and dropping it as a torn write would lose an
// acknowledged batch quietly. Damage to the seal itself loses nothing.
func TestCorruptWAL(t *testing.T) {
	fx := newCorruptFixture(t)
	last := len(fx.walRecs) - 1
	offsets := map[int]bool{0: true, 8: true, 12: true, 15: true}
	for _, j := range []int{0, 1, last / 2, last - 1, last} {
		start, end := fx.walRecs[j], fx.walEnd(j)
		for _, d := range []int{0, 3, 4, 7, 8, 9, (end - start) / 2, end - start - 1} {
			offsets[start+d] = true // checksum, length, type, payload
		}
	}
	stride := 5
	if testing.Short() {
		stride = 23
	}
	for off := 0; off < len(fx.walData); off += stride {
		offsets[off] = true
	}
	for _, off := range slices.Sorted(maps.Keys(offsets)) {
		rec := -1 // the file header
		for j, s := range fx.walRecs {
			if off >= s {
				rec = j
			}
		}
		if off >= fx.walSeal {
			rec = len(fx.walRecs) // the seal
		}
		t.Run(fmt.Sprintf("record %d/+%d", rec, off-fx.walStart(rec)), func(t *testing.T) {
			bad := bytes.Clone(fx.walData)
			bad[off] ^= 1 << (off % 8)
			fx.checkWALDamage(t, bad, rec)
		})
	}
}

func (fx *corruptFixture) walStart(rec int) int {
	switch {
	case rec < 0:
		return 0
	case rec == len(fx.walRecs):
		return fx.walSeal
	}
	return fx.walRecs[rec]
}

func (fx *corruptFixture) walEnd(rec int) int {
	switch {
	case rec+1 < len(fx.walRecs):
		return fx.walRecs[rec+1]
	case rec+1 == len(fx.walRecs):
		return fx.walSeal
	}
	return len(fx.walData)
}

func (fx *corruptFixture) checkWALDamage(t *testing.T, bad []byte, rec int) {
	dir := fx.copyStore(t, map[string][]byte{fx.wal: bad})
	db, err := Open(dir, corruptOptions(true))
	if err != nil {
		lo, hi := fx.walStart(rec), fx.walStart(rec)
		if rec < 0 {
			// Before the first batch: the file header, or one of the mark
			// records that precede the first batch (wal.Mark), reported
			// at its own start.
			hi = fx.walRecs[0] - 1
		}
		wantCorrupt(t, err, fx.wal, lo, hi, "Open")
		wantUnchanged(t, dir, fx.wal, bad)
		return
	}
	defer db.Close()
	if rec < len(fx.walRecs) {
		t.Fatalf("Open accepted damage to record %d of %d of a sealed log", rec, len(fx.walRecs))
	}
	fx.checkModel(t, db, fx.model(len(fx.walRecs))) // a damaged seal loses no batch
}

// TestCorruptWALTruncated cuts the WAL anywhere: a torn tail, never
// corruption. Open keeps every complete record and drops the rest, and the
// cut sticks across a second reopen.
func TestCorruptWALTruncated(t *testing.T) {
	fx := newCorruptFixture(t)
	last := len(fx.walRecs) - 1
	for _, n := range []int{0, 10, 16, 17, fx.walRecs[1] - 1, fx.walRecs[last] - 1, fx.walRecs[last],
		fx.walRecs[last] + 3, fx.walRecs[last] + 9, fx.walSeal - 1, fx.walSeal, fx.walSeal + 5, len(fx.walData) - 1, len(fx.walData)} {
		complete := 0
		for j := range fx.walRecs {
			if fx.walEnd(j) <= n {
				complete = j + 1
			}
		}
		t.Run(fmt.Sprintf("%d bytes", n), func(t *testing.T) {
			dir := fx.copyStore(t, map[string][]byte{fx.wal: fx.walData[:n]})
			for range 2 {
				db, err := Open(dir, corruptOptions(true))
				if err != nil {
					t.Fatalf("Open of a WAL cut to %d bytes: %v", n, err)
				}
				fx.checkModel(t, db, fx.model(complete))
				mustDo(t, db.Close())
			}
		})
	}
}
