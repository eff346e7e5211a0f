package bloomkv

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadStatePins: a retired state is freed (its segments' references
// dropped) exactly once, by whoever lets go last, and never while a pin
// taken on any stripe is held — with readers pinning on many stripes
// while states are published and retired as fast as the loop goes.
func TestReadStatePins(t *testing.T) {
	db := &DB{}
	rs := newTestState()
	db.current.Store(rs)
	if got := db.pin(3); got != rs {
		t.Fatal("pin did not return the current state")
	}
	db.current.Store(newTestState())
	rs.retire()
	if rs.freed.Load() || rs.segments[0].refs.Load() != 2 {
		t.Fatal("a pinned state was freed at retirement")
	}
	rs.unpin(3)
	if !rs.freed.Load() || rs.segments[0].refs.Load() != 1 {
		t.Fatal("the last unpin of a retired state did not free it")
	}
	churnStates(t, db, 2000, "pins", db.pin)
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
	db.current.Store(newTestState())
	churnStates(t, db, 5000, "views", func(i int) *readState {
		rs, _ := db.view(i)
		return rs
	})
}

// newTestState returns a read state of one segment whose reference count
// is 2: the state's own reference, dropped when it is freed, and one the
// test keeps so that unref never closes a file.
func newTestState() *readState {
	s := &segHandle{}
	s.refs.Store(2)
	return &readState{segments: []*segHandle{s}}
}

// churnStates publishes and retires states (newTestState) as fast as it
// can while 8 readers take them through read on stripes of their own and
// some shared, and let them go; what (pins or views) names the readers'
// calls in failures. Then it checks that no reader held a freed state and
// that every state, the one current at the start included, was freed
// exactly once and holds no pin.
func churnStates(t *testing.T, db *DB, states int, what string, read func(stripe int) *readState) {
	t.Helper()
	const readers = 8
	all := []*readState{db.current.Load()}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads, violations atomic.Int64
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; !stop.Load(); k++ {
				i := (r * 5) % 32 // distinct stripes, and some shared
				rs := read(i)
				if rs.freed.Load() || rs.segments[0].refs.Load() != 2 {
					violations.Add(1)
				}
				rs.unpin(i)
				reads.Add(1)
				if k%16 == 15 {
					runtime.Gosched() // on one P, so that the others run
				}
			}
		}()
	}
	for n := range states {
		next := newTestState()
		all = append(all, next)
		db.current.Swap(next).retire()
		if n%64 == 0 {
			runtime.Gosched() // on one P, so that the readers run
		}
	}
	for deadline := time.Now().Add(10 * time.Second); reads.Load() < readers && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
	db.current.Swap(nil).retire()
	if n := violations.Load(); n > 0 {
		t.Fatalf("%d %s saw their state freed", n, what)
	}
	if reads.Load() == 0 {
		t.Fatalf("no reader got one of its %s", what)
	}
	for i, rs := range all {
		if !rs.freed.Load() || rs.segments[0].refs.Load() != 1 || rs.pins.Load() != 0 {
			t.Fatalf("state %d of %d: freed %v, segment refs %d (want 1: dropped exactly once), pins %d",
				i, len(all), rs.freed.Load(), rs.segments[0].refs.Load(), rs.pins.Load())
		}
	}
}
