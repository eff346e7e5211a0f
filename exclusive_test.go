package bloomkv

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestExclusivesDoNotStarveWriters runs two goroutines that call Sync
// back to back, so that one of them always waits for commit leadership
// (exclusive), beside a writer: its Puts must go on. An exclusive used to
// step down, when done, in favour of the next exclusive rather than the
// writers queued meanwhile, and the writer waited as long as the Syncs
// went on.
func TestExclusivesDoNotStarveWriters(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	defer db.Close()
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	defer func() { stop.Store(true); wg.Wait() }()
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				if err := db.Sync(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			if err := db.Put([]byte{byte(i + 1)}, []byte("v")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		stop.Store(true)
		<-done
		t.Fatal("100 Puts beside two goroutines calling Sync took over 10 s: the writer was starved")
	}
}
