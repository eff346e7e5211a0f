package metamorphic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bloomkv/bloomkv"
)

// runner executes an op log against a store and prints one line per op,
// in the model's words. Everything it prints is a copy made before the
// next call into the store (an iterator's key and value are valid only
// until its next move).
type runner struct {
	dir   string
	opts  optionSet
	db    *bloomkv.DB
	iters map[int]iterator
	snaps map[int]*runSnap
	txns  map[int]*bloomkv.Txn // open and ended ones, until a reopen
	ckpts int
	opens int       // Opens so far
	cur   optionSet // the options of the open store (opts.variant with vary)

	// With opts.concurrent: a shadow model, to know what each snapshot
	// holds, and the background goroutines.
	shadow  *model
	bgStop  chan struct{}
	bgWG    sync.WaitGroup
	bgErrMu sync.Mutex
	bgErr   string
}

// iterator is what the runner does with a DB's, a snapshot's or a
// transaction's iterator.
type iterator interface {
	First() bool
	Last() bool
	Seek(key []byte) bool
	SeekLT(key []byte) bool
	Next() bool
	Prev() bool
	Valid() bool
	Key() []byte
	Value() []byte
	Error() error
	SetBounds(lower, upper []byte)
	SetPrefix(p []byte)
	Close() error
}

var (
	_ iterator = (*bloomkv.Iterator)(nil)
	_ iterator = (*bloomkv.TxnIterator)(nil)
)

// runSnap is an open snapshot and, in concurrent runs, the reader that
// checks it in the background until it is closed.
type runSnap struct {
	s    *bloomkv.Snapshot
	stop chan struct{}
	done chan struct{}
	bad  string // the reader's first mismatch
}

// errNames are the sentinels an error is printed as, so that outputs
// compare across option sets (messages name files and offsets).
var errNames = []struct {
	err  error
	name string
}{
	{bloomkv.ErrNotFound, resNotFound},
	{bloomkv.ErrCorrupt, "err-corrupt"},
	{bloomkv.ErrClosed, "err-closed"},
	{bloomkv.ErrReadOnly, "err-read-only"},
	{bloomkv.ErrSnapshotReleased, "err-snapshot-released"},
	{bloomkv.ErrIteratorClosed, "err-iterator-closed"},
	{bloomkv.ErrInvalidOptions, "err-invalid-options"},
	{bloomkv.ErrLocked, "err-locked"},
	{bloomkv.ErrConflict, resConflict},
	{bloomkv.ErrTxnDiscarded, resTxnDiscarded},
	{bloomkv.ErrTxnReadOnly, resTxnReadOnly},
}

func errString(err error) string {
	if err == nil {
		return resOK
	}
	for _, e := range errNames {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return "err: " + err.Error()
}

// runLog runs ops against a store in dir with opts and returns its
// output. A panic or a failed open ends the run with a line saying so.
func runLog(dir string, opts optionSet, ops []op) []string {
	r := &runner{dir: dir, opts: opts, iters: map[int]iterator{}, snaps: map[int]*runSnap{}, txns: map[int]*bloomkv.Txn{}}
	if opts.concurrent {
		r.shadow = newModel()
	}
	out := make([]string, 0, len(ops))
	if err := r.open(); err != nil {
		return append(out, "open: "+errString(err))
	}
	defer r.close()
	for _, o := range ops {
		res, fatal := r.step(o)
		out = append(out, res)
		if fatal {
			return out
		}
	}
	// A background failure no snapshot close reported is one line more
	// than the model prints.
	r.stopBackground()
	if r.bgErr != "" {
		out = append(out, r.bgErr)
	}
	return out
}

func (r *runner) dbDir() string { return filepath.Join(r.dir, "db") }

func (r *runner) open() error {
	r.cur = r.opts
	if r.opts.vary && r.opens > 0 {
		r.cur = r.opts.variant(r.opens)
	}
	r.opens++
	db, err := bloomkv.Open(r.dbDir(), r.cur.options())
	if err != nil {
		return err
	}
	r.db = db
	r.startBackground()
	return nil
}

// close closes everything, as the end of a run or a reopen does.
func (r *runner) close() error {
	r.stopBackground()
	for id, it := range r.iters {
		it.Close()
		delete(r.iters, id)
	}
	for id, s := range r.snaps {
		r.closeSnap(s)
		delete(r.snaps, id)
	}
	for id, t := range r.txns {
		t.Discard()
		delete(r.txns, id)
	}
	if r.db == nil {
		return nil
	}
	err := r.db.Close()
	r.db = nil
	return err
}

// step runs one op; fatal means the store is gone and the run must stop.
func (r *runner) step(o op) (res string, fatal bool) {
	defer func() {
		if p := recover(); p != nil {
			res, fatal = fmt.Sprintf("panic: %v\n%s", p, debug.Stack()), true
		}
	}()
	if r.shadow != nil {
		r.shadow.apply(o)
	}
	switch o.kind {
	case opPut, opDelete, opDeleteRange:
		return errString(r.write(o)), false
	case opBatch:
		b := bloomkv.NewBatch()
		for _, w := range o.batch {
			switch w.kind {
			case opPut:
				b.Put(w.key, w.val.bytes())
			case opDelete:
				b.Delete(w.key)
			case opDeleteRange:
				b.DeleteRange(w.key, w.end)
			}
		}
		if o.sync {
			return errString(r.db.WriteSync(b)), false
		}
		return errString(r.db.Write(b)), false
	case opGet:
		return valueResult(r.db.Get(o.key)), false
	case opHas:
		ok, err := r.db.Has(o.key)
		if err != nil {
			return errString(err), false
		}
		return strconv.FormatBool(ok), false
	case opValueSize:
		n, err := r.db.ValueSize(o.key)
		if err != nil {
			return errString(err), false
		}
		return strconv.Itoa(n), false
	case opSnapNew:
		s, err := r.db.NewSnapshot()
		if err != nil {
			return errString(err), false
		}
		rs := &runSnap{s: s}
		r.snaps[o.id] = rs
		if r.shadow != nil {
			r.startSnapReader(rs, r.shadow.snaps[o.id])
		}
		return resOK, false
	case opSnapGet:
		rs, ok := r.snaps[o.id]
		if !ok {
			return resNoSnap, false
		}
		return valueResult(rs.s.Get(o.key)), false
	case opSnapClose:
		rs, ok := r.snaps[o.id]
		if !ok {
			return resNoSnap, false
		}
		delete(r.snaps, o.id)
		return r.closeSnap(rs), false
	case opIterNew:
		if _, ok := r.iters[o.id]; ok {
			return "duplicate-iterator", false
		}
		// Every other iterator fills the block cache, so that Gets and
		// iterators also read blocks that iterators put there. Drawn from
		// the id, not the log: the logs kept in testdata replay as before.
		io := &bloomkv.IterOptions{LowerBound: o.lower, UpperBound: o.upper, Prefix: o.prefix, FillCache: o.id%2 == 1}
		var it iterator
		var err error
		if o.txn != 0 {
			t, ok := r.txns[o.txn]
			if !ok {
				return resNoTxn, false
			}
			it, err = t.NewIterator(io)
		} else if o.snap != 0 {
			rs, ok := r.snaps[o.snap]
			if !ok {
				return resNoSnap, false
			}
			it, err = rs.s.NewIterator(io)
		} else {
			it, err = r.db.NewIterator(io)
		}
		if err != nil {
			return errString(err), false
		}
		r.iters[o.id] = it
		return resOK, false
	case opIterFirst, opIterLast, opIterSeek, opIterSeekLT, opIterSeekOwn, opIterSeekLTOwn, opIterNext, opIterPrev:
		it, ok := r.iters[o.id]
		if !ok {
			return resNoIter, false
		}
		return moveIter(it, o), false
	case opIterSetBounds, opIterSetPrefix, opIterSetPrefixOwn:
		it, ok := r.iters[o.id]
		if !ok {
			return resNoIter, false
		}
		switch o.kind {
		case opIterSetBounds:
			it.SetBounds(o.lower, o.upper)
		case opIterSetPrefix:
			it.SetPrefix(o.prefix)
		default:
			k := it.Key()
			it.SetPrefix(k[:min(int(o.n), len(k))])
		}
		if it.Valid() || it.Key() != nil {
			return fmt.Sprintf("%s left the iterator at %q", o.kind, it.Key()), false
		}
		return resOK, false
	case opIterClose:
		it, ok := r.iters[o.id]
		if !ok {
			return resNoIter, false
		}
		delete(r.iters, o.id)
		return errString(it.Close()), false
	case opTxnNew:
		if _, ok := r.txns[o.id]; ok {
			return "duplicate-txn", false
		}
		r.txns[o.id] = r.db.NewTransaction(o.update)
		return resOK, false
	case opTxnGet, opTxnHas, opTxnPut, opTxnDelete, opTxnDeleteRange, opTxnCommit, opTxnDiscard:
		t, ok := r.txns[o.id]
		if !ok {
			return resNoTxn, false
		}
		return txnStep(t, o), false
	case opUpdate, opView:
		return r.closure(o), false
	case opCAS:
		var old, new []byte
		if o.old != nil {
			old = o.old.bytes()
		}
		if o.new != nil {
			new = o.new.bytes()
		}
		ok, err := r.db.CompareAndSet(o.key, old, new)
		if err != nil {
			return errString(err), false
		}
		return strconv.FormatBool(ok), false
	case opScan:
		return scanDigest(r.db), false
	case opFlush:
		return errString(r.db.Flush()), false
	case opCompact:
		return errString(r.db.Compact()), false
	case opWait:
		return errString(r.db.WaitForCompactions(context.Background())), false
	case opSync:
		return errString(r.db.Sync()), false
	case opSetBudget:
		return errString(r.db.SetFilterBudget(o.n)), false
	case opRebuild:
		return errString(r.db.RebuildFilters()), false
	case opReopen:
		if err := r.close(); err != nil {
			return "close: " + errString(err), true
		}
		if err := r.open(); err != nil {
			return "open: " + errString(err), true
		}
		return resOK, false
	case opReadOnly:
		if err := r.close(); err != nil {
			return "close: " + errString(err), true
		}
		ro := r.cur.options()
		ro.ReadOnly = true
		db, err := bloomkv.Open(r.dbDir(), ro)
		if err != nil {
			return "open read-only: " + errString(err), true
		}
		res = scanDigest(db)
		if err := db.Close(); err != nil {
			return "close read-only: " + errString(err), true
		}
		if err := r.open(); err != nil {
			return "open: " + errString(err), true
		}
		return res, false
	case opCheckpoint:
		r.ckpts++
		dir := filepath.Join(r.dir, fmt.Sprintf("checkpoint-%d", r.ckpts))
		defer os.RemoveAll(dir)
		if err := r.db.Checkpoint(dir); err != nil {
			return "checkpoint: " + errString(err), false
		}
		db, err := bloomkv.Open(dir, r.cur.options())
		if err != nil {
			return "open checkpoint: " + errString(err), false
		}
		res = scanDigest(db)
		if err := db.Close(); err != nil {
			return "close checkpoint: " + errString(err), false
		}
		return res, false
	}
	return "unknown op " + string(o.kind), false
}

// errAbort is what an aborting closure returns, wrapped, so that the
// runner can tell whether Update and View return its error unchanged.
var errAbort = errors.New("metamorphic: closure aborted")

// closure runs an update or a view. The body's iterators stay open until
// the closure has returned (and an update committed), as a caller may
// leave them. The line holds the results of the body's last run and, if
// the closure ran other than once, how many times it ran, for the model
// to check against the retries it predicts.
func (r *runner) closure(o op) string {
	var fnErr error
	if o.abort {
		fnErr = fmt.Errorf("closure of op %q: %w", o.kind, errAbort)
	}
	var res []string
	var its []*bloomkv.TxnIterator
	runs := 0
	fn := func(t *bloomkv.Txn) error {
		runs++
		res = res[:0]
		for _, b := range o.batch {
			if b.kind == opInterfere {
				res = append(res, r.interfere(b, runs))
				continue
			}
			res = append(res, closureStep(t, b, &its))
		}
		return fnErr
	}
	var err error
	switch {
	case o.kind == opView:
		err = r.db.View(fn)
	case o.with:
		err = r.db.UpdateWith(&bloomkv.UpdateOptions{Retries: o.retries, Sync: o.sync}, fn)
	default:
		err = r.db.Update(fn)
	}
	for _, it := range its {
		if cerr := it.Close(); cerr != nil {
			res = append(res, "close: "+errString(cerr))
		}
	}
	if runs != 1 {
		res = append(res, fmt.Sprintf("ran %d times", runs))
	}
	switch {
	case fnErr != nil && err == fnErr:
		res = append(res, resAborted)
	case errors.Is(err, errAbort):
		res = append(res, fmt.Sprintf("closure's error changed: %v", err))
	default:
		res = append(res, errString(err))
	}
	return strings.Join(res, " | ")
}

// interfere runs a closure's interfere op in the closure's run-th run: its
// write, through the DB, while the run's transaction is open.
func (r *runner) interfere(o op, run int) string {
	if o.n != int64(run) {
		return resNotRun
	}
	for _, w := range o.batch {
		if err := r.write(w); err != nil {
			return errString(err)
		}
	}
	return resOK
}

// write runs a plain write (a put, delete or delete-range op) on the DB.
func (r *runner) write(o op) error {
	switch o.kind {
	case opPut:
		return r.db.Put(o.key, o.val.bytes())
	case opDelete:
		return r.db.Delete(o.key)
	case opDeleteRange:
		return r.db.DeleteRange(o.key, o.end)
	}
	return fmt.Errorf("metamorphic: %s is not a plain write", o.kind)
}

// closureTxnOps are the transaction ops a closure's body's reads and
// writes are, for txnStep and the model's modelTxn.apply.
var closureTxnOps = map[opKind]opKind{
	opGet: opTxnGet, opHas: opTxnHas, opPut: opTxnPut, opDelete: opTxnDelete, opDeleteRange: opTxnDeleteRange,
}

// closureStep runs one op of a closure's body on its transaction.
func closureStep(t *bloomkv.Txn, o op, its *[]*bloomkv.TxnIterator) string {
	if k, ok := closureTxnOps[o.kind]; ok {
		o.kind = k
		return txnStep(t, o)
	}
	switch o.kind {
	case opRangeScan:
		it, err := t.NewIterator(&bloomkv.IterOptions{LowerBound: o.lower, UpperBound: o.upper, Prefix: o.prefix})
		if err != nil {
			return errString(err)
		}
		*its = append(*its, it)
		// One positioning call: a First before the Last would add the span
		// from the lower bound to the first key to the read set.
		var kvs []kv
		var ok bool
		if o.reverse {
			ok = it.Last()
		} else {
			ok = it.First()
		}
		for ok {
			kvs = append(kvs, kv{string(it.Key()), describe(it.Value())})
			if len(kvs) > int(o.n) {
				break
			}
			if o.reverse {
				ok = it.Prev()
			} else {
				ok = it.Next()
			}
		}
		if err := it.Error(); err != nil {
			return errString(err)
		}
		return digest(kvs)
	}
	return "unknown op " + string(o.kind)
}

// txnStep runs a transaction's op. An ended transaction stays in
// r.txns, so that its later uses print the store's answer to them.
func txnStep(t *bloomkv.Txn, o op) string {
	switch o.kind {
	case opTxnGet:
		return valueResult(t.Get(o.key))
	case opTxnHas:
		ok, err := t.Has(o.key)
		if err != nil {
			return errString(err)
		}
		return strconv.FormatBool(ok)
	case opTxnPut:
		return errString(t.Put(o.key, o.val.bytes()))
	case opTxnDelete:
		return errString(t.Delete(o.key))
	case opTxnDeleteRange:
		return errString(t.DeleteRange(o.key, o.end))
	case opTxnCommit:
		return errString(t.Commit())
	case opTxnDiscard:
		t.Discard()
		return resOK
	}
	return "unknown op " + string(o.kind)
}

func valueResult(v []byte, err error) string {
	if err != nil {
		return errString(err)
	}
	return describe(v)
}

func moveIter(it iterator, o op) string {
	var ok bool
	switch o.kind {
	case opIterFirst:
		ok = it.First()
	case opIterLast:
		ok = it.Last()
	case opIterSeek:
		ok = it.Seek(o.key)
	case opIterSeekLT:
		ok = it.SeekLT(o.key)
	case opIterSeekOwn:
		ok = it.Seek(it.Key())
	case opIterSeekLTOwn:
		ok = it.SeekLT(it.Key())
	case opIterNext:
		ok = it.Next()
	case opIterPrev:
		ok = it.Prev()
	}
	if ok != it.Valid() {
		return fmt.Sprintf("%s returned %v but Valid is %v", o.kind, ok, it.Valid())
	}
	if !ok {
		if err := it.Error(); err != nil {
			return errString(err)
		}
		return resInvalid
	}
	return posResult(string(it.Key()), describe(it.Value()))
}

// scanDigest scans the whole store, forward and then backward, and
// prints the digest (or how the two directions disagree).
func scanDigest(db *bloomkv.DB) string {
	var fwd, bwd []kv
	for _, dir := range []bool{true, false} {
		it, err := db.NewIterator(nil)
		if err != nil {
			return errString(err)
		}
		var kvs []kv
		for ok := it.First(); dir && ok; ok = it.Next() {
			kvs = append(kvs, kv{string(it.Key()), describe(it.Value())})
		}
		for ok := it.Last(); !dir && ok; ok = it.Prev() {
			kvs = append(kvs, kv{string(it.Key()), describe(it.Value())})
		}
		if err := it.Close(); err != nil {
			return "scan: " + errString(err)
		}
		if dir {
			fwd = kvs
		} else {
			slices.Reverse(kvs)
			bwd = kvs
		}
	}
	if f, b := digest(fwd), digest(bwd); f != b {
		return fmt.Sprintf("forward scan %s, backward scan %s", f, b)
	}
	return digest(fwd)
}

// startBackground starts, in concurrent runs, a goroutine that flushes
// the memtable every few milliseconds, so that flushes and the
// compactions they trigger run while the ops and the snapshot readers do.
func (r *runner) startBackground() {
	if !r.opts.concurrent {
		return
	}
	r.bgStop = make(chan struct{})
	db, stop := r.db, r.bgStop
	r.bgWG.Go(func() {
		t := time.NewTicker(3 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if err := db.Flush(); err != nil {
				r.bgErrMu.Lock()
				if r.bgErr == "" {
					r.bgErr = "background flush: " + errString(err)
				}
				r.bgErrMu.Unlock()
				return
			}
		}
	})
}

func (r *runner) stopBackground() {
	if r.bgStop != nil {
		close(r.bgStop)
		r.bgWG.Wait()
		r.bgStop = nil
	}
}

// startSnapReader checks, until the snapshot is closed, that Gets and
// iterators on it see exactly want, while the runner goes on writing,
// flushing and compacting.
func (r *runner) startSnapReader(rs *runSnap, want map[string]string) {
	rs.stop, rs.done = make(chan struct{}), make(chan struct{})
	keys := make([]kv, 0, len(want))
	for k, v := range want {
		keys = append(keys, kv{k, v})
	}
	slices.SortFunc(keys, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	seed := uint64(len(keys))
	go func() {
		defer close(rs.done)
		rng := rand.New(rand.NewPCG(seed, 1))
		fail := func(format string, args ...any) {
			rs.bad = fmt.Sprintf(format, args...)
		}
		for rs.bad == "" {
			select {
			case <-rs.stop:
				return
			default:
			}
			if len(keys) == 0 || rng.IntN(4) == 0 {
				checkSnapScan(rs.s, keys, rng, fail)
				time.Sleep(100 * time.Microsecond)
				continue
			}
			e := keys[rng.IntN(len(keys))]
			k := []byte(e.key)
			if rng.IntN(3) == 0 {
				k = append(k, 0) // a key after it, usually absent
				e.val = lookup(want, k)
			}
			if got := valueResult(rs.s.Get(k)); got != e.val {
				fail("snapshot Get(%q) = %s, want %s", k, got, e.val)
			}
		}
	}()
}

// checkSnapScan walks a stretch of the snapshot from a random key and
// compares it with want.
func checkSnapScan(s *bloomkv.Snapshot, want []kv, rng *rand.Rand, fail func(string, ...any)) {
	it, err := s.NewIterator(nil)
	if err != nil {
		fail("snapshot NewIterator: %s", errString(err))
		return
	}
	defer it.Close()
	i := 0
	ok := it.First()
	if len(want) > 0 {
		i = rng.IntN(len(want))
		ok = it.Seek([]byte(want[i].key))
	}
	for n := 0; n < 32; n++ {
		if !ok || i >= len(want) {
			if ok != (i < len(want)) {
				fail("snapshot scan: at %d of %d keys, Valid = %v (err %v)", i, len(want), ok, it.Error())
			}
			return
		}
		if k, v := string(it.Key()), describe(it.Value()); k != want[i].key || v != want[i].val {
			fail("snapshot scan: got %q %s, want %q %s", k, v, want[i].key, want[i].val)
			return
		}
		i++
		ok = it.Next()
	}
}

// closeSnap stops the snapshot's reader and closes it; it prints the
// reader's mismatch if it found one.
func (r *runner) closeSnap(rs *runSnap) string {
	if rs.stop != nil {
		close(rs.stop)
		<-rs.done
	}
	res := errString(rs.s.Close())
	if rs.bad != "" {
		res = "background reader: " + rs.bad
	}
	r.bgErrMu.Lock()
	if r.bgErr != "" {
		res += "; " + r.bgErr
		r.bgErr = ""
	}
	r.bgErrMu.Unlock()
	return res
}
