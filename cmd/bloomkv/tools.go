package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/bloomkv/bloomkv"
	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/batch"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/wal"
)

// openWritable opens the existing store in dir for writing, with every
// write fsynced before it returns. It refuses a directory that holds no
// store rather than creating one there: a mistyped path must not become
// a new, empty store.
func openWritable(dir string) (*bloomkv.DB, error) {
	if _, err := os.Stat(filepath.Join(dir, base.ManifestName)); err != nil {
		if _, derr := os.Stat(dir); errors.Is(derr, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: no such directory, so no bloomkv store", dir)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: not a bloomkv store (no %s)", dir, base.ManifestName)
		}
		return nil, err
	}
	opts := bloomkv.DefaultOptions()
	opts.Sync = true
	return bloomkv.Open(dir, opts)
}

// writeLine is what put -json and delete -json print.
type writeLine struct {
	Op    string `json:"op"`
	Key   []byte `json:"key"`
	Found *bool  `json:"found,omitempty"` // delete: whether the key was there
}

func put(args []string, stdout, stderr io.Writer) int {
	c := newCommand("put", "[-hex] [-json] DIR KEY VALUE", stdout, stderr)
	asHex := c.Bool("hex", false, "KEY and VALUE are hex")
	asJSON := c.Bool("json", false, `print {"op":"put","key":...}, the key in base64`)
	pos, code, ok := c.parse(args, 3)
	if !ok {
		return code
	}
	key, code, ok := keyArg(stderr, "put", pos[1], *asHex)
	if !ok {
		return code
	}
	value, err := decodeArg("VALUE", pos[2], *asHex)
	if err != nil {
		return usageError(stderr, "put", "%v", err)
	}
	db, err := openWritable(pos[0])
	if err != nil {
		return failure(stderr, "put", err)
	}
	if err := errors.Join(db.Put(key, value), db.Close()); err != nil {
		if errors.Is(err, bloomkv.ErrValueTooLarge) || errors.Is(err, bloomkv.ErrKeyTooLarge) {
			return usageError(stderr, "put", "%v", err)
		}
		return failure(stderr, "put", err)
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(writeLine{Op: "put", Key: key}); err != nil {
			return failure(stderr, "put", err)
		}
	}
	return exitOK
}

// del is the delete command. Deleting an absent key succeeds, as
// DB.Delete does; -json says whether the key was there.
func del(args []string, stdout, stderr io.Writer) int {
	c := newCommand("delete", "[-hex] [-json] DIR KEY", stdout, stderr)
	asHex := c.Bool("hex", false, "KEY is hex")
	asJSON := c.Bool("json", false, `print {"op":"delete","key":...,"found":...}, the key in base64`)
	pos, code, ok := c.parse(args, 2)
	if !ok {
		return code
	}
	key, code, ok := keyArg(stderr, "delete", pos[1], *asHex)
	if !ok {
		return code
	}
	db, err := openWritable(pos[0])
	if err != nil {
		return failure(stderr, "delete", err)
	}
	found, err := db.Has(key)
	if err == nil {
		err = db.Delete(key)
	}
	if err := errors.Join(err, db.Close()); err != nil {
		if errors.Is(err, bloomkv.ErrKeyTooLarge) {
			return usageError(stderr, "delete", "%v", err)
		}
		return failure(stderr, "delete", err)
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(writeLine{Op: "delete", Key: key, Found: &found}); err != nil {
			return failure(stderr, "delete", err)
		}
	}
	return exitOK
}

func count(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("count", "[-prefix P] [-start K] [-end K] [-hex] [-json] DIR", stdout, stderr)
	bounds := addBounds(c)
	asHex := c.Bool("hex", false, "-prefix, -start and -end are hex")
	asJSON := c.Bool("json", false, `print {"count":N}`)
	pos, code, ok := c.parse(args, 1)
	if !ok {
		return code
	}
	o, err := bounds.options(*asHex)
	if err != nil {
		return usageError(stderr, "count", "%v", err)
	}
	db, err := openReadOnly(pos[0])
	if err != nil {
		return failure(stderr, "count", err)
	}
	n, err := countKeys(ctx, db, o)
	if err = errors.Join(err, db.Close()); err != nil {
		return failure(stderr, "count", err)
	}
	if *asJSON {
		err = json.NewEncoder(stdout).Encode(struct {
			Count int64 `json:"count"`
		}{n})
	} else {
		_, err = fmt.Fprintln(stdout, n)
	}
	if err != nil {
		return failure(stderr, "count", err)
	}
	return exitOK
}

// countKeys counts the live keys of db within o. The store keeps no count
// (a segment's entry count includes overwritten versions and tombstones),
// so it walks the keys; values are not copied.
func countKeys(ctx context.Context, db *bloomkv.DB, o *bloomkv.IterOptions) (n int64, err error) {
	it, err := db.NewIterator(o)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
	}
	return n, nil
}

// shapeJSON is the part of the store's shape compact prints.
type shapeJSON struct {
	Segments     int   `json:"segments"`
	SegmentBytes int64 `json:"segment_bytes"`
}

func compact(args []string, stdout, stderr io.Writer) int {
	c := newCommand("compact", "[-json] DIR", stdout, stderr)
	asJSON := c.Bool("json", false, `print {"before":{...},"after":{...}}: segments and segment_bytes`)
	pos, code, ok := c.parse(args, 1)
	if !ok {
		return code
	}
	db, err := openWritable(pos[0])
	if err != nil {
		return failure(stderr, "compact", err)
	}
	shape := func() shapeJSON {
		st := db.Stats()
		return shapeJSON{st.Segments, st.SegmentBytes}
	}
	before := shape()
	err = db.Compact()
	after := shape()
	if err := errors.Join(err, db.Close()); err != nil {
		return failure(stderr, "compact", err)
	}
	if *asJSON {
		err = printJSON(stdout, struct {
			Before shapeJSON `json:"before"`
			After  shapeJSON `json:"after"`
		}{before, after})
	} else {
		_, err = fmt.Fprintf(stdout, "before: %d segments, %s\nafter:  %d segments, %s\n",
			before.Segments, sizeString(before.SegmentBytes), after.Segments, sizeString(after.SegmentBytes))
	}
	if err != nil {
		return failure(stderr, "compact", err)
	}
	return exitOK
}

// segmentJSON describes one live segment in lsm -json.
type segmentJSON struct {
	File          string  `json:"file"`
	Tier          uint32  `json:"tier"`
	Bytes         int64   `json:"bytes"`
	Smallest      []byte  `json:"smallest"`
	Largest       []byte  `json:"largest"`
	Entries       uint64  `json:"entries"`
	Tombstones    uint64  `json:"tombstones"`
	RangeDels     uint64  `json:"range_dels"`
	DistinctKeys  uint64  `json:"distinct_keys"`
	MinSeq        uint64  `json:"min_seq"`
	MaxSeq        uint64  `json:"max_seq"`
	DataBlocks    int     `json:"data_blocks"`
	ValueRecords  uint64  `json:"value_records"` // values stored apart from their keys
	RangeCovered  uint64  `json:"range_covered"` // puts kept for a snapshot that a newer range tombstone deletes
	FilterBits    uint64  `json:"filter_bits"`
	FilterK       uint8   `json:"filter_k"`
	BitsPerKey    float64 `json:"filter_bits_per_key"`
	FPR           float64 `json:"filter_fpr"`       // the layout's formula at the filter's geometry and key count
	FPRFromBits   float64 `json:"filter_fpr_bits"`  // estimated from the filter's set bits
	PrefixFilter  string  `json:"prefix_extractor"` // "" without a prefix filter
	FormatVersion uint32  `json:"format_version"`
}

// tierJSON sums the segments of one tier in lsm -json.
type tierJSON struct {
	Tier       uint32 `json:"tier"`
	Segments   int    `json:"segments"`
	Bytes      int64  `json:"bytes"`
	Entries    uint64 `json:"entries"`
	Tombstones uint64 `json:"tombstones"`
}

// lsm lists the live segments by tier. It reads the manifest read-only,
// under its shared lock, so no writer can remove a segment meanwhile,
// and opens each segment for its properties and filter.
func lsm(args []string, stdout, stderr io.Writer) int {
	c := newCommand("lsm", "[-json] DIR", stdout, stderr)
	asJSON := c.Bool("json", false, `print {"tiers":[...],"segments":[...]}, key ranges in base64`)
	pos, code, ok := c.parse(args, 1)
	if !ok {
		return code
	}
	dir := pos[0]
	st, err := manifest.ReadState(vfs.Default, filepath.Join(dir, base.ManifestName))
	if err != nil {
		return failure(stderr, "lsm", err)
	}
	var segs []segmentJSON
	for _, m := range st.Segments {
		s, err := describeSegment(filepath.Join(dir, base.SegmentFileName(m.FileNum)))
		if err != nil {
			return failure(stderr, "lsm", err)
		}
		s.Tier = m.Tier
		segs = append(segs, s)
	}
	// Highest tier (the oldest, largest data) first, then newest first
	// within a tier, as the manifest orders them.
	slices.SortStableFunc(segs, func(a, b segmentJSON) int { return int(b.Tier) - int(a.Tier) })
	var tiers []tierJSON
	for _, s := range segs {
		if len(tiers) == 0 || tiers[len(tiers)-1].Tier != s.Tier {
			tiers = append(tiers, tierJSON{Tier: s.Tier})
		}
		t := &tiers[len(tiers)-1]
		t.Segments++
		t.Bytes += s.Bytes
		t.Entries += s.Entries
		t.Tombstones += s.Tombstones
	}
	if *asJSON {
		err = printJSON(stdout, struct {
			Tiers    []tierJSON    `json:"tiers"`
			Segments []segmentJSON `json:"segments"`
		}{orEmpty(tiers), orEmpty(segs)})
	} else {
		err = writeLSM(stdout, tiers, segs)
	}
	if err != nil {
		return failure(stderr, "lsm", err)
	}
	return exitOK
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// openSegment opens the segment file at path; the caller closes f. Its
// damage is reported as corruption naming the file and offset. Like the
// store, it opens only a regular file (vfs.OpenRegular): a named pipe
// would block the open, a device such as /dev/zero never ends.
func openSegment(path string) (r *segment.Reader, f *os.File, size int64, err error) {
	f, err = vfs.OpenRegular(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil {
		size = fi.Size()
		r, err = segment.Open(f, size, segment.ReaderOptions{Name: filepath.Base(path)})
	}
	if err != nil {
		f.Close()
		return nil, nil, 0, err
	}
	return r, f, size, nil
}

// describeSegment opens the segment at path for its properties and
// filter.
func describeSegment(path string) (segmentJSON, error) {
	r, f, size, err := openSegment(path)
	if err != nil {
		return segmentJSON{}, err
	}
	defer f.Close()
	return describe(r, filepath.Base(path), size), nil
}

// describe summarizes the segment r, named name, of size bytes.
func describe(r *segment.Reader, name string, size int64) segmentJSON {
	p := r.Properties()
	s := segmentJSON{
		File: name, Bytes: size,
		Smallest: orEmpty(p.Smallest), Largest: orEmpty(p.Largest),
		Entries: p.Entries, Tombstones: p.Tombstones, RangeDels: p.RangeDels, DistinctKeys: p.DistinctKeys,
		MinSeq: p.MinSeq, MaxSeq: p.MaxSeq, DataBlocks: p.DataBlocks, ValueRecords: p.Values, RangeCovered: p.RangeCovered,
		FilterBits: p.FilterBits, FilterK: p.FilterK,
		PrefixFilter: p.PrefixExtractor, FormatVersion: p.FormatVersion,
	}
	if f := r.Filter(); f != nil && p.DistinctKeys > 0 {
		s.BitsPerKey = float64(p.FilterBits) / float64(p.DistinctKeys)
		s.FPR = finite(bloom.FPR(f.Geometry().Layout, s.BitsPerKey, int(p.FilterK)))
		s.FPRFromBits = finite(f.EstimatedFPR())
	}
	return s
}

// writeLSM prints lsm's text: a table per tier.
func writeLSM(w io.Writer, tiers []tierJSON, segs []segmentJSON) error {
	bw := bufio.NewWriter(w)
	if len(segs) == 0 {
		fmt.Fprintln(bw, "no segments")
	}
	i := 0
	for _, t := range tiers {
		fmt.Fprintf(bw, "tier %d: %d segments, %s, %d entries, %d tombstones\n",
			t.Tier, t.Segments, sizeString(t.Bytes), t.Entries, t.Tombstones)
		fmt.Fprintf(bw, "  %-12s %12s %10s %10s %8s %7s %9s  %s\n",
			"file", "bytes", "entries", "tombstones", "rangedel", "bits/key", "fpr", "key range")
		for ; i < len(segs) && segs[i].Tier == t.Tier; i++ {
			s := segs[i]
			fpr := "-"
			if s.FilterBits > 0 {
				fpr = fmt.Sprintf("%.3g", s.FPR)
			}
			fmt.Fprintf(bw, "  %-12s %12d %10d %10d %8d %7.2f %9s  [%s, %s]\n",
				s.File, s.Bytes, s.Entries, s.Tombstones, s.RangeDels, s.BitsPerKey, fpr,
				formatBytes(s.Smallest, false), formatBytes(s.Largest, false))
		}
	}
	return bw.Flush()
}

// dumpOptions say how dump prints.
type dumpOptions struct {
	hex, json bool
	w         *bufio.Writer
	enc       *json.Encoder
}

// line prints one JSON object (with -json) or one text line.
func (o *dumpOptions) line(v any, format string, args ...any) error {
	if o.json {
		return o.enc.Encode(v)
	}
	_, err := fmt.Fprintf(o.w, format+"\n", args...)
	return err
}

func (o *dumpOptions) b(p []byte) string { return formatBytes(p, o.hex) }

func dump(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("dump", "[-hex] [-json] segment|wal|manifest FILE", stdout, stderr)
	asHex := c.Bool("hex", false, "print keys and values as hex")
	asJSON := c.Bool("json", false, `print one JSON object per line, each with a "type"; keys and values in base64`)
	pos, code, ok := c.parse(args, 2)
	if !ok {
		return code
	}
	bw := bufio.NewWriter(stdout)
	o := &dumpOptions{hex: *asHex, json: *asJSON, w: bw, enc: json.NewEncoder(bw)}
	var err error
	switch pos[0] {
	case "segment":
		err = dumpSegment(ctx, o, pos[1])
	case "wal":
		err = dumpWAL(ctx, o, pos[1])
	case "manifest":
		err = dumpManifest(o, pos[1])
	default:
		c.printUsage(stderr)
		return usageError(stderr, "dump", "unknown file kind %q: want segment, wal or manifest", pos[0])
	}
	if err = errors.Join(err, bw.Flush()); err != nil {
		return failure(stderr, "dump", err)
	}
	return exitOK
}

// The lines of dump -json.
type (
	entryLine struct {
		Type string `json:"type"` // "entry"
		Key  []byte `json:"key"`
		Seq  uint64 `json:"seq"`
		Kind string `json:"kind"` // "put", "delete", "range-delete"
		// Value is a put's value or a range deletion's end, absent for a
		// delete: a pointer, so that an empty value is "", not left out.
		Value *[]byte `json:"value,omitempty"`
	}
	rangeDelLine struct {
		Type  string `json:"type"` // "range_del"
		Start []byte `json:"start"`
		End   []byte `json:"end"`
		Seq   uint64 `json:"seq"`
	}
	recordLine struct {
		Type   string `json:"type"` // "record"
		Offset int64  `json:"offset"`
		Seq    uint64 `json:"seq"`
		Ops    int    `json:"ops"`
	}
	endLine struct {
		Type   string `json:"type"` // "end"
		Offset int64  `json:"offset"`
		Reason string `json:"reason"`
	}
)

func dumpSegment(ctx context.Context, o *dumpOptions, path string) error {
	r, f, size, err := openSegment(path)
	if err != nil {
		return err
	}
	defer f.Close()
	s := describe(r, filepath.Base(path), size) // a lone file knows no tier: the manifest has it
	if o.json {
		err = o.enc.Encode(struct {
			Type string `json:"type"`
			segmentJSON
		}{"properties", s})
	} else {
		_, err = fmt.Fprintf(o.w, "segment %s: format %d, %d bytes, %d entries (%d tombstones) in %d data blocks, %d distinct keys, seqs %d..%d, %d range tombstones, filter %d bits k=%d\n",
			s.File, s.FormatVersion, s.Bytes, s.Entries, s.Tombstones, s.DataBlocks, s.DistinctKeys, s.MinSeq, s.MaxSeq, s.RangeDels, s.FilterBits, s.FilterK)
	}
	if err != nil {
		return err
	}
	for _, t := range r.RangeDels().Tombstones() {
		if err := o.line(rangeDelLine{"range_del", t.Start, t.End, t.Seq}, "range-delete [%s, %s) seq %d", o.b(t.Start), o.b(t.End), t.Seq); err != nil {
			return err
		}
	}
	it := r.NewIter(false)
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%4096 == 0 && ctx.Err() != nil {
			it.Close()
			return ctx.Err()
		}
		k, v, seq, kind := it.Key(), it.Value(), it.Seq(), it.Kind()
		line := entryLine{Type: "entry", Key: k, Seq: seq, Kind: kind.String()}
		text := fmt.Sprintf("%s seq %d %s", o.b(k), seq, kind)
		if kind == base.KindPut {
			line.Value = &v
			text += " " + o.b(v)
		}
		if err := o.line(line, "%s", text); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

// dumpWAL prints each record of the log and its operations. A torn tail,
// the normal end of a log cut by a crash, ends the dump with a note (exit
// 0); damage followed by more data is corruption. Only a regular file is
// read, as by openSegment.
func dumpWAL(ctx context.Context, o *dumpOptions, path string) error {
	f, err := vfs.OpenRegular(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	name := filepath.Base(path)
	r := wal.NewReader(f, name)
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		start := r.Offset()
		rec, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, wal.ErrTornTail) || errors.Is(err, wal.ErrUnsyncedTail) {
			return o.line(endLine{"end", r.Offset(), err.Error()}, "end of log at offset %d: %v", r.Offset(), err)
		}
		if err != nil {
			return err
		}
		var ops []entryLine
		var firstSeq uint64
		derr := batch.Decode(rec, name, start, func(seq uint64, op batch.Op) {
			if len(ops) == 0 {
				firstSeq = seq
			}
			e := entryLine{Type: "op", Key: op.Key, Seq: seq, Kind: op.Kind.String()}
			if op.Kind != base.KindDelete {
				v := op.Value
				e.Value = &v
			}
			ops = append(ops, e)
		})
		if derr != nil {
			return derr
		}
		if err := o.line(recordLine{"record", start, firstSeq, len(ops)}, "record at offset %d: seq %d, %d operations", start, firstSeq, len(ops)); err != nil {
			return err
		}
		for _, op := range ops {
			text := fmt.Sprintf("  %s seq %d %s", o.b(op.Key), op.Seq, op.Kind)
			switch op.Kind {
			case base.KindPut.String():
				text += " " + o.b(*op.Value)
			case base.KindRangeDelete.String():
				text = fmt.Sprintf("  [%s, %s) seq %d range-delete", o.b(op.Key), o.b(*op.Value), op.Seq)
			}
			if err := o.line(op, "%s", text); err != nil {
				return err
			}
		}
	}
}

// manifestLine is what dump -json manifest prints: the committed state.
type manifestLine struct {
	Type            string            `json:"type"` // "manifest"
	NextFileNum     uint64            `json:"next_file_num"`
	FlushedSeq      uint64            `json:"flushed_seq"`
	LogNum          uint64            `json:"log_num"`
	Legacy          bool              `json:"legacy_format"`
	PrefixExtractor string            `json:"prefix_extractor"`
	Segments        []manifestSegment `json:"segments"`
}

// manifestSegment is one live segment as the manifest records it.
type manifestSegment struct {
	File       string `json:"file"`
	Tier       uint32 `json:"tier"`
	Bytes      int64  `json:"bytes"`
	Entries    uint64 `json:"entries"`
	Tombstones uint64 `json:"tombstones"`
	MinSeq     uint64 `json:"min_seq"`
	MaxSeq     uint64 `json:"max_seq"`
	Smallest   []byte `json:"smallest"`
	Largest    []byte `json:"largest"`
	FilterBits uint64 `json:"filter_bits"`
	FilterK    uint8  `json:"filter_k"`
}

// dumpManifest prints the manifest's committed state. It is read as the
// store reads it, validated before bbolt maps it (manifest.CheckFile), and
// under bbolt's shared lock: it fails while a writer has the store open.
func dumpManifest(o *dumpOptions, path string) error {
	st, err := manifest.ReadState(vfs.Default, path)
	if err != nil {
		return err
	}
	m := manifestLine{Type: "manifest", NextFileNum: st.NextFileNum, FlushedSeq: st.FlushedSeq, LogNum: st.LogNum,
		Legacy: st.Legacy, PrefixExtractor: st.PrefixExtractor, Segments: []manifestSegment{}}
	for _, s := range st.Segments {
		m.Segments = append(m.Segments, manifestSegment{
			File: base.SegmentFileName(s.FileNum), Tier: s.Tier, Bytes: s.Size, Entries: s.Entries, Tombstones: s.Tombstones,
			MinSeq: s.MinSeq, MaxSeq: s.MaxSeq, Smallest: orEmpty(s.Smallest), Largest: orEmpty(s.Largest),
			FilterBits: s.FilterBits, FilterK: s.FilterK,
		})
	}
	if o.json {
		return o.enc.Encode(m)
	}
	fmt.Fprintf(o.w, "next file number %d, flushed seq %d, log number %d, prefix extractor %q, legacy format %v\n",
		m.NextFileNum, m.FlushedSeq, m.LogNum, m.PrefixExtractor, m.Legacy)
	fmt.Fprintf(o.w, "%d live segments, newest first:\n", len(m.Segments))
	for _, s := range m.Segments {
		fmt.Fprintf(o.w, "  %s tier %d, %d bytes, %d entries (%d tombstones), seqs %d..%d, keys [%s, %s], filter %d bits k=%d\n",
			s.File, s.Tier, s.Bytes, s.Entries, s.Tombstones, s.MinSeq, s.MaxSeq, o.b(s.Smallest), o.b(s.Largest), s.FilterBits, s.FilterK)
	}
	return nil
}

// formatVersions are the on-disk format versions a build writes and the
// oldest it reads, from the packages that own each format.
type formatVersions struct {
	Writes int `json:"writes"`
	Reads  int `json:"reads_from"`
}

// versionJSON is what version -json prints.
type versionJSON struct {
	Module  string                    `json:"module"`
	Version string                    `json:"version"`
	Go      string                    `json:"go"`
	Formats map[string]formatVersions `json:"formats"`
}

func version(args []string, stdout, stderr io.Writer) int {
	c := newCommand("version", "[-json]", stdout, stderr)
	asJSON := c.Bool("json", false, "print the versions as JSON")
	if _, code, ok := c.parse(args, 0); !ok {
		return code
	}
	v := buildVersion()
	var err error
	if *asJSON {
		err = printJSON(stdout, v)
	} else {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s (%s)\non-disk formats (writes, reads from):\n", v.Module, v.Version, v.Go)
		for _, name := range []string{"segment", "wal", "manifest", "bloom"} {
			f := v.Formats[name]
			fmt.Fprintf(&b, "  %-9s %d, %d\n", name, f.Writes, f.Reads)
		}
		b.WriteString("  (segment: version 3 only for segments with zstd blocks, else 2)\n")
		_, err = io.WriteString(stdout, b.String())
	}
	if err != nil {
		return failure(stderr, "version", err)
	}
	return exitOK
}

// buildVersion reads the module's version from the binary's build
// information: a tagged version for `go install ...@v1.2.3`, "(devel)"
// for a build from a checkout.
func buildVersion() versionJSON {
	v := versionJSON{Module: "github.com/bloomkv/bloomkv", Version: "(unknown)", Go: runtime.Version(),
		Formats: map[string]formatVersions{
			"segment":  {segment.FormatVersion, segment.MinFormatVersion},
			"wal":      {wal.FormatVersion, wal.MinFormatVersion},
			"manifest": {manifest.FormatVersion, manifest.MinFormatVersion},
			"bloom":    {bloom.FormatVersion, bloom.FormatVersion},
		}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == v.Module {
			v.Version = bi.Main.Version
		} else {
			for _, d := range bi.Deps {
				if d.Path == v.Module {
					v.Version = d.Version
				}
			}
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	return v
}
