package bloomkv

// TestCrashLoopOps is TestCrashLoop's kill loop with the operations its
// writers do not make: beside them, the child runs read-modify-write
// transactions (Update, UpdateWith with retries and Sync, Commit of
// NewTransaction) that increment shared counters and transfer amounts
// between accounts, CompareAndSets that increment shared keys,
// Checkpoints into fresh directories one after another, and
// SetFilterBudget and RebuildFilters at random moments. After each kill
// the parent checks:
//
//   - the writers' keys, as TestCrashLoop does;
//   - every counter, account and CompareAndSet key: exactly its value
//     before the round plus the increments and transfers acknowledged
//     (commit or CompareAndSet returned nil and true), plus those of some
//     of the operations in flight at the kill, each whole or not at all;
//     one that failed (ErrConflict, a CompareAndSet that did not swap)
//     wrote nothing;
//   - every checkpoint whose call returned: it opens, and holds of each
//     writer a prefix of its ops that includes every op acknowledged
//     before the call began and none not yet attempted when it returned,
//     each counter within the same bounds and the accounts' sum zero (no
//     transfer halved); a checkpoint the kill interrupted either is
//     refused by Open with ErrNotStore or satisfies the same rule;
//   - Verify of the store and of every checkpoint that opens.
//
// 30 rounds by default (10 with -short), -crashloop.iterations and
// -crashloop.seed as for TestCrashLoop.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"
)

const (
	opsWorkers  = 6 // two each: incrementers, transferrers, CompareAndSetters
	opsCounters = 3
	opsAccounts = 5
	opsCASKeys  = 2
	opsCPEnv    = "BLOOMKV_CRASHLOOP_CHECKPOINTS" // the prefix of the child's checkpoint directories
)

// opsKeys are the keys the ops workers share.
func opsKeys() []string {
	var keys []string
	for i := range opsCounters {
		keys = append(keys, fmt.Sprintf("t/c/%d", i))
	}
	for i := range opsAccounts {
		keys = append(keys, fmt.Sprintf("t/a/%d", i))
	}
	for i := range opsCASKeys {
		keys = append(keys, fmt.Sprintf("t/x/%d", i))
	}
	return keys
}

// opsDelta is what op n of worker w adds to which keys if it commits.
// The two workers of a kind share their keys, so that they conflict.
func opsDelta(w, n int) map[string]int64 {
	switch w / 2 {
	case 0:
		return map[string]int64{fmt.Sprintf("t/c/%d", (n+w)%opsCounters): 1}
	case 1:
		from := (3*n + w) % opsAccounts
		to := (from + 1 + n%(opsAccounts-1)) % opsAccounts
		amount := int64(1 + n%9)
		return map[string]int64{fmt.Sprintf("t/a/%d", from): -amount, fmt.Sprintf("t/a/%d", to): amount}
	}
	return map[string]int64{fmt.Sprintf("t/x/%d", n%opsCASKeys): 1}
}

// opsValue decodes a counter's value (absent: 0).
func opsValue(v []byte) (int64, error) {
	if v == nil {
		return 0, nil
	}
	return strconv.ParseInt(string(v), 10, 64)
}

// commitOpsOp makes op n of worker w and reports whether it committed
// (false: ErrConflict, or a CompareAndSet that did not swap).
func commitOpsOp(db *DB, w, n int) (bool, error) {
	delta := opsDelta(w, n)
	if w/2 == 2 {
		key := []byte(slices.Collect(maps.Keys(delta))[0])
		old, err := db.Get(key)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return false, err
		}
		v, err := opsValue(old)
		if err != nil {
			return false, err
		}
		return db.CompareAndSet(key, old, strconv.AppendInt(nil, v+1, 10))
	}
	fn := func(txn *Txn) error {
		for k, d := range delta {
			old, err := txn.Get([]byte(k))
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			v, err := opsValue(old)
			if err != nil {
				return err
			}
			if err := txn.Put([]byte(k), strconv.AppendInt(nil, v+d, 10)); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	switch n % 3 {
	case 0:
		err = db.Update(fn)
	case 1:
		err = db.UpdateWith(&UpdateOptions{Retries: 3, Sync: n%2 == 0}, fn)
	default:
		txn := db.NewTransaction(true)
		if err = fn(txn); err == nil {
			err = txn.Commit()
		}
		txn.Discard()
	}
	if errors.Is(err, ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

// startOpsChild starts the ops of TestCrashLoopOps in the child, beside
// the crash loop's writers: each reports "txn W N ok|fail" once op N of
// worker W has returned, "cpstart I" before Checkpoint I and "cpdone I"
// once it has returned nil.
func startOpsChild(db *DB, base int, say func(string, ...any)) {
	for w := range opsWorkers {
		go func() {
			for n := base; ; n++ {
				ok, err := commitOpsOp(db, w, n)
				if err != nil {
					say("txn error: %v", err)
					os.Exit(3)
				}
				say("txn %d %d %s", w, n, map[bool]string{true: "ok", false: "fail"}[ok])
			}
		}()
	}
	go func() {
		prefix := os.Getenv(opsCPEnv)
		for i := 0; ; i++ {
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			say("cpstart %d", i)
			if err := db.Checkpoint(fmt.Sprintf("%s-%d", prefix, i)); err != nil {
				say("checkpoint error: %v", err)
				os.Exit(4)
			}
			say("cpdone %d", i)
		}
	}()
	go func() {
		budgets := []int64{0, 256, 1 << 10, 8 << 10}
		for i := 0; ; i++ {
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			var err error
			if i%2 == 0 {
				err = db.SetFilterBudget(budgets[rand.IntN(len(budgets))])
			} else {
				err = db.RebuildFilters()
			}
			if err != nil {
				say("filter error: %v", err)
				os.Exit(5)
			}
		}
	}()
}

// opsMark is how far the child had got when it reported a line: the
// writers' last acknowledged ops and the ops workers' last returned ones
// (base-1: none this round).
type opsMark struct {
	acked [crashLoopWriters]int
	ops   [opsWorkers]int
}

type opsCheckpoint struct {
	start, done opsMark
	finished    bool
}

// opsRound is what the parent learns from one child.
type opsRound struct {
	base        int
	ok          [opsWorkers][]bool // ok[w][n-base]: op n returned committed
	checkpoints map[int]*opsCheckpoint
}

func (r *opsRound) mark(acked [crashLoopWriters]int) opsMark {
	m := opsMark{acked: acked}
	for w := range opsWorkers {
		m.ops[w] = r.base + len(r.ok[w]) - 1
	}
	return m
}

// line parses one line of the ops' reports.
func (r *opsRound) line(line string, acked [crashLoopWriters]int) bool {
	var w, n, i int
	var outcome string
	switch {
	case scanLine(line, "txn %d %d %s", &w, &n, &outcome) && w >= 0 && w < opsWorkers && n == r.base+len(r.ok[w]):
		r.ok[w] = append(r.ok[w], outcome == "ok")
	case scanLine(line, "cpstart %d", &i) && r.checkpoints[i] == nil:
		r.checkpoints[i] = &opsCheckpoint{start: r.mark(acked)}
	case scanLine(line, "cpdone %d", &i) && r.checkpoints[i] != nil:
		r.checkpoints[i].done, r.checkpoints[i].finished = r.mark(acked), true
	default:
		return false
	}
	return true
}

// sumDeltas adds to vals the deltas of every committed op of worker w up
// to op last.
func (r *opsRound) sumDeltas(vals map[string]int64, w, last int) {
	for n := r.base; n <= last; n++ {
		if r.ok[w][n-r.base] {
			for k, d := range opsDelta(w, n) {
				vals[k] += d
			}
		}
	}
}

func TestCrashLoopOps(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("kills a process with SIGKILL; Windows has no signals (and no removal of open files)")
	}
	rounds, seed := crashLoopRounds(t, 30, 10)
	rng := rand.New(rand.NewPCG(seed, 0x0b5))
	dir, cpRoot := t.TempDir(), t.TempDir()
	st := &loopState{keyOp: map[string]int{}}
	vals := map[string]int64{}
	var commits, fails, cpDone, cpKilled, cpRefused, flushes, compactions int
	start := time.Now()
	for round := range rounds {
		base := (round + 1) * 1_000_000
		syncOn := rng.IntN(2) == 0
		duringOpen := rng.IntN(6) == 0
		delay := time.Duration(5+rng.IntN(100)) * time.Millisecond
		if duringOpen {
			delay = time.Duration(rng.IntN(5000)) * time.Microsecond
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d round %d (sync %v, kill %v after %s): %s", seed, round, syncOn, delay,
				map[bool]string{true: "open", false: "the first ack"}[duringOpen], fmt.Sprintf(format, args...))
		}
		keyOpBefore, valsBefore := maps.Clone(st.keyOp), maps.Clone(vals)
		r := &opsRound{base: base, checkpoints: map[int]*opsCheckpoint{}}
		cpPrefix := filepath.Join(cpRoot, fmt.Sprintf("r%d", round))
		rep := runCrashLoopChild(t, dir, syncOn, base, duringOpen, delay,
			[]string{crashLoopModeEnv + "=ops", opsCPEnv + "=" + cpPrefix}, r.line)

		flushes += int(rep.flushes)
		compactions += int(rep.compactions)
		// The writers' keys, as TestCrashLoop checks them.
		var inFlight [crashLoopWriters]int
		for g, n := range rep.acked {
			inFlight[g] = base
			if n >= 0 {
				for m := base; m <= n; m++ {
					st.apply(g, m)
				}
				inFlight[g] = n + 1
			}
		}
		// The shared keys: the committed ops' deltas, and those of some of
		// the ops in flight, each whole.
		want := maps.Clone(vals)
		var flying []map[string]int64
		for w := range opsWorkers {
			r.sumDeltas(want, w, base+len(r.ok[w])-1)
			flying = append(flying, opsDelta(w, base+len(r.ok[w])))
			for _, ok := range r.ok[w] {
				if ok {
					commits++
				} else {
					fails++
				}
			}
		}
		var got map[string]int64
		if _, err := checkCrashLoop(dir, st, inFlight, func(db *DB, raw map[string][]byte) error {
			var err error
			got, err = readOpsKeys(db, raw)
			if err == nil {
				err = matchSomeInFlight(got, want, flying)
			}
			return err
		}); err != nil {
			fail("%v", err)
		}
		if rep, err := VerifyDir(context.Background(), nil, dir); err != nil || !rep.OK() {
			fail("VerifyDir: %v %v", rep, err)
		}
		vals = got

		final := r.mark(rep.acked)
		for _, i := range slices.Sorted(maps.Keys(r.checkpoints)) {
			cp := r.checkpoints[i]
			cpDir := fmt.Sprintf("%s-%d", cpPrefix, i)
			done := cp.done
			if !cp.finished {
				done = final // nothing after the kill was attempted
			}
			opened, err := checkOpsCheckpoint(cpDir, cp.finished, keyOpBefore, valsBefore, r, cp.start, done)
			switch {
			case err != nil:
				fail("checkpoint %d (%s): %v", i, map[bool]string{true: "returned", false: "killed"}[cp.finished], err)
			case cp.finished:
				cpDone++
			case opened:
				cpKilled++
			default:
				cpRefused++
			}
			os.RemoveAll(cpDir)
		}
	}
	rep, err := VerifyDir(context.Background(), nil, dir)
	if err != nil || !rep.OK() {
		t.Fatalf("seed %d: VerifyDir after the loop: %v %v", seed, rep, err)
	}
	t.Logf("%d rounds in %v: %d transactions and CompareAndSets committed, %d failed; %d checkpoints returned and checked, %d killed ones opened complete, %d refused or empty; children reported %d flushes, %d compactions",
		rounds, time.Since(start).Round(time.Millisecond), commits, fails, cpDone, cpKilled, cpRefused, flushes, compactions)
}

// readOpsKeys reads the shared keys (absent: 0), and their values into
// raw.
func readOpsKeys(db *DB, raw map[string][]byte) (map[string]int64, error) {
	vals := map[string]int64{}
	for _, k := range opsKeys() {
		v, err := db.Get([]byte(k))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("Get %s: %w", k, err)
		}
		if v != nil {
			raw[k] = v
		}
		if vals[k], err = opsValue(v); err != nil {
			return nil, fmt.Errorf("%s = %q: %w", k, v, err)
		}
	}
	return vals, nil
}

// matchSomeInFlight returns nil if got is want plus the deltas of some
// subset of flying (each delta whole).
func matchSomeInFlight(got, want map[string]int64, flying []map[string]int64) error {
	for set := range 1 << len(flying) {
		sum := maps.Clone(want)
		for i, d := range flying {
			if set&(1<<i) != 0 {
				for k, v := range d {
					sum[k] += v
				}
			}
		}
		if equalCounts(got, sum) {
			return nil
		}
	}
	return fmt.Errorf("shared keys %v: want %v (the committed ops) plus some of the ops in flight %v, each whole", got, want, flying)
}

func equalCounts(a, b map[string]int64) bool {
	for _, k := range opsKeys() {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// checkOpsCheckpoint opens the checkpoint in dir and checks it holds
// everything acknowledged before start and nothing attempted after done
// (see TestCrashLoopOps). Unless the checkpoint returned (finished; done
// is then its return), it may be missing or empty, or Open may refuse it
// with ErrNotStore: opened says whether it opened. keyOp gives the
// writers' states before the round, vals the shared keys'.
func checkOpsCheckpoint(dir string, finished bool, keyOp map[string]int, vals map[string]int64, r *opsRound, start, done opsMark) (opened bool, err error) {
	if entries, err := os.ReadDir(dir); !finished && len(entries) == 0 {
		return false, nil // killed before it wrote anything (Open would make a store there)
	} else if err != nil {
		return false, err
	}
	db, err := Open(dir, smallOptions())
	if err != nil {
		if !finished && errors.Is(err, ErrNotStore) {
			return false, nil
		}
		return false, fmt.Errorf("open: %w", err)
	}
	defer func() {
		err = errors.Join(err, db.Close())
		if err == nil {
			if rep, verr := VerifyDir(context.Background(), nil, dir); verr != nil || !rep.OK() {
				err = fmt.Errorf("VerifyDir: %v %v", rep, verr)
			}
		}
	}()
	got := map[string][]byte{}
	for g := range crashLoopWriters {
		if err := checkWriterPrefix(db, keyOp, g, r.base, start.acked[g], done.acked[g], got); err != nil {
			return true, err
		}
	}
	counts, err := readOpsKeys(db, got)
	if err != nil {
		return true, err
	}
	lo, hi := maps.Clone(vals), maps.Clone(vals)
	for w := range opsWorkers {
		r.sumDeltas(lo, w, start.ops[w])
		r.sumDeltas(hi, w, done.ops[w])
		for k, d := range opsDelta(w, done.ops[w]+1) { // in flight when it returned
			hi[k] += d
		}
	}
	var sum int64
	for _, k := range opsKeys() {
		switch k[2] {
		case 'a':
			sum += counts[k]
		default:
			if counts[k] < lo[k] || counts[k] > hi[k] {
				return true, fmt.Errorf("%s = %d; want from %d (acknowledged before the call) to %d (attempted before its return)", k, counts[k], lo[k], hi[k])
			}
		}
	}
	if sum != 0 {
		return true, fmt.Errorf("the accounts sum to %d, not 0: a transfer is in part: %v", sum, counts)
	}
	return true, checkScanMatches(db, got)
}

// checkWriterPrefix checks that the keys of writer g in db hold the state
// after some op j of its history, lo <= j <= hi+1 (lo, hi < base: none
// this round; keyOp: the state before the round), and reads them into got.
func checkWriterPrefix(db *DB, keyOp map[string]int, g, base, lo, hi int, got map[string][]byte) error {
	lo, hi = max(lo, base-1), max(hi+1, base)
	cur := map[string]int{} // key → the op whose state it has after j
	mismatched := 0
	for _, family := range []byte{'p', 'm', 's'} {
		for k := range crashLoopKeys {
			key := loopKey(family, g, k)
			v, err := db.Get([]byte(key))
			if err != nil && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("Get %s: %w", key, err)
			}
			if v != nil {
				got[key] = v
			}
			last, ok := keyOp[key]
			if !ok {
				last = -1
			}
			cur[key] = last
			if !sameState(v, loopWant(key, g, last)) {
				mismatched++
			}
		}
	}
	if lo < base && mismatched == 0 {
		return nil
	}
	for j := base; j <= hi; j++ {
		effect, _ := loopOp(g, j)
		for k, v := range effect {
			if !sameState(got[k], loopWant(k, g, cur[k])) {
				mismatched--
			}
			if cur[k] = j; !sameState(got[k], v) {
				mismatched++
			}
		}
		if j >= lo && mismatched == 0 {
			return nil
		}
	}
	return fmt.Errorf("writer %d: the checkpoint holds the state after none of its ops %d to %d (acknowledged before the call, attempted before its return)", g, lo, hi)
}
