package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/bloomkv/bloomkv"
	"github.com/bloomkv/bloomkv/internal/base"
)

// The pairs of makeInspectStore: printable, with a space, binary, empty,
// a key that starts with '-' and one that starts with a quote.
var inspectPairs = []struct{ key, value string }{
	{"user:1", "ada"},
	{"user:2", "bob smith"},
	{"user:3", "wal only"}, // written after the flush: in the WAL only
	{"\x00\xffbin", "\x01\x02\x03"},
	{"-dash", "d"},
	{"\"quoted\"", ""},
	{"zz", "last"},
}

// makeInspectStore makes a store holding inspectPairs, all but user:3 in
// a segment, and returns a copy of its directory taken while the writer
// still had it open: the image a crash of the writer leaves, with a WAL
// that holds user:3 (on Linux, preallocated and mapped, so with a zero
// tail that a writer's Open would cut off). The spare WAL the flush's
// rotation created ahead, empty and numbered above it, is left out, so
// that the image has one WAL.
func makeInspectStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, p := range inspectPairs {
		if p.key == "user:3" {
			continue
		}
		if err := db.Put([]byte(p.key), []byte(p.value)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Put([]byte("user:3"), []byte("wal only")); err != nil {
		t.Fatal(err)
	}
	img := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sawWAL := false
	for _, e := range entries { // sorted by name: the active WAL first
		if filepath.Ext(e.Name()) == base.WALExt {
			if sawWAL {
				continue
			}
			sawWAL = true
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(img, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// TestHelp: asking for help is not an error, and goes to stdout.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"--help"}, {"help"},
		{"verify", "-h"}, {"stats", "-h"}, {"get", "-h"}, {"scan", "-h"}, {"checkpoint", "-h"},
		{"put", "-h"}, {"delete", "-h"}, {"count", "-h"}, {"compact", "-h"}, {"lsm", "-h"},
		{"dump", "-h"}, {"version", "-h"},
		{"scan", "somedir", "-h"}, // after the arguments too
	} {
		code, out, errs := runCmd(args...)
		want := "usage: bloomkv"
		if len(args) > 1 {
			want += " " + args[0]
		}
		if code != 0 || !strings.Contains(out, want) || errs != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and %q on stdout", args, code, out, errs, want)
		}
	}
	_, out, _ := runCmd("-h")
	for _, s := range []string{"exit status", "0  ok", "1  get: no such key", "2  usage", "3  the store or file could not be opened",
		"4  corrupt", "base64", "strconv.Quote", "before or after", "-json: every command"} {
		if !strings.Contains(out, s) {
			t.Errorf("usage does not mention %q", s)
		}
	}
}

func TestUsageAndErrors(t *testing.T) {
	store := makeStore(t)
	notStore := t.TempDir()
	missing := filepath.Join(store, "nope")
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"verify"},
		{"verify", "-bogus", store},
		{"verify", store, "extra"},
		{"stats"},
		{"stats", store, "-bogus"},
		{"get", store},
		{"get", store, "k", "extra"},
		{"get", "-hex", store, "zz"}, // not hex
		{"get", "-hex", "-raw", store, "00"},
		{"get", "-json", "-raw", store, "k"},
		{"get", store, ""}, // empty key
		{"scan"},
		{"scan", store, "extra"},
		{"scan", store, "-limit", "-1"},
		{"scan", store, "-limit"},
		{"scan", "-hex", "-prefix", "xyz", store},
		{"checkpoint", store},
		{"put", store, "k"},
		{"put", store, "", "v"},
		{"put", "-hex", store, "00", "xyz"},
		{"delete", store},
		{"delete", store, ""},
		{"count", store, "extra"},
		{"count", "-hex", "-start", "q", store},
		{"compact"},
		{"lsm"},
		{"lsm", store, "-bogus"},
		{"dump", "segment"},
		{"dump", "table", store},
		{"version", "extra"},
	} {
		if code, _, errs := runCmd(args...); code != exitUsage || errs == "" {
			t.Errorf("bloomkv %q: exit %d, stderr %q; want 2 and a message", args, code, errs)
		}
	}
	// What cannot be opened: exit 3, nothing created.
	for _, args := range [][]string{
		{"verify", notStore},
		{"verify", missing},
		{"stats", notStore}, // must not make a store
		{"get", notStore, "k"},
		{"get", missing, "k"},
		{"scan", notStore},
		{"scan", missing},
		{"count", notStore},
		{"lsm", notStore},
		{"lsm", missing},
		{"put", notStore, "k", "v"}, // must not make a store either
		{"delete", notStore, "k"},
		{"compact", notStore},
		{"put", missing, "k", "v"},
		{"dump", "segment", filepath.Join(notStore, "000001.seg")},
		{"dump", "wal", filepath.Join(notStore, "000001.wal")},
		{"dump", "manifest", filepath.Join(notStore, "MANIFEST")},
	} {
		if code, _, errs := runCmd(args...); code != exitOpen || errs == "" {
			t.Errorf("bloomkv %q: exit %d, stderr %q; want 3 and a message", args, code, errs)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("a failed command created %s", missing)
	}
	if entries, _ := os.ReadDir(notStore); len(entries) != 0 {
		t.Errorf("a failed command wrote into an empty directory: %v", entries)
	}
}

// TestLockedStore: while a writer has the store open, every command but
// dump segment, dump wal (TestDumpUnderWriter) and version refuses with
// exit 3 and says the store is locked.
func TestLockedStore(t *testing.T) {
	store := makeStore(t)
	db, err := bloomkv.Open(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, args := range [][]string{
		{"verify", store},
		{"stats", store},
		{"get", store, "k0001"},
		{"scan", store},
		{"checkpoint", store, filepath.Join(t.TempDir(), "copy")},
		{"count", store},
		{"lsm", store},
		{"put", store, "k", "v"},
		{"delete", store, "k0001"},
		{"compact", store},
		{"dump", "manifest", filepath.Join(store, "MANIFEST")},
	} {
		if code, out, errs := runCmd(args...); code != exitOpen || !strings.Contains(errs, "locked") || out != "" {
			t.Errorf("bloomkv %v on a store open for writing: exit %d, stdout %q, stderr %q; want 3 and a lock error", args, code, out, errs)
		}
	}
}

// TestSharedWithReaders: while another reader has the store open
// (Options.ReadOnly, as the reading commands open it), every reading
// command shares it and succeeds, and every writing command refuses it
// with exit 3, "locked", leaving it unchanged.
func TestSharedWithReaders(t *testing.T) {
	store := makeStore(t)
	reader, err := bloomkv.Open(store, &bloomkv.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	before := treeHash(t, store)
	for _, args := range [][]string{
		{"verify", store},
		{"stats", store},
		{"get", store, "k0001"},
		{"scan", store, "-limit", "3"},
		{"count", store},
		{"lsm", store},
		{"checkpoint", store, filepath.Join(t.TempDir(), "copy")},
		{"dump", "manifest", filepath.Join(store, "MANIFEST")},
	} {
		if code, _, errs := runCmd(args...); code != exitOK {
			t.Errorf("bloomkv %v beside a reader: exit %d, stderr %q; want 0", args, code, errs)
		}
	}
	for _, args := range [][]string{
		{"put", store, "k", "v"},
		{"delete", store, "k0001"},
		{"compact", store},
	} {
		if code, out, errs := runCmd(args...); code != exitOpen || !strings.Contains(errs, "locked") || out != "" {
			t.Errorf("bloomkv %v beside a reader: exit %d, stdout %q, stderr %q; want 3 and a lock error", args, code, out, errs)
		}
	}
	if treeHash(t, store) != before {
		t.Fatal("the commands changed a store another reader has open")
	}
}

// TestDumpUnderWriter: dump segment and dump wal read one file and take
// no lock, so they work while a writer has the store open (the WAL being
// the one it appends to, on Linux mapped with a preallocated zero tail),
// and print what the writer wrote. dump manifest is the exception:
// bbolt reads its file under a shared lock (TestLockedStore).
func TestDumpUnderWriter(t *testing.T) {
	dir := makeStore(t)
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Put([]byte("live-key"), []byte("live-value")); err != nil {
		t.Fatal(err)
	}
	seg := segFile(t, dir)
	wals, _ := filepath.Glob(filepath.Join(dir, "*"+base.WALExt))
	if len(wals) == 0 {
		t.Fatal("the open store has no WAL")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dump", "segment", seg}, "k0001"},
		{[]string{"dump", "-json", "segment", seg}, b64("k0001")},
		{[]string{"dump", "wal", wals[0]}, "live-key"},
		{[]string{"dump", "-json", "wal", wals[0]}, b64("live-key")},
	} {
		code, out, errs := runCmd(tc.args...)
		if code != exitOK || !strings.Contains(out, tc.want) {
			t.Errorf("bloomkv %q while a writer has the store: exit %d, stderr %q; want 0 and output naming %q", tc.args, code, errs, tc.want)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args   []string
		pos    []string
		prefix string
		limit  int
		json   bool
	}{
		{nil, nil, "", 0, false},
		{[]string{"DIR"}, []string{"DIR"}, "", 0, false},
		{[]string{"-json", "DIR"}, []string{"DIR"}, "", 0, true},
		{[]string{"DIR", "-json"}, []string{"DIR"}, "", 0, true},
		{[]string{"DIR", "-prefix", "p", "-limit", "3"}, []string{"DIR"}, "p", 3, false},
		{[]string{"-prefix=p", "DIR", "KEY", "-limit=3"}, []string{"DIR", "KEY"}, "p", 3, false},
		{[]string{"DIR", "-limit", "3", "KEY", "-json"}, []string{"DIR", "KEY"}, "", 3, true},
		{[]string{"DIR", "--", "-json"}, []string{"DIR", "-json"}, "", 0, false},
		{[]string{"--", "-x", "-json"}, []string{"-x", "-json"}, "", 0, false},
		{[]string{"DIR", "--", "k", "-json"}, []string{"DIR", "k", "-json"}, "", 0, false},
		{[]string{"DIR", "-json", "--", "-k"}, []string{"DIR", "-k"}, "", 0, true},
		// "--" as the value of a flag does not end the flags.
		{[]string{"-prefix", "--", "DIR", "-json"}, []string{"DIR"}, "--", 0, true},
		{[]string{"-prefix", "-limit", "--", "DIR", "-json"}, []string{"DIR", "-json"}, "-limit", 0, false},
		{[]string{"-limit", "3", "-prefix", "--", "--", "-json"}, []string{"-json"}, "--", 3, false},
		{[]string{"-json", "--", "DIR", "-limit", "3"}, []string{"DIR", "-limit", "3"}, "", 0, true},
		{[]string{"DIR", "-", "-json"}, []string{"DIR", "-"}, "", 0, true},
	}
	for _, tc := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		prefix := fs.String("prefix", "", "")
		limit := fs.Int("limit", 0, "")
		asJSON := fs.Bool("json", false, "")
		pos, err := parseInterspersed(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || *prefix != tc.prefix || *limit != tc.limit || *asJSON != tc.json {
			t.Errorf("%q: %q, %v, prefix %q, limit %d, json %v; want %q, prefix %q, limit %d, json %v",
				tc.args, pos, err, *prefix, *limit, *asJSON, tc.pos, tc.prefix, tc.limit, tc.json)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct{ in, text, hex string }{
		{"user:1", "user:1", "757365723a31"},
		{"a b", `"a b"`, "612062"},
		{"a\tb", `"a\tb"`, "610962"},
		{"\x00\xff", `"\x00\xff"`, "00ff"},
		{"", `""`, ""},
		{`"q"`, `"\"q\""`, "227122"},
		{`a"b`, `a"b`, "612262"}, // a quote inside is not ambiguous
		{"café", `"café"`, "636166c3a9"},
		{"~!", "~!", "7e21"},
	}
	for _, tc := range tests {
		if got := formatBytes([]byte(tc.in), false); got != tc.text {
			t.Errorf("formatBytes(%q) = %s, want %s", tc.in, got, tc.text)
		}
		if got := formatBytes([]byte(tc.in), true); got != tc.hex {
			t.Errorf("formatBytes(%q, hex) = %s, want %s", tc.in, got, tc.hex)
		}
	}
}

func TestGetCommand(t *testing.T) {
	dir := makeInspectStore(t)
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"get", dir, "user:1"}, 0, "ada\n", ""},
		{[]string{"get", dir, "user:2"}, 0, "\"bob smith\"\n", ""},
		{[]string{"get", dir, "user:3"}, 0, "\"wal only\"\n", ""}, // replayed from the WAL
		{[]string{"get", dir, "\x00\xffbin"}, 0, "\"\\x01\\x02\\x03\"\n", ""},
		{[]string{"get", "-hex", dir, "00ff62696e"}, 0, "010203\n", ""},
		{[]string{"get", dir, "00ff62696e", "-hex"}, 0, "010203\n", ""}, // flag after the arguments
		{[]string{"get", dir, "\x00\xffbin", "-raw"}, 0, "\x01\x02\x03", ""},
		{[]string{"get", dir, "\"quoted\""}, 0, "\"\"\n", ""},
		{[]string{"get", "-raw", dir, "\"quoted\""}, 0, "", ""},
		{[]string{"get", dir, "--", "-dash"}, 0, "d\n", ""},
		{[]string{"get", dir, "nope"}, 1, "", "bloomkv get: nope: not found\n"},
		{[]string{"get", dir, "-hex", "00"}, 1, "", "bloomkv get: 00: not found\n"},
		{[]string{"get", dir, "user:"}, 1, "", "bloomkv get: user:: not found\n"},
	}
	for _, tc := range tests {
		before := treeHash(t, dir)
		code, out, errs := runCmd(tc.args...)
		if code != tc.code || out != tc.out || errs != tc.err {
			t.Errorf("bloomkv %q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out, errs, tc.code, tc.out, tc.err)
		}
		if treeHash(t, dir) != before {
			t.Fatalf("bloomkv %q changed the store", tc.args)
		}
	}
}

func TestScanCommand(t *testing.T) {
	dir := makeInspectStore(t)
	all := "\"\\x00\\xffbin\"\t\"\\x01\\x02\\x03\"\n" +
		"\"\\\"quoted\\\"\"\t\"\"\n" +
		"-dash\td\n" +
		"user:1\tada\n" +
		"user:2\t\"bob smith\"\n" +
		"user:3\t\"wal only\"\n" +
		"zz\tlast\n"
	tests := []struct {
		args []string
		out  string
	}{
		{[]string{"scan", dir}, all},
		{[]string{"scan", "-prefix", "user:", dir}, "user:1\tada\nuser:2\t\"bob smith\"\nuser:3\t\"wal only\"\n"},
		{[]string{"scan", dir, "-prefix", "user:", "-limit", "2"}, "user:1\tada\nuser:2\t\"bob smith\"\n"},
		{[]string{"scan", dir, "-prefix", "user:", "-limit", "2", "-keys-only"}, "user:1\nuser:2\n"},
		{[]string{"scan", dir, "-start", "user:2", "-end", "zz"}, "user:2\t\"bob smith\"\nuser:3\t\"wal only\"\n"},
		{[]string{"scan", dir, "-start", "user:2", "-end", "zz", "-prefix", "user:", "-limit", "1"}, "user:2\t\"bob smith\"\n"},
		{[]string{"scan", dir, "-end", "-"}, "\"\\x00\\xffbin\"\t\"\\x01\\x02\\x03\"\n\"\\\"quoted\\\"\"\t\"\"\n"},
		{[]string{"scan", dir, "-hex", "-prefix", "00", "-keys-only"}, "00ff62696e\n"},
		{[]string{"scan", dir, "-hex", "-start", "7a"}, "7a7a\t6c617374\n"},
		{[]string{"scan", dir, "-prefix", "none"}, ""},
		{[]string{"scan", dir, "-limit", "0", "-keys-only", "-start", "zz"}, "zz\n"},
	}
	for _, tc := range tests {
		before := treeHash(t, dir)
		code, out, errs := runCmd(tc.args...)
		if code != 0 || out != tc.out || errs != "" {
			t.Errorf("bloomkv %q: exit %d, stderr %q, stdout\n%s\nwant\n%s", tc.args, code, errs, out, tc.out)
		}
		if treeHash(t, dir) != before {
			t.Fatalf("bloomkv %q changed the store", tc.args)
		}
	}
}

// TestScanJSON decodes scan -json's lines back into the exact pairs.
func TestScanJSON(t *testing.T) {
	dir := makeInspectStore(t)
	want := slices.Clone(inspectPairs)
	slices.SortFunc(want, func(a, b struct{ key, value string }) int { return strings.Compare(a.key, b.key) })
	for _, keysOnly := range []bool{false, true} {
		args := []string{"scan", dir, "-json"}
		if keysOnly {
			args = append(args, "-keys-only")
		}
		code, out, errs := runCmd(args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errs)
		}
		sc := bufio.NewScanner(strings.NewReader(out))
		i := 0
		for ; sc.Scan(); i++ {
			var line map[string]*[]byte
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatalf("%q line %d %q: %v", args, i, sc.Text(), err)
			}
			if i >= len(want) {
				t.Fatalf("%q: more lines than pairs: %s", args, sc.Text())
			}
			k, v := line["key"], line["value"]
			wantLen := 2
			if keysOnly {
				wantLen = 1
			}
			if len(line) != wantLen || k == nil || string(*k) != want[i].key {
				t.Errorf("%q line %d: %s; want key %q", args, i, sc.Text(), want[i].key)
			}
			if !keysOnly && (v == nil || string(*v) != want[i].value) {
				t.Errorf("%q line %d: %s; want value %q", args, i, sc.Text(), want[i].value)
			}
		}
		if i != len(want) {
			t.Errorf("%q: %d lines, want %d", args, i, len(want))
		}
	}
}

func TestStatsCommand(t *testing.T) {
	dir := makeInspectStore(t)
	before := treeHash(t, dir)

	code, out, errs := runCmd("stats", dir)
	if code != 0 || errs != "" {
		t.Fatalf("stats: exit %d\n%s", code, errs)
	}
	for _, want := range []string{"segments                   1\n", "memtables                  1 ", "filter memory              ", " B"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" || strings.HasSuffix(line, ":") {
			continue
		}
		if len(line) < 28 || line[26] != ' ' || line[27] == ' ' {
			t.Errorf("stats line not aligned at column 28: %q", line)
		}
	}

	code, out, errs = runCmd("stats", dir, "-json") // flag after DIR
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("stats -json: exit %d, %v\n%s%s", code, err, out, errs)
	}
	if st["segments"] != 1.0 || st["memtables"] != 1.0 || st["segment_bytes"].(float64) <= 0 || st["filter_bytes"].(float64) <= 0 {
		t.Errorf("stats -json: %v", st)
	}
	if treeHash(t, dir) != before {
		t.Fatal("stats changed the store")
	}
}

// TestStatsShapeOnly: stats shows the store's shape, every shape field of
// bloomkv.Stats under its snake_case name, and none of the counters of
// its own open (all zero, or what opening did).
func TestStatsShapeOnly(t *testing.T) {
	shape := []string{"Segments", "SegmentBytes", "FilterBytes", "FilterExpectedReads", "Memtables"}
	var st bloomkv.Stats
	fillNonZero(reflect.ValueOf(&st).Elem())
	b, err := json.Marshal(newStatsJSON(st))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range shape {
		if v, ok := got[snakeCase(f)]; !ok || v == 0.0 {
			t.Errorf("stats -json: %s is %v, want its value", snakeCase(f), v)
		}
	}
	if len(got) != len(shape) {
		t.Errorf("stats -json has %d keys, want the %d shape fields: %v", len(got), len(shape), slices.Sorted(maps.Keys(got)))
	}
	typ := reflect.TypeFor[bloomkv.Stats]()
	for _, f := range shape {
		if _, ok := typ.FieldByName(f); !ok {
			t.Errorf("bloomkv.Stats has no field %s", f)
		}
	}
	text := newStatsJSON(st).String()
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		name := strings.TrimSpace(line[:min(26, len(line))])
		if !slices.Contains([]string{"segments", "segment bytes", "filter memory", "filter / segment bytes", "expected reads / miss", "memtables"}, name) {
			t.Errorf("text stats show %q:\n%s", name, text)
		}
	}
	// encoding/json refuses NaN and ±Inf: they are shown as 0.
	st.FilterExpectedReads = math.NaN()
	if _, err := json.Marshal(newStatsJSON(st)); err != nil {
		t.Errorf("stats -json with NaN: %v", err)
	}
}

// snakeCase turns a Go field name into a snake_case key: WALBytes →
// wal_bytes, EstimatedFPR → estimated_fpr.
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// fillNonZero sets every field under v to a non-zero value; a slice gets
// one element.
func fillNonZero(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillNonZero(v.Field(i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillNonZero(v.Index(0))
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.String:
		v.SetString("x")
	}
}

// TestInspectionChangesNothing runs every read-only command on the image a
// crashed writer leaves (a WAL with records, and on Linux its
// preallocated zero tail) and checks that no file's bytes changed: a
// writer's Open would replay, flush and trim, a read-only open must not.
func TestInspectionChangesNothing(t *testing.T) {
	dir := makeInspectStore(t)
	before := treeHash(t, dir)
	for _, args := range [][]string{
		{"stats", dir},
		{"stats", "-json", dir},
		{"get", dir, "user:3"},
		{"get", dir, "nope"},
		{"scan", dir},
		{"scan", "-json", dir},
		{"verify", dir},
		{"checkpoint", dir, filepath.Join(t.TempDir(), "copy")},
		{"count", dir},
		{"lsm", dir},
		{"get", "-json", dir, "user:3"},
		{"dump", "manifest", filepath.Join(dir, "MANIFEST")},
		{"dump", "wal", walFile(t, dir)},
		{"dump", "segment", segFile(t, dir)},
	} {
		if code, _, errs := runCmd(args...); code > exitNotFound {
			t.Fatalf("bloomkv %q: exit %d: %s", args, code, errs)
		}
		if treeHash(t, dir) != before {
			t.Fatalf("bloomkv %q changed the store", args)
		}
	}
	// The same image opened by a writer does change: the check can fail.
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if treeHash(t, dir) == before {
		t.Fatal("a writer's open and close changed nothing either: the image has no WAL to replay")
	}
}

// TestDamagedStore: get, scan, count and dump report a damaged block with
// exit 4 and the file's name, as verify does.
func TestDamagedStore(t *testing.T) {
	dir := makeStore(t)
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 0xff // inside the first data block
	if err := os.WriteFile(segs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(segs[0])
	for _, args := range [][]string{
		{"get", dir, "k0000"},
		{"scan", dir, "-keys-only"},
		{"count", dir},
		{"dump", "segment", segs[0]},
		{"dump", "-json", "segment", segs[0]},
	} {
		if code, _, errs := runCmd(args...); code != exitCorrupt || !strings.Contains(errs, name) {
			t.Errorf("bloomkv %q on a damaged segment: exit %d, stderr %q; want 4 and the file's name", args, code, errs)
		}
	}
}
