package bloomkv

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/compaction"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/merge"
	"github.com/bloomkv/bloomkv/internal/rangedel"
	"github.com/bloomkv/bloomkv/segment"
)

// CompactionInfo describes one committed compaction.
type CompactionInfo struct {
	Inputs        int    `json:"inputs"`         // segments merged
	InputBytes    int64  `json:"input_bytes"`    // their total size
	OutputBytes   int64  `json:"output_bytes"`   // size of the merged segment (0 if everything was deleted)
	OutputEntries uint64 `json:"output_entries"` // entries in the merged segment
	Tier          uint32 `json:"tier"`           // size tier of the output
	Major         bool   `json:"major"`          // included the oldest segment, so tombstones were dropped
	// DeleteOnly says the inputs were removed without a merge: newer range
	// tombstones deleted every key in them for every reader (Inputs and
	// InputBytes count them; nothing was written).
	DeleteOnly   bool          `json:"delete_only"`
	FilterPath   string        `json:"filter_path"`   // "rebuild", "union" or "union+fold" (compaction.FilterPath)
	FilterPlan   time.Duration `json:"filter_plan"`   // time spent planning (and, on the union path, building) the filter
	EstimatedFPR float64       `json:"estimated_fpr"` // the output filter's FPR estimated from its bits (0 without filters)
	MeasuredFPR  float64       `json:"measured_fpr"`  // the fraction of fprProbes random absent keys the output filter passes
	Duration     time.Duration `json:"duration"`      // wall time of the whole compaction
}

const historyLen = 16

// Compact flushes the memtable and merges every segment into one, dropping
// deleted keys and overwritten versions. Reads and writes go on meanwhile;
// the input files are removed once the last reader using them is done.
// A merge that runs out of a resource writing its output (ENOSPC, EMFILE,
// …) returns that error and leaves the inputs in place and the DB
// writable; so does Flush's failure of the same kind (see Flush).
func (db *DB) Compact() error {
	err := db.compact()
	db.closer.wait() // the inputs' files are gone when Compact returns
	return err
}

func (db *DB) compact() error {
	if err := db.Flush(); err != nil {
		return err
	}
	db.compactMu.Lock()
	defer db.compactMu.Unlock()
	db.mu.Lock()
	if err := db.writableLocked(); err != nil {
		db.mu.Unlock()
		return err
	}
	inputs := db.refSegmentsLocked(0, len(db.segments))
	db.mu.Unlock()
	defer unrefAll(inputs)
	if len(inputs) == 0 || len(inputs) == 1 && !hasGarbage(inputs[0]) {
		return nil // nothing to merge, nothing to drop
	}
	var tier uint32
	for _, s := range inputs {
		tier = max(tier, s.meta.Tier+1)
	}
	if err := db.compactSegments(inputs, tier, true); err != nil {
		return fmt.Errorf("bloomkv: compact: %w", err)
	}
	return nil
}

// WaitForCompactions blocks until no background compaction runs or is
// due: the policy has nothing left to merge. Benchmarks and tests use it to
// measure a settled store. It returns early with ctx's error, with
// ErrClosed if the DB is closed meanwhile, and with an error matching
// ErrReadOnly once a flush or compaction has failed: the work it waits for
// will then never be done. While flushes or compactions fail for want of
// a resource and are retried, it asks for an attempt at once and returns
// the failure of the first attempt that fails while it waits (matching
// the errno, not ErrReadOnly).
func (db *DB) WaitForCompactions(ctx context.Context) error {
	err := db.waitForCompactions(ctx)
	db.closer.wait() // and the files they made obsolete are gone
	return err
}

func (db *DB) waitForCompactions(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		db.mu.Lock()
		db.cond.Broadcast()
		db.mu.Unlock()
	})
	defer stop()
	db.mu.Lock()
	defer db.mu.Unlock()
	flushFails, compactFails, kicked := db.flushRetry.fails, db.compactRetry.fails, false
	for {
		if db.opts.ReadOnly && !db.closed {
			return nil // no background work ever runs
		}
		if err := db.writableLocked(); err != nil {
			return err
		}
		if db.compacting == 0 && len(db.imm) == 0 {
			return nil
		}
		// While flushes or merges fail for want of a resource, the next
		// attempt (asked for now) says whether the shortage is over: its
		// failure is returned rather than waited out.
		if err := db.flushRetry.failedSince(flushFails); err != nil {
			return err
		}
		if err := db.compactRetry.failedSince(compactFails); err != nil {
			return err
		}
		if !kicked {
			kicked = true
			db.kickLocked(&db.flushRetry)
			db.kickLocked(&db.compactRetry)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		db.cond.Wait()
	}
}

// hasGarbage reports whether a segment holds what a major compaction
// drops: tombstones (point or range), or versions kept for a snapshot that
// may since have been released (older versions of a key, puts a range
// tombstone covers).
func hasGarbage(s *segHandle) bool {
	return s.garbage > 0 || s.reader.Properties().RangeDels > 0
}

func anyObsolete(segs []*segHandle) bool {
	for _, s := range segs {
		if s.obsolete.Load() {
			return true
		}
	}
	return false
}

// scheduleCompactionLocked starts background compactions, up to
// Options.CompactionConcurrency, while the policy has merges to offer,
// and beyond that while the segment count is at the urgent threshold.
//
// The extra merges keep write stalls short. A merge of an old tier takes
// as long as dozens of flushes (1.2 s for a tier-3 merge of a
// 2·10^6-key fill on two cores, against 15 ms per flush); with one
// compaction at a time the flushes landing meanwhile would wait behind it,
// reach the stall threshold and stop the writers until it ends. Past the
// urgent threshold a merge of the newest run starts beside it instead:
// pickLocked takes only segments newer than every busy one, so the merges
// stay disjoint and contiguous, and the lowest tier goes first, so the
// extra merge is short. Each extra merge runs on a run newer than the
// last, so there are at most as many as tiers. On two cores they take CPU
// from the writers only when the writers were about to stall anyway.
func (db *DB) scheduleCompactionLocked() {
	for db.mayCompactLocked() {
		job := db.pickLocked()
		if job == nil {
			return
		}
		db.compacting++
		db.bgWG.Add(1)
		go db.compactLoop(job)
	}
}

// mayCompactLocked reports whether one more background compaction may
// start: within Options.CompactionConcurrency, or past it while the
// segment count is at the urgent threshold.
func (db *DB) mayCompactLocked() bool {
	if db.closed || db.bgErr != nil || db.opts.DisableAutoCompaction || db.opts.ReadOnly {
		return false
	}
	if db.compactRetry.err != nil {
		return false // the loop that failed retries after its backoff
	}
	return db.compacting < db.opts.CompactionConcurrency || len(db.segments) >= db.urgentAt
}

// A compactionJob is one background merge of inputs as pick says, or,
// with a nil pick, the removal of inputs that newer range tombstones
// delete entirely.
type compactionJob struct {
	pick   *compaction.Pick
	inputs []*segHandle
}

// run carries out the job.
func (db *DB) run(job *compactionJob) error {
	if job.pick == nil {
		return db.dropSegments(job.inputs)
	}
	return db.compactSegments(job.inputs, job.pick.Tier, job.pick.IncludesOldest)
}

// pickLocked chooses the next background job among the segments newer
// than any a running compaction uses, so that concurrent merges take
// disjoint runs and every run stays contiguous: first segments that newer
// range tombstones delete entirely (dropped without a merge), then what
// the policy offers. The inputs are marked busy and referenced. It
// returns nil if there is nothing to do.
func (db *DB) pickLocked() *compactionJob {
	free := len(db.segments)
	for i, s := range db.segments {
		if db.busy[s] {
			free = i
			break
		}
	}
	var job compactionJob
	if covered := db.deletedSegmentsLocked(db.segments[:free]); len(covered) > 0 {
		job.inputs = covered
	} else {
		job.pick = db.policy.Pick(db.metasLocked()[:free])
		if job.pick == nil && free == len(db.segments) {
			job.pick = db.garbageMergeLocked()
		}
		if job.pick == nil {
			return nil
		}
		// A run that ends just above a busy one does not hold the oldest data.
		job.pick.IncludesOldest = job.pick.IncludesOldest && free == len(db.segments)
		job.inputs = db.segments[job.pick.Start:job.pick.End]
	}
	job.inputs = slices.Clone(job.inputs)
	if db.busy == nil {
		db.busy = make(map[*segHandle]bool)
	}
	for _, s := range job.inputs {
		s.refs.Add(1)
		db.busy[s] = true
	}
	return &job
}

// garbageDensity is the share of garbage among the live entries at which
// a merge to drop it is due, and minGarbage the fewest entries of garbage
// that make one worth it. Garbage is what a scan of the latest state steps
// over and a major merge with no snapshot open drops (segmentGarbage):
// point tombstones, and the versions a snapshot kept — older versions of a
// key, and puts that a newer range tombstone deletes. A scan steps over
// each, and size-tiered merges drop them only in a merge that reaches the
// oldest segment, which the policy may not do for a long time: at 20% of
// the entries a scan spends up to two fifths of its steps on deleted data
// (a tombstone also hides a version), and the merge writes at most five
// entries per entry of garbage it drops. Versions a snapshot kept are
// never dropped otherwise: without this trigger a log truncated by
// DeleteRange while a snapshot was open kept every truncated entry in its
// compacted segment, and each FirstIndex stepped over all of them.
const (
	garbageDensity = 0.2
	minGarbage     = 64
)

// segmentGarbage returns how many entries of a segment a merge down to the
// oldest segment with no snapshot open would drop, from its properties:
// point tombstones, versions that are not the newest of their key in the
// segment (entries − distinct keys), and puts that a newer range tombstone
// covers (RangeCovered; compaction.Dedup counts them). A tombstone that is
// also an older version is counted twice, so the sum is capped at the
// entries: the trigger needs the order of magnitude, not the exact count.
// Versions shadowed by a newer segment are the size-tiered policy's
// business and are not counted.
func segmentGarbage(p segment.Properties) uint64 {
	return min(p.Entries, p.Tombstones+(p.Entries-p.DistinctKeys)+p.RangeCovered)
}

// garbageMergeLocked returns a major merge from the newest segment that
// holds garbage (segmentGarbage) down to the oldest, when garbage makes up
// garbageDensity of the live entries (as Pebble's tombstone-density
// compactions do for its levels). Not while a snapshot is open: it could
// keep the garbage, and the merge would be due again at once. With none
// open the merge drops all of it (its output counts 0), so it is not due
// again until new garbage is written; releasing the last snapshot asks for
// it (Snapshot.Close).
//
// What range tombstones cover in older segments (rangegarbage.go) counts
// only once it is a memtable's worth of bytes: below that the flushes of a
// store still written to merge it away with the rest soon enough, and one
// that stops growing keeps at most that much. Counted at any size, a raft
// log truncated every 1,000 entries made 66% more merges (113 against 68
// over 3·10^5 appends), for garbage the policy's merges took anyway.
func (db *DB) garbageMergeLocked() *compaction.Pick {
	if db.snapshots.Len() > 0 {
		return nil
	}
	covered := db.coveredBytesLocked() >= uint64(db.opts.MemtableSize)
	var entries, garbage uint64
	newest := -1
	for i, s := range db.segments {
		entries += s.meta.Entries
		g := s.garbage
		if covered {
			g += s.coveredGarbage()
		}
		garbage += g
		if newest < 0 && g > 0 {
			newest = i
		}
	}
	if garbage < minGarbage || float64(garbage) < garbageDensity*float64(entries) {
		return nil
	}
	pick := &compaction.Pick{Start: newest, End: len(db.segments), IncludesOldest: true}
	for _, s := range db.segments[newest:] {
		pick.Tier = max(pick.Tier, s.meta.Tier+1)
	}
	return pick
}

// deletedSegmentsLocked returns the segments of segs (newest first) that
// the range tombstones of the segments before them delete entirely: every
// version in them is older than a tombstone covering its key, for every
// reader that can see any of them (the latest state, and each open
// snapshot at or after the segment's oldest version). A merge would write
// nothing of them, so they can leave the manifest without one — as
// Pebble's delete-only compactions do. Segments that hold range tombstones
// of their own are kept: theirs may cover older data outside the span the
// newer ones cover.
//
// The lists are asked together (rangedel.CoverSpan), not merged: this
// runs under db.mu at every pick, and a merge of every newer list for
// each segment below them cost 33 ms a pick at 3·10^4 range deletions in
// each of four segments (BenchmarkPickBesideRangeDels), where the search
// costs what the fragments inside the segment's key range do.
func (db *DB) deletedSegmentsLocked(segs []*segHandle) []*segHandle {
	var (
		lists   []*rangedel.List // of the segments newer than s
		out     []*segHandle
		readers []uint64
	)
	for _, s := range segs {
		rd := s.reader.RangeDels()
		if len(lists) > 0 && rd.Empty() {
			if readers == nil {
				readers = append(db.snapshotSeqsLocked(), base.MaxSeq)
			}
			if deletedForAll(lists, s.meta, readers) {
				out = append(out, s)
			}
		}
		if !rd.Empty() {
			lists = append(lists, rd)
		}
	}
	return out
}

// deletedForAll reports whether the tombstones of lists delete every
// version of the segment described by m for each reader (a sequence
// number) that can see any of them.
func deletedForAll(lists []*rangedel.List, m base.SegmentMeta, readers []uint64) bool {
	for _, r := range readers {
		if r >= m.MinSeq && !rangedel.CoverSpan(lists, m.Smallest, m.Largest, m.MaxSeq, r) {
			return false
		}
	}
	return true
}

// dropSegments removes segments that newer range tombstones delete
// entirely (deletedSegmentsLocked) from the manifest and the live set.
func (db *DB) dropSegments(inputs []*segHandle) error {
	info := CompactionInfo{Inputs: len(inputs), DeleteOnly: true, FilterPath: "none"}
	start := time.Now()
	e := shapeEdit{removed: inputs}
	for _, s := range inputs {
		e.Remove = append(e.Remove, s.meta.FileNum)
		info.InputBytes += s.meta.Size
	}
	if err := db.logAndApply(e); err != nil {
		db.fail(fmt.Errorf("delete-only compaction: %w", err))
		return err
	}
	info.Duration = time.Since(start)
	db.recordCompaction(info)
	db.logger.Info("dropped deleted segments", "segments", len(inputs), "bytes", info.InputBytes)
	return nil
}

// compactLoop runs one merge, then more while the policy offers them and
// scheduleCompactionLocked would start them (an urgent merge's loop ends
// once the backlog is gone). It holds compactMu shared during each merge
// so that Compact, which takes it exclusively, never runs beside it.
func (db *DB) compactLoop(job *compactionJob) {
	defer db.bgWG.Done()
	for {
		var err error
		db.compactMu.RLock()
		if !anyObsolete(job.inputs) { // else a Compact merged them while this waited
			err = db.run(job)
		}
		db.compactMu.RUnlock()
		unrefAll(job.inputs)
		db.mu.Lock()
		for _, s := range job.inputs {
			delete(db.busy, s)
		}
		job = nil
		if isRetryable(err) {
			// Out of a resource before the manifest commit (retry.go):
			// the inputs are still live. Back off, keeping this loop's
			// slot (no other merge starts meanwhile: mayCompactLocked),
			// then pick again, as the segments may have changed.
			db.retryFailedLocked(&db.compactRetry, err)
			db.retryWaitLocked(&db.compactRetry)
			if !db.closed && db.bgErr == nil && !db.opts.DisableAutoCompaction {
				job = db.pickLocked()
			}
			if job != nil {
				db.mu.Unlock()
				continue
			}
			db.compactRetry.err = nil // nothing left to merge: no streak
		} else if err == nil {
			db.retrySucceededLocked(&db.compactRetry)
		}
		db.compacting-- // this loop's slot, free while it looks for more work
		if err == nil && db.mayCompactLocked() {
			job = db.pickLocked()
		}
		if job == nil {
			db.scheduleCompactionLocked() // a merge that ended may free a run for another
			db.cond.Broadcast()
			db.mu.Unlock()
			return
		}
		db.compacting++
		db.mu.Unlock()
	}
}

func (db *DB) metasLocked() []base.SegmentMeta {
	metas := make([]base.SegmentMeta, len(db.segments))
	for i, s := range db.segments {
		metas[i] = s.meta
	}
	return metas
}

// compactSegments merges inputs, a run of segments adjacent in time, into
// one segment of the given tier and swaps it in. With major (the run
// includes the oldest segment) tombstones are dropped too.
func (db *DB) compactSegments(inputs []*segHandle, tier uint32, major bool) error {
	start := time.Now()
	info := CompactionInfo{Inputs: len(inputs), Tier: tier, Major: major}
	srcs := make([]base.InternalIterator, len(inputs))
	rangeDels := make([]*rangedel.List, 0, len(inputs))
	for i, s := range inputs {
		it := s.reader.NewIterWithCounters(false, &db.compactionCounters)
		defer it.Close()
		// Values the output stores apart too are copied as the records
		// they are stored in (fillSegment); the rest are decoded.
		it.KeepValueRecords(db.opts.LargeValueSize)
		srcs[i] = it
		info.InputBytes += s.meta.Size
		if rd := s.reader.RangeDels(); !rd.Empty() {
			rangeDels = append(rangeDels, rd)
		}
	}
	filter := db.planFilter(inputs, &info)
	snaps := db.snapshotSeqs()
	it := compaction.NewDedup(merge.New(srcs...), snaps, major)
	var merged *rangedel.List
	if len(rangeDels) > 0 {
		merged = rangedel.Merge(rangeDels...)
		it.SetRangeDels(merged)
	}
	var keys uint64 // a hint for the filter's hash list: the writer caps it
	for _, s := range inputs {
		keys += s.meta.Entries
	}
	out, err := db.writeSegment(it, compaction.KeepRangeDels(merged, snaps, major), filter, tier, inputs, int(min(keys, math.MaxInt32)))
	if err != nil {
		if !isRetryable(err) { // else the inputs are still live: merge them later
			db.fail(fmt.Errorf("compaction: %w", err))
		}
		return err
	}
	e := shapeEdit{added: out, removed: inputs}
	if out != nil {
		e.Add = []base.SegmentMeta{out.meta}
		info.OutputBytes, info.OutputEntries = out.meta.Size, out.meta.Entries
		if f := out.reader.Filter(); f != nil {
			info.EstimatedFPR = f.EstimatedFPR()
			info.MeasuredFPR = measureFPR(f)
		}
	}
	for _, s := range inputs {
		e.Remove = append(e.Remove, s.meta.FileNum)
	}
	if err := db.logAndApply(e); err != nil {
		db.fail(fmt.Errorf("compaction: %w", err))
		return err
	}
	info.Duration = time.Since(start)
	db.recordCompaction(info)
	db.logger.Info("compacted", "inputs", len(inputs), "output", segName(out), "filter", info.FilterPath, "took", info.Duration)
	return nil
}

// planFilter decides how the output's filter is made: by OR-ing the
// inputs' filters when that is exact and keeps the target FPR (an
// overwrite-heavy merge), otherwise (nil) by the writer hashing the merged
// keys again. compaction/DESIGN.md has the arithmetic.
func (db *DB) planFilter(inputs []*segHandle, info *CompactionInfo) *bloom.Filter {
	info.FilterPath = compaction.PathRebuild.String()
	bpk := db.planBitsPerKey(inputs) // the output's share of filter memory (filtermem.go)
	if bpk <= 0 {
		return nil
	}
	filters := make([]*bloom.Filter, len(inputs))
	for i, s := range inputs {
		if filters[i] = s.reader.Filter(); filters[i] == nil {
			return nil
		}
	}
	t := time.Now()
	plan, f, err := compaction.PlanFilter(filters, bpk)
	info.FilterPlan = time.Since(t)
	if err != nil {
		db.logger.Warn("filter plan failed; rebuilding", "err", err)
		return nil
	}
	info.FilterPath = plan.Path.String()
	return f
}

// recordCompaction counts an installed compaction and keeps its
// description for Stats.
func (db *DB) recordCompaction(info CompactionInfo) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.stats.compactions.Add(1)
	if !info.DeleteOnly {
		db.stats.compactionBytesRead.Add(uint64(info.InputBytes))
	}
	db.stats.compactionBytesWritten.Add(uint64(info.OutputBytes))
	db.history = append(db.history, info)
	if len(db.history) > historyLen {
		db.history = db.history[1:]
	}
	db.cond.Broadcast()
}

// fprProbes is the number of absent keys measureFPR asks a filter about:
// enough to see a 1% rate to within about ±0.04 percentage points (one
// standard deviation) for about a millisecond of work.
const fprProbes = 1 << 16

// measureFPR returns the fraction of fprProbes random 16-byte keys that f
// passes. The keys come from a fixed-seed generator, so the figure is
// reproducible; a random 16-byte key collides with a stored one with
// negligible probability, so every "maybe" is a false positive.
func measureFPR(f *bloom.Filter) float64 {
	rng := rand.NewPCG(0x626c6f6f6d, 0x6b76)
	var key [16]byte
	passed := 0
	for range fprProbes {
		binary.LittleEndian.PutUint64(key[:8], rng.Uint64())
		binary.LittleEndian.PutUint64(key[8:], rng.Uint64())
		if f.Contains(key[:]) {
			passed++
		}
	}
	return float64(passed) / fprProbes
}
