package bloomkv

// The crash loop: a child process (this test binary, re-executed) writes
// from several goroutines — batches, single Puts and Deletes, with and
// without Sync — while flushes and compactions run constantly, and is
// killed with SIGKILL at a random moment, sometimes while it is still
// opening (recovering) the store. The parent reopens the store after every
// kill and checks it against every write the child acknowledged.
//
// 100 rounds by default (30 with -short), from a random seed that every
// failure reports. Longer or reproducing runs:
//
//	go test -run 'TestCrashLoop$' -crashloop.iterations 5000
//	go test -run 'TestCrashLoop$' -crashloop.seed 42
//
// The kill moments depend on scheduling, so a seed reproduces the choices
// (sync, delays) of each round, not the exact interleaving.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	crashLoopIterations = flag.Int("crashloop.iterations", 100, "kill-and-recover rounds of TestCrashLoop (TestCrashLoopOps: 30 at the default)")
	crashLoopSeed       = flag.Uint64("crashloop.seed", 0, "seed of TestCrashLoop (0: from the clock)")
)

const (
	crashLoopEnv     = "BLOOMKV_CRASHLOOP_DIR"
	crashLoopModeEnv = "BLOOMKV_CRASHLOOP_MODE" // "ops": TestCrashLoopOps's child
	crashLoopWriters = 4
	crashLoopKeys    = 40 // per writer and key family
)

// Writer g owns the keys p/g/k, m/g/k (a pair, written together) and
// s/g/k; no other writer touches them, and a writer has at most one op in
// flight, so a key's state after a crash is that of its last acknowledged
// op or of its writer's one op in flight.
func loopKey(family byte, g, k int) string { return fmt.Sprintf("%c/g%d/%03d", family, g, k) }

// loopValue is the value op n writes to key: derived from both, so a
// value that turns up under another key or another version is caught.
func loopValue(key string, n int) []byte {
	return append(fmt.Appendf(nil, "%s=%d;", key, n), bytes.Repeat([]byte{byte('a' + n%26)}, n*31%90)...)
}

// loopOp returns what op n of writer g does, key → value (nil: delete),
// and how it is committed.
func loopOp(g, n int) (effect map[string][]byte, single bool) {
	k := n % crashLoopKeys
	p, m, s := loopKey('p', g, k), loopKey('m', g, k), loopKey('s', g, k)
	if start, end, ok := loopRange(g, n); ok {
		effect = map[string][]byte{}
		for i := k; i < min(k+5, crashLoopKeys); i++ {
			if key := loopKey(start[0], g, i); key < end {
				effect[key] = nil
			}
		}
		if start[0] == 's' {
			return effect, true // DeleteRange alone
		}
		// A batch that deletes a range of pairs, then writes one key of it
		// again, and a key outside it.
		if k+1 < crashLoopKeys {
			m1 := loopKey('m', g, k+1)
			effect[m1] = loopValue(m1, n)
		}
		effect[p] = loopValue(p, n)
		return effect, false
	}
	switch n % 7 { // 7 is prime to crashLoopKeys: every key sees every kind
	case 3: // delete the pair
		return map[string][]byte{p: nil, m: nil}, false
	case 4:
		return map[string][]byte{s: loopValue(s, n)}, true
	case 5:
		return map[string][]byte{s: nil}, true
	case 6: // three keys, two kinds, one batch
		return map[string][]byte{p: loopValue(p, n), m: loopValue(m, n), s: nil}, false
	}
	return map[string][]byte{p: loopValue(p, n), m: loopValue(m, n)}, false
}

// childReporter returns what a child process of a kill test reports with:
// one line to stdout per call, flushed at once (the parent reads the lines
// of a process it kills), safe from several goroutines.
func childReporter() func(format string, args ...any) {
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
}

// TestCrashLoopChild is the writer process of TestCrashLoop.
func TestCrashLoopChild(t *testing.T) {
	dir := os.Getenv(crashLoopEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashLoop")
	}
	o := smallOptions()
	o.MemtableSize = 8 << 10
	o.LargeValueSize = 64 // nearly half the values are value records (segment format 5)
	o.CompactionFanIn = 2
	o.CompactionConcurrency = 2
	o.Sync = os.Getenv("BLOOMKV_CRASHLOOP_SYNC") == "1"
	base, _ := strconv.Atoi(os.Getenv("BLOOMKV_CRASHLOOP_BASE"))
	say := childReporter()
	say("open")
	db, err := Open(dir, o)
	if err != nil {
		say("open error: %v", err)
		os.Exit(2)
	}
	for g := range crashLoopWriters {
		go func() {
			for n := base; ; n++ {
				if err := commitLoopOp(db, g, n); err != nil {
					say("write error: %v", err)
					os.Exit(3)
				}
				say("ack %d %d", g, n) // only now: the write is acknowledged
			}
		}()
	}
	go func() {
		for {
			time.Sleep(time.Millisecond)
			db.Flush() // flushes beyond the memtable's, so more compactions too
		}
	}()
	if os.Getenv(crashLoopModeEnv) == "ops" {
		startOpsChild(db, base, say) // crashloop_ops_test.go
	}
	var last Stats
	for {
		time.Sleep(time.Millisecond)
		if s := db.Stats(); s.Flushes != last.Flushes || s.Compactions != last.Compactions {
			say("stats %d %d", s.Flushes, s.Compactions)
			last = s
		}
	}
}

// loopRange returns the range deletion op n of writer g starts with, if
// it has one: five keys of its s family alone, or three of its m family
// in a batch (loopOp).
func loopRange(g, n int) (start, end string, ok bool) {
	k := n % crashLoopKeys
	switch n % 13 { // 13 is prime to 7 and crashLoopKeys
	case 6:
		return loopKey('s', g, k), loopKey('s', g, k+5), true
	case 9:
		return loopKey('m', g, k), loopKey('m', g, k+3), true
	}
	return "", "", false
}

func commitLoopOp(db *DB, g, n int) error {
	effect, single := loopOp(g, n)
	b := NewBatch()
	if start, end, ok := loopRange(g, n); ok {
		if single {
			return db.DeleteRange([]byte(start), []byte(end))
		}
		b.DeleteRange([]byte(start), []byte(end)) // first: the puts after it survive it
		for k, v := range effect {
			if v != nil {
				b.Put([]byte(k), v)
			}
		}
		return db.Write(b)
	}
	for k, v := range effect {
		switch {
		case single && v == nil:
			return db.Delete([]byte(k))
		case single:
			return db.Put([]byte(k), v)
		case v == nil:
			b.Delete([]byte(k))
		default:
			b.Put([]byte(k), v)
		}
	}
	return db.Write(b)
}

// loopState is the parent's record of the history: for each key the op
// whose state it must hold (-1: never written).
type loopState struct {
	keyOp map[string]int
}

func (st *loopState) apply(g, n int) {
	effect, _ := loopOp(g, n)
	for k := range effect {
		st.keyOp[k] = n
	}
}

// loopWant is the state key of writer g holds after op n: its value, nil
// if absent (n < 0: never written).
func loopWant(key string, g, n int) []byte {
	if n < 0 {
		return nil
	}
	effect, _ := loopOp(g, n)
	return effect[key]
}

// childReport is what one child process said before it died.
type childReport struct {
	acked       [crashLoopWriters]int // last acknowledged op per writer, -1 none
	flushes     uint64
	compactions uint64
}

func TestCrashLoop(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("kills a writer process with SIGKILL; Windows has no signals (and no removal of open files)")
	}
	rounds, seed := crashLoopRounds(t, 100, 30)
	rng := rand.New(rand.NewPCG(seed, 0xc1a5))
	dir := t.TempDir()
	st := &loopState{keyOp: map[string]int{}}
	var acks, flushes, compactions, landed int
	start := time.Now()
	// On a loaded machine (the race detector beside other tests) the
	// children may write too little in their lives to flush and compact:
	// then up to twice as many rounds more run.
	for round := 0; round < rounds || round < 3*rounds && (flushes == 0 || compactions == 0); round++ {
		base := (round + 1) * 1_000_000 // op numbers of this round: fresh values
		syncOn := rng.IntN(2) == 0
		// One round in four dies while opening, that is, during recovery.
		duringOpen := rng.IntN(4) == 0
		delay := time.Duration(1+rng.IntN(100)) * time.Millisecond
		if duringOpen {
			delay = time.Duration(rng.IntN(5000)) * time.Microsecond
		}
		if round >= rounds {
			// The extra rounds: the children lived too briefly to flush
			// and compact (a loaded machine, the invariants build's
			// guarded copies), so these live up to ten times longer.
			delay *= time.Duration(1 + rng.IntN(10))
		}
		rep := runCrashLoopChild(t, dir, syncOn, base, duringOpen, delay, nil, nil)
		var inFlight [crashLoopWriters]int
		for g, n := range rep.acked {
			inFlight[g] = base // the first op of the round may land unacknowledged
			if n >= 0 {
				for m := base; m <= n; m++ {
					st.apply(g, m)
				}
				inFlight[g] = n + 1
				acks += n - base + 1
			}
		}
		flushes += int(rep.flushes)
		compactions += int(rep.compactions)
		n, err := checkCrashLoop(dir, st, inFlight, nil)
		if err != nil {
			t.Fatalf("seed %d round %d (sync %v, kill %v after %s): %v",
				seed, round, syncOn, delay, map[bool]string{true: "open", false: "the first ack"}[duringOpen], err)
		}
		landed += n
	}
	if rounds >= 20 && (flushes == 0 || compactions == 0) {
		t.Fatalf("seed %d: the children reported %d flushes and %d compactions: the loop crashed nothing interesting", seed, flushes, compactions)
	}
	db := mustOpen(t, dir, smallOptions())
	mustDo(t, db.Compact())
	mustDo(t, db.Close())
	for range 2 { // after the final Compact, and once more
		if _, err := checkCrashLoop(dir, st, noneInFlight(), nil); err != nil {
			t.Fatalf("seed %d after the final Compact: %v", seed, err)
		}
	}
	rep, err := VerifyDir(context.Background(), nil, dir)
	if err != nil || !rep.OK() {
		t.Fatalf("seed %d: VerifyDir after the loop: %v %v", seed, rep, err)
	}
	t.Logf("%d rounds in %v: %d acknowledged ops all present, %d unacknowledged ones landed whole; children reported %d flushes, %d compactions",
		rounds, time.Since(start).Round(time.Millisecond), acks, landed, flushes, compactions)
}

// noneInFlight is a -1 per writer: no op (acknowledged, or in flight).
func noneInFlight() [crashLoopWriters]int {
	var f [crashLoopWriters]int
	for g := range f {
		f[g] = -1
	}
	return f
}

// runCrashLoopChild runs the writer from op base and kills it delay after
// it starts opening the store (duringOpen) or acknowledges its first op.
// env is added to the child's environment, and extra, if not nil, is
// given each line the loop does not know, with the writers' last
// acknowledged ops so far; it returns false for a line it does not know
// either.
func runCrashLoopChild(t *testing.T, dir string, syncOn bool, base int, duringOpen bool, delay time.Duration,
	env []string, extra func(line string, acked [crashLoopWriters]int) bool) childReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashLoopChild$")
	cmd.Env = append(os.Environ(), crashLoopEnv+"="+dir, "BLOOMKV_CRASHLOOP_BASE="+strconv.Itoa(base),
		// The writer runs on as many Ps as this test does (-cpu 1,4,16).
		"GOMAXPROCS="+strconv.Itoa(runtime.GOMAXPROCS(0)))
	cmd.Env = append(cmd.Env, env...)
	if syncOn {
		cmd.Env = append(cmd.Env, "BLOOMKV_CRASHLOOP_SYNC=1")
	}
	stdout, err := cmd.StdoutPipe()
	mustDo(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // before Start, or the child's stderr is lost
	mustDo(t, cmd.Start())
	scheduled, killed := false, make(chan struct{})
	kill := func(d time.Duration) {
		if !scheduled {
			scheduled = true
			time.AfterFunc(d, func() { cmd.Process.Signal(syscall.SIGKILL); close(killed) })
		}
	}
	// A child that never gets as far as the kill point is stuck.
	watchdog := time.AfterFunc(30*time.Second, func() { cmd.Process.Signal(syscall.SIGKILL) })
	defer watchdog.Stop()

	rep := childReport{acked: noneInFlight()}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		var g, n int
		var f, c uint64
		switch {
		case line == "open":
			if duringOpen {
				kill(delay)
			}
		case scanLine(line, "ack %d %d", &g, &n) && g >= 0 && g < crashLoopWriters && n > rep.acked[g]:
			rep.acked[g] = n
			kill(delay)
		case scanLine(line, "stats %d %d", &f, &c):
			rep.flushes, rep.compactions = f, c
		case extra != nil && extra(line, rep.acked):
		default:
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			t.Fatalf("child: %s", line)
		}
	}
	if !scheduled {
		cmd.Wait()
		t.Fatalf("the child died, or was stuck, before its kill point; stderr:\n%s", stderr.Bytes())
	}
	<-killed // EOF can come before the timer's goroutine closes killed
	cmd.Wait()
	return rep
}

func scanLine(line, format string, args ...any) bool {
	n, err := fmt.Sscanf(line, format, args...)
	return err == nil && n == len(args)
}

// checkCrashLoop reopens the store and checks every key against st: the
// state of its last acknowledged op or, for the keys of a writer's op in
// flight, of that op — all of its keys or none (a batch is atomic). It
// records the in-flight ops that landed in st and returns their number.
// A full scan must show exactly the keys the Gets found, with the same
// values: nothing never written. extra, if not nil, reads (into got) and
// checks the keys of the other writers, before the scan.
func checkCrashLoop(dir string, st *loopState, inFlight [crashLoopWriters]int, extra func(db *DB, got map[string][]byte) error) (int, error) {
	db, err := Open(dir, smallOptions())
	if err != nil {
		return 0, fmt.Errorf("reopen: %w", err)
	}
	defer db.Close()
	got := map[string][]byte{}
	landed := 0
	for g := range crashLoopWriters {
		ok, err := checkWriter(db, st, g, inFlight[g], got)
		if err != nil {
			return 0, err
		}
		if ok {
			st.apply(g, inFlight[g])
			landed++
		}
	}
	if extra != nil {
		if err := extra(db, got); err != nil {
			return 0, err
		}
	}
	return landed, checkScanMatches(db, got)
}

// checkWriter reads every key of writer g into got and reports whether
// its op in flight (f, -1 if none) landed.
func checkWriter(db *DB, st *loopState, g, f int, got map[string][]byte) (bool, error) {
	var effect map[string][]byte
	if f >= 0 {
		effect, _ = loopOp(g, f)
	}
	votes := map[bool][]string{} // landed? → the keys that say so
	for _, family := range []byte{'p', 'm', 's'} {
		for k := range crashLoopKeys {
			key := loopKey(family, g, k)
			v, err := db.Get([]byte(key))
			if err != nil && !errors.Is(err, ErrNotFound) {
				return false, fmt.Errorf("Get %s: %w", key, err)
			}
			if v != nil {
				got[key] = v
			}
			last, ok := st.keyOp[key]
			if !ok {
				last = -1
			}
			acked := loopWant(key, g, last)
			next, inOp := effect[key]
			switch {
			case inOp && sameState(v, next) && !sameState(acked, next):
				votes[true] = append(votes[true], key)
			case sameState(v, acked):
				if inOp && !sameState(acked, next) {
					votes[false] = append(votes[false], key)
				}
			default:
				return false, fmt.Errorf("%s = %s; want the state of op %d (its last acknowledged)%s",
					key, showState(v), last, map[bool]string{true: fmt.Sprintf(" or of op %d (in flight)", f)}[inOp])
			}
		}
	}
	if len(votes[true]) > 0 && len(votes[false]) > 0 {
		return false, fmt.Errorf("torn batch: op %d of writer %d landed on %v but not on %v", f, g, votes[true], votes[false])
	}
	return len(votes[true]) > 0, nil
}

func showState(v []byte) string {
	if v == nil {
		return "absent"
	}
	return fmt.Sprintf("%.40q", v)
}

func sameState(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }

// checkScanMatches scans the store: it must yield exactly the pairs in got.
func checkScanMatches(db *DB, got map[string][]byte) error {
	it, err := db.NewIterator(nil)
	if err != nil {
		return err
	}
	seen := 0
	for k, v := range it.All() {
		if w, ok := got[string(k)]; !ok || !bytes.Equal(v, w) {
			it.Close()
			return fmt.Errorf("scan yields %q=%.40q, which the Gets did not find", k, v)
		}
		seen++
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	if seen != len(got) {
		return fmt.Errorf("scan yields %d keys, the Gets found %d", seen, len(got))
	}
	return nil
}

// crashLoopRounds returns a crash loop's rounds, from
// -crashloop.iterations where it was given (that is, not left at its
// default of 100), else normal, or short under -short; and its seed, from
// -crashloop.seed or the clock, logged so that a failure can be rerun.
func crashLoopRounds(t *testing.T, normal, short int) (rounds int, seed uint64) {
	t.Helper()
	rounds = *crashLoopIterations
	switch {
	case rounds == 100 && testing.Short():
		rounds = short
	case rounds == 100:
		rounds = normal
	}
	seed = *crashLoopSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -crashloop.seed %d)", seed, seed)
	return rounds, seed
}
