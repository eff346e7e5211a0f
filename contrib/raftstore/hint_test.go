package raftstore

import (
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// trueFirst is FirstIndex without the front hint: a scan of the whole log
// prefix.
func trueFirst(t *testing.T, s *Store) uint64 {
	t.Helper()
	idx, err := s.edgeIndex(0, false)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestFirstIndexHint(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Options{Path: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 100; i++ {
		logs = append(logs, testRaftLog(i, "x"))
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	want := func(first uint64) {
		t.Helper()
		if got, err := s.FirstIndex(); err != nil || got != first {
			t.Fatalf("FirstIndex = %d, %v; want %d", got, err, first)
		}
		if got := trueFirst(t, s); got != first {
			t.Fatalf("the scan says %d, want %d", got, first)
		}
	}
	if err := s.DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	want(51)
	if s.front.min != 51 {
		t.Fatalf("hint %d after deleting 1-50, want 51", s.front.min)
	}
	// An entry below the hint (raft does not do this, but a LogStore
	// must not hide it).
	if err := s.StoreLog(testRaftLog(10, "y")); err != nil {
		t.Fatal(err)
	}
	want(10)
	if err := s.DeleteRange(0, 10); err != nil {
		t.Fatal(err)
	}
	want(51)
	// A range entirely below the hint deletes nothing.
	if err := s.DeleteRange(3, 7); err != nil {
		t.Fatal(err)
	}
	want(51)
	// A reopened store starts without a hint; its first FirstIndex sets it.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = New(Options{Path: dir, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want(51)
	if s.front.min != 51 {
		t.Fatalf("hint %d after FirstIndex, want 51", s.front.min)
	}
}

// TestFirstIndexHintConcurrent appends, compacts the front and reads
// FirstIndex at once, as raft's main loop and its snapshot goroutine do,
// then checks FirstIndex against a scan.
func TestFirstIndexHintConcurrent(t *testing.T) {
	s, err := New(Options{Path: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const appends = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(2)
	go func() { // appender, with an occasional write below the front
		defer wg.Done()
		defer close(done)
		for i := uint64(1); i <= appends; i++ {
			idx := i
			if i%97 == 0 {
				idx = i / 2
			}
			if err := s.StoreLog(testRaftLog(idx, "x")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // compactor
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			first, err1 := s.FirstIndex()
			last, err2 := s.LastIndex()
			if err1 != nil || err2 != nil {
				t.Error(err1, err2)
				return
			}
			if last > first+20 {
				if err := s.DeleteRange(first, last-20); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	wg.Wait()
	if got, want := must(s.FirstIndex()), trueFirst(t, s); got != want {
		t.Fatalf("FirstIndex = %d, the scan says %d", got, want)
	}
	if s.front.min > trueFirst(t, s) {
		t.Fatalf("hint %d above the first entry %d", s.front.min, trueFirst(t, s))
	}
}

func must(v uint64, err error) uint64 {
	if err != nil {
		panic(err)
	}
	return v
}

// TestFrontHintRaceRules pins the rules that keep the hint a lower bound
// when a StoreLogs overlaps a DeleteRange or FirstIndex.
func TestFrontHintRaceRules(t *testing.T) {
	h := frontHint{min: 50}
	_, gen, ok := h.observe()
	if !ok {
		t.Fatal("nothing in flight, yet observe says no")
	}
	h.lower(10) // a StoreLogs of index 10 starts and ends meanwhile
	h.written()
	h.raise(100, gen) // what the deleter saw may miss entry 10
	if h.min != 10 {
		t.Fatalf("hint %d after a raise overlapped by a write of 10", h.min)
	}
	h.lower(5) // a StoreLogs in flight...
	if _, _, ok := h.observe(); ok {
		t.Fatal("observe allows a raise while a StoreLogs is in flight")
	}
	h.written()
	_, gen, _ = h.observe()
	h.raise(7, gen)
	if h.min != 7 {
		t.Fatalf("hint %d, want 7", h.min)
	}
	h.raise(6, gen)
	if h.min != 7 {
		t.Fatalf("raise lowered the hint to %d", h.min)
	}
}
