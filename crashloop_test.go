package bloomkv

// The crash loop: a child process writes from several goroutines while
// flushes and compactions run, and is killed (SIGKILL) at a random moment;
// the parent reopens the store and checks it against every write the child
// had acknowledged. 100 rounds in CI; for longer runs:
//
//	go test -run TestCrashLoop -crashloop.iterations 5000 -crashloop.seed 42
//
// A failure logs the seed and the round, which reproduce it.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	crashLoopIterations = flag.Int("crashloop.iterations", 100, "kill-and-recover rounds of TestCrashLoop")
	crashLoopSeed       = flag.Uint64("crashloop.seed", 1, "seed of TestCrashLoop")
)

const (
	crashLoopEnv     = "BLOOMKV_CRASHLOOP_DIR"
	crashLoopWriters = 3
	crashLoopKeys    = 40 // per writer
)

// Op n of writer g is a batch that sets key k = n%crashLoopKeys and its
// mirror to "g<g>-n<n>", or deletes both when n%6 == 5. A writer has at
// most one op in flight, so a key's state after a crash is that of its last
// acknowledged op or of the writer's one op in flight.
func loopKey(g, k int, mirror bool) []byte {
	if mirror {
		return fmt.Appendf(nil, "mirror/g%d/%03d", g, k)
	}
	return fmt.Appendf(nil, "key/g%d/%03d", g, k)
}

func loopOp(g, n int) (k int, value []byte) {
	if n%6 == 5 {
		return n % crashLoopKeys, nil
	}
	return n % crashLoopKeys, fmt.Appendf(nil, "g%d-n%d", g, n)
}

// TestCrashLoopChild is the writer process of TestCrashLoop.
func TestCrashLoopChild(t *testing.T) {
	dir := os.Getenv(crashLoopEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashLoop")
	}
	o := smallOptions()
	o.MemtableSize = 8 << 10
	o.CompactionFanIn = 2
	o.CompactionConcurrency = 2
	o.Sync = os.Getenv("BLOOMKV_CRASHLOOP_SYNC") == "1"
	db, err := Open(dir, o)
	if err != nil {
		fmt.Println("open error:", err)
		os.Exit(2)
	}
	base, _ := strconv.Atoi(os.Getenv("BLOOMKV_CRASHLOOP_BASE"))
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	ack := func(g, n int) {
		mu.Lock()
		fmt.Fprintf(out, "%d %d\n", g, n)
		out.Flush()
		mu.Unlock()
	}
	for g := range crashLoopWriters {
		go func() {
			for n := base; ; n++ {
				k, v := loopOp(g, n)
				b := NewBatch()
				for _, m := range []bool{false, true} {
					if v == nil {
						b.Delete(loopKey(g, k, m))
					} else {
						b.Put(loopKey(g, k, m), v)
					}
				}
				if err := db.Write(b); err != nil {
					fmt.Println("write error:", err)
					os.Exit(3)
				}
				ack(g, n)
			}
		}()
	}
	for {
		time.Sleep(time.Millisecond)
		db.Flush() // more flushes, so more compactions, under the writers
	}
}

// loopState is the parent's record of every acknowledged op.
type loopState struct {
	lastAcked [crashLoopWriters]int                // last acknowledged op of each writer, -1 none
	keyOp     [crashLoopWriters][crashLoopKeys]int // last acknowledged op on each key, -1 none
}

func TestCrashLoop(t *testing.T) {
	if testing.Short() && *crashLoopIterations == 100 {
		*crashLoopIterations = 30
	}
	seed := *crashLoopSeed
	rng := rand.New(rand.NewPCG(seed, 0xc1a5))
	dir := t.TempDir()
	var st loopState
	for g := range crashLoopWriters {
		st.lastAcked[g] = -1
		for k := range crashLoopKeys {
			st.keyOp[g][k] = -1
		}
	}
	start := time.Now()
	for round := range *crashLoopIterations {
		base := (round + 1) * 1_000_000 // op numbers of this round, fresh values
		inFlight := st.lastAcked
		for g := range crashLoopWriters {
			inFlight[g] = base // the first op of this round may land unacknowledged
		}
		syncOn := rng.IntN(2) == 0
		acks := runCrashLoopChild(t, dir, syncOn, base, time.Duration(5+rng.IntN(60))*time.Millisecond)
		for g, n := range acks {
			if n >= 0 {
				for m := base; m <= n; m++ {
					k, _ := loopOp(g, m)
					st.keyOp[g][k] = m
				}
				st.lastAcked[g] = n
				inFlight[g] = n + 1
			}
		}
		if err := checkCrashLoop(dir, &st, inFlight); err != nil {
			t.Fatalf("seed %d round %d (sync %v): %v", seed, round, syncOn, err)
		}
	}
	db := mustOpen(t, dir, smallOptions())
	mustDo(t, db.Compact())
	mustDo(t, db.Close())
	if err := checkCrashLoop(dir, &st, st.lastAcked); err != nil {
		t.Fatalf("seed %d after the final Compact: %v", seed, err)
	}
	rep, err := VerifyDir(context.Background(), nil, dir)
	if err != nil || !rep.OK() {
		t.Fatalf("seed %d: VerifyDir after the loop: %v %v", seed, rep, err)
	}
	t.Logf("%d rounds in %v: every acknowledged write present, no torn batch", *crashLoopIterations, time.Since(start).Round(time.Millisecond))
}

// runCrashLoopChild runs the writer from op base, kills it after d and
// returns the last op each writer reported acknowledged (-1: none).
func runCrashLoopChild(t *testing.T, dir string, syncOn bool, base int, d time.Duration) [crashLoopWriters]int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashLoopChild$")
	cmd.Env = append(os.Environ(), crashLoopEnv+"="+dir, "BLOOMKV_CRASHLOOP_BASE="+strconv.Itoa(base))
	if syncOn {
		cmd.Env = append(cmd.Env, "BLOOMKV_CRASHLOOP_SYNC=1")
	}
	stdout, err := cmd.StdoutPipe()
	mustDo(t, err)
	mustDo(t, cmd.Start())
	// Kill only once the child has acknowledged something, so that every
	// round crashes a store that is busy writing, not one still opening.
	killed := make(chan struct{})
	var once sync.Once
	kill := func() {
		once.Do(func() {
			time.AfterFunc(d, func() { cmd.Process.Signal(syscall.SIGKILL); close(killed) })
		})
	}
	acks := [crashLoopWriters]int{}
	for g := range acks {
		acks[g] = -1
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		g, err1 := strconv.Atoi(f[0])
		n, err2 := strconv.Atoi(f[len(f)-1])
		if len(f) != 2 || err1 != nil || err2 != nil || g < 0 || g >= crashLoopWriters {
			t.Fatalf("child: %s", sc.Text())
		}
		acks[g] = n
		kill()
	}
	kill()
	<-killed
	cmd.Wait()
	return acks
}

// checkCrashLoop reopens the store and checks every key against st: the
// state of its last acknowledged op or of its writer's op in flight, the
// key and its mirror alike (a batch is atomic).
func checkCrashLoop(dir string, st *loopState, inFlight [crashLoopWriters]int) error {
	db, err := Open(dir, smallOptions())
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	defer db.Close()
	for g := range crashLoopWriters {
		for k := range crashLoopKeys {
			var got [2][]byte
			for i, m := range []bool{false, true} {
				v, err := db.Get(loopKey(g, k, m))
				if err != nil && !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("Get %s: %w", loopKey(g, k, m), err)
				}
				got[i] = v
			}
			if string(got[0]) != string(got[1]) {
				return fmt.Errorf("torn batch: %s = %q, its mirror %q", loopKey(g, k, false), got[0], got[1])
			}
			if stateIsOneOf(g, got[0], []int{st.keyOp[g][k]}) {
				continue
			}
			if kf, _ := loopOp(g, inFlight[g]); kf == k && stateIsOneOf(g, got[0], []int{inFlight[g]}) {
				// The op in flight at the kill made it to the WAL: it is
				// part of the history now.
				st.keyOp[g][k] = inFlight[g]
				continue
			}
			return fmt.Errorf("%s = %q; want the state of op %d (last acknowledged) or %d (in flight)",
				loopKey(g, k, false), got[0], st.keyOp[g][k], inFlight[g])
		}
	}
	return nil
}

func stateIsOneOf(g int, got []byte, ops []int) bool {
	for _, n := range ops {
		var want []byte
		if n >= 0 {
			_, want = loopOp(g, n)
		}
		if string(got) == string(want) && (got == nil) == (want == nil) {
			return true
		}
	}
	return false
}
