package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/bloomkv/bloomkv"
)

// bench is one run: its configuration, work directory, data set, report,
// and the fill-random store that the sections after the workloads read.
type bench struct {
	cfg    config
	stderr io.Writer
	rep    *reporter
	work   string
	data   *dataset
	ioCost procIO // what sampling /proc/self/io costs; subtracted from every result

	main    *bloomkvStore // the fill-random store; nil once closed
	getMiss result        // its get-miss, reused by the filter comparison
	fills   []result      // fill-seq, fill-random: for the baseline table
	reads   []result      // get-hit, get-miss, mixed: for the baseline table
	// compactions are fill-random's latest merges, taken before any
	// reopen (-drop-cache) resets the DB's history.
	compactions []bloomkv.CompactionInfo
}

// run is the whole benchmark: main parses the flags and calls it; the
// smoke test calls it with tiny sizes. The text report goes to stdout
// (unless -json -), progress bars to stderr.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Report != "" { // written at the end: a wrong path must stop the run before it, not after
		if err := os.MkdirAll(cfg.Report, 0o755); err != nil {
			return fmt.Errorf("-report: %w", err)
		}
		if cfg.ReportPeers != "" {
			if _, err := readPeers(cfg.ReportPeers); err != nil {
				return fmt.Errorf("-report-peers: %w", err)
			}
		}
	}
	b := &bench{cfg: cfg, stderr: stderr, rep: &reporter{text: stdout}, ioCost: probeCost()}
	closeJSON, err := b.openJSON(stdout)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeJSON()) }()
	var text bytes.Buffer // the text report, for -report's page
	if cfg.Report != "" {
		b.rep.html = &htmlReport{keys: cfg.Keys}
		b.rep.text = io.MultiWriter(b.rep.text, &text)
	}

	if b.work, err = os.MkdirTemp(cfg.Dir, "kvbench-"); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	defer func() { err = errors.Join(err, b.cleanup()) }()

	start := time.Now()
	b.data = newDataset(cfg.Keys, cfg.ValueSize, cfg.Seed)
	b.header(time.Since(start))
	phases := []func(context.Context) error{b.workloads, b.concurrentReads, b.filterComparison, b.negativeLookups, b.prefixLookups, b.filterMemory, b.fillReport, b.fprSweep, b.baseline}
	for _, phase := range phases {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	b.rep.endSection()
	b.rep.printf("\ntotal time %s\n", time.Since(start).Round(time.Millisecond))
	b.printMemory()
	if b.rep.html != nil {
		path, err := b.rep.html.write(cfg.Report, cfg.ReportPeers, text.String())
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "report written to %s\n", path)
	}
	return nil
}

// openJSON sets up -json: a file, or stdout in place of the text report.
func (b *bench) openJSON(stdout io.Writer) (closeFn func() error, err error) {
	switch b.cfg.JSON {
	case "":
		return func() error { return nil }, nil
	case "-":
		b.rep.json, b.rep.text = json.NewEncoder(stdout), io.Discard
		return func() error { return nil }, nil
	}
	f, err := os.Create(b.cfg.JSON)
	if err != nil {
		return nil, fmt.Errorf("-json: %w", err)
	}
	b.rep.json = json.NewEncoder(f)
	return f.Close, nil
}

// cleanup closes the store still open and removes the work directory
// unless -keep.
func (b *bench) cleanup() error {
	var err error
	if b.main != nil {
		err = b.main.close()
		b.main = nil
	}
	if b.cfg.Keep {
		fmt.Fprintf(b.stderr, "kvbench: stores kept in %s\n", b.work)
		return err
	}
	return errors.Join(err, os.RemoveAll(b.work))
}

func (b *bench) header(dataTime time.Duration) {
	c, d := b.cfg, b.data
	b.rep.printf("kvbench: bloomkv on %s %s/%s, %d CPUs (GOMAXPROCS %d)\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	b.rep.printf("data set:  %s keys of %d B with %d B values (%s), seed %d, made in %s\n",
		fmtInt(int64(d.len())), keySize, c.ValueSize, fmtBytes(float64(d.bytes())), c.Seed, dataTime.Round(time.Millisecond))
	b.rep.printf("stores:    %s bits/key, memtable %s, block cache %s, %s compression, %s, %s, %s\n",
		fmtNum(c.BitsPerKey), fmtBytes(float64(c.MemtableSize)), fmtBytes(float64(c.CacheSize)), c.Compression,
		onOff(c.Sync, "fsync per write", "no fsync per write"), onOff(c.NoMmap, "pread", "mmap"),
		onOff(c.NoCompaction, "no background compaction", "background compaction"))
	reads := fmt.Sprintf("%s per workload", c.Duration)
	if c.Ops > 0 {
		reads = fmt.Sprintf("%s operations per workload", fmtInt(c.Ops))
	}
	cache := "page cache left warm (files written moments before are served from memory)"
	if c.DropCache {
		cache = "page cache dropped before every read phase"
	}
	b.rep.printf("reads:     %s, one goroutine; %s\n", reads, cache)
}

func onOff(on bool, yes, no string) string {
	if on {
		return yes
	}
	return no
}

// openStore opens a fresh bloomkv store in a subdirectory of the work dir,
// with background compaction unless -no-compaction.
func (b *bench) openStore(name string, bitsPerKey float64) (*bloomkvStore, error) {
	return openBloomkv(filepath.Join(b.work, name), b.cfg, bitsPerKey, true)
}

// finishResult fills in what every result of a section shares and writes
// its JSON record.
func (b *bench) finishResult(r *result, section string, bitsPerKey float64) error {
	r.Section, r.BitsPerKey = section, bitsPerKey
	return b.rep.record(r)
}

// workloadsSection is the section name of the workloads' JSON records.
const workloadsSection = "workloads"

// workloads runs fill-seq and fill-random on fresh stores, then the read
// workloads on the fill-random store, which stays open for later sections.
func (b *bench) workloads(ctx context.Context) error {
	b.rep.section("Workloads (one goroutine; latencies to within 3.1%)")
	if err := b.runFills(ctx); err != nil {
		return err
	}
	if err := b.runReads(ctx); err != nil {
		return err
	}
	b.printWorkloads()
	return b.scans(ctx)
}

// runFills loads the data set into two fresh stores, in key order and in
// random order. The first is removed at once: only the second is read.
func (b *bench) runFills(ctx context.Context) error {
	bpk := b.cfg.BitsPerKey
	seq, err := b.openStore("fill-seq", bpk)
	if err != nil {
		return err
	}
	fillSeq, err := b.measure(ctx, seq, fillWorkload(seq, "fill-seq", b.data, sequential))
	if err = errors.Join(err, seq.close(), os.RemoveAll(seq.dir())); err != nil {
		return err
	}
	if b.main, err = b.openStore("fill-random", bpk); err != nil {
		return err
	}
	fillRandom, err := b.measure(ctx, b.main, fillWorkload(b.main, "fill-random", b.data, b.data.randomOrder))
	if err != nil {
		return err
	}
	b.compactions = b.main.db.Stats().RecentCompactions
	b.fills = []result{fillSeq, fillRandom}
	for i := range b.fills {
		b.fills[i].BytesPerOp = keySize + b.cfg.ValueSize
		if err := b.finishResult(&b.fills[i], workloadsSection, bpk); err != nil {
			return err
		}
	}
	return nil
}

// runReads runs get-hit, get-miss and mixed on the fill-random store.
func (b *bench) runReads(ctx context.Context) error {
	for _, w := range []struct {
		name     string
		hitRatio float64
	}{{"get-hit", 1}, {"get-miss", 0}, {"mixed", b.cfg.HitRatio}} {
		r, err := b.readPhase(ctx, b.main, b.readWorkload(b.main, w.name, b.data, w.hitRatio))
		if err != nil {
			return err
		}
		if w.name == "mixed" {
			r.Variant = fmt.Sprintf("%s%% hits", fmtNum(100*w.hitRatio))
		}
		if err := b.finishResult(&r, workloadsSection, b.cfg.BitsPerKey); err != nil {
			return err
		}
		b.reads = append(b.reads, r)
	}
	b.getMiss = b.reads[1]
	return nil
}

func (b *bench) printWorkloads() {
	latencyTable(append(slices.Clone(b.fills), b.reads...)).write(b.rep.text)
	b.rep.printf("\nWrites: one Put per operation; settle = after the last Put, the final flush and the background\n")
	b.rep.printf("compactions until the store is at rest (not in ops/s). wchar counts WAL, flush and compaction writes.\n")
	writeTable(b.fills).write(b.rep.text)
	b.printCompactions()
	sh := b.reads[0].Shape
	b.rep.printf("\nReads on the fill-random store: %d segments, %s on disk, %s of filters.\n",
		sh.Segments, fmtBytes(float64(sh.SegmentBytes)), fmtBytes(float64(sh.FilterBytes)))
	b.rep.printf("probed = segments whose filter was asked (key in range), skipped = ruled out by it, false+ = it said maybe wrongly.\n")
	readTable(b.reads).write(b.rep.text)
}

// filterComparison is "disk reads avoided": the workloads' get-miss against
// the same workload on a twin store holding the same data without filters.
func (b *bench) filterComparison(ctx context.Context) (err error) {
	const section = "disk-reads-avoided"
	b.rep.section("Disk reads avoided: get-miss with and without filters")
	if b.cfg.BitsPerKey == 0 {
		b.rep.printf("skipped: -disable-filters leaves nothing to compare\n")
		return nil
	}
	nf, err := b.openStore("no-filters", 0)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, nf.close()) }()
	load, err := b.measure(ctx, nf, fillWorkload(nf, "load no-filters", b.data, b.data.randomOrder))
	if err != nil {
		return err
	}
	without, err := b.readPhase(ctx, nf, b.readWorkload(nf, "get-miss", b.data, 0))
	if err != nil {
		return err
	}
	with := b.getMiss
	with.Variant, without.Variant = "filters", "no filters"
	if err := errors.Join(b.finishResult(&with, section, b.cfg.BitsPerKey), b.finishResult(&without, section, 0)); err != nil {
		return err
	}
	b.rep.printf("The twin store was loaded with the same %s keys in the same order (DisableFilters) in %s;\n",
		fmtInt(load.Ops), time.Duration(load.Seconds*1e9).Round(time.Millisecond))
	b.rep.printf("both ran get-miss with the same key sequence (%s and %s Gets; the filters column is the get-miss above).\n",
		fmtInt(with.Ops), fmtInt(without.Ops))
	comparisonTable(with, without, b.cfg.BitsPerKey).write(b.rep.text)
	return b.coldComparison(ctx, nf)
}

// coldComparison runs get-miss and get-hit again on both stores after
// evicting their files from the page cache, so that the table shows what
// the filters save at the device (read_bytes) and in page faults, not
// only in block counters.
func (b *bench) coldComparison(ctx context.Context, nf kvStore) error {
	b.rep.printf("\nCold: the same Gets after evicting each store's files from the page cache (store reopened).\n")
	if _, ok := readProcIO(); !ok || !dropCacheSupported {
		b.rep.printf("skipped: needs Linux with /proc/self/io (device bytes) and fadvise (eviction)\n")
		return nil
	}
	ops := b.cfg.ColdOps
	if b.cfg.Ops > 0 {
		ops = int(min(b.cfg.Ops, int64(ops)))
	}
	var results []result
	for _, run := range []struct {
		s       kvStore
		variant string
		bpk     float64
	}{{b.main, "filters, cold", b.cfg.BitsPerKey}, {nf, "no filters, cold", 0}} {
		for _, w := range []struct {
			name     string
			hitRatio float64
		}{{"get-miss", 0}, {"get-hit", 1}} {
			if err := run.s.reopen(dropCache); err != nil {
				return err
			}
			wl := b.readWorkload(run.s, w.name, b.data, w.hitRatio)
			wl.ops, wl.dur = int64(ops), 0
			r, err := b.measure(ctx, run.s, wl)
			if err != nil {
				return err
			}
			r.Variant = run.variant
			if err := b.finishResult(&r, "disk-reads-avoided-cold", run.bpk); err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	b.rep.printf("%s Gets per row; read_bytes is what reached the block device, majflt the major page faults.\n", fmtInt(int64(ops)))
	readTable(results).write(b.rep.text)
	return nil
}

// negHitRatio is the share of present keys among the negative-lookup
// scenario's Gets: Bigtable's case of asking many SSTables for rows or
// columns that mostly are not there.
const negHitRatio = 0.1

// negativeLookups is the Bigtable-style scenario: a store with many
// segments (a flush every so many Puts and no compaction), 90% of the Gets
// for absent keys, with filters and without.
func (b *bench) negativeLookups(ctx context.Context) error {
	const section = "negative-lookups"
	b.rep.section("Negative lookups, Bigtable-style: many segments, mostly absent keys")
	if b.cfg.BitsPerKey == 0 {
		b.rep.printf("skipped: -disable-filters leaves nothing to compare\n")
		return nil
	}
	d := newDataset(max(b.cfg.Keys/8, 1), b.cfg.ValueSize, b.cfg.Seed+1)
	perSegment := max((d.len()+b.cfg.NegSegments-1)/b.cfg.NegSegments, 1)
	var runs [2]result
	for i, bpk := range []float64{b.cfg.BitsPerKey, 0} {
		r, err := b.negativeRun(ctx, d, perSegment, bpk)
		if err != nil {
			return err
		}
		r.Variant = "filters"
		if bpk == 0 {
			r.Variant = "no filters"
		}
		if err := b.finishResult(&r, section, bpk); err != nil {
			return err
		}
		runs[i] = r
	}
	b.rep.printf("%s keys loaded in random order with a Flush every %s Puts and no compaction; Gets %s%% for present keys.\n",
		fmtInt(int64(d.len())), fmtInt(int64(perSegment)), fmtNum(100*negHitRatio))
	comparisonTable(runs[0], runs[1], b.cfg.BitsPerKey).write(b.rep.text)
	return nil
}

// negativeRun loads d into a fresh store, flushing every perSegment Puts,
// and measures the negative-lookup workload on it.
func (b *bench) negativeRun(ctx context.Context, d *dataset, perSegment int, bpk float64) (_ result, err error) {
	name := "negative-filters"
	if bpk == 0 {
		name = "negative-no-filters"
	}
	s, err := openBloomkv(filepath.Join(b.work, name), b.cfg, bpk, false)
	if err != nil {
		return result{}, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	load := fillWorkload(s, "load "+name, d, d.randomOrder)
	put := load.op
	load.op = func(n int64) error {
		if err := put(n); err != nil || (n+1)%int64(perSegment) != 0 {
			return err
		}
		return s.db.Flush()
	}
	if _, err := b.measure(ctx, s, load); err != nil {
		return result{}, err
	}
	return b.readPhase(ctx, s, b.readWorkload(s, "negative-lookup", d, negHitRatio))
}

// printCompactions lists the fill-random store's latest compactions: what
// each merged, and how the output's filter was made (rebuilt from the
// merged keys, or the union of the inputs' filters) with its FPR estimated
// from the bits.
func (b *bench) printCompactions() {
	cs := b.compactions
	if len(cs) == 0 {
		return
	}
	b.rep.printf("\nThe last %d compactions of fill-random (filter: how the output's filter was made; est. FPR from its bits;\n", len(cs))
	b.rep.printf("measured FPR: the share of %s random absent keys the output's filter passes):\n", fmtInt(65536))
	t := &table{header: []string{"inputs", "in", "out", "entries", "tier", "major", "filter", "filter time", "est. FPR", "measured FPR", "took"}}
	for _, c := range cs {
		t.add(fmtNum(float64(c.Inputs)), fmtBytes(float64(c.InputBytes)), fmtBytes(float64(c.OutputBytes)),
			fmtNum(float64(c.OutputEntries)), fmtNum(float64(c.Tier)), onOff(c.Major, "yes", "no"),
			c.FilterPath, c.FilterPlan.Round(time.Microsecond).String(), fmt.Sprintf("%.3f%%", 100*c.EstimatedFPR),
			fmt.Sprintf("%.3f%%", 100*c.MeasuredFPR), c.Duration.Round(time.Millisecond).String())
	}
	t.write(b.rep.text)
}

// printMemory states the process's memory honestly: RSS counts the pages
// of mapped segments and WAL, which are the kernel's page cache (shared,
// reclaimable); the anonymous part is what the process itself holds.
func (b *bench) printMemory() {
	m, ok := readMemStatus()
	if !ok {
		b.rep.printf("memory: /proc/self/status unavailable on this system\n")
		return
	}
	b.rep.printf("memory: peak RSS %s; at the end RSS %s = %s anonymous (heap, stacks: the process's own, data set included) + %s file pages (mapped segments and WAL: page cache, shared and reclaimable)\n",
		fmtBytes(float64(m.PeakRSS)), fmtBytes(float64(m.RSS)), fmtBytes(float64(m.Anon)), fmtBytes(float64(m.File)))
	_ = b.rep.record(struct {
		Kind string `json:"kind"` // "memory"
		memStatus
	}{"memory", m})
}
