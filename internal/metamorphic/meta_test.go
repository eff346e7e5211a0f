package metamorphic

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	flagSeed     = flag.Uint64("meta-seed", 0, "seed of the first op log and its option sets (0: from the clock)")
	flagOps      = flag.Int("meta-ops", 0, "ops per log (0: 2500, or 600 with -short)")
	flagRuns     = flag.Int("meta-runs", 0, "option sets each log runs under (0: 4, or 2 with -short)")
	flagDuration = flag.Duration("meta-duration", 0, "draw and run new seeds until this much time has passed (e.g. 4h); 0: one seed")
	flagReplay   = flag.String("meta-replay", "", "run this saved op log (a .meta file) instead of drawing one")
	flagKeep     = flag.String("meta-keep", "", "write failure files under this directory (default: a new temporary directory, kept)")
	flagReduce   = flag.Duration("meta-reduce", time.Minute, "time to spend shrinking a failing log (0: none)")
)

// TestMeta draws an op log and option sets from a seed, runs the log
// against the model and under each option set, and fails if any output
// differs from the model's. The failure names a directory holding the log
// (replayable with -meta-replay), each option set's output and diff, and,
// if the reducer found one, a shorter log that fails the same way.
func TestMeta(t *testing.T) {
	if *flagReplay != "" {
		text, err := os.ReadFile(*flagReplay)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parseLogFile(string(text))
		if err != nil {
			t.Fatalf("%s: %v", *flagReplay, err)
		}
		runFile(t, f)
		return
	}
	nOps, nRuns := 2500, 4
	if testing.Short() {
		nOps, nRuns = 600, 2
	}
	if *flagOps > 0 {
		nOps = *flagOps
	}
	if *flagRuns > 0 {
		nRuns = *flagRuns
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	deadline := time.Now().Add(*flagDuration)
	for n := 0; ; n++ {
		runFile(t, drawLog(seed+uint64(n), nOps, nRuns))
		if t.Failed() || !time.Now().Before(deadline) {
			t.Logf("%d logs of %d ops, %d option sets each, seeds %d to %d", n+1, nOps, nRuns, seed, seed+uint64(n))
			return
		}
	}
}

// TestMetaTestdata replays the logs under testdata: failures found
// before, shrunk, kept as regression tests.
func TestMetaTestdata(t *testing.T) {
	files, err := filepath.Glob("testdata/*.meta")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			text, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parseLogFile(string(text))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			runFile(t, f)
		})
	}
}

// TestOpText checks that every op of a long log prints as text that
// parses back to the same op, which replaying a saved log relies on.
func TestOpText(t *testing.T) {
	f := drawLog(1, 5000, 4)
	g, err := parseLogFile(f.String())
	if err != nil {
		t.Fatal(err)
	}
	if f.String() != g.String() || len(f.ops) != len(g.ops) || len(f.options) != len(g.options) {
		t.Fatalf("log does not survive its text form")
	}
	for i := range f.options {
		if f.options[i] != g.options[i] {
			t.Fatalf("options %d: %v, parsed back %v", i, f.options[i], g.options[i])
		}
	}
}

func drawLog(seed uint64, nOps, nRuns int) *logFile {
	r := rand.New(rand.NewPCG(seed, 0x6f707473))
	f := &logFile{seed: seed, ops: generate(seed, nOps)}
	for range nRuns {
		f.options = append(f.options, randomOptions(r))
	}
	return f
}

// expected is the model's output for ops, one line per op.
func expected(ops []op) []string {
	m := newModel()
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = m.apply(o)
	}
	return out
}

// mismatch returns the index of the first line that differs, or -1.
func mismatch(want, got []string) int {
	for i := range max(len(want), len(got)) {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			return i
		}
	}
	return -1
}

// runLogTemp runs ops in a new directory that it removes afterwards, so
// that a run of hours does not fill the disk with stores.
func runLogTemp(t *testing.T, opts optionSet, ops []op) []string {
	dir, err := os.MkdirTemp("", "bloomkv-meta-run-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	return runLog(dir, opts, ops)
}

// runFile runs f under each of its option sets and reports every run whose
// output differs from the model's, leaving the files to replay it.
func runFile(t *testing.T, f *logFile) {
	t.Helper()
	if len(f.options) == 0 {
		f.options = drawLog(f.seed, 0, 2).options
	}
	dir := *flagKeep
	if dir != "" {
		dir = filepath.Join(dir, fmt.Sprintf("seed-%d", f.seed))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		var err error
		if dir, err = os.MkdirTemp("", fmt.Sprintf("bloomkv-meta-%d-", f.seed)); err != nil {
			t.Fatal(err)
		}
	}
	// The log is written before it runs, so that a crash (a fault in
	// mapped memory kills the process) leaves it too.
	logPath := filepath.Join(dir, "log.meta")
	write(t, logPath, f.String())
	fmt.Fprintf(os.Stderr, "metamorphic: seed %d, %d ops, %d option sets: %s\n", f.seed, len(f.ops), len(f.options), logPath)

	want := expected(f.ops)
	write(t, filepath.Join(dir, "output-model.txt"), render(f.ops, want))
	failed := false
	for k, opts := range f.options {
		// On stderr too, so that a crash names the set it died under.
		fmt.Fprintf(os.Stderr, "metamorphic: seed %d: options %d: %s\n", f.seed, k, opts)
		start := time.Now()
		got := runLogTemp(t, opts, f.ops)
		t.Logf("options %d (%s): %d ops in %v", k, opts, len(f.ops), time.Since(start).Round(time.Millisecond))
		i := mismatch(want, got)
		if i < 0 {
			continue
		}
		failed = true
		write(t, filepath.Join(dir, fmt.Sprintf("options-%d.txt", k)), opts.String()+"\n")
		write(t, filepath.Join(dir, fmt.Sprintf("output-%d.txt", k)), render(f.ops, got))
		d := diff(f.ops, want, got)
		write(t, filepath.Join(dir, fmt.Sprintf("diff-%d.txt", k)), d)
		msg := fmt.Sprintf("seed %d, options %d (%s): output differs from the model's at op %d:\n%s\nfiles: %s\nreplay: go test ./internal/metamorphic -run 'TestMeta$' -meta-replay %s",
			f.seed, k, opts, i+1, firstLines(d, 12), dir, logPath)
		if *flagReduce > 0 {
			small := reduce(t, opts, f.ops, *flagReduce)
			path := filepath.Join(dir, fmt.Sprintf("reduced-%d.meta", k))
			write(t, path, (&logFile{seed: f.seed, options: []optionSet{opts}, ops: small}).String())
			msg += fmt.Sprintf("\nshrunk to %d ops: %s", len(small), path)
		}
		t.Error(msg)
	}
	if !failed && *flagKeep == "" {
		os.RemoveAll(dir)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func render(ops []op, out []string) string {
	var sb strings.Builder
	for i, res := range out {
		if i < len(ops) {
			fmt.Fprintf(&sb, "%s -> %s\n", ops[i], res)
		} else {
			fmt.Fprintf(&sb, "? -> %s\n", res)
		}
	}
	return sb.String()
}

// diff lists the ops whose outputs differ (the first 50).
func diff(ops []op, want, got []string) string {
	var sb strings.Builder
	n := 0
	for i := range max(len(want), len(got)) {
		w, g := "(none)", "(not run)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g == w {
			continue
		}
		if n++; n > 50 {
			sb.WriteString("...\n")
			break
		}
		o := "(after the last op)"
		if i < len(ops) {
			o = ops[i].String()
		}
		fmt.Fprintf(&sb, "op %d: %s\n  model: %s\n  store: %s\n", i+1, o, w, g)
	}
	return sb.String()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// reduce shrinks a failing log, for at most budget: it cuts the log after
// the first op that differs, then removes ever smaller runs of ops as long
// as what is left still differs from the model (delta debugging). Ops
// that name an iterator, snapshot or transaction that is no longer made
// print the same "no such" line in the model and the store, so any subset
// is a valid log.
func reduce(t *testing.T, opts optionSet, ops []op, budget time.Duration) []op {
	deadline := time.Now().Add(budget)
	fails := func(ops []op) bool {
		return mismatch(expected(ops), runLogTemp(t, opts, ops)) >= 0
	}
	want := expected(ops)
	got := runLogTemp(t, opts, ops)
	if i := mismatch(want, got); i >= 0 && fails(ops[:i+1]) {
		ops = ops[:i+1]
	}
	if try := dropDangling(ops); len(try) < len(ops) && fails(try) {
		ops = try
	}
	for chunk := len(ops) / 2; chunk >= 1 && time.Now().Before(deadline); chunk /= 2 {
		for start := 0; start+chunk <= len(ops) && time.Now().Before(deadline); {
			try := append(append([]op(nil), ops[:start]...), ops[start+chunk:]...)
			if fails(try) {
				ops = try
				continue
			}
			start += chunk
		}
	}
	if try := dropDangling(ops); len(try) < len(ops) && fails(try) {
		ops = try
	}
	return ops
}

// dropDangling removes the ops that name an iterator, snapshot or
// transaction the log no longer makes: they change nothing, in the model
// or in a store.
func dropDangling(ops []op) []op {
	want := expected(ops)
	var out []op
	for i, o := range ops {
		if want[i] != resNoIter && want[i] != resNoSnap && want[i] != resNoTxn {
			out = append(out, o)
		}
	}
	return out
}
