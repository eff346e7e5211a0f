package bloomkv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var closeRaceRounds = flag.Int("closerace.rounds", 0, "rounds of each case of TestCloseRacesOperations (0: its default)")

// closeRaceBase is the number of keys every round's store holds before its
// workers start: enough for a dozen segments at smallOptions' 16 KiB
// memtable, some merged, the newest in memtables.
const closeRaceBase = 1200

func closeRaceKey(i int) []byte { return fmt.Appendf(nil, "base-%05d", i) }

// closeRaceValue is base key i's value: never overwritten, so that any
// read of it can be checked. Every seventh is stored apart from its key.
func closeRaceValue(i int) []byte {
	n := 40 + i%50
	if i%7 == 0 {
		n = 1500
	}
	return bytes.Repeat(fmt.Appendf(nil, "%05d.", i), n/6+1)[:n]
}

// closeRaceCheckBase checks a base key and what a read returned for it.
func closeRaceCheckBase(key, value []byte) error {
	var i int
	if _, err := fmt.Sscanf(string(key), "base-%05d", &i); err != nil || !bytes.Equal(key, closeRaceKey(i)) {
		return nil // a worker's key: its writer checks it after reopening
	}
	if !bytes.Equal(value, closeRaceValue(i)) {
		return fmt.Errorf("key %s: value %.20q (len %d), want %.20q (len %d)", key, value, len(value), closeRaceValue(i), len(closeRaceValue(i)))
	}
	return nil
}

// raceWorker is one goroutine looping on an operation while the DB is
// closed under it. Its writes go to keys of its own, so that it alone
// knows what each should hold once the store is reopened.
type raceWorker struct {
	t    *testing.T
	db   *DB
	id   int
	rng  *rand.Rand
	dir  string // a directory of the test's, for checkpoints
	snap *Snapshot
	it   *Iterator // a long-lived iterator, moved across Close

	next      int                // the number of its next key
	model     map[string]*string // key -> value acknowledged (nil: deleted)
	uncertain map[string]bool    // keys an operation that failed may have written
	written   []int              // numbers of its keys acknowledged as present
	cps       []string           // checkpoints made
	done      atomic.Int64       // operations done
}

// started reports whether every worker has done an operation.
func started(workers []*raceWorker) bool {
	for _, w := range workers {
		if w == nil || w.done.Load() == 0 {
			return false
		}
	}
	return true
}

func (w *raceWorker) key(n int) []byte { return fmt.Appendf(nil, "w%02d-%06d", w.id, n) }

func (w *raceWorker) newKey() []byte {
	k := w.key(w.next)
	w.next++
	return k
}

func (w *raceWorker) value(k []byte) []byte {
	n := 10 + w.rng.IntN(100)
	if w.rng.IntN(10) == 0 {
		n = 1100 + w.rng.IntN(2000)
	}
	return bytes.Repeat(append(k, '.'), n/(len(k)+1)+1)[:n]
}

// pending is a write in flight: what it sets, applied to the model when
// the write is acknowledged, and marked uncertain if it fails.
type pending map[string]*string

func (p pending) put(k, v []byte) { s := string(v); p[string(k)] = &s }
func (p pending) del(k []byte)    { p[string(k)] = nil }

func (w *raceWorker) settle(p pending, err error) {
	for k, v := range p {
		if err != nil {
			w.uncertain[k] = true
			continue
		}
		w.model[k] = v
		if v != nil {
			var n int
			fmt.Sscanf(k[4:], "%06d", &n)
			w.written = append(w.written, n)
		}
	}
}

// someWritten returns one of its keys acknowledged as written, if any.
func (w *raceWorker) someWritten() (int, bool) {
	if len(w.written) == 0 {
		return 0, false
	}
	return w.written[w.rng.IntN(len(w.written))], true
}

func (w *raceWorker) baseKey() (int, []byte) {
	i := w.rng.IntN(closeRaceBase + 50) // a few absent
	return i, closeRaceKey(i)
}

// checkRead checks the result of a read of base key i.
func checkRead(i int, v []byte, err error) error {
	if i >= closeRaceBase {
		if err == nil {
			return fmt.Errorf("absent key %d read as %.20q", i, v)
		}
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	return closeRaceCheckBase(closeRaceKey(i), v)
}

// raceOp is one operation of TestCloseRacesOperations. run returns the
// operation's error; an error the operation may return besides ErrClosed
// (ErrNotFound, ErrConflict) it returns as nil, having checked it.
// afterClose says that the operation, begun after Close returned, must
// fail with ErrClosed; else nil is allowed too (Stats, Snapshot.Close).
type raceOp struct {
	name       string
	run        func(w *raceWorker) error
	afterClose bool
}

func iterMoves(w *raceWorker, it *Iterator, moves int) error {
	var prev []byte
	dir := 0 // 1 forward, -1 backward, 0 just positioned
	for range moves {
		var ok bool
		switch r := w.rng.IntN(10); {
		case r == 0:
			ok, dir = it.First(), 0
		case r == 1:
			ok, dir = it.Last(), 0
		case r == 2:
			_, k := w.baseKey()
			ok, dir = it.Seek(k), 0
		case r == 3:
			_, k := w.baseKey()
			ok, dir = it.SeekLT(k), 0
		case !it.Valid():
			ok, dir = it.First(), 0
		case r < 7:
			ok, dir = it.Next(), 1
		default:
			ok, dir = it.Prev(), -1
		}
		if !ok {
			if err := it.Error(); err != nil {
				return err
			}
			prev = nil
			continue
		}
		k := it.Key()
		if prev != nil && (dir == 1 && bytes.Compare(k, prev) <= 0 || dir == -1 && bytes.Compare(k, prev) >= 0) {
			return fmt.Errorf("iterator stepped %d from %q to %q", dir, prev, k)
		}
		if err := closeRaceCheckBase(k, it.Value()); err != nil {
			return fmt.Errorf("iterator: %w", err)
		}
		prev = append(prev[:0], k...)
	}
	return nil
}

func iterBounds(w *raceWorker) *IterOptions {
	switch w.rng.IntN(3) {
	case 0:
		return nil
	case 1:
		a := w.rng.IntN(closeRaceBase)
		return &IterOptions{LowerBound: closeRaceKey(a), UpperBound: closeRaceKey(a + 1 + w.rng.IntN(200))}
	}
	return &IterOptions{Prefix: []byte("base-00")}
}

// scratchSum reads every byte of a value the store lends (GetFunc): an
// invariants build faults on a read of unmapped or expired memory.
var scratchSum atomic.Uint64

func readAll(v []byte) {
	var s uint64
	for _, b := range v {
		s += uint64(b)
	}
	scratchSum.Add(s)
}

var closeRaceOps = map[string]raceOp{
	"Get": {name: "Get", afterClose: true, run: func(w *raceWorker) error {
		i, k := w.baseKey()
		v, err := w.db.Get(k)
		return checkRead(i, v, err)
	}},
	"GetFunc": {name: "GetFunc", afterClose: true, run: func(w *raceWorker) error {
		i, k := w.baseKey()
		var got []byte
		err := w.db.GetFunc(k, func(v []byte) error {
			readAll(v)
			got = bytes.Clone(v)
			runtime.Gosched() // let Close run while the value is lent
			readAll(v)
			return nil
		})
		return checkRead(i, got, err)
	}},
	"Has": {name: "Has", afterClose: true, run: func(w *raceWorker) error {
		i, k := w.baseKey()
		ok, err := w.db.Has(k)
		if err == nil && ok != (i < closeRaceBase) {
			return fmt.Errorf("Has(%s) = %v", k, ok)
		}
		return err
	}},
	"ValueSize": {name: "ValueSize", afterClose: true, run: func(w *raceWorker) error {
		i, k := w.baseKey()
		n, err := w.db.ValueSize(k)
		if i < closeRaceBase && err == nil && n != len(closeRaceValue(i)) {
			return fmt.Errorf("ValueSize(%s) = %d", k, n)
		}
		return checkRead(i, closeRaceValue(i)[:min(n, len(closeRaceValue(i)))], err)
	}},
	"Put": {name: "Put", afterClose: true, run: func(w *raceWorker) error {
		p := pending{}
		k := w.newKey()
		v := w.value(k)
		p.put(k, v)
		err := w.db.Put(k, v)
		w.settle(p, err)
		return err
	}},
	"Delete": {name: "Delete", afterClose: true, run: func(w *raceWorker) error {
		n, ok := w.someWritten()
		if !ok {
			n = w.next
		}
		p := pending{}
		p.del(w.key(n))
		err := w.db.Delete(w.key(n))
		w.settle(p, err)
		return err
	}},
	"DeleteRange": {name: "DeleteRange", afterClose: true, run: func(w *raceWorker) error {
		a := max(0, w.next-w.rng.IntN(40))
		b := min(w.next, a+1+w.rng.IntN(5))
		p := pending{}
		for n := a; n < b; n++ {
			p.del(w.key(n))
		}
		err := w.db.DeleteRange(w.key(a), w.key(b))
		w.settle(p, err)
		return err
	}},
	"Write": {name: "Write", afterClose: true, run: func(w *raceWorker) error { return raceBatch(w, false) }},
	"WriteSync": {name: "WriteSync", afterClose: true, run: func(w *raceWorker) error {
		return raceBatch(w, true)
	}},
	"Sync": {name: "Sync", afterClose: true, run: func(w *raceWorker) error { return w.db.Sync() }},
	"Iterator": {name: "Iterator", afterClose: true, run: func(w *raceWorker) error {
		it, err := w.db.NewIterator(iterBounds(w))
		if err != nil {
			return err
		}
		err = iterMoves(w, it, 1+w.rng.IntN(30))
		cerr := it.Close()
		if err == nil && cerr != nil {
			err = cerr
		}
		return err
	}},
	// IteratorAcrossClose moves an iterator made before Close: once the
	// DB is closed its moves fail with ErrClosed, and its Close returns
	// that.
	"IteratorAcrossClose": {name: "IteratorAcrossClose", afterClose: true, run: func(w *raceWorker) error {
		if w.it == nil {
			it, err := w.db.NewIterator(nil)
			if err != nil {
				return err
			}
			w.it = it
		}
		if err := iterMoves(w, w.it, 1+w.rng.IntN(10)); err != nil {
			cerr := w.it.Close()
			w.it = nil
			if !errors.Is(cerr, ErrClosed) {
				return fmt.Errorf("Close of an iterator that failed with %v: %v", err, cerr)
			}
			return err
		}
		return nil
	}},
	"Snapshot": {name: "Snapshot", afterClose: true, run: func(w *raceWorker) error {
		s, err := w.db.NewSnapshot()
		if err != nil {
			return err
		}
		err = snapshotReads(w, s)
		if cerr := s.Close(); cerr != nil {
			return fmt.Errorf("Snapshot.Close: %w", cerr) // nil even after DB.Close
		}
		return err
	}},
	// SharedSnapshot reads through one snapshot that one worker closes.
	"SharedSnapshot": {name: "SharedSnapshot", afterClose: true, run: func(w *raceWorker) error {
		if w.id == 0 && w.rng.IntN(50) == 0 {
			if err := w.snap.Close(); err != nil && !errors.Is(err, ErrSnapshotReleased) {
				return err
			}
		}
		return snapshotReads(w, w.snap)
	}},
	"View": {name: "View", afterClose: true, run: func(w *raceWorker) error {
		return w.db.View(func(t *Txn) error {
			i, k := w.baseKey()
			v, err := t.Get(k)
			if err := checkRead(i, v, err); err != nil {
				return err
			}
			it, err := t.NewIterator(iterBounds(w))
			if err != nil {
				return err
			}
			for ok, n := it.First(), 0; ok && n < 10; ok, n = it.Next(), n+1 {
				if err := closeRaceCheckBase(it.Key(), it.Value()); err != nil {
					return err
				}
			}
			return errors.Join(it.Error(), it.Close())
		})
	}},
	"Update": {name: "Update", afterClose: true, run: func(w *raceWorker) error {
		p := pending{}
		err := w.db.UpdateWith(&UpdateOptions{Retries: 2}, func(t *Txn) error {
			clear(p)
			i, k := w.baseKey()
			v, err := t.Get(k)
			if err := checkRead(i, v, err); err != nil {
				return err
			}
			k = w.newKey()
			v = w.value(k)
			p.put(k, v)
			if err := t.Put(k, v); err != nil {
				return err
			}
			if n, ok := w.someWritten(); ok && w.rng.IntN(3) == 0 {
				p.del(w.key(n))
				return t.Delete(w.key(n))
			}
			return nil
		})
		w.settle(p, err)
		if errors.Is(err, ErrConflict) {
			return nil // its own keys only: but the read set may meet anyone's range
		}
		return err
	}},
	"Txn": {name: "Txn", afterClose: true, run: func(w *raceWorker) error {
		t := w.db.NewTransaction(true)
		defer t.Discard()
		i, k := w.baseKey()
		v, err := t.Get(k)
		if err := checkRead(i, v, err); err != nil {
			return err
		}
		p := pending{}
		k = w.newKey()
		v = w.value(k)
		if err := t.Put(k, v); err != nil {
			return err
		}
		p.put(k, v)
		it, err := t.NewIterator(&IterOptions{Prefix: fmt.Appendf(nil, "w%02d-", w.id)})
		if err != nil {
			return err
		}
		if it.First() && !bytes.HasPrefix(it.Key(), fmt.Appendf(nil, "w%02d-", w.id)) {
			return fmt.Errorf("txn iterator at %q", it.Key())
		}
		if err := it.Close(); err != nil {
			return err
		}
		err = t.Commit()
		w.settle(p, err)
		if errors.Is(err, ErrConflict) {
			return nil
		}
		return err
	}},
	"CompareAndSet": {name: "CompareAndSet", afterClose: true, run: func(w *raceWorker) error {
		k := w.newKey()
		v := w.value(k)
		p := pending{}
		p.put(k, v)
		ok, err := w.db.CompareAndSet(k, nil, v)
		if err == nil && !ok {
			return fmt.Errorf("CompareAndSet of new key %s not done", k)
		}
		w.settle(p, err)
		return err
	}},
	"Flush":   {name: "Flush", afterClose: true, run: func(w *raceWorker) error { return w.db.Flush() }},
	"Compact": {name: "Compact", afterClose: true, run: func(w *raceWorker) error { return w.db.Compact() }},
	"WaitForCompactions": {name: "WaitForCompactions", afterClose: true, run: func(w *raceWorker) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(w.rng.IntN(20))*time.Millisecond)
		defer cancel()
		err := w.db.WaitForCompactions(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		return err
	}},
	"Checkpoint": {name: "Checkpoint", afterClose: true, run: func(w *raceWorker) error {
		dir := filepath.Join(w.dir, fmt.Sprintf("cp-%d-%d", w.id, len(w.cps)))
		w.cps = append(w.cps, dir)
		err := w.db.Checkpoint(dir)
		if err != nil {
			// A failed Checkpoint removes what it wrote and the
			// directory it made.
			if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
				return fmt.Errorf("Checkpoint failed (%w) and left %s: %v", err, dir, serr)
			}
		}
		return err
	}},
	"Verify": {name: "Verify", afterClose: true, run: func(w *raceWorker) error {
		rep, err := w.db.Verify(context.Background())
		if err == nil && len(rep.Problems) > 0 {
			return fmt.Errorf("Verify: %v", rep.Problems)
		}
		return err
	}},
	"SetFilterBudget": {name: "SetFilterBudget", afterClose: true, run: func(w *raceWorker) error {
		return w.db.SetFilterBudget(int64(w.rng.IntN(3)) * int64(w.rng.IntN(8<<10)))
	}},
	"RebuildFilters": {name: "RebuildFilters", afterClose: true, run: func(w *raceWorker) error { return w.db.RebuildFilters() }},
	"Stats": {name: "Stats", run: func(w *raceWorker) error {
		s := w.db.Stats()
		if s.Segments < 0 || s.Memtables < 0 {
			return fmt.Errorf("Stats: %+v", s)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(w.db.StatsVar().String()), &v); err != nil {
			return fmt.Errorf("StatsVar: %w", err)
		}
		return nil
	}},
}

func raceBatch(w *raceWorker, sync bool) error {
	b := NewBatch()
	p := pending{}
	for range 1 + w.rng.IntN(4) {
		k := w.newKey()
		v := w.value(k)
		b.Put(k, v)
		p.put(k, v)
	}
	if n, ok := w.someWritten(); ok {
		b.Delete(w.key(n))
		p.del(w.key(n))
	}
	var err error
	if sync {
		err = w.db.WriteSync(b)
	} else {
		err = w.db.Write(b)
	}
	w.settle(p, err)
	return err
}

func snapshotReads(w *raceWorker, s *Snapshot) error {
	i, k := w.baseKey()
	switch w.rng.IntN(5) {
	case 0:
		v, err := s.Get(k)
		return checkRead(i, v, err)
	case 1:
		var got []byte
		err := s.GetFunc(k, func(v []byte) error { readAll(v); got = bytes.Clone(v); return nil })
		return checkRead(i, got, err)
	case 2:
		ok, err := s.Has(k)
		if err == nil && ok != (i < closeRaceBase) {
			return fmt.Errorf("Snapshot.Has(%s) = %v", k, ok)
		}
		return err
	case 3:
		_, err := s.ValueSize(k)
		if errors.Is(err, ErrNotFound) && i >= closeRaceBase {
			return nil
		}
		return err
	}
	it, err := s.NewIterator(iterBounds(w))
	if err != nil {
		return err
	}
	err = iterMoves(w, it, 1+w.rng.IntN(20))
	return errors.Join(err, it.Close())
}

// closeRaceCases are the operations run together against Close, each case
// with a writer beside them so that flushes and compactions run.
var closeRaceCases = []struct {
	name string
	ops  []string
}{
	{"reads", []string{"Get", "GetFunc", "Has", "ValueSize", "Put"}},
	{"writes", []string{"Put", "Delete", "DeleteRange", "Write", "WriteSync", "Sync"}},
	{"iterators", []string{"Iterator", "IteratorAcrossClose", "Iterator", "Put"}},
	{"snapshots", []string{"Snapshot", "SharedSnapshot", "SharedSnapshot", "SharedSnapshot", "Put"}},
	{"txns", []string{"View", "Update", "Txn", "CompareAndSet", "Put"}},
	{"maintenance", []string{"Flush", "Compact", "WaitForCompactions", "Checkpoint", "Verify", "Put", "Put"}},
	{"filters", []string{"SetFilterBudget", "RebuildFilters", "Get", "Get", "Compact", "Stats", "Put"}},
	{"stats", []string{"Stats", "Stats", "Put", "Get"}},
	{"all", []string{"Get", "GetFunc", "Has", "ValueSize", "Put", "Delete", "DeleteRange", "Write",
		"WriteSync", "Sync", "Iterator", "IteratorAcrossClose", "Snapshot", "SharedSnapshot", "View",
		"Update", "Txn", "CompareAndSet", "Flush", "Compact", "WaitForCompactions", "Checkpoint",
		"Verify", "SetFilterBudget", "RebuildFilters", "Stats"}},
}

// TestCloseRacesOperations runs, for each case, goroutines that loop on
// operations of a DB while another closes it at a random moment, over a
// store with data in its memtables and segments and flushes and
// compactions under way. It checks that nothing panics or deadlocks, that
// every error is ErrClosed or one the operation documents, that every
// operation begun after Close returned fails with ErrClosed, that Close
// leaves no goroutine, open file or mapping behind once the last
// iterator is closed, and that every write acknowledged is there after a
// reopen.
func TestCloseRacesOperations(t *testing.T) {
	rounds := 1 // about 0.3 s a round, 0.7 s under the race detector
	if *closeRaceRounds > 0 {
		rounds = *closeRaceRounds
	}
	for _, c := range closeRaceCases {
		if testing.Short() && c.name != "all" && *closeRaceRounds == 0 {
			continue // "all" has every operation
		}
		t.Run(c.name, func(t *testing.T) {
			for round := range rounds {
				closeRaceRound(t, c.ops, uint64(round))
			}
		})
	}
}

func closeRaceRound(t *testing.T, ops []string, seed uint64) {
	t.Helper()
	goroutines := runtime.NumGoroutine()
	dir := t.TempDir()
	o := smallOptions()
	db := mustOpen(t, dir, o)
	// The base keys, in a shuffled order so that the segments overlap:
	// merges have work to do.
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	b := NewBatch()
	for n, i := range rng.Perm(closeRaceBase) {
		b.Put(closeRaceKey(i), closeRaceValue(i))
		if n%20 == 19 {
			mustDo(t, db.Write(b))
			b.Reset()
		}
	}
	mustDo(t, db.Write(b))
	snap, err := db.NewSnapshot()
	mustDo(t, err)

	var (
		closeBegan, closeDone atomic.Bool
		failures              = make(chan string, 100)
		wg                    sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		select {
		case failures <- fmt.Sprintf(format, args...):
		default:
		}
	}
	workers := make([]*raceWorker, len(ops))
	for id, name := range ops {
		op := closeRaceOps[name]
		w := &raceWorker{t: t, db: db, id: id, rng: rand.New(rand.NewPCG(seed, uint64(id))), dir: t.TempDir(),
			snap: snap, model: map[string]*string{}, uncertain: map[string]bool{}}
		workers[id] = w
		wg.Go(func() {
			for !closeDone.Load() {
				began := closeBegan.Load()
				err := op.run(w)
				w.done.Add(1)
				if err == nil {
					continue
				}
				if !errors.Is(err, ErrClosed) {
					fail("%s: %v (Close begun before: %v)", op.name, err, began)
					return
				}
				if !closeBegan.Load() && !(name == "SharedSnapshot" && errors.Is(err, ErrSnapshotReleased)) {
					fail("%s: %v before Close began", op.name, err)
					return
				}
				runtime.Gosched()
			}
			// Begun after Close returned: must fail.
			if err := op.run(w); op.afterClose && !errors.Is(err, ErrClosed) {
				fail("%s after Close returned: %v, want ErrClosed", op.name, err)
			} else if !op.afterClose && err != nil {
				fail("%s after Close returned: %v", op.name, err)
			}
			if w.it != nil {
				if err := w.it.Close(); !errors.Is(err, ErrClosed) {
					fail("Iterator.Close after DB.Close: %v, want ErrClosed", err)
				}
			}
		})
	}
	wg.Go(func() {
		// Close at a random moment: in half the rounds once every worker
		// has done an operation (or 200 ms passed: a Compact under the
		// race detector takes that), so that most are past their first.
		if rng.IntN(2) == 0 {
			for wait := time.Now(); !started(workers) && time.Since(wait) < 200*time.Millisecond; {
				time.Sleep(100 * time.Microsecond)
			}
		}
		time.Sleep(time.Duration(rng.IntN(20_000)) * time.Microsecond)
		closeBegan.Store(true)
		if err := db.Close(); err != nil {
			fail("Close: %v", err)
		}
		closeDone.Store(true)
	})
	waitOrDump(t, &wg, 60*time.Second)
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if err := snap.Close(); err != nil && !errors.Is(err, ErrSnapshotReleased) {
		t.Errorf("Snapshot.Close after DB.Close: %v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	checkReleased(t, dir, goroutines)

	// Every write acknowledged is there.
	db = mustOpen(t, dir, o)
	defer db.Close()
	for _, w := range workers {
		for k, v := range w.model {
			if w.uncertain[k] {
				continue
			}
			got, err := db.Get([]byte(k))
			switch {
			case v == nil && !errors.Is(err, ErrNotFound):
				t.Errorf("worker %d: %s deleted (acknowledged), read back %.20q, %v", w.id, k, got, err)
			case v != nil && (err != nil || string(got) != *v):
				t.Errorf("worker %d: %s written (acknowledged), read back %.20q, %v", w.id, k, got, err)
			}
		}
	}
	for i := 0; i < closeRaceBase; i += 37 {
		v, err := db.Get(closeRaceKey(i))
		if err := checkRead(i, v, err); err != nil {
			t.Errorf("base key after reopen: %v", err)
		}
	}
	// A checkpoint Checkpoint said it made opens, with the base keys.
	for _, w := range workers {
		for _, cp := range w.cps {
			if _, err := os.Stat(cp); err != nil {
				continue
			}
			cdb, err := Open(cp, &Options{ReadOnly: true})
			if err != nil {
				t.Errorf("checkpoint %s: %v", cp, err)
				continue
			}
			v, err := cdb.Get(closeRaceKey(5))
			if err := checkRead(5, v, err); err != nil {
				t.Errorf("checkpoint %s: %v", cp, err)
			}
			cdb.Close()
			break
		}
	}
}

// waitOrDump waits for wg, failing the test with every goroutine's stack
// if it takes longer than limit: a deadlock.
func waitOrDump(t *testing.T, wg *sync.WaitGroup, limit time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("not done %v after it began: deadlock?\n%s", limit, buf)
	}
}

// checkReleased checks that a closed DB of dir, whose iterators are all
// closed, leaves no goroutine (beyond the goroutines running before it
// was opened), open file or mapping behind. Its closer may still be
// closing what the last reader let go, so each is given a few seconds.
func checkReleased(t *testing.T, dir string, goroutines int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines after Close, %d before Open:\n%s", n, goroutines, buf)
	}
	if runtime.GOOS != "linux" {
		return
	}
	var open []string
	for time.Now().Before(deadline) {
		open = open[:0]
		fds, err := os.ReadDir("/proc/self/fd")
		mustDo(t, err)
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
				open = append(open, target)
			}
		}
		maps, err := os.ReadFile("/proc/self/maps")
		mustDo(t, err)
		for _, line := range strings.Split(string(maps), "\n") {
			if strings.Contains(line, dir) {
				open = append(open, "mapped: "+line)
			}
		}
		if len(open) == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("files of the store still open or mapped after Close:\n%s", strings.Join(open, "\n"))
}
