package bloomkv

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkPutParallel: concurrent Puts of 16-byte keys and 100-byte
// values, which group commit gathers into shared WAL writes. With
// BenchmarkFillRandom, the measure of what transactions cost plain writes
// while none is open (the commit leader's one atomic load).
func BenchmarkPutParallel(b *testing.B) {
	db := mustOpen(b, b.TempDir(), nil)
	defer db.Close()
	runParallelPuts(b, db)
}

// runParallelPuts times b.N Puts of distinct 16-byte keys and 100-byte
// values from GOMAXPROCS goroutines and reports ops/s.
func runParallelPuts(b *testing.B, db *DB) {
	b.ReportAllocs()
	b.SetBytes(116)
	var n atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		var k [16]byte
		v := make([]byte, 100)
		for pb.Next() {
			i := n.Add(1)
			if err := db.Put(benchKey(k[:], i), benchValue(v, i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkPutTxnOpen is BenchmarkFillRandom with one read-write
// transaction open throughout, so that the commit leader records every
// written key for its conflict check.
func BenchmarkPutTxnOpen(b *testing.B) {
	db := mustOpen(b, b.TempDir(), nil)
	defer db.Close()
	txn := db.NewTransaction(true)
	defer txn.Discard()
	var k [16]byte
	v := make([]byte, 100)
	b.ReportAllocs()
	b.SetBytes(116)
	for i := range b.N {
		if err := db.Put(benchKey(k[:], uint64(i)), benchValue(v, uint64(i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkTxnTransfer: one read-write transaction per op that reads two
// of 10,000 keys and writes both (a bank transfer), against
// BenchmarkBatchTransfer, the same two writes as a Batch with no reads.
func BenchmarkTxnTransfer(b *testing.B) {
	db := openAccounts(b)
	defer db.Close()
	var k [16]byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		from, to := uint64(i*7919)%accounts, uint64(i*104729+1)%accounts
		err := db.Update(func(txn *Txn) error {
			a, err := txn.Get(benchKey(k[:], from))
			if err != nil {
				return err
			}
			c, err := txn.Get(benchKey(k[:], to))
			if err != nil {
				return err
			}
			txn.Put(benchKey(k[:], from), c)
			return txn.Put(benchKey(k[:], to), a)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// accounts is the number of keys of the transfer benchmarks' store.
const accounts = 10000

// openAccounts returns a store of accounts keys with 100-byte values.
func openAccounts(b *testing.B) *DB {
	db := mustOpen(b, b.TempDir(), nil)
	var k [16]byte
	v := make([]byte, 100)
	for i := range uint64(accounts) {
		if err := db.Put(benchKey(k[:], i), benchValue(v, i)); err != nil {
			b.Fatal(err)
		}
	}
	return db
}

func BenchmarkBatchTransfer(b *testing.B) {
	db := openAccounts(b)
	defer db.Close()
	var k [16]byte
	v := make([]byte, 100)
	batch := NewBatch()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		from, to := uint64(i*7919)%accounts, uint64(i*104729+1)%accounts
		batch.Reset()
		batch.Put(benchKey(k[:], from), benchValue(v, to))
		batch.Put(benchKey(k[:], to), benchValue(v, from))
		if err := db.Write(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkTxnDeleteRangeAmongWrites: one DeleteRange (of a range holding
// none of them) in a transaction that holds pending writes, one op per
// call, at several write-set sizes. A range deletion's cost should follow
// what it deletes and the deletions before it, not the writes pending.
func BenchmarkTxnDeleteRangeAmongWrites(b *testing.B) {
	for _, pending := range []int{0, 1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			txn := pendingTxn(b, pending, func(i int) int { return i })
			i := 0
			for b.Loop() {
				mustDo(b, txn.DeleteRange(fmt.Appendf(nil, "b%08d", i), fmt.Appendf(nil, "b%08d~", i)))
				i++
			}
		})
	}
}

// pendingTxn returns a read-write transaction, on a store of its own
// closed when b ends, holding n pending writes of the keys "a%08d" of
// key(0) to key(n-1), each value "v".
func pendingTxn(b *testing.B, n int, key func(int) int) *Txn {
	b.Helper()
	db := mustOpen(b, b.TempDir(), nil)
	b.Cleanup(func() { db.Close() })
	txn := db.NewTransaction(true)
	b.Cleanup(txn.Discard)
	for i := range n {
		mustDo(b, txn.Put(fmt.Appendf(nil, "a%08d", key(i)), []byte("v")))
	}
	return txn
}

// warmIterator makes and closes an iterator of txn, which sorts the
// writes pending so far, so that a benchmark times only what follows.
func warmIterator(b *testing.B, txn *Txn) {
	b.Helper()
	it, err := txn.NewIterator(nil)
	mustDo(b, err)
	mustDo(b, it.Close())
}

// BenchmarkTxnIterAfterPut: a transaction holding n pending writes makes
// one more, then an iterator that sees it (read-your-writes scans), one
// op per Put, NewIterator, Seek and Close. The iterator's cost should not
// follow the writes pending.
func BenchmarkTxnIterAfterPut(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprint("pending=", n), func(b *testing.B) {
			txn := pendingTxn(b, n, func(i int) int { return i * 2 })
			warmIterator(b, txn)
			i := 0
			for b.Loop() {
				k := fmt.Appendf(nil, "a%08d", (i%n)*2+1)
				mustDo(b, txn.Put(k, []byte("w")))
				it, err := txn.NewIterator(nil)
				mustDo(b, err)
				if !it.Seek(k) {
					b.Fatal("not found")
				}
				mustDo(b, it.Close())
				i++
			}
		})
	}
}

// BenchmarkTxnIterScan: a full scan of a transaction's n pending writes
// (over an empty store), made with an iterator after every 1000th write,
// one op per key scanned.
func BenchmarkTxnIterScan(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint("pending=", n), func(b *testing.B) {
			db := mustOpen(b, b.TempDir(), nil)
			defer db.Close()
			txn := db.NewTransaction(true)
			defer txn.Discard()
			for i := range n {
				mustDo(b, txn.Put(fmt.Appendf(nil, "a%08d", (i*7919)%n), []byte("v")))
				if i%1000 == 999 {
					it, err := txn.NewIterator(nil)
					mustDo(b, err)
					mustDo(b, it.Close())
				}
			}
			it, err := txn.NewIterator(nil)
			mustDo(b, err)
			defer it.Close()
			ok := false
			for b.Loop() {
				if !ok {
					ok = it.First()
				}
				ok = it.Next()
			}
		})
	}
}

// BenchmarkTxnIterAfterDeleteRange: a transaction holding n pending
// writes deletes one of them with DeleteRange, then makes an iterator,
// one op per pair: the iterator's runs are cut where the deletion hit
// them (cutRuns), a copy of the run it hit.
func BenchmarkTxnIterAfterDeleteRange(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprint("pending=", n), func(b *testing.B) {
			txn := pendingTxn(b, n, func(i int) int { return i })
			warmIterator(b, txn)
			i := 0
			for b.Loop() {
				k := fmt.Appendf(nil, "a%08d", i%n)
				mustDo(b, txn.DeleteRange(k, append(k, 0)))
				it, err := txn.NewIterator(nil)
				mustDo(b, err)
				it.Seek(k)
				mustDo(b, it.Close())
				i++
			}
		})
	}
}

// BenchmarkTxnIterClose: a transaction holding n open iterators closes
// the one opened in the middle of them and opens one more, one op per
// pair.
func BenchmarkTxnIterClose(b *testing.B) {
	for _, n := range []int{100, 1_000, 10_000, 100_000} {
		b.Run(fmt.Sprint("open=", n), func(b *testing.B) {
			db := mustOpen(b, b.TempDir(), nil)
			defer db.Close()
			mustDo(b, db.Put([]byte("k"), []byte("v")))
			txn := db.NewTransaction(true)
			defer txn.Discard()
			var its []*TxnIterator
			for range n {
				it, err := txn.NewIterator(nil)
				mustDo(b, err)
				its = append(its, it)
			}
			for b.Loop() {
				mid := len(its) / 2
				mustDo(b, its[mid].Close())
				it, err := txn.NewIterator(nil)
				mustDo(b, err)
				its[mid] = it
			}
			for _, it := range its {
				it.Close()
			}
		})
	}
}

// BenchmarkAdmitGroup: the commit leader validates a group of g
// transactions, each of which read one key and writes another
// (txnState.admit), with no history; one op per transaction. Each is
// checked against the writes of those before it in the group, which
// should cost about O(log g), not O(g).
func BenchmarkAdmitGroup(b *testing.B) {
	for _, g := range []int{100, 1_000, 10_000} {
		b.Run(fmt.Sprint("group=", g), func(b *testing.B) {
			var ts txnState
			group := make([]*commitReq, g)
			for i := range group {
				bt := NewBatch()
				bt.Put(fmt.Appendf(nil, "w%08d", i), []byte("v"))
				group[i] = &commitReq{b: bt, check: &txnCheck{readSeq: 1, reads: []keySpan{pointSpan(fmt.Appendf(nil, "r%08d", i))}}}
			}
			for b.Loop() {
				if ws := ts.admit(group, 10); ws == nil {
					b.Fatal("no writes")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*g), "ns/txn")
		})
	}
}

// BenchmarkTxnCommitAfterWrites: a read-write transaction that read one
// key commits after n other keys were written since it began, in batches
// of 1000; one op per commit. Its check, under commit leadership, costs a
// binary search per commit group since it began, plus the sort of each
// group's keys by the first transaction that checks it: linear in the
// writes since the transaction began, up to the history's limit.
func BenchmarkTxnCommitAfterWrites(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprint("written=", n), func(b *testing.B) {
			db := mustOpen(b, b.TempDir(), &Options{MemtableSize: 64 << 20})
			defer db.Close()
			hold := db.NewTransaction(true) // keeps the history
			defer hold.Discard()
			i := 0
			for b.Loop() {
				b.StopTimer()
				txn := db.NewTransaction(true)
				txn.Get(fmt.Appendf(nil, "zz%d", i))
				bt := NewBatch()
				for j := range n {
					bt.Put(fmt.Appendf(nil, "k%08d", j), nil)
					if (j+1)%1000 == 0 {
						mustDo(b, db.Write(bt))
						bt = NewBatch()
					}
				}
				mustDo(b, txn.Put(fmt.Appendf(nil, "zz%d", i), []byte("v")))
				b.StartTimer()
				mustDo(b, txn.Commit())
				i++
			}
		})
	}
}
