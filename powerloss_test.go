package bloomkv

// The power-loss test: a workload runs on a store whose FS is a
// powerfs.FS, the power goes off after a random file system operation,
// the store is closed, the disk is rolled back to what a power loss would
// leave (powerfs.FS.Restore: unsynced data and unsynced directory
// changes lost, or partly written back), and the store is reopened on the
// plain OS file system and checked against the acknowledged history:
//
//   - with Options.Sync, every acknowledged write must be there;
//   - without, the store must open and hold a prefix of the history, in
//     whole batches, with no hole (a write lost while a write started
//     after it was acknowledged survives).
//
// The crash loop (crashloop_test.go) kills processes, which leaves the
// page cache behind and so never loses an unsynced write; this test does.
//
// It runs on both WAL write paths: the default one, where (on Linux) the
// WAL is a shared writable mapping that the simulation reads back at
// each fsync and at the cut (keeping, of the pages changed since the
// last fsync, none, a prefix or a random subset, as the kernel may have
// written them back), and the write(2) one (Options.DisableMmap).
//
// 30 cuts per Sync mode and write path by default, 120 in all (8 per
// mode and path with -short; about 40 s with -race on two cores, most of
// it bbolt's fsyncs, which the simulation does not skip), each from a
// seed derived from a base seed that the test logs. Longer or reproducing runs:
//
//	go test -run 'TestPowerLoss$' -powerloss.cuts 2000
//	go test -run 'TestPowerLoss$' -powerloss.seed 42 -v
//
// The workload runs goroutines, so a seed reproduces the choices of a cut
// (where, which write-back mode, which pages) but not the interleaving.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/powerfs"
)

var (
	powerLossCuts = flag.Int("powerloss.cuts", 30, "power cuts per Sync mode (with and without) and WAL write path (mapped, write(2)) in TestPowerLoss")
	powerLossSeed = flag.Uint64("powerloss.seed", 0, "base seed of TestPowerLoss (0: from the clock)")
)

const (
	plWriters      = 4
	plKeys         = 24 // per writer
	plOpsPerWriter = 60 // per cut
	plFlushEvery   = 20 // writer 0 calls Flush after every plFlushEvery ops
)

// plKey is key k of writer g. Writers own disjoint keys and have one op
// in flight at most, so each writer's keys must hold the state after some
// prefix of its ops.
func plKey(g, k int) string { return fmt.Sprintf("w%d/%03d", g, k) }

// plEffect is what op n of writer g does (value nil: delete) and whether
// it is a single Put or Delete rather than a batch. Values name their op,
// so a value found under the wrong key or from the wrong op is caught.
func plEffect(g, n int) (keys []string, values [][]byte, single bool) {
	val := func(k string) []byte {
		return append(fmt.Appendf(nil, "%s@%d;", k, n), bytes.Repeat([]byte{byte('a' + n%26)}, 20+n*13%90)...)
	}
	k1, k2, k3 := plKey(g, n*7%plKeys), plKey(g, (n*7+3)%plKeys), plKey(g, (n*7+11)%plKeys)
	if _, _, ok := plRange(g, n); ok {
		if n%2 == 0 {
			return nil, nil, true // the range deletion alone
		}
		return []string{k2}, [][]byte{val(k2)}, false // after it, in one batch
	}
	switch n % 6 {
	case 0, 1:
		return []string{k1}, [][]byte{val(k1)}, true
	case 2:
		return []string{k1}, [][]byte{nil}, true
	case 3:
		return []string{k1, k2}, [][]byte{val(k1), val(k2)}, false
	case 4:
		return []string{k1, k2, k3}, [][]byte{val(k1), val(k2), nil}, false
	}
	return []string{k1, k2, k3}, [][]byte{val(k1), val(k2), val(k3)}, false
}

// plRange is the range deletion op n of writer g starts with, if any: of
// six keys from its first key.
func plRange(g, n int) (start, end string, ok bool) {
	if n%11 != 7 {
		return "", "", false
	}
	k := n * 7 % plKeys
	return plKey(g, k), plKey(g, k+6), true
}

func plCommit(db *DB, g, n int) error {
	keys, values, single := plEffect(g, n)
	start, end, isRange := plRange(g, n)
	if isRange && single {
		return db.DeleteRange([]byte(start), []byte(end))
	}
	if single {
		if values[0] == nil {
			return db.Delete([]byte(keys[0]))
		}
		return db.Put([]byte(keys[0]), values[0])
	}
	b := NewBatch()
	if isRange {
		b.DeleteRange([]byte(start), []byte(end))
	}
	for i, k := range keys {
		if values[i] == nil {
			b.Delete([]byte(k))
		} else {
			b.Put([]byte(k), values[i])
		}
	}
	return db.Write(b)
}

// plWriterLog is the history of one writer: ops 0..acked-1 were
// acknowledged; op acked, if submitted, was in flight at the cut. start
// and ack are positions on a clock shared by all writers, ticked at each
// submission and acknowledgement, to find holes across writers.
type plWriterLog struct {
	acked     int
	submitted int // acked, or acked+1 if an op failed or was in flight
	start     []int64
	ack       []int64
}

// plCut is one power cut and what came of it.
type plCut struct {
	seed     uint64
	sync     bool
	mmap     bool // the default WAL path: mapped (on Linux); false: DisableMmap
	mapped   int  // files the store mapped for writing
	mode     powerfs.Writeback
	cutAt    int // the operation after which the power went off (0: at the end)
	ops      int // operations made before the cut took effect
	openErr  bool
	acked    int // acknowledged writes checked
	restored powerfs.RestoreStats
	problem  string // empty: passed
}

func (c plCut) String() string {
	where := fmt.Sprintf("cut after op %d", c.cutAt)
	if c.ops < c.cutAt {
		where = fmt.Sprintf("cut at the end (op %d)", c.ops)
	}
	if c.openErr {
		where += " during Open"
	}
	return fmt.Sprintf("seed %d sync=%v mmap=%v writeback=%v %s", c.seed, c.sync, c.mmap, c.mode, where)
}

// plOptions are the store's options for the run with the PowerLoss FS
// and, with FS nil, for the reopening.
func plOptions(sync, mmap bool, fsys vfs.FS) *Options {
	o := smallOptions()
	o.MemtableSize = 8 << 10
	o.CompactionFanIn = 2 // compactions from the third flush on
	o.CompactionConcurrency = 2
	o.Sync = sync
	o.DisableMmap = !mmap
	o.FS = fsys
	return o
}

// plWorkload opens the store in dir on p, runs the writers until they
// have done their ops or the power is off, and closes the store. It
// returns the writers' histories and whether Open failed.
func plWorkload(dir string, p *powerfs.FS, syncOn, mmap bool) (logs [plWriters]*plWriterLog, openFailed bool) {
	for g := range logs {
		logs[g] = &plWriterLog{}
	}
	db, err := Open(dir, plOptions(syncOn, mmap, p))
	if err != nil {
		return logs, true
	}
	var clock atomic.Int64
	var wg sync.WaitGroup
	for g := range plWriters {
		l := logs[g]
		wg.Go(func() {
			for n := range plOpsPerWriter {
				l.start = append(l.start, clock.Add(1))
				l.submitted = n + 1
				if err := plCommit(db, g, n); err != nil {
					return
				}
				l.ack = append(l.ack, clock.Add(1))
				l.acked = n + 1
				if g == 0 && n%plFlushEvery == plFlushEvery-1 && db.Flush() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	p.Cut() // if the workload ended first, the power goes off at its end
	db.Close()
	return logs, false
}

// plState is the state of one writer's keys after its first j ops.
func plState(g, j int) map[string]string {
	st := make(map[string]string)
	for n := range j {
		plApply(st, g, n)
	}
	return st
}

// plApply applies op n of writer g to st.
func plApply(st map[string]string, g, n int) {
	if start, end, ok := plRange(g, n); ok {
		for k := range st {
			if start <= k && k < end {
				delete(st, k)
			}
		}
	}
	keys, values, _ := plEffect(g, n)
	for i, k := range keys {
		if values[i] == nil {
			delete(st, k)
		} else {
			st[k] = string(values[i])
		}
	}
}

// plCheck reopens the store in dir on the OS file system and checks it
// against the histories; it returns the problem found, "" if none.
// The store is reopened through booted, the PowerLoss after its Restore:
// it reports a new boot ID, as a machine does after a power cut, which is
// what lets recovery treat damage beyond the last sync as a power cut's.
func plCheck(dir string, booted vfs.FS, sync, mmap bool, logs [plWriters]*plWriterLog) string {
	o := plOptions(sync, mmap, booted)
	o.DisableAutoCompaction = true // the check only reads: spare the fsyncs
	db, err := Open(dir, o)
	if err != nil {
		return fmt.Sprintf("reopen: %v", err)
	}
	defer db.Close()
	got := make([]map[string]string, plWriters)
	for g := range got {
		got[g] = make(map[string]string)
	}
	it, err := db.NewIterator(nil)
	if err != nil {
		return fmt.Sprintf("iterator: %v", err)
	}
	for k, v := range it.All() {
		var g int
		if _, err := fmt.Sscanf(string(k), "w%d/", &g); err != nil || g < 0 || g >= plWriters {
			it.Close()
			return fmt.Sprintf("key %q was never written", k)
		}
		got[g][string(k)] = string(v)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Sprintf("iterating: %v", err)
	}

	// For each writer, the prefixes of its history its keys are
	// consistent with.
	var jmin, jmax [plWriters]int
	for g, l := range logs {
		var fits []int
		st := make(map[string]string)
		for j := 0; ; j++ {
			if mapsEqual(st, got[g]) {
				fits = append(fits, j)
			}
			if j == l.submitted {
				break
			}
			plApply(st, g, j)
		}
		if len(fits) == 0 {
			return fmt.Sprintf("writer %d: its keys match no prefix of its %d ops (%d acknowledged): a torn batch or a foreign value; %s",
				g, l.submitted, l.acked, describeDiff(g, l, got[g]))
		}
		jmin[g], jmax[g] = fits[0], fits[len(fits)-1]
		if sync && jmax[g] < l.acked {
			return fmt.Sprintf("writer %d: lost acknowledged writes: holds the state after %d ops, %d were acknowledged; %s",
				g, jmax[g], l.acked, describeDiff(g, l, got[g]))
		}
	}
	// A hole: op jmax[g] of writer g (the first it surely lost) was
	// acknowledged before op jmin[h]-1 of writer h (the last it surely
	// kept) was submitted.
	for g, lg := range logs {
		if jmax[g] >= lg.acked {
			continue
		}
		for h, lh := range logs {
			if jmin[h] > 0 && lh.start[jmin[h]-1] > lg.ack[jmax[g]] {
				return fmt.Sprintf("hole: writer %d lost its op %d (acknowledged at tick %d) but writer %d kept its op %d (submitted at tick %d)",
					g, jmax[g], lg.ack[jmax[g]], h, jmin[h]-1, lh.start[jmin[h]-1])
			}
		}
	}
	return ""
}

// describeDiff names the first key whose value is not that of the last
// acknowledged state, for the failure message.
func describeDiff(g int, l *plWriterLog, got map[string]string) string {
	want := plState(g, l.acked)
	keys := make([]string, 0, len(want)+len(got))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w, wok := want[k]
		v, vok := got[k]
		if w != v || wok != vok {
			return fmt.Sprintf("first difference %s: want %.24q (present %v), have %.24q (present %v)", k, w, wok, v, vok)
		}
	}
	return "no difference with the acknowledged state"
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// plRun makes one cut: a fresh store in a fresh directory, the power off
// after operation cutAt (0: at the end of the workload), Restore, check.
func plRun(t *testing.T, seed uint64, sync, mmap bool, cutAt int) plCut {
	rng := rand.New(rand.NewPCG(seed, 0x9017e7))
	c := plCut{seed: seed, sync: sync, mmap: mmap, cutAt: cutAt, mode: powerfs.Writeback(rng.IntN(3))}
	dir, err := os.MkdirTemp(t.TempDir(), "store")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := powerfs.New(vfs.Default, &powerfs.Options{SkipRealSync: true})
	p.CutAfter(cutAt)
	logs, openFailed := plWorkload(dir, p, sync, mmap)
	c.ops, c.openErr, c.mapped = p.Ops(), openFailed, p.Mapped()
	if c.restored, err = p.Restore(c.mode, rng.Uint64()); err != nil {
		t.Fatalf("%v: restore: %v", c, err)
	}
	for _, l := range logs {
		c.acked += l.acked
	}
	// A read-only pass through a PowerLoss (bbolt's read-only open of the
	// manifest included) must work and change nothing.
	vp := powerfs.New(vfs.Default, nil)
	// (No MANIFEST yet is fine: the power went off while Open created it.)
	if _, err := VerifyDir(context.Background(), vp, dir); err != nil && !errors.Is(err, ErrNotStore) {
		c.problem = fmt.Sprintf("VerifyDir through a PowerLoss: %v", err)
		return c
	}
	if n := vp.Ops(); n != 0 {
		c.problem = fmt.Sprintf("VerifyDir made %d mutating operations", n)
		return c
	}
	c.problem = plCheck(dir, p, sync, mmap, logs)
	return c
}

func TestPowerLoss(t *testing.T) {
	cuts := *powerLossCuts
	if testing.Short() && cuts == 30 {
		cuts = 8
	}
	base := *powerLossSeed
	if base == 0 {
		base = uint64(time.Now().UnixNano())
	}
	t.Logf("base seed %d (rerun with -powerloss.seed %d)", base, base)
	for _, mmap := range []bool{true, false} {
		for _, sync := range []bool{true, false} {
			t.Run(fmt.Sprintf("mmap=%v/sync=%v", mmap, sync), func(t *testing.T) {
				testPowerLoss(t, base, cuts, sync, mmap)
			})
		}
	}
}

// testPowerLoss makes cuts cuts of the workload with the given Sync mode
// and WAL write path.
func testPowerLoss(t *testing.T, base uint64, cuts int, sync, mmap bool) {
	// Count the workload's operations once, uncut, to draw the
	// cut points from; a run that makes fewer operations (the
	// interleaving differs) is cut at its end.
	calib := plRun(t, base, sync, mmap, 0)
	if calib.problem != "" {
		t.Errorf("uncut run: %s", calib.problem)
	}
	// The default path must really be the mapped one, or this
	// half of the test would only repeat the other.
	if mmap && runtime.GOOS == "linux" && calib.mapped == 0 {
		t.Errorf("uncut run with mmap: no WAL was mapped")
	}
	if !mmap && calib.mapped != 0 {
		t.Errorf("uncut run with DisableMmap: %d files mapped", calib.mapped)
	}
	t.Logf("uncut workload: %d operations, %d writes acknowledged, %d WAL files mapped", calib.ops, calib.acked, calib.mapped)
	rng := rand.New(rand.NewPCG(base, 1))
	var (
		failed   []plCut
		acked    int
		openErrs int
		byMode   [3]int
		restored powerfs.RestoreStats
		start    = time.Now()
	)
	for i := range cuts {
		seed := base + uint64(i) + 1
		if sync {
			seed += 1 << 32
		}
		if mmap {
			seed += 1 << 33
		}
		c := plRun(t, seed, sync, mmap, 1+rng.IntN(calib.ops))
		acked += c.acked
		byMode[c.mode]++
		restored.Removed += c.restored.Removed
		restored.Revived += c.restored.Revived
		restored.RolledBack += c.restored.RolledBack
		restored.Kept += c.restored.Kept
		restored.Lost += c.restored.Lost
		if c.openErr {
			openErrs++
		}
		if c.problem != "" {
			failed = append(failed, c)
		}
	}
	t.Logf("%d cuts in %v (writeback none/prefix/subset %d/%d/%d, %d during Open): %d acknowledged writes checked; "+
		"Restore removed %d names, revived %d, rolled back %d files, kept %d and lost %d unsynced bytes",
		cuts, time.Since(start).Round(time.Millisecond), byMode[0], byMode[1], byMode[2], openErrs, acked,
		restored.Removed, restored.Revived, restored.RolledBack, restored.Kept, restored.Lost)
	if len(failed) == 0 {
		return
	}
	kinds := make(map[string]int)
	for _, c := range failed {
		kinds[fmt.Sprintf("%s (writeback %v)", problemKind(c.problem), c.mode)]++
	}
	t.Errorf("%d of %d cuts failed: %v", len(failed), cuts, kinds)
	for i, c := range failed {
		if i == 20 {
			t.Errorf("... and %d more", len(failed)-i)
			break
		}
		t.Errorf("%v: %s", c, c.problem)
	}
}

// problemKind groups failure messages for the summary.
func problemKind(p string) string {
	switch {
	case strings.Contains(p, "reopen") && strings.Contains(p, "corrupt"):
		return "reopen: corrupt"
	case strings.HasPrefix(p, "reopen"):
		return "reopen: other"
	case strings.Contains(p, "lost acknowledged"):
		return "lost acknowledged writes"
	case strings.HasPrefix(p, "hole"):
		return "hole"
	case strings.Contains(p, "match no prefix"):
		return "no prefix"
	}
	return "other"
}
