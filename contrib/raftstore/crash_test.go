package raftstore

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

var (
	crashRounds = flag.Int("raftstore.crash-rounds", 0, "kill -9 rounds of TestCrash (default 30, 12 with -short)")
)

const (
	crashDirEnv  = "RAFTSTORE_CRASH_DIR"
	crashSeedEnv = "RAFTSTORE_CRASH_SEED"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
		crashChild(dir, seed) // never returns: killed by the parent
		os.Exit(2)
	}
	os.Exit(m.Run())
}

var crashTermKey = []byte("term")

// crashData is the payload of the entry at idx written by operation gen.
func crashData(idx, gen uint64) []byte {
	b := binary.BigEndian.AppendUint64(nil, idx)
	b = binary.BigEndian.AppendUint64(b, gen)
	return append(b, make([]byte, idx%50)...)
}

// crashChild appends entries and truncates the log at either end, as raft
// does, with fsynced writes (the Store's defaults), until it is killed.
// Before each operation it prints "B <op> <args>", after it returned
// "D": the parent knows every acknowledged operation and the one in
// flight.
func crashChild(dir string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	s, err := New(Options{Path: dir})
	if err != nil {
		fmt.Println("E", err)
		os.Exit(1)
	}
	first, err1 := s.FirstIndex()
	last, err2 := s.LastIndex()
	if err1 != nil || err2 != nil {
		fmt.Println("E", err1, err2)
		os.Exit(1)
	}
	fmt.Println("R")
	fail := func(err error) {
		fmt.Println("E", err)
		os.Exit(1)
	}
	for {
		switch r := rng.IntN(100); {
		case r < 60 || last <= first+1:
			k, gen := 1+rng.Uint64N(40), rng.Uint64()
			start := last + 1
			fmt.Printf("B A %d %d %d\n", start, k, gen)
			var logs []*raft.Log
			for i := start; i < start+k; i++ {
				logs = append(logs, &raft.Log{Index: i, Term: gen, Data: crashData(i, gen), AppendedAt: time.Now()})
			}
			if err := s.StoreLogs(logs); err != nil {
				fail(err)
			}
			if first == 0 {
				first = start
			}
			last = start + k - 1
		case r < 75: // a conflicting suffix: [x, last], x > first
			x := first + 1 + rng.Uint64N(last-first)
			fmt.Printf("B S %d %d\n", x, last)
			if err := s.DeleteRange(x, last); err != nil {
				fail(err)
			}
			last = x - 1
		case r < 90: // compaction: [first, y], y < last
			y := first + rng.Uint64N(last-first)
			fmt.Printf("B P %d %d\n", first, y)
			if err := s.DeleteRange(first, y); err != nil {
				fail(err)
			}
			first = y + 1
		default:
			v := rng.Uint64()
			fmt.Printf("B T %d\n", v)
			if err := s.SetUint64(crashTermKey, v); err != nil {
				fail(err)
			}
		}
		fmt.Println("D")
	}
}

// crashState is the content of a store: entry index → the operation that
// wrote it, and the term key.
type crashState struct {
	logs map[uint64]uint64
	term uint64
	set  bool
}

func (st crashState) clone() crashState {
	st.logs = maps.Clone(st.logs)
	return st
}

// apply applies one "B" line's operation.
func (st *crashState) apply(t *testing.T, line string) {
	f := strings.Fields(line)
	n := make([]uint64, len(f)-2)
	for i := range n {
		var err error
		if n[i], err = strconv.ParseUint(f[i+2], 10, 64); err != nil {
			t.Fatalf("child line %q: %v", line, err)
		}
	}
	switch f[1] {
	case "A":
		for i := n[0]; i < n[0]+n[1]; i++ {
			st.logs[i] = n[2]
		}
	case "S", "P":
		for i := n[0]; i <= n[1]; i++ {
			delete(st.logs, i)
		}
	case "T":
		st.term, st.set = n[0], true
	default:
		t.Fatalf("child line %q", line)
	}
}

// TestCrash SIGKILLs a process appending to and truncating a Store at
// random moments, reopens the store and requires: every acknowledged
// append, truncation and Set present; a StoreLogs in flight there in full
// or not at all; a DeleteRange in flight leaving the log contiguous (no
// hole between FirstIndex and LastIndex) somewhere between before and
// after; every entry's data intact. Long mode: -raftstore.crash-rounds=N.
// The child writes through bloomkv's mapped WAL (the default): before
// bloomkv stored each record's checksum last, a kill in the middle of a
// copy failed a reopen with ErrCorrupt within about 60 rounds.
func TestCrash(t *testing.T) {
	rounds := *crashRounds
	if rounds == 0 {
		rounds = 30
		if testing.Short() {
			rounds = 12
		}
	}
	dir := t.TempDir()
	model := crashState{logs: map[uint64]uint64{}}
	acked := 0
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, fmt.Sprintf("%s=%d", crashSeedEnv, rand.Uint64()))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1<<16)
		go func() {
			sc := bufio.NewScanner(out) // a torn last line has no newline and is dropped
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		if l := <-lines; l != "R" {
			t.Fatalf("round %d: child said %q", round, l)
		}
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()

		inflight := ""
		for l := range lines {
			switch {
			case strings.HasPrefix(l, "B "):
				inflight = l
			case l == "D":
				model.apply(t, inflight)
				inflight = ""
				acked++
			default:
				t.Fatalf("round %d: child said %q", round, l)
			}
		}
		after := model.clone()
		if inflight != "" {
			after.apply(t, inflight)
		}
		model = verifyCrash(t, round, dir, model, after, inflight)
	}
	t.Logf("%d rounds, %d acknowledged operations, %d entries at the end", rounds, acked, len(model.logs))
}

// verifyCrash reopens the store and checks it against the state before
// (acknowledged operations only) and after the operation in flight. It
// returns the state found.
func verifyCrash(t *testing.T, round int, dir string, before, after crashState, inflight string) crashState {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close()
	first, err1 := s.FirstIndex()
	last, err2 := s.LastIndex()
	if err1 != nil || err2 != nil {
		t.Fatalf("round %d: %v %v", round, err1, err2)
	}
	got := crashState{logs: map[uint64]uint64{}}
	for i := first; i <= last && last != 0; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("round %d (in flight: %q): log %d between first %d and last %d: %v", round, inflight, i, first, last, err)
		}
		if string(l.Data) != string(crashData(i, l.Term)) {
			t.Fatalf("round %d: log %d holds %x", round, i, l.Data)
		}
		got.logs[i] = l.Term
	}
	got.term, err = s.GetUint64(crashTermKey)
	got.set = err == nil
	if err != nil && err != ErrKeyNotFound {
		t.Fatal(err)
	}
	okTerm := got.term == before.term && got.set == before.set || got.term == after.term && got.set == after.set
	if !okTerm {
		t.Fatalf("round %d: term %d, want %d (or %d with %q in flight)", round, got.term, before.term, after.term, inflight)
	}
	var okLogs bool
	switch {
	case strings.HasPrefix(inflight, "B S"), strings.HasPrefix(inflight, "B P"):
		okLogs = subset(after.logs, got.logs) && subset(got.logs, before.logs)
	default:
		okLogs = maps.Equal(got.logs, before.logs) || maps.Equal(got.logs, after.logs)
	}
	if !okLogs {
		t.Fatalf("round %d: %d entries [%d, %d] after reopen, want %d before or %d after %q",
			round, len(got.logs), first, last, len(before.logs), len(after.logs), inflight)
	}
	return got
}

// subset reports whether every entry of a is in b, written by the same
// operation.
func subset(a, b map[uint64]uint64) bool {
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
