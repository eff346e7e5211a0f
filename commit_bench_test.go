package bloomkv

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// syncCountFS is the operating system's file system, counting the fsyncs
// of WAL files; the WALs can still be mapped (vfs.Mapper).
type syncCountFS struct {
	vfs.FS
	osBootID
	syncs atomic.Int64
	// noop: a WAL's Sync returns at once, doing nothing (a test's
	// instant fsync); sleep: it sleeps that long instead; while fail is
	// set, it fails at once.
	noop  bool
	sleep time.Duration
	fail  atomic.Bool
}

func (c *syncCountFS) Create(name string) (vfs.File, error) {
	f, err := c.FS.Create(name)
	if err != nil || !strings.HasSuffix(name, base.WALExt) {
		return f, err
	}
	return &syncCountFile{File: f, n: &c.syncs, fs: c}, nil
}

var errSyncFailed = errors.New("injected fsync failure")

var benchFsync = flag.Duration("bench.fsync", 0, "BenchmarkPutSyncWriters: each WAL fsync is a sleep this long instead (0: real fsyncs), "+
	"to compare the commit path's CPU and wakeups without a shared disk's noise")

var benchGather = flag.Float64("bench.gather", 0, "BenchmarkPutSyncWriters: how long the next fsync waits, at most, for the writers the last one "+
	"acknowledged, as a share of an fsync's time (0: the default, gatherShare; negative: no wait)")

type syncCountFile struct {
	vfs.File
	n  *atomic.Int64
	fs *syncCountFS
}

func (f *syncCountFile) Sync() error {
	f.n.Add(1)
	switch {
	case f.fs.fail.Load():
		return errSyncFailed
	case f.fs.noop:
		return nil
	case f.fs.sleep > 0:
		sleepThread(f.fs.sleep)
		return nil
	}
	return f.File.Sync()
}

func (f *syncCountFile) WriteAt(b []byte, off int64) (int, error) {
	return f.File.(*os.File).WriteAt(b, off)
}

func (f *syncCountFile) MapFd() (uintptr, bool) { return vfs.MapFd(f.File) }

// openSyncCounting opens a store with Options.Sync on a syncCountFS,
// closed when b ends.
func openSyncCounting(b *testing.B, sleep time.Duration) (*DB, *syncCountFS) {
	fs := &syncCountFS{FS: vfs.Default, sleep: sleep}
	o := DefaultOptions()
	o.Sync, o.FS = true, fs
	db := mustOpen(b, b.TempDir(), o)
	b.Cleanup(func() { db.Close() })
	return db, fs
}

// BenchmarkPutParallelSync is BenchmarkPutParallel with Options.Sync:
// every Put is acknowledged only once an fsync covers it, so what it
// measures is how well group commit shares fsyncs among writers (one per
// -cpu) and overlaps them with the next group's write. puts/fsync is the
// sharing, which the machine's load disturbs less than ops/s.
func BenchmarkPutParallelSync(b *testing.B) {
	db, fs := openSyncCounting(b, 0)
	start := fs.syncs.Load()
	runParallelPuts(b, db)
	if syncs := fs.syncs.Load() - start; syncs > 0 {
		b.ReportMetric(float64(b.N)/float64(syncs), "puts/fsync")
	}
}

// BenchmarkPutSyncWriters is BenchmarkPutParallelSync with a fixed number
// of writer goroutines whatever GOMAXPROCS is: 1, 4, 16 and 64 writers
// share b.N synced Puts, as enginebench -sync-scaling runs them (there
// on 2 Ps). With more writers than Ps, what it measures is how groups
// form while writers wait for fsyncs and wakeups, not CPU scaling. On a
// shared machine, whose other work makes an fsync take twice as long from
// one run to the next, -bench.fsync=200us replaces each WAL fsync by a
// sleep as long: what is left is the commit path's CPU and wakeups.
func BenchmarkPutSyncWriters(b *testing.B) {
	for _, writers := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			db, fs := openSyncCounting(b, *benchFsync)
			db.commit.pmu.Lock()
			db.commit.share = *benchGather
			db.commit.pmu.Unlock()
			start := fs.syncs.Load()
			groups, handOffs := db.commit.counts()
			sc := db.commit.syncCounts()
			b.ReportAllocs()
			b.SetBytes(116)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			cpu := cpuSeconds()
			for range writers {
				wg.Go(func() {
					var k [16]byte
					v := make([]byte, 100)
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if err := db.Put(benchKey(k[:], uint64(i)), benchValue(v, uint64(i))); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			// CPU time per Put, the store's background work (flushes,
			// compactions) included: with more writers than Ps, the
			// writers that an fsync acknowledged write again on a busy
			// CPU while the next fsync waits for them, so the CPU a Put
			// costs bounds ops/s, and the machine's load disturbs it less.
			b.ReportMetric((cpuSeconds()-cpu)*1e9/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			if syncs := fs.syncs.Load() - start; syncs > 0 {
				b.ReportMetric(float64(b.N)/float64(syncs), "puts/fsync")
				// How the writers an fsync covers reached the WAL: in how
				// many groups, and how many of those waited for a
				// leadership hand-off (a wakeup).
				g, h := db.commit.counts()
				b.ReportMetric(float64(g-groups)/float64(syncs), "groups/fsync")
				b.ReportMetric(float64(h-handOffs)/float64(syncs), "handoffs/fsync")
				// Where an fsync cycle's time goes: the fsync, and the
				// wait for the writers the last one acknowledged (per
				// fsync, and the share of fsyncs whose wait ran out).
				s := db.commit.syncCounts()
				if n := s.syncs - sc.syncs; n > 0 {
					b.ReportMetric(float64((s.syncTime-sc.syncTime).Microseconds())/float64(n), "fsync-µs")
					b.ReportMetric(float64((s.waitTime-sc.waitTime).Microseconds())/float64(n), "wait-µs/fsync")
					b.ReportMetric(float64(s.timeouts-sc.timeouts)/float64(n), "timeouts/fsync")
				}
			}
		})
	}
}
