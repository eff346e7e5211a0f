// Package metamorphic tests bloomkv by running one random operation log
// against a Go-map model and against stores opened with several randomly
// drawn option sets, and comparing what every run printed. It is modelled
// on Pebble's metamorphic package: the options change how a store lays
// its data out (memtable and block sizes, compression, mmap, filters,
// prefix filters, fan-in, compaction concurrency), never what a read
// returns, so any difference between two runs, or between a run and the
// model, is a bug.
//
// Everything is in the package's tests (go test ./internal/metamorphic):
//
//   - ops_test.go: the operations and their text form, one per line, which
//     parses back, so a failing log replays (-meta-replay FILE).
//   - gen_test.go: the seeded generators of operation logs and option sets.
//   - model_test.go: the expected output of each operation, from a map.
//   - runner_test.go: the same operations against a store, with
//     background snapshot readers and flushes in some runs.
//   - meta_test.go: the tests, their flags, the failure files and the
//     reducer that shrinks a failing log.
//
// By default a short run (a few thousand operations over a few option
// sets) fits in CI under the race detector; -meta-duration runs new seeds
// until the time is up, for hours if asked.
package metamorphic
