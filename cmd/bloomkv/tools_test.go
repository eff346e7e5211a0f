package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/segment"
	"github.com/bloomkv/bloomkv/wal"
)

// oneFile returns the one file of dir with extension ext.
func oneFile(t *testing.T, dir, ext string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"+ext))
	if len(files) != 1 {
		t.Fatalf("%s files in %s: %v, want one", ext, dir, files)
	}
	return files[0]
}

func segFile(t *testing.T, dir string) string { return oneFile(t, dir, base.SegmentExt) }
func walFile(t *testing.T, dir string) string { return oneFile(t, dir, base.WALExt) }

// jsonOut runs a command that must succeed and decodes its JSON output.
func jsonOut(t *testing.T, v any, args ...string) {
	t.Helper()
	code, out, errs := runCmd(args...)
	if code != exitOK {
		t.Fatalf("bloomkv %q: exit %d: %s", args, code, errs)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("bloomkv %q: %v\n%s", args, err, out)
	}
}

// jsonLines decodes each line of a command's output into a map.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

// b64 is how encoding/json writes b.
func b64(b string) string {
	j, _ := json.Marshal([]byte(b))
	return strings.Trim(string(j), `"`)
}

func TestGetJSON(t *testing.T) {
	dir := makeInspectStore(t)
	var got getLine
	jsonOut(t, &got, "get", "-json", dir, "\x00\xffbin")
	if !got.Found || string(got.Key) != "\x00\xffbin" || got.Value == nil || string(*got.Value) != "\x01\x02\x03" {
		t.Errorf("get -json = %+v", got)
	}
	code, out, errs := runCmd("get", dir, "-json", "nope")
	var miss map[string]any
	if err := json.Unmarshal([]byte(out), &miss); code != exitNotFound || err != nil || miss["found"] != false || miss["key"] != b64("nope") || errs != "" {
		t.Errorf("get -json of an absent key: exit %d, %q, %v, stderr %q; want 1 and found false", code, out, err, errs)
	}
	// An empty value is "", not left out.
	code, out, _ = runCmd("get", "-json", dir, "\"quoted\"")
	if code != exitOK || !strings.Contains(out, `"value":""`) {
		t.Errorf("get -json of an empty value: exit %d, %s", code, out)
	}
}

func TestPutDelete(t *testing.T) {
	dir := makeStore(t)
	if code, out, errs := runCmd("put", dir, "new", "value 1"); code != exitOK || out != "" || errs != "" {
		t.Fatalf("put: exit %d, %q, %q", code, out, errs)
	}
	if code, out, _ := runCmd("get", dir, "new"); code != exitOK || out != "\"value 1\"\n" {
		t.Fatalf("get after put: exit %d, %q", code, out)
	}
	var w writeLine
	jsonOut(t, &w, "put", "-json", "-hex", dir, "00ff", "0102")
	if w.Op != "put" || string(w.Key) != "\x00\xff" || w.Found != nil {
		t.Errorf("put -json = %+v", w)
	}
	if code, out, _ := runCmd("get", "-hex", dir, "00ff"); code != exitOK || out != "0102\n" {
		t.Fatalf("get -hex after put -hex: exit %d, %q", code, out)
	}
	for _, tc := range []struct {
		key   string
		found bool
	}{{"new", true}, {"new", false}, {"k0005", true}, {"never", false}} {
		var d writeLine
		jsonOut(t, &d, "delete", "-json", dir, tc.key)
		if d.Op != "delete" || string(d.Key) != tc.key || d.Found == nil || *d.Found != tc.found {
			t.Errorf("delete -json %s = %+v, want found %v", tc.key, d, tc.found)
		}
		if code, _, _ := runCmd("get", dir, tc.key); code != exitNotFound {
			t.Errorf("get %s after delete: exit %d, want 1", tc.key, code)
		}
	}
	var n struct{ Count int }
	jsonOut(t, &n, "count", "-json", dir)
	if n.Count != 1000 { // 1000 keys, one deleted, one added (00ff)
		t.Errorf("count after the edits = %d, want 1000", n.Count)
	}
	if code, _, _ := runCmd("verify", dir); code != exitOK {
		t.Errorf("verify after the edits: exit %d", code)
	}
}

func TestCount(t *testing.T) {
	dir := makeInspectStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"count", dir}, fmt.Sprintln(len(inspectPairs))},
		{[]string{"count", dir, "-prefix", "user:"}, "3\n"},
		{[]string{"count", dir, "-start", "user:2", "-end", "zz"}, "2\n"},
		{[]string{"count", dir, "-hex", "-prefix", "00"}, "1\n"},
		{[]string{"count", dir, "-prefix", "none"}, "0\n"},
		{[]string{"count", dir, "-json", "-prefix", "user:"}, "{\"count\":3}\n"},
	} {
		if code, out, errs := runCmd(tc.args...); code != exitOK || out != tc.want {
			t.Errorf("bloomkv %q: exit %d, %q, %q; want %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// makeTieredStore makes a closed store of n segments, each flushed from
// 200 keys that overlap the previous segment's half.
func makeTieredStore(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	o := bloomkv.DefaultOptions()
	o.DisableAutoCompaction = true
	db, err := bloomkv.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for s := range n {
		for i := range 200 {
			if err := db.Put(fmt.Appendf(nil, "k%05d", s*100+i), fmt.Appendf(nil, "v%d", s)); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Delete(fmt.Appendf(nil, "k%05d", s*100)); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

type lsmOut struct {
	Tiers []struct {
		Tier, Segments int
		Bytes, Entries int64
		Tombstones     int64
	} `json:"tiers"`
	Segments []segmentJSON `json:"segments"`
}

func TestLSMAndCompact(t *testing.T) {
	dir := makeTieredStore(t, 4)
	var l lsmOut
	jsonOut(t, &l, "lsm", "-json", dir)
	if len(l.Segments) != 4 || len(l.Tiers) != 1 || l.Tiers[0].Segments != 4 || l.Tiers[0].Tier != 0 {
		t.Fatalf("lsm -json of 4 flushed segments: %+v", l)
	}
	var entries int64
	for i, s := range l.Segments {
		entries += int64(s.Entries)
		fi, err := os.Stat(filepath.Join(dir, s.File))
		if err != nil || fi.Size() != s.Bytes {
			t.Errorf("segment %s: %d bytes, file %v %v", s.File, s.Bytes, fi, err)
		}
		// Newest first: segment i holds keys from (3-i)*100.
		first := 3 - i
		if string(s.Smallest) != fmt.Sprintf("k%05d", first*100) || string(s.Largest) != fmt.Sprintf("k%05d", first*100+199) {
			t.Errorf("segment %d key range [%s, %s]", i, s.Smallest, s.Largest)
		}
		if s.Entries != 200 || s.Tombstones != 1 || s.FilterBits == 0 || s.BitsPerKey < 9 || s.FPR <= 0 || s.FPR > 0.02 ||
			s.FPRFromBits <= 0 || s.FPRFromBits > 0.05 || s.FormatVersion != 4 {
			t.Errorf("segment %d: %+v", i, s)
		}
	}
	if entries != l.Tiers[0].Entries || l.Tiers[0].Tombstones != 4 {
		t.Errorf("tier sums %+v, segments hold %d entries", l.Tiers[0], entries)
	}
	code, out, _ := runCmd("lsm", dir)
	if code != exitOK || !strings.Contains(out, "tier 0: 4 segments") || !strings.Contains(out, "[k00300, k00499]") {
		t.Errorf("lsm: exit %d\n%s", code, out)
	}

	var c struct{ Before, After shapeJSON }
	jsonOut(t, &c, "compact", "-json", dir)
	if c.Before.Segments != 4 || c.After.Segments != 1 || c.After.SegmentBytes <= 0 || c.After.SegmentBytes >= c.Before.SegmentBytes {
		t.Errorf("compact -json = %+v", c)
	}
	jsonOut(t, &l, "lsm", "-json", dir)
	if len(l.Segments) != 1 || l.Segments[0].Tombstones != 0 || l.Segments[0].Entries != 500-4 {
		// A major compaction drops the 4 tombstones and the versions they
		// and the overlaps hid: 500 keys, 4 deleted.
		t.Errorf("lsm -json after compact: %+v", l.Segments)
	}
	if code, out, _ := runCmd("count", dir); code != exitOK || out != "496\n" {
		t.Errorf("count after compact: exit %d, %q", code, out)
	}
	if code, out, _ := runCmd("compact", dir); code != exitOK || !strings.Contains(out, "before: 1 segments") {
		t.Errorf("compact of one segment: exit %d\n%s", code, out)
	}

	// A fresh flush beside the compacted segment: two tiers, the higher
	// (older, larger) listed first.
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(db.Put([]byte("fresh"), []byte("v")), db.Flush(), db.Close()); err != nil {
		t.Fatal(err)
	}
	jsonOut(t, &l, "lsm", "-json", dir)
	if len(l.Tiers) != 2 || l.Tiers[0].Tier <= l.Tiers[1].Tier || l.Tiers[1].Tier != 0 ||
		len(l.Segments) != 2 || l.Segments[1].Entries != 1 || l.Segments[0].Tier != uint32(l.Tiers[0].Tier) {
		t.Errorf("lsm -json of a compacted segment and a flush: %+v", l)
	}
}

func TestDump(t *testing.T) {
	dir := makeInspectStore(t)
	// The segment: a properties line, then every pair but user:3 (in the
	// WAL only), in key order.
	code, out, errs := runCmd("dump", "-json", "segment", segFile(t, dir))
	if code != exitOK {
		t.Fatalf("dump segment: exit %d: %s", code, errs)
	}
	lines := jsonLines(t, out)
	if len(lines) != len(inspectPairs) || lines[0]["type"] != "properties" || lines[0]["entries"] != float64(len(inspectPairs)-1) {
		t.Fatalf("dump -json segment: %d lines, first %v", len(lines), lines[0])
	}
	seen := map[string]string{}
	for _, l := range lines[1:] {
		var e entryLine
		b, _ := json.Marshal(l)
		json.Unmarshal(b, &e)
		if e.Value == nil {
			t.Fatalf("entry line without a value: %v", l)
		}
		if e.Type != "entry" || e.Kind != "put" || e.Seq == 0 {
			t.Errorf("entry line %v", l)
		}
		seen[string(e.Key)] = string(*e.Value)
	}
	for _, p := range inspectPairs {
		if v, ok := seen[p.key]; ok != (p.key != "user:3") || v != p.value && ok {
			t.Errorf("dump segment: %q = %q, %v", p.key, v, ok)
		}
	}
	if code, out, _ := runCmd("dump", "segment", segFile(t, dir)); code != exitOK || !strings.Contains(out, "user:1 seq ") || !strings.Contains(out, "format 4") {
		t.Errorf("dump segment: exit %d\n%s", code, out)
	}

	// The WAL: one record with the put of user:3.
	code, out, errs = runCmd("dump", "-json", "wal", walFile(t, dir))
	if code != exitOK {
		t.Fatalf("dump wal: exit %d: %s", code, errs)
	}
	var ops []map[string]any
	for _, l := range jsonLines(t, out) {
		if l["type"] == "op" {
			ops = append(ops, l)
		}
	}
	if len(ops) != 1 || ops[0]["key"] != b64("user:3") || ops[0]["value"] != b64("wal only") || ops[0]["kind"] != "put" {
		t.Errorf("dump -json wal: ops %v\n%s", ops, out)
	}

	var m manifestLine
	jsonOut(t, &m, "dump", "-json", "manifest", filepath.Join(dir, "MANIFEST"))
	if len(m.Segments) != 1 || m.Segments[0].File != filepath.Base(segFile(t, dir)) || m.NextFileNum == 0 || m.Segments[0].Entries != uint64(len(inspectPairs)-1) {
		t.Errorf("dump -json manifest: %+v", m)
	}
	if code, out, _ := runCmd("dump", "manifest", filepath.Join(dir, "MANIFEST")); code != exitOK || !strings.Contains(out, "1 live segments") {
		t.Errorf("dump manifest: exit %d\n%s", code, out)
	}
}

// TestDumpDamaged feeds dump every truncation and many byte flips of each
// kind of file: it must exit 4 (corrupt) or, for a WAL cut short, 0 (a
// torn tail is how a crash leaves a log), and never panic or print a
// wrong operation.
func TestDumpDamaged(t *testing.T) {
	dir := makeInspectStore(t)
	files := map[string]string{"segment": segFile(t, dir), "wal": walFile(t, dir), "manifest": filepath.Join(dir, "MANIFEST")}
	for kind, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if kind == "wal" {
			data = data[:walEnd(t, path)] // without the preallocated zero tail
		}
		damaged := t.TempDir()
		try := func(what string, b []byte) {
			p := filepath.Join(damaged, filepath.Base(path))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errs := runCmd("dump", "-json", kind, p)
			switch {
			case code == exitCorrupt && strings.Contains(errs, "corrupt"):
			case what == "with a bad batch":
				t.Errorf("dump wal of a record that holds no batch: exit %d, want 4", code)
			case code == exitOK && kind == "wal":
				// A cut ends the log (with an "end" line inside a
				// record, cleanly at a record boundary): what it
				// prints must still be true.
				for _, l := range jsonLines(t, out) {
					if l["type"] == "op" && (l["key"] != b64("user:3") || l["value"] != b64("wal only")) {
						t.Errorf("dump wal %s: wrong operation %v", what, l)
					}
				}
			case code == exitOK && kind == "manifest" && what != "intact":
				// bbolt keeps two meta pages and reads through the
				// good one; unused pages may be damaged freely.
			case code == exitOK && what == "intact":
			default:
				t.Errorf("dump %s %s: exit %d, stderr %q", kind, what, code, errs)
			}
		}
		try("intact", data)
		if kind == "wal" {
			// A record whose checksum holds but whose batch does not
			// decode: corruption found past the framing.
			var buf bytes.Buffer
			w, err := wal.NewWriter(nopSyncer{&buf}, "bad.wal")
			if err == nil {
				_, err = w.WriteRecords([]byte("not a batch"))
			}
			if err != nil {
				t.Fatal(err)
			}
			try("with a bad batch", buf.Bytes())
		}
		for n := range len(data) {
			if kind == "manifest" && n%97 != 0 {
				continue // bbolt pages are 4 KiB: a sample is enough
			}
			try(fmt.Sprintf("cut to %d bytes", n), data[:n])
		}
		for i := 0; i < len(data); i += 1 + len(data)/200 {
			b := append([]byte(nil), data...)
			b[i] ^= 0x5a
			try(fmt.Sprintf("byte %d flipped", i), b)
		}
	}
}

// nopSyncer makes a buffer a wal.File.
type nopSyncer struct{ *bytes.Buffer }

func (nopSyncer) Sync() error  { return nil }
func (nopSyncer) Close() error { return nil }

// walEnd returns where the WAL's records end (its file may be longer,
// preallocated with zeros).
func walEnd(t *testing.T, path string) int {
	t.Helper()
	code, out, errs := runCmd("dump", "-json", "wal", path)
	if code != exitOK {
		t.Fatalf("dump wal: exit %d: %s", code, errs)
	}
	end := 16 // the file header
	for _, l := range jsonLines(t, out) {
		if l["type"] == "record" {
			end = -1 // the next record's offset, or the end line's
		}
		if l["type"] == "end" {
			return int(l["offset"].(float64))
		}
	}
	if end == -1 {
		fi, _ := os.Stat(path)
		return int(fi.Size())
	}
	return end
}

func TestVersion(t *testing.T) {
	var v versionJSON
	jsonOut(t, &v, "version", "-json")
	if v.Module != "github.com/bloomkv/bloomkv" || v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Errorf("version -json = %+v", v)
	}
	if f := v.Formats["segment"]; f.Writes != segment.FormatVersion || f.Reads != segment.MinFormatVersion {
		t.Errorf("segment formats %+v", f)
	}
	for _, name := range []string{"wal", "manifest", "bloom"} {
		if f := v.Formats[name]; f.Writes < 1 || f.Reads < 1 || f.Reads > f.Writes {
			t.Errorf("%s formats %+v", name, f)
		}
	}
	if code, out, _ := runCmd("version"); code != exitOK || !strings.Contains(out, "github.com/bloomkv/bloomkv") || !strings.Contains(out, "segment ") {
		t.Errorf("version: exit %d\n%s", code, out)
	}
}
