// Package metamorphic tests bloomkv by running one random operation log
// against a Go-map model and against stores opened with several randomly
// drawn option sets, and comparing what every run printed. It is modelled
// on Pebble's metamorphic package: the options change how a store lays
// its data out (memtable and block sizes, compression, mmap, filters,
// prefix filters, fan-in, compaction concurrency), never what a read
// returns, so any difference between two runs, or between a run and the
// model, is a bug.
//
// Transactions are in the logs too: up to three open at once, read-write
// or read-only, with Get, Has, Put, Delete, DeleteRange and iterators
// (bounds, prefix, both directions, SetBounds) interleaved with plain
// writes and with each other, then committed or discarded, and used after
// that. The model predicts what each read returns (the transaction's
// snapshot with its own writes over it) and which commits fail with
// ErrConflict, from the documented rule rather than from the store: a
// read-write transaction that wrote something conflicts if a write
// committed after it began (plain, batch or another transaction's) hit a
// key it read with Get or Has (not one it wrote itself), or the span one
// of its iterators traversed, from where a seek positioned it through the
// keys it stopped at, to its bound if it ran off the end. Nothing of that
// depends on timing: flushes and compactions write no keys, and
// transactions stay open for a bounded number of ops, far from the cap on
// the store's record of writes.
//
// So are the closure forms, each one op: Update and UpdateWith (retries,
// Sync) run a short body of Gets, Has, writes, range deletions and short
// scans, whose reads the model predicts from the DB as of the run plus the
// body's own writes, and then commit, or return a sentinel error, which
// must come back unchanged with nothing written; View runs reads, and a
// write in it must fail with ErrTxnReadOnly. A body may also interfere:
// commit a plain Put, Delete or DeleteRange through the DB in a given run
// of the closure, while that run's transaction is open. The model runs
// each run as a transaction of its own, by the rule above: a run that
// wrote something and read the key (or scanned a span holding it) fails
// its commit, writes nothing, and UpdateWith runs the closure again on
// the new state, up to its retries, then returns the last ErrConflict
// (Update never runs it again); a run that only wrote the key, or read it
// after writing it, or wrote nothing, commits. The line says how many
// runs there were, and the interfering writes stay, commits like any
// other. CompareAndSet compares with the key's value (so that it swaps),
// a wrong one, an empty one or nil (absent, which an empty value is not),
// and sets a value, an empty one or nil (a delete). It takes no closure,
// so nothing commits while it runs (a conflict made from another
// goroutine would hang on timing), and it swaps exactly when its old
// value is the key's. What a closure or a CompareAndSet writes is a
// commit like any other for the open transactions' conflicts, and a
// CompareAndSet that did not swap wrote nothing.
//
// Everything is in the package's tests (go test ./internal/metamorphic):
//
//   - ops_test.go: the operations and their text form, one per line, which
//     parses back, so a failing log replays (-meta-replay FILE).
//   - gen_test.go: the seeded generators of operation logs and option sets.
//   - model_test.go: the expected output of each operation, from a map
//     (and, for a transaction, a map of its view, its writes and its read
//     set).
//   - runner_test.go: the same operations against a store, with
//     background snapshot readers and flushes in some runs.
//   - meta_test.go: the tests, their flags, the failure files and the
//     reducer that shrinks a failing log.
//
// By default a short run (a few thousand operations over a few option
// sets) fits in CI under the race detector; -meta-duration runs new seeds
// until the time is up, for hours if asked.
package metamorphic
