package bloomkv

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestReadStatePins: a retired state is freed (its segments' references
// dropped) exactly once, by whoever lets go last, and never while a pin
// taken on any stripe is held — with readers pinning on many stripes
// while states are published and retired as fast as the loop goes.
func TestReadStatePins(t *testing.T) {
	db := &DB{}
	newState := func() *readState {
		// refs 2: the state's own reference, dropped when it is freed,
		// and one the test keeps so that unref never closes a file.
		s := &segHandle{}
		s.refs.Store(2)
		return &readState{segments: []*segHandle{s}}
	}
	rs := newState()
	db.current.Store(rs)
	if got := db.pin(3); got != rs {
		t.Fatal("pin did not return the current state")
	}
	db.current.Store(newState())
	rs.retire()
	if rs.freed.Load() || rs.segments[0].refs.Load() != 2 {
		t.Fatal("a pinned state was freed at retirement")
	}
	rs.unpin(3)
	if !rs.freed.Load() || rs.segments[0].refs.Load() != 1 {
		t.Fatal("the last unpin of a retired state did not free it")
	}

	const readers, states = 8, 2000
	var stop atomic.Bool
	var wg sync.WaitGroup
	var violations atomic.Int64
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := (r * 5) % 32 // distinct stripes, and some shared
				rs := db.pin(i)
				if rs.freed.Load() || rs.segments[0].refs.Load() != 2 {
					violations.Add(1)
				}
				rs.unpin(i)
			}
		}()
	}
	all := make([]*readState, 0, states)
	for range states {
		next := newState()
		all = append(all, next)
		db.current.Swap(next).retire()
	}
	stop.Store(true)
	wg.Wait()
	db.current.Swap(nil).retire()
	if n := violations.Load(); n > 0 {
		t.Fatalf("%d pins saw their state freed", n)
	}
	for i, rs := range all {
		if !rs.freed.Load() || rs.segments[0].refs.Load() != 1 || rs.pins.Load() != 0 {
			t.Fatalf("state %d: freed %v, segment refs %d (want 1: dropped exactly once), pins %d",
				i, rs.freed.Load(), rs.segments[0].refs.Load(), rs.pins.Load())
		}
	}
}

// TestReadStateViewLetsGoOfStaleStates: view pins the current state and
// then checks that it is still current; a state replaced in between is
// unpinned before view tries again. A pin left on it would keep it from
// ever being freed, and with it every segment it holds open and on disk.
// Readers call view on many stripes while states are published and
// retired as fast as the loop goes, so that replacements land between a
// pin and its check; at the end every state must be freed exactly once
// and hold no pin.
func TestReadStateViewLetsGoOfStaleStates(t *testing.T) {
	db := &DB{}
	newState := func() *readState {
		// refs 2: the state's own reference, dropped when it is freed,
		// and one the test keeps so that unref never closes a file.
		s := &segHandle{}
		s.refs.Store(2)
		return &readState{segments: []*segHandle{s}}
	}
	const readers, states = 8, 5000
	all := make([]*readState, 0, states+1)
	all = append(all, newState())
	db.current.Store(all[0])
	var stop atomic.Bool
	var wg sync.WaitGroup
	var views, violations atomic.Int64
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := (r * 5) % 32
				rs, _ := db.view(i)
				if rs.freed.Load() || rs.segments[0].refs.Load() != 2 {
					violations.Add(1)
				}
				rs.unpin(i)
				views.Add(1)
			}
		}()
	}
	for range states {
		next := newState()
		all = append(all, next)
		db.current.Swap(next).retire()
	}
	stop.Store(true)
	wg.Wait()
	db.current.Swap(nil).retire()
	if n := violations.Load(); n > 0 {
		t.Fatalf("%d views saw their state freed", n)
	}
	if views.Load() == 0 {
		t.Fatal("no reader got a view")
	}
	for i, rs := range all {
		if !rs.freed.Load() || rs.segments[0].refs.Load() != 1 || rs.pins.Load() != 0 {
			t.Fatalf("state %d of %d: freed %v, segment refs %d (want 1: dropped exactly once), pins %d",
				i, len(all), rs.freed.Load(), rs.segments[0].refs.Load(), rs.pins.Load())
		}
	}
}
