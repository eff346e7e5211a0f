package engines

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ReaderCell is one concurrent get phase: Ops lookups shared out among
// Readers goroutines, ops/s counted over all of them.
type ReaderCell struct {
	Readers int     `json:"readers"`
	GetHit  float64 `json:"get_hit_ops_per_sec"`
	GetMiss float64 `json:"get_miss_ops_per_sec"`
	// GetMissIter is the same misses through IterReaders (one iterator
	// per goroutine), 0 for engines without it.
	GetMissIter float64 `json:"get_miss_iter_ops_per_sec,omitempty"`
}

// BestGetMiss returns the faster get-miss path of the cell and its name
// ("get" or "iter"), as Result.BestGetMiss.
func (c ReaderCell) BestGetMiss() (opsPerSec float64, path string) {
	if c.GetMissIter > c.GetMiss {
		return c.GetMissIter, "iter"
	}
	return c.GetMiss, "get"
}

// IterReaders is implemented by engines whose IterGetter keeps state that
// one goroutine owns (Pebble's reused iterator): NewIterGetter returns a
// lookup with the IterGetter contract and state of its own, for one
// goroutine, and the function that releases it.
type IterReaders interface {
	NewIterGetter() (get func(dst, key []byte) ([]byte, bool, error), release func() error, err error)
}

// minReaderPhase is the least time a concurrent get phase runs. Ops
// lookups of absent keys take a few milliseconds at tens of millions a
// second, too short to time goroutines that are woken and finish
// unevenly; past its share of Ops each goroutine goes on through the
// sequence, wrapping around, until this much time has passed.
const minReaderPhase = 200 * time.Millisecond

// readerCell runs the concurrent get-hit and get-miss phases with n
// goroutines on e (whose Get every store under comparison allows from
// many goroutines at once), and the IterReaders misses where e has them.
func (w *workload) readerCell(e Engine, n int) (ReaderCell, error) {
	cell := ReaderCell{Readers: n}
	shared := func() (getFunc, func() error, error) { return e.Get, func() error { return nil }, nil }
	var err error
	if cell.GetHit, err = w.parallelGets(shared, n, true, minReaderPhase); err != nil {
		return cell, err
	}
	if cell.GetMiss, err = w.parallelGets(shared, n, false, minReaderPhase); err != nil {
		return cell, err
	}
	if ir, ok := e.(IterReaders); ok {
		own := func() (getFunc, func() error, error) {
			get, release, err := ir.NewIterGetter()
			return get, release, err
		}
		if cell.GetMissIter, err = w.parallelGets(own, n, false, minReaderPhase); err != nil {
			return cell, fmt.Errorf("iter path: %w", err)
		}
	}
	return cell, nil
}

// parallelGets runs Ops lookups over n goroutines, each with the lookup
// newGet gives it: goroutine g takes lookups g, g+n, g+2n, ... of the
// single-goroutine phase's sequence (present keys in the get-hit order,
// or absent keys), so the goroutines share the work evenly and no two ask
// for the same key; if that is over before atLeast has passed, each goes on
// along its stride of the sequence, wrapping around, until then. Every
// answer is checked. It returns the lookups done per second, from the
// moment all goroutines are released to when the last one is done. A
// goroutine writes nothing shared until it is done (its count, or its
// error): a store written to on every lookup, even to a word of its own,
// would share cache lines with the others and slow all of them, which is
// what the phase measures of the engine.
func (w *workload) parallelGets(newGet func() (getFunc, func() error, error), n int, hit bool, atLeast time.Duration) (ops float64, err error) {
	gets := make([]getFunc, n)
	releases := make([]func() error, 0, n)
	defer func() {
		for _, r := range releases {
			err = errors.Join(err, r())
		}
	}()
	for g := range gets {
		get, release, err := newGet()
		if err != nil {
			return 0, err
		}
		gets[g] = get
		releases = append(releases, release)
	}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		stop  atomic.Bool
		errs  = make([]error, n)
		done  = make([]int, n)
	)
	stop.Store(atLeast <= 0)
	for g := range n {
		wg.Go(func() {
			<-start
			var buf []byte
			var err error
			k := 0
			for j := g; j < w.cfg.Ops || !stop.Load(); j += n {
				if buf, err = w.lookup(gets[g], buf, j, hit); err != nil {
					errs[g] = err
					return
				}
				k++
			}
			done[g] = k
		})
	}
	began := time.Now()
	close(start)
	if atLeast > 0 {
		t := time.AfterFunc(atLeast, func() { stop.Store(true) })
		defer t.Stop()
	}
	wg.Wait()
	d := time.Since(began)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	total := 0
	for _, k := range done {
		total += k
	}
	return rate(total, d), nil
}

// lookup does lookup j of the get-hit (hit) or get-miss sequence with get
// and checks its answer; buf is the previous value, reused as dst.
func (w *workload) lookup(get getFunc, buf []byte, j int, hit bool) ([]byte, error) {
	if !hit {
		i := j % len(w.absent)
		v, found, err := get(buf[:0], w.absent[i])
		if err != nil {
			return v, fmt.Errorf("get absent key %d: %w", i, err)
		}
		if found {
			return v, fmt.Errorf("get absent key %d: found", i)
		}
		return v, nil
	}
	i := int(w.order[j%len(w.order)])
	v, found, err := get(buf[:0], w.present[i])
	switch {
	case err != nil:
		return v, fmt.Errorf("get present key %d: %w", i, err)
	case !found:
		return v, fmt.Errorf("get present key %d: not found", i)
	case !bytes.Equal(v, w.value(i)):
		return v, fmt.Errorf("get present key %d: wrong value", i)
	}
	return v, nil
}
