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

// TestInterfere checks what the model predicts for closures whose body
// commits a plain write while a run's transaction is open (interfere), op
// by op, and then that a store prints the same. The model is the oracle
// of every drawn log, so its rule is pinned here by hand: a write to a key
// the run read, or in a range it scanned, fails the run's commit with
// ErrConflict and UpdateWith runs the closure again on the new state; a
// write to a key it only wrote, or read after writing it, or to any key
// when it wrote nothing, does not; a failed run's writes are never
// applied, while the interfering writes stay. In the wanted lines,
// {v<seed>.<len>c} stands for how that value prints.
func TestInterfere(t *testing.T) {
	steps := []struct{ op, want string }{
		{`put "a" v1.3c`, "ok"},
		{`put "b" v2.3c`, "ok"},
		// A read key written in run 1: run 2 sees the new value, commits.
		{`update with=1 sync=0 retries=2 abort=0 get "a" ; put "c" v3.3c ; interfere run=1 put "a" v4.3c`,
			"{v4.3c} | ok | not-run | ran 2 times | ok"},
		{`get "c"`, "{v3.3c}"},
		// The same, written before the read: the run still reads its
		// snapshot, and conflicts.
		{`update with=1 sync=0 retries=2 abort=0 interfere run=1 delete "a" ; get "a" ; put "c" v5.3c`,
			"not-run | not-found | ok | ran 2 times | ok"},
		// A key the body did not read: no conflict, one run.
		{`update with=1 sync=0 retries=2 abort=0 get "b" ; put "c" v6.3c ; interfere run=1 put "zz" v7.3c`,
			"{v2.3c} | ok | ok | ok"},
		{`get "zz"`, "{v7.3c}"},
		// Every run hit: retries spent, the last conflict returned, the
		// closure's writes never applied; run 3 is never reached.
		{`update with=1 sync=0 retries=1 abort=0 get "b" ; put "c" v8.3c ; interfere run=1 put "b" v9.3c ; interfere run=2 put "b" v10.3c ; interfere run=3 put "b" v11.3c`,
			"{v9.3c} | ok | not-run | ok | not-run | ran 2 times | err-conflict"},
		{`get "b"`, "{v10.3c}"},
		{`get "c"`, "{v6.3c}"},
		// Update does not retry.
		{`update with=0 sync=0 retries=0 abort=0 has "b" ; delete "c" ; interfere run=1 delete-range "a" "c" ; interfere run=2 put "b" v12.3c`,
			"true | ok | ok | not-run | err-conflict"},
		{`get "c"`, "{v6.3c}"},
		{`has "b"`, "false"},
		// A scan that ran off the end of its range reads up to the bound:
		// a key written anywhere in it conflicts, one outside it does not.
		{`put "p/1" v13.3c`, "ok"},
		{`update with=1 sync=0 retries=1 abort=0 range-scan prefix="p/" n=3 reverse=0 ; put "q" v14.3c ; interfere run=1 put "p/9" v15.3c ; interfere run=2 put "pz" v16.3c`,
			"2 keys {scan p/1 v13.3c p/9 v15.3c} | ok | not-run | ok | ran 2 times | ok"},
		// A scan that stopped at its first key read up to that key only.
		{`update with=1 sync=0 retries=1 abort=0 range-scan prefix="p/" n=0 reverse=0 ; put "q" v17.3c ; interfere run=1 put "p/5" v18.3c`,
			"1 keys {scan p/1 v13.3c} | ok | ok | ok"},
		// Blind writes, and reads of the closure's own writes, do not
		// conflict.
		{`update with=1 sync=0 retries=1 abort=0 put "b" v19.3c ; get "b" ; interfere run=1 put "b" v20.3c`,
			"ok | {v19.3c} | ok | ok"},
		{`get "b"`, "{v19.3c}"},
		// A closure that writes nothing commits unchecked.
		{`update with=1 sync=0 retries=1 abort=0 get "b" ; interfere run=1 put "b" v21.3c`,
			"{v19.3c} | ok | ok"},
		// An aborting closure runs once; its interference stays.
		{`update with=1 sync=0 retries=3 abort=1 get "b" ; put "c" v22.3c ; interfere run=1 delete "b"`,
			"{v21.3c} | ok | ok | aborted"},
		{`has "b"`, "false"},
		// A view reads its snapshot after a write committed meanwhile.
		{`view abort=0 get "zz" ; interfere run=1 delete "zz" ; get "zz"`,
			"{v7.3c} | ok | {v7.3c} | ok"},
		// An interfering write counts for an open transaction too.
		{`txn-new t1 update=1`, "ok"},
		{`txn-get t1 "q"`, "{v17.3c}"},
		{`txn-put t1 "r" v23.3c`, "ok"},
		{`update with=0 sync=0 retries=0 abort=0 get "r" ; interfere run=1 put "q" v24.3c`,
			"not-found | ok | ok"},
		{`txn-commit t1`, "err-conflict"},
		// A reverse scan reads from its upper bound down to the key it
		// stopped at: not the keys below that.
		{`update with=1 sync=0 retries=1 abort=0 range-scan prefix="p/" n=0 reverse=1 ; put "s" v25.3c ; interfere run=1 put "p/" v26.3c`,
			"1 keys {scan p/9 v15.3c} | ok | ok | ok"},
		{`update with=1 sync=0 retries=1 abort=0 range-scan prefix="p/" n=0 reverse=1 ; put "s" v27.3c ; interfere run=1 put "p/z" v28.3c`,
			"1 keys {scan p/z v28.3c} | ok | not-run | ran 2 times | ok"},
	}
	var ops []op
	for _, s := range steps {
		o, err := parseOp(s.op)
		if err != nil {
			t.Fatalf("%s: %v", s.op, err)
		}
		if o.String() != s.op {
			t.Fatalf("%s prints back as %s", s.op, o)
		}
		ops = append(ops, o)
	}
	for i, got := range expected(ops) {
		if want := expandValues(t, steps[i].want); got != want {
			t.Errorf("op %d: %s\n  model: %s\n  want:  %s", i+1, steps[i].op, got, want)
		}
	}
	if !t.Failed() {
		runFile(t, &logFile{seed: 1, ops: ops})
	}
}

// expandValues replaces each {v<seed>.<len>c} in s by how the value
// prints, and each {scan k v k v ...} by the digest of those keys and
// values.
func expandValues(t *testing.T, s string) string {
	t.Helper()
	for {
		i := strings.Index(s, "{")
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], "}")
		if j < 0 {
			t.Fatalf("unclosed { in %q", s)
		}
		f := strings.Fields(s[i+1 : i+j])
		var rep string
		if f[0] == "scan" {
			var kvs []kv
			for k := 1; k+1 < len(f); k += 2 {
				kvs = append(kvs, kv{f[k], expandValues(t, "{"+f[k+1]+"}")})
			}
			d := digest(kvs)
			rep = d[strings.Index(d, "keys ")+5:]
		} else {
			v, err := parseValSpec(f[0])
			if err != nil {
				t.Fatal(err)
			}
			rep = describe(v.bytes())
		}
		s = s[:i] + rep + s[i+j+1:]
	}
}
