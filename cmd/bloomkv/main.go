// Command bloomkv inspects and edits a bloomkv store.
//
//	bloomkv get [-hex] [-raw] [-json] DIR KEY     print the value of KEY
//	bloomkv put [-hex] [-json] DIR KEY VALUE      write KEY = VALUE
//	bloomkv delete [-hex] [-json] DIR KEY         delete KEY
//	bloomkv scan [flags] DIR                      print keys (and values) in order
//	bloomkv count [-prefix P] [-start K] [-end K] [-hex] [-json] DIR
//	                                              count the live keys
//	bloomkv stats [-json] DIR                     the store's shape
//	bloomkv lsm [-json] DIR                       segments by tier
//	bloomkv compact [-json] DIR                   merge every segment into one
//	bloomkv verify [-json] DIR                    check every checksum, key order and filter
//	bloomkv checkpoint [-json] SRC DST            a consistent copy of SRC in DST
//	bloomkv dump [-hex] [-json] segment|wal|manifest FILE
//	                                              decode one file of a store
//	bloomkv version [-json]                       build and on-disk format versions
//
// get, scan, count, stats, lsm, verify and checkpoint change no byte of
// the store: they open it read-only (the WALs are replayed into memory
// only), share it with other readers and refuse it while a writer has it
// open. put, delete and compact open it for writing, so they refuse it
// while anyone else has it open. dump segment and dump wal read one file
// without the store's lock; dump manifest reads it under bbolt's shared
// lock, so it too is refused while a writer has the store open. Every
// command takes -json. The usage text (bloomkv -h) documents the output
// encodings and the exit status: 0 ok, 1 not found, 2 usage, 3 cannot
// open or read, 4 corrupt.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/bloomkv/bloomkv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes, documented in the usage text.
const (
	exitOK       = 0 // success
	exitNotFound = 1 // get: no such key
	exitUsage    = 2 // bad command line
	exitOpen     = 3 // the store or file could not be opened, read or written (missing, not a store, locked, I/O error)
	exitCorrupt  = 4 // damage found: verify's findings, a damaged block or record read (bloomkv.ErrCorrupt)
)

const usage = `usage: bloomkv COMMAND [flags] ARGS

reading (the store is opened read-only and never changed):
  get [-hex] [-raw] [-json] DIR KEY
        print the value of KEY
  scan [-prefix P] [-start K] [-end K] [-limit N] [-keys-only] [-hex] [-json] DIR
        print the keys in [start, end) that begin with prefix, in key
        order, one "key<TAB>value" line each
  count [-prefix P] [-start K] [-end K] [-hex] [-json] DIR
        print the number of live keys (as scan would list them)
  stats [-json] DIR
        print the store's shape: live segments, their bytes, filter memory,
        memtables (with the WALs replayed)
  lsm [-json] DIR
        list the live segments by compaction tier: size, key range,
        entries, tombstones, range tombstones, filter bits per key and
        false-positive rate, format version
  verify [-json] DIR
        check every checksum, the key order, the filters and the manifest
        against the files
  checkpoint [-json] SRC DST
        write a consistent copy of the store SRC into DST (new or empty)

writing (the store is opened for writing, alone):
  put [-hex] [-json] DIR KEY VALUE
        write KEY = VALUE, durably (fsynced) when it returns
  delete [-hex] [-json] DIR KEY
        delete KEY, durably; deleting an absent key is not an error
  compact [-json] DIR
        merge every segment into one (DB.Compact) and print the segments
        and bytes before and after

files and build:
  dump [-hex] [-json] segment|wal|manifest FILE
        decode one file: a segment's properties, range tombstones and
        entries (key, seq, kind, value); a WAL's records and their
        operations; the manifest's counters and live segments. It
        changes nothing; segment and wal take no lock, manifest reads
        under bbolt's shared lock (refused while a writer has the store).
  version [-json]
        print the module version, the Go version, and the on-disk format
        versions this build writes and reads

Reading commands share the store with other readers and are refused
(exit 3, "locked") while a writer has it open; writing commands are
refused while anyone has it open. 'bloomkv COMMAND -h' lists a
command's flags.

Flags may come before or after the arguments (bloomkv scan DIR -limit 3);
"--" ends the flags, for a KEY that begins with "-".

Keys and values in text output: as they are when every byte is printable
ASCII other than space (0x21-0x7e) and the first is not '"'; otherwise
Go-quoted (strconv.Quote: "a b", "\x00\xff", ""). With -hex, KEY, VALUE,
-prefix, -start and -end are read as hex and keys and values are printed
as hex; get -raw prints the value's bytes exactly, with no newline.

-json: every command prints JSON instead of text. Keys and values are
strings in standard base64 with padding (as encoding/json encodes []byte);
-hex does not change that. scan and dump print one JSON object per line;
the others print one object. get -json prints {"key":...,"found":true,
"value":...}, or {"key":...,"found":false} with exit 1.

exit status:
  0  ok
  1  get: no such key
  2  usage error
  3  the store or file could not be opened, read or written: no such
     directory or file, not a store, locked by another process, I/O error
  4  corrupt: verify found damage, or a command read a damaged block,
     record or file (the message names the file and offset)
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "verify":
		return verify(ctx, args[1:], stdout, stderr)
	case "stats":
		return stats(args[1:], stdout, stderr)
	case "get":
		return get(args[1:], stdout, stderr)
	case "scan":
		return scan(ctx, args[1:], stdout, stderr)
	case "checkpoint":
		return checkpoint(args[1:], stdout, stderr)
	case "put":
		return put(args[1:], stdout, stderr)
	case "delete":
		return del(args[1:], stdout, stderr)
	case "count":
		return count(ctx, args[1:], stdout, stderr)
	case "compact":
		return compact(args[1:], stdout, stderr)
	case "lsm":
		return lsm(args[1:], stdout, stderr)
	case "dump":
		return dump(ctx, args[1:], stdout, stderr)
	case "version":
		return version(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "bloomkv: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

// command is the flag set and synopsis of one command.
type command struct {
	*flag.FlagSet
	synopsis string
	stdout   io.Writer
	stderr   io.Writer
}

func newCommand(name, synopsis string, stdout, stderr io.Writer) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parse prints the usage where it belongs
	return &command{FlagSet: fs, synopsis: synopsis, stdout: stdout, stderr: stderr}
}

// printUsage prints the command's synopsis and flags to w.
func (c *command) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: bloomkv %s %s\n", c.Name(), c.synopsis)
	c.SetOutput(w)
	c.PrintDefaults()
	c.SetOutput(c.stderr)
	fmt.Fprint(w, "\nFlags may come before or after the arguments; 'bloomkv -h' has the rest.\n")
}

// parse parses args, flags before, between and after the positional
// arguments, of which there must be n. ok is false when the caller should
// exit with code: 0 after -h (usage on stdout), 2 after a usage error
// (usage on stderr).
func (c *command) parse(args []string, n int) (pos []string, code int, ok bool) {
	pos, err := parseInterspersed(c.FlagSet, args)
	if errors.Is(err, flag.ErrHelp) {
		c.printUsage(c.stdout)
		return nil, exitOK, false
	}
	if err == nil && len(pos) != n {
		err = fmt.Errorf("want %d arguments, have %d", n, len(pos))
		fmt.Fprintf(c.stderr, "bloomkv %s: %v\n", c.Name(), err)
	}
	if err != nil { // the flag package printed its own message
		c.printUsage(c.stderr)
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}

// parseInterspersed parses the flags in args wherever they are, and
// returns the positional arguments in order. The flag package stops at
// the first positional argument; this takes it and parses on. "--" ends
// the flags: everything after it is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if parsed := args[:len(args)-len(rest)]; endedByDashes(fs, parsed) {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// endedByDashes reports whether parsed, the arguments one fs.Parse
// consumed (flags and their values only), ends with a "--" that ended the
// flags rather than one that was the value of a flag (-prefix --).
func endedByDashes(fs *flag.FlagSet, parsed []string) bool {
	for i := 0; i < len(parsed); i++ {
		arg := parsed[i]
		if arg == "--" {
			return i == len(parsed)-1
		}
		name := strings.TrimLeft(arg, "-")
		if strings.Contains(name, "=") {
			continue // -name=value
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++ // -name value: skip the value, whatever it looks like
			}
		}
	}
	return false
}

// openReadOnly opens dir with Options.ReadOnly: nothing in it is changed.
func openReadOnly(dir string) (*bloomkv.DB, error) {
	opts := bloomkv.DefaultOptions()
	opts.ReadOnly = true
	return bloomkv.Open(dir, opts)
}

// failure reports err for command name and returns its exit code: 4 for
// damage (ErrCorrupt), 3 for the rest (cannot open, read or write).
func failure(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "bloomkv %s: %v\n", name, err)
	if errors.Is(err, bloomkv.ErrCorrupt) {
		return exitCorrupt
	}
	return exitOpen
}

// usageError reports a bad argument for command name: exit 2.
func usageError(stderr io.Writer, name string, format string, args ...any) int {
	fmt.Fprintf(stderr, "bloomkv %s: %s\n", name, fmt.Sprintf(format, args...))
	return exitUsage
}

// printJSON writes v to w as one indented JSON object.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func verify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("verify", "[-json] DIR", stdout, stderr)
	asJSON := c.Bool("json", false, "print the report as JSON")
	pos, code, ok := c.parse(args, 1)
	if !ok {
		return code
	}
	rep, err := bloomkv.VerifyDir(ctx, nil, pos[0])
	if err != nil {
		// It could not run (no store, locked, I/O): what it reports as
		// damage is in rep.
		fmt.Fprintf(stderr, "bloomkv verify: %v\n", err)
		return exitOpen
	}
	if *asJSON {
		if err := printJSON(stdout, struct {
			OK bool `json:"ok"`
			*bloomkv.VerifyReport
		}{rep.OK(), rep}); err != nil {
			return failure(stderr, "verify", err)
		}
	} else {
		fmt.Fprint(stdout, rep)
	}
	if !rep.OK() {
		return exitCorrupt
	}
	return exitOK
}

// stats opens the store read-only and prints its shape: the live
// segments and the memtables the WALs replay into. It leaves out the
// store's counters (Gets, block reads, flushes, compactions...): a store
// keeps none across opens, so all they could show is what this open did,
// which is nothing the store's user asked for.
func stats(args []string, stdout, stderr io.Writer) int {
	c := newCommand("stats", "[-json] DIR", stdout, stderr)
	asJSON := c.Bool("json", false, "print the statistics as JSON, with snake_case keys")
	pos, code, ok := c.parse(args, 1)
	if !ok {
		return code
	}
	db, err := openReadOnly(pos[0])
	if err != nil {
		return failure(stderr, "stats", err)
	}
	st := newStatsJSON(db.Stats())
	if err := db.Close(); err != nil {
		return failure(stderr, "stats", err)
	}
	if *asJSON {
		err = printJSON(stdout, st)
	} else {
		_, err = io.WriteString(stdout, st.String())
	}
	if err != nil {
		return failure(stderr, "stats", err)
	}
	return exitOK
}

// statsJSON is the shape part of bloomkv.Stats, as stats -json prints it:
// snake_case keys, sizes in bytes.
type statsJSON struct {
	Segments            int     `json:"segments"`
	SegmentBytes        int64   `json:"segment_bytes"`
	FilterBytes         int64   `json:"filter_bytes"`
	FilterExpectedReads float64 `json:"filter_expected_reads"`
	Memtables           int     `json:"memtables"`
}

func newStatsJSON(s bloomkv.Stats) statsJSON {
	return statsJSON{
		Segments:            s.Segments,
		SegmentBytes:        s.SegmentBytes,
		FilterBytes:         s.FilterBytes,
		FilterExpectedReads: finite(s.FilterExpectedReads),
		Memtables:           s.Memtables,
	}
}

// finite returns f, or 0 for NaN and ±Inf, which encoding/json refuses.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// String is the text stats prints: one aligned "name  value" line each.
func (s statsJSON) String() string {
	var b strings.Builder
	line := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-26s %s\n", name, fmt.Sprintf(format, args...))
	}
	line("segments", "%d", s.Segments)
	line("segment bytes", "%s", sizeString(s.SegmentBytes))
	line("filter memory", "%s", sizeString(s.FilterBytes))
	if s.Segments > 0 && s.SegmentBytes > 0 {
		line("filter / segment bytes", "%.2f%%", 100*float64(s.FilterBytes)/float64(s.SegmentBytes))
	}
	if s.FilterExpectedReads > 0 {
		line("expected reads / miss", "%.4f block reads per Get of an absent key (filter budget)", s.FilterExpectedReads)
	}
	line("memtables", "%d (active and frozen, WALs replayed)", s.Memtables)
	return b.String()
}

// sizeString shows n bytes exactly and, from 1 KiB, in binary units too:
// "1,234,567 B (1.18 MiB)".
func sizeString(n int64) string {
	s := groupDigits(n) + " B"
	const units = "KMGTPE"
	if n < 1<<10 {
		return s
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%s (%.2f %ciB)", s, v, units[i])
}

// groupDigits writes n with thousands separators.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// getLine is what get -json prints.
type getLine struct {
	Key   []byte  `json:"key"`
	Found bool    `json:"found"`
	Value *[]byte `json:"value,omitempty"` // absent when not found; "" for an empty value
}

func get(args []string, stdout, stderr io.Writer) int {
	c := newCommand("get", "[-hex] [-raw] [-json] DIR KEY", stdout, stderr)
	asHex := c.Bool("hex", false, "KEY is hex; print the value as hex")
	raw := c.Bool("raw", false, "print the value's bytes exactly, with no newline")
	asJSON := c.Bool("json", false, `print {"key":...,"found":...,"value":...}, key and value in base64`)
	pos, code, ok := c.parse(args, 2)
	if !ok {
		return code
	}
	if *raw && (*asHex || *asJSON) {
		return usageError(stderr, "get", "-raw excludes -hex and -json")
	}
	key, code, ok := keyArg(stderr, "get", pos[1], *asHex)
	if !ok {
		return code
	}
	db, err := openReadOnly(pos[0])
	if err != nil {
		return failure(stderr, "get", err)
	}
	v, err := db.Get(key)
	err = errors.Join(err, db.Close())
	found := err == nil
	switch {
	case errors.Is(err, bloomkv.ErrNotFound):
		if !*asJSON {
			fmt.Fprintf(stderr, "bloomkv get: %s: not found\n", formatBytes(key, *asHex))
			return exitNotFound
		}
	case err != nil:
		return failure(stderr, "get", err)
	}
	switch {
	case *asJSON:
		line := getLine{Key: key, Found: found}
		if found {
			line.Value = &v
		}
		err = json.NewEncoder(stdout).Encode(line)
	case *raw:
		_, err = stdout.Write(v)
	default:
		_, err = fmt.Fprintln(stdout, formatBytes(v, *asHex))
	}
	if err != nil {
		return failure(stderr, "get", err)
	}
	if !found {
		return exitNotFound
	}
	return exitOK
}

// keyArg decodes a KEY argument (hex with -hex) and refuses an empty one,
// which no store holds, as a usage error.
func keyArg(stderr io.Writer, name, arg string, isHex bool) (key []byte, code int, ok bool) {
	key, err := decodeArg("KEY", arg, isHex)
	if err != nil {
		return nil, usageError(stderr, name, "%v", err), false
	}
	if len(key) == 0 {
		return nil, usageError(stderr, name, "KEY is empty: a store holds no empty key"), false
	}
	return key, exitOK, true
}

func scan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("scan", "[-prefix P] [-start K] [-end K] [-limit N] [-keys-only] [-hex] [-json] DIR", stdout, stderr)
	bounds := addBounds(c)
	limit := c.Int("limit", 0, "print at most `N` keys (0: all)")
	keysOnly := c.Bool("keys-only", false, "print keys only")
	asHex := c.Bool("hex", false, "-prefix, -start and -end are hex; print keys and values as hex")
	asJSON := c.Bool("json", false, "print one JSON object per line, key and value in base64")
	pos, code, ok := c.parse(args, 1)
	if !ok {
		return code
	}
	if *limit < 0 {
		return usageError(stderr, "scan", "-limit %d: must be 0 (all) or more", *limit)
	}
	o, err := bounds.options(*asHex)
	if err != nil {
		return usageError(stderr, "scan", "%v", err)
	}
	db, err := openReadOnly(pos[0])
	if err != nil {
		return failure(stderr, "scan", err)
	}
	err = scanTo(ctx, db, o, stdout, scanFormat{limit: *limit, keysOnly: *keysOnly, hex: *asHex, json: *asJSON})
	if err = errors.Join(err, db.Close()); err != nil {
		return failure(stderr, "scan", err)
	}
	return exitOK
}

// boundFlags are the -prefix, -start and -end flags of scan and count.
type boundFlags struct{ prefix, start, end *string }

func addBounds(c *command) boundFlags {
	return boundFlags{
		prefix: c.String("prefix", "", "only keys that begin with `P`"),
		start:  c.String("start", "", "only keys >= `K`"),
		end:    c.String("end", "", "only keys < `K`"),
	}
}

// options returns the iterator options the flags ask for.
func (f boundFlags) options(isHex bool) (*bloomkv.IterOptions, error) {
	var o bloomkv.IterOptions
	for _, a := range []struct {
		name, val string
		dst       *[]byte
	}{{"-prefix", *f.prefix, &o.Prefix}, {"-start", *f.start, &o.LowerBound}, {"-end", *f.end, &o.UpperBound}} {
		b, err := decodeArg(a.name, a.val, isHex)
		if err != nil {
			return nil, err
		}
		if len(b) > 0 {
			*a.dst = b
		}
	}
	return &o, nil
}

// scanFormat is what scan prints.
type scanFormat struct {
	limit         int
	keysOnly, hex bool
	json          bool
}

// scanLine is one line of scan -json; keyLine, of scan -json -keys-only.
type (
	scanLine struct {
		Key   []byte `json:"key"`
		Value []byte `json:"value"`
	}
	keyLine struct {
		Key []byte `json:"key"`
	}
)

// scanTo prints the keys of db within o to w as f says.
func scanTo(ctx context.Context, db *bloomkv.DB, o *bloomkv.IterOptions, w io.Writer, f scanFormat) (err error) {
	it, err := db.NewIterator(o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	n := 0
	for k, v := range it.All() {
		if f.limit > 0 && n == f.limit {
			break
		}
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		n++
		switch {
		case f.json && f.keysOnly:
			err = enc.Encode(keyLine{Key: k})
		case f.json:
			if v == nil {
				v = []byte{} // "", not null
			}
			err = enc.Encode(scanLine{Key: k, Value: v})
		case f.keysOnly:
			_, err = fmt.Fprintln(bw, formatBytes(k, f.hex))
		default:
			_, err = fmt.Fprintf(bw, "%s\t%s\n", formatBytes(k, f.hex), formatBytes(v, f.hex))
		}
		if err != nil {
			return err
		}
	}
	return bw.Flush()
}

// decodeArg returns the bytes of a key argument: s itself, or s decoded
// from hex.
func decodeArg(name, s string, isHex bool) ([]byte, error) {
	if !isHex {
		return []byte(s), nil
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s %q: not hex: %w", name, s, err)
	}
	return b, nil
}

// formatBytes shows a key or value on one line: hex if asHex; else as it
// is if every byte is printable ASCII other than space and the first is
// not a quote, and Go-quoted otherwise. So a line of scan output splits
// at its one tab, and a quoted form is never mistaken for a plain one.
func formatBytes(b []byte, asHex bool) string {
	if asHex {
		return hex.EncodeToString(b)
	}
	if len(b) == 0 || b[0] == '"' {
		return strconv.Quote(string(b))
	}
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return strconv.Quote(string(b))
		}
	}
	return string(b)
}

// checkpoint copies a store that no writer has open: a read-only open
// shares it with other readers and changes nothing in it.
func checkpoint(args []string, stdout, stderr io.Writer) int {
	c := newCommand("checkpoint", "SRC DST", stdout, stderr)
	pos, code, ok := c.parse(args, 2)
	if !ok {
		return code
	}
	db, err := openReadOnly(pos[0])
	if err == nil {
		err = errors.Join(db.Checkpoint(pos[1]), db.Close())
	}
	if err != nil {
		return failure(stderr, "checkpoint", err)
	}
	return exitOK
}
