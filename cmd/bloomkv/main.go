// Command bloomkv inspects a bloomkv store.
//
//	bloomkv verify [-json] DIR   check every checksum, key order, filter and
//	                             the manifest against the files
//	bloomkv stats [-json] DIR    print the store's shape and counters
//	bloomkv get [-hex] [-raw] DIR KEY
//	                             print the value of KEY
//	bloomkv scan [-prefix P] [-start K] [-end K] [-limit N] [-keys-only]
//	             [-hex] [-json] DIR
//	                             print the keys (and values) in key order
//	bloomkv checkpoint SRC DST   write a consistent copy of the store SRC
//	                             into DST (new or empty)
//
// None of them changes a byte of DIR or SRC: stats, get, scan and
// checkpoint open the store with Options.ReadOnly (the WALs are replayed
// into memory only), verify reads the files under the same shared lock.
// They share the store with other readers and fail (exit 2) while a
// writer has it open. Flags may come before or after the arguments; the
// usage text (bloomkv -h) documents the output encodings and exit codes.
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
	"time"

	"github.com/bloomkv/bloomkv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK      = 0 // success
	exitProblem = 1 // get: no such key; verify: damage; get, scan: a damaged block
	exitError   = 2 // usage, or the store could not be opened or read
)

const usage = `usage: bloomkv COMMAND [flags] ARGS

commands:
  verify [-json] DIR
        check every checksum, the key order, the filters and the manifest
        against the files
  stats [-json] DIR
        print the live segments, their bytes and filter memory, and the
        counters of this open (zero but for what opening did)
  get [-hex] [-raw] DIR KEY
        print the value of KEY
  scan [-prefix P] [-start K] [-end K] [-limit N] [-keys-only] [-hex] [-json] DIR
        print the keys in [start, end) that begin with prefix, in key
        order, one "key<TAB>value" line each
  checkpoint SRC DST
        write a consistent copy of the store SRC into DST (new or empty)

None of them changes a byte of DIR or SRC: the store is opened read-only,
shared with other readers, and refused (exit 2, "locked") while a writer
has it open. 'bloomkv COMMAND -h' lists a command's flags.

Flags may come before or after the arguments (bloomkv scan DIR -limit 3);
"--" ends the flags, for a KEY that begins with "-".

Keys and values in text output: as they are when every byte is printable
ASCII other than space (0x21-0x7e) and the first is not '"'; otherwise
Go-quoted (strconv.Quote: "a b", "\x00\xff", ""). With -hex, KEY, -prefix,
-start and -end are read as hex and keys and values are printed as hex;
get -raw prints the value's bytes exactly, with no newline. scan -json
prints one JSON object per line, {"key":"...","value":"..."}, each in
standard base64 with padding (as encoding/json encodes []byte); -keys-only
leaves the value out.

exit status:
  0  ok
  1  get: no such key; verify: damage found; get, scan: a damaged block
     was read (the message names the file and offset)
  2  usage error, or the store could not be opened or read (no such
     directory, not a store, locked by a writer, I/O error)
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
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
	}
	fmt.Fprintf(stderr, "bloomkv: unknown command %q\n%s", args[0], usage)
	return exitError
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
		return nil, exitError, false
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

// failure reports err for command name and returns its exit code: 1 for
// damage (ErrCorrupt), 2 for the rest.
func failure(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "bloomkv %s: %v\n", name, err)
	if errors.Is(err, bloomkv.ErrCorrupt) {
		return exitProblem
	}
	return exitError
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
		fmt.Fprintf(stderr, "bloomkv verify: %v\n", err)
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			OK bool `json:"ok"`
			*bloomkv.VerifyReport
		}{rep.OK(), rep}); err != nil {
			fmt.Fprintf(stderr, "bloomkv verify: %v\n", err)
			return exitError
		}
	} else {
		fmt.Fprint(stdout, rep)
	}
	if !rep.OK() {
		return exitProblem
	}
	return exitOK
}

// stats opens the store read-only, so it changes nothing: its counters are
// those of this open (a store keeps none across opens), and its shape is
// that of the live segments and the WALs replayed into memtables.
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
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(st)
	} else {
		_, err = io.WriteString(stdout, st.String())
	}
	if err != nil {
		return failure(stderr, "stats", err)
	}
	return exitOK
}

// statsJSON is bloomkv.Stats as stats -json prints it: snake_case keys,
// sizes in bytes, durations in nanoseconds.
type statsJSON struct {
	Segments                 int              `json:"segments"`
	SegmentBytes             int64            `json:"segment_bytes"`
	FilterBytes              int64            `json:"filter_bytes"`
	FilterExpectedReads      float64          `json:"filter_expected_reads"`
	Memtables                int              `json:"memtables"`
	Gets                     uint64           `json:"gets"`
	SegmentsProbed           uint64           `json:"segments_probed"`
	FilterNegatives          uint64           `json:"filter_negatives"`
	FilterFalsePositives     uint64           `json:"filter_false_positives"`
	BlockReads               uint64           `json:"block_reads"`
	BlockCacheHits           uint64           `json:"block_cache_hits"`
	BytesRead                uint64           `json:"bytes_read"`
	CompactionBlockReads     uint64           `json:"compaction_block_reads"`
	CompactionBlockCacheHits uint64           `json:"compaction_block_cache_hits"`
	PrefixFilterProbes       uint64           `json:"prefix_filter_probes"`
	PrefixFilterSkips        uint64           `json:"prefix_filter_skips"`
	Writes                   uint64           `json:"writes"`
	WALBytes                 uint64           `json:"wal_bytes"`
	WriteStalls              uint64           `json:"write_stalls"`
	Flushes                  uint64           `json:"flushes"`
	FlushBytes               uint64           `json:"flush_bytes"`
	Compactions              uint64           `json:"compactions"`
	CompactionBytesRead      uint64           `json:"compaction_bytes_read"`
	CompactionBytesWritten   uint64           `json:"compaction_bytes_written"`
	RecentCompactions        []compactionJSON `json:"recent_compactions"`
}

// compactionJSON is bloomkv.CompactionInfo in stats -json.
type compactionJSON struct {
	Inputs          int     `json:"inputs"`
	InputBytes      int64   `json:"input_bytes"`
	OutputBytes     int64   `json:"output_bytes"`
	OutputEntries   uint64  `json:"output_entries"`
	Tier            uint32  `json:"tier"`
	Major           bool    `json:"major"`
	DeleteOnly      bool    `json:"delete_only"`
	FilterPath      string  `json:"filter_path"`
	FilterPlanNanos int64   `json:"filter_plan_ns"`
	EstimatedFPR    float64 `json:"estimated_fpr"`
	MeasuredFPR     float64 `json:"measured_fpr"`
	DurationNanos   int64   `json:"duration_ns"`
}

func newStatsJSON(s bloomkv.Stats) statsJSON {
	j := statsJSON{
		Segments:                 s.Segments,
		SegmentBytes:             s.SegmentBytes,
		FilterBytes:              s.FilterBytes,
		FilterExpectedReads:      finite(s.FilterExpectedReads),
		Memtables:                s.Memtables,
		Gets:                     s.Gets,
		SegmentsProbed:           s.SegmentsProbed,
		FilterNegatives:          s.FilterNegatives,
		FilterFalsePositives:     s.FilterFalsePositives,
		BlockReads:               s.BlockReads,
		BlockCacheHits:           s.BlockCacheHits,
		BytesRead:                s.BytesRead,
		CompactionBlockReads:     s.CompactionBlockReads,
		CompactionBlockCacheHits: s.CompactionBlockCacheHits,
		PrefixFilterProbes:       s.PrefixFilterProbes,
		PrefixFilterSkips:        s.PrefixFilterSkips,
		Writes:                   s.Writes,
		WALBytes:                 s.WALBytes,
		WriteStalls:              s.WriteStalls,
		Flushes:                  s.Flushes,
		FlushBytes:               s.FlushBytes,
		Compactions:              s.Compactions,
		CompactionBytesRead:      s.CompactionBytesRead,
		CompactionBytesWritten:   s.CompactionBytesWritten,
		RecentCompactions:        []compactionJSON{},
	}
	for _, c := range s.RecentCompactions {
		j.RecentCompactions = append(j.RecentCompactions, compactionJSON{
			Inputs:          c.Inputs,
			InputBytes:      c.InputBytes,
			OutputBytes:     c.OutputBytes,
			OutputEntries:   c.OutputEntries,
			Tier:            c.Tier,
			Major:           c.Major,
			DeleteOnly:      c.DeleteOnly,
			FilterPath:      c.FilterPath,
			FilterPlanNanos: int64(c.FilterPlan),
			EstimatedFPR:    finite(c.EstimatedFPR),
			MeasuredFPR:     finite(c.MeasuredFPR),
			DurationNanos:   int64(c.Duration),
		})
	}
	return j
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
	b.WriteString("\ncounters of this open (a read-only open reads, never writes):\n")
	line("gets", "%d", s.Gets)
	line("segments probed", "%d", s.SegmentsProbed)
	line("filter negatives", "%d", s.FilterNegatives)
	line("filter false positives", "%d", s.FilterFalsePositives)
	line("block reads", "%d", s.BlockReads)
	line("block cache hits", "%d", s.BlockCacheHits)
	line("bytes read", "%s", sizeString(int64(s.BytesRead)))
	line("prefix filter probes", "%d", s.PrefixFilterProbes)
	line("prefix filter skips", "%d", s.PrefixFilterSkips)
	line("writes", "%d batches", s.Writes)
	line("wal bytes", "%s", sizeString(int64(s.WALBytes)))
	line("write stalls", "%d", s.WriteStalls)
	line("flushes", "%d", s.Flushes)
	line("flush bytes", "%s", sizeString(int64(s.FlushBytes)))
	line("compactions", "%d", s.Compactions)
	line("compaction block reads", "%d", s.CompactionBlockReads)
	line("compaction cache hits", "%d", s.CompactionBlockCacheHits)
	line("compaction bytes read", "%s", sizeString(int64(s.CompactionBytesRead)))
	line("compaction bytes written", "%s", sizeString(int64(s.CompactionBytesWritten)))
	for i, c := range s.RecentCompactions {
		if c.DeleteOnly {
			line(fmt.Sprintf("compaction %d", i+1), "%d inputs, %s deleted by range tombstones, %v",
				c.Inputs, sizeString(c.InputBytes), time.Duration(c.DurationNanos).Round(time.Millisecond))
			continue
		}
		line(fmt.Sprintf("compaction %d", i+1), "%d inputs, %s -> %s, tier %d, filter %s, %v",
			c.Inputs, sizeString(c.InputBytes), sizeString(c.OutputBytes), c.Tier, c.FilterPath,
			time.Duration(c.DurationNanos).Round(time.Millisecond))
	}
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

func get(args []string, stdout, stderr io.Writer) int {
	c := newCommand("get", "[-hex] [-raw] DIR KEY", stdout, stderr)
	asHex := c.Bool("hex", false, "KEY is hex; print the value as hex")
	raw := c.Bool("raw", false, "print the value's bytes exactly, with no newline")
	pos, code, ok := c.parse(args, 2)
	if !ok {
		return code
	}
	if *asHex && *raw {
		fmt.Fprintln(stderr, "bloomkv get: -hex and -raw exclude each other")
		return exitError
	}
	key, err := decodeArg("KEY", pos[1], *asHex)
	if err != nil {
		fmt.Fprintf(stderr, "bloomkv get: %v\n", err)
		return exitError
	}
	db, err := openReadOnly(pos[0])
	if err != nil {
		return failure(stderr, "get", err)
	}
	v, err := db.Get(key)
	err = errors.Join(err, db.Close())
	switch {
	case errors.Is(err, bloomkv.ErrNotFound):
		fmt.Fprintf(stderr, "bloomkv get: %s: not found\n", formatBytes(key, *asHex))
		return exitProblem
	case err != nil:
		return failure(stderr, "get", err)
	}
	if *raw {
		_, err = stdout.Write(v)
	} else {
		_, err = fmt.Fprintln(stdout, formatBytes(v, *asHex))
	}
	if err != nil {
		return failure(stderr, "get", err)
	}
	return exitOK
}

func scan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("scan", "[-prefix P] [-start K] [-end K] [-limit N] [-keys-only] [-hex] [-json] DIR", stdout, stderr)
	prefix := c.String("prefix", "", "only keys that begin with `P`")
	start := c.String("start", "", "only keys >= `K`")
	end := c.String("end", "", "only keys < `K`")
	limit := c.Int("limit", 0, "print at most `N` keys (0: all)")
	keysOnly := c.Bool("keys-only", false, "print keys only")
	asHex := c.Bool("hex", false, "-prefix, -start and -end are hex; print keys and values as hex")
	asJSON := c.Bool("json", false, "print one JSON object per line, key and value in base64")
	pos, code, ok := c.parse(args, 1)
	if !ok {
		return code
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "bloomkv scan: -limit %d: must be 0 (all) or more\n", *limit)
		return exitError
	}
	var o bloomkv.IterOptions
	for _, a := range []struct {
		name, val string
		dst       *[]byte
	}{{"-prefix", *prefix, &o.Prefix}, {"-start", *start, &o.LowerBound}, {"-end", *end, &o.UpperBound}} {
		b, err := decodeArg(a.name, a.val, *asHex)
		if err != nil {
			fmt.Fprintf(stderr, "bloomkv scan: %v\n", err)
			return exitError
		}
		if len(b) > 0 {
			*a.dst = b
		}
	}
	db, err := openReadOnly(pos[0])
	if err != nil {
		return failure(stderr, "scan", err)
	}
	err = scanTo(ctx, db, &o, stdout, scanFormat{limit: *limit, keysOnly: *keysOnly, hex: *asHex, json: *asJSON})
	if err = errors.Join(err, db.Close()); err != nil {
		return failure(stderr, "scan", err)
	}
	return exitOK
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
