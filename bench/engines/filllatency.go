package engines

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/trace"
	"slices"
	"strconv"
	"time"
)

// Flusher is implemented by engines with a public memtable flush
// (bloomkv, Pebble): Flush writes the memtable out and returns when it is
// on disk; Flushes counts the flushes the store has done, its own
// included, so a measurement can tell whether a flush happened by itself.
type Flusher interface {
	Flush() error
	Flushes() uint64
}

// WriteStatser is implemented by engines that count their write stalls
// (bloomkv's Stats).
type WriteStatser interface {
	WriteStats() WriteStats
}

// WriteStats are a WriteStatser's counters, cumulative since the store
// was opened: stalls, flushes and compactions, the time writers spent
// stalled, the part of it spent waiting for flushes (the rest waited for
// compactions), and the longest single stall.
type WriteStats struct {
	Stalls, Flushes, Compactions            uint64
	StallTime, FlushStallTime, LongestStall time.Duration
}

// since returns the growth of s's counters and times since s0's; the
// longest stall is s's.
func (s WriteStats) since(s0 WriteStats) WriteStats {
	return WriteStats{Stalls: s.Stalls - s0.Stalls, Flushes: s.Flushes - s0.Flushes, Compactions: s.Compactions - s0.Compactions,
		StallTime: s.StallTime - s0.StallTime, FlushStallTime: s.FlushStallTime - s0.FlushStallTime, LongestStall: s.LongestStall}
}

// FillLatencyConfig is the fill-latency workload: N Puts of distinct
// random 16-byte keys with ValueSize-byte incompressible values, one Put
// per call, no fsync (each adapter's ordinary fill, as in Run), every
// Put's latency recorded.
type FillLatencyConfig struct {
	N         int
	ValueSize int
	Seed      uint64
	Dir       string // parent of the stores; "" means os.TempDir()
	// Threshold: Puts slower than this are listed (SlowPuts) and counted;
	// 0 means the store's own measured flush time, or none.
	Threshold time.Duration
	// FlushBytes is how full each timed flush's memtable is (key, value
	// and entryOverhead bytes per entry); 0 means flushDataBytes.
	FlushBytes int
	// Trace, if set, is a file to write a runtime/trace flight-recorder
	// snapshot to, taken right after the Put above Threshold with the
	// most latency spent neither waiting in the OS's run queue nor
	// stalled in the store (rewritten each time such a Put comes): the
	// seconds before it. A trace.Log
	// ("enginebench slow put", its latency in ns) marks its end.
	Trace string
}

// flushRounds timed flushes measure a store's flush time (the median).
const flushRounds = 5

// flushDataBytes is how full each timed flush's memtable is, counted as
// a memtable counts: key, value and entryOverhead bytes per entry. 85% of
// the 4 MiB default memtable of bloomkv and Pebble: as full as it gets
// without either flushing on its own before the timed Flush.
const flushDataBytes = 4 << 20 * 85 / 100

// entryOverhead approximates what a memtable charges per entry besides
// its key and value (bloomkv: a skiplist node and its tower pointers,
// nodeOverhead in package memtable; Pebble's arena nodes are alike).
const entryOverhead = 80

// maxSlowPuts caps the list of slow Puts in a FillLatencyResult.
const maxSlowPuts = 50

// SlowPut is one Put slower than the threshold.
type SlowPut struct {
	Index  int     `json:"index"` // its position in the fill
	AtMs   float64 `json:"at_ms"` // when it started, ms after the fill began
	Micros float64 `json:"latency_us"`
	// Stalls, Flushes and Compactions are the WriteStatser counters'
	// growth since the previous slow Put (or the fill's start): what
	// happened in the store up to and including this Put.
	Stalls      uint64 `json:"stalls,omitempty"`
	Flushes     uint64 `json:"flushes,omitempty"`
	Compactions uint64 `json:"compactions,omitempty"`
	// StallMicros is the growth of the store's stall time over the same
	// span: of a Put's latency, the part the store spent waiting for a
	// flush or a compaction (one writer: every stall is a Put's). The
	// rest waited for something else: a CPU, the device, the runtime.
	StallMicros float64 `json:"stall_us,omitempty"`
	// With Trace only (Linux; the filling goroutine is then locked to its
	// OS thread, and bloomkv, Pebble and goleveldb run a lone writer's
	// commit on it): RunqueueWaitMicros is the time that thread spent
	// runnable but without a CPU (schedstat) over the SpanMicros from the
	// last sample (taken every schedSampleEvery Puts) to this Put's end.
	// When it is close to the Put's latency, the OS did not run the
	// writer (CPU starvation): not the store's doing.
	RunqueueWaitMicros float64 `json:"runqueue_wait_us,omitempty"`
	SpanMicros         float64 `json:"span_us,omitempty"`
}

// schedSampleEvery is how many Puts pass between run-queue wait samples
// in a traced fill.
const schedSampleEvery = 1024

// FillLatencyResult is one store's fill-latency run, one JSON line in
// enginebench -fill-latency.
type FillLatencyResult struct {
	Workload  string  `json:"workload"` // "fill-latency"
	Engine    string  `json:"engine"`
	Version   string  `json:"version,omitempty"` // filled in by the caller
	N         int     `json:"n"`
	ValueSize int     `json:"value_size"`
	Seed      uint64  `json:"seed"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// Put latency, nanoseconds (quantiles to within 0.8%, max exact).
	P50  int64 `json:"p50_ns"`
	P99  int64 `json:"p99_ns"`
	P999 int64 `json:"p99_9_ns"`
	Max  int64 `json:"max_ns"`
	// Histogram is every Put's latency: [bucket, count] pairs of a
	// Histogram, rebuilt with HistogramOf(Histogram, Max).
	Histogram []HistBucket `json:"histogram"`
	// FlushMicros is the median of flushRounds timed Flush calls of a
	// memtable holding flushDataBytes, on a fresh store (Flusher engines
	// only; 0 otherwise).
	FlushMicros float64 `json:"flush_us,omitempty"`
	// FlushEntries is the entries of each timed flush's memtable.
	FlushEntries int `json:"flush_entries,omitempty"`
	// ThresholdMicros is the threshold used: Puts slower than it are
	// SlowCount and listed (the first maxSlowPuts) in SlowPuts.
	ThresholdMicros float64   `json:"threshold_us,omitempty"`
	SlowCount       int       `json:"slow_count"`
	SlowPuts        []SlowPut `json:"slow_puts,omitempty"`
	// Stalls, Flushes, Compactions: WriteStatser counters over the fill.
	Stalls      uint64 `json:"stalls,omitempty"`
	Flushes     uint64 `json:"flushes,omitempty"`
	Compactions uint64 `json:"compactions,omitempty"`
	// StallMillis is the time the fill's Puts spent stalled,
	// FlushStallMillis the part of it spent waiting for flushes (the rest
	// waited for compactions), and LongestStallMicros the longest single
	// stall (WriteStatser engines that time their stalls): the store's
	// own bound on a Put's latency, to set beside FlushMicros.
	StallMillis        float64 `json:"stall_ms,omitempty"`
	FlushStallMillis   float64 `json:"flush_stall_ms,omitempty"`
	LongestStallMicros float64 `json:"longest_stall_us,omitempty"`
}

// RunFillLatency measures spec's flush time (if it is a Flusher) on a
// fresh store, then fills another fresh store timing every Put. Both
// directories are removed afterwards.
func RunFillLatency(spec Spec, cfg FillLatencyConfig) (res FillLatencyResult, err error) {
	res = FillLatencyResult{Workload: "fill-latency", Engine: spec.Name, N: cfg.N, ValueSize: cfg.ValueSize, Seed: cfg.Seed}
	if cfg.N < 1 || cfg.ValueSize < 1 {
		return res, errors.New("engines: fill-latency needs N and ValueSize")
	}
	w := newWorkload(Config{N: cfg.N, ValueSize: cfg.ValueSize, Ops: 1, Seed: cfg.Seed})
	flushBytes := cfg.FlushBytes
	if flushBytes <= 0 {
		flushBytes = flushDataBytes
	}
	flush, err := timeFlushes(spec, w, cfg.Dir, flushBytes, &res.FlushEntries)
	if err != nil {
		return res, fmt.Errorf("%s: timed flush: %w", spec.Name, err)
	}
	res.FlushMicros = float64(flush.Nanoseconds()) / 1e3
	threshold := cfg.Threshold
	if threshold == 0 {
		threshold = flush
	}
	res.ThresholdMicros = float64(threshold.Nanoseconds()) / 1e3
	if err := fillTimed(spec, w, cfg, threshold, &res); err != nil {
		return res, fmt.Errorf("%s: %w", spec.Name, err)
	}
	return res, nil
}

// timeFlushes returns the median time of flushRounds Flush calls, each of
// a memtable of flushBytes (entryOverhead included), on a fresh store; 0
// if the engine is no Flusher.
//
// A round in which the store flushed by itself during the Puts is not
// counted (its timed Flush wrote less), and the rounds after it put 10%
// fewer entries. entries is set to the entries per counted flush.
func timeFlushes(spec Spec, w *workload, parent string, flushBytes int, entries *int) (_ time.Duration, err error) {
	dir, err := os.MkdirTemp(parent, "enginebench-flush-"+spec.Name+"-")
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	e, err := spec.Open(dir)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, e.Close()) }()
	f, ok := e.(Flusher)
	if !ok {
		return 0, nil
	}
	perFlush := max(flushBytes/(len(w.present[0])+w.cfg.ValueSize+entryOverhead), 1)
	var times []time.Duration
	next := 0
	for round := 0; len(times) < flushRounds; round++ {
		if round == 3*flushRounds {
			return 0, fmt.Errorf("the store kept flushing by itself, down to %d Puts per memtable", perFlush)
		}
		before := f.Flushes()
		for range perFlush {
			i := next % len(w.present) // a small N cycles: overwrites still fill the memtable
			next++
			if err := e.Put(w.present[i], w.value(i)); err != nil {
				return 0, err
			}
		}
		selfFlushed := f.Flushes() != before
		start := time.Now()
		if err := f.Flush(); err != nil {
			return 0, err
		}
		d := time.Since(start)
		if selfFlushed {
			// The timed Flush had less than perFlush entries to write: not
			// counted, and the next memtable gets 10% fewer.
			perFlush = max(perFlush*9/10, 1)
			continue
		}
		times = append(times, d)
	}
	*entries = perFlush
	slices.Sort(times)
	return times[len(times)/2], nil
}

// fillTimed Puts every key of w into a fresh store, timing each Put.
func fillTimed(spec Spec, w *workload, cfg FillLatencyConfig, threshold time.Duration, res *FillLatencyResult) (err error) {
	dir, err := os.MkdirTemp(cfg.Dir, "enginebench-fill-"+spec.Name+"-")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	e, err := spec.Open(dir)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() { err = errors.Join(err, e.Close()) }()

	var fr *trace.FlightRecorder
	if cfg.Trace != "" {
		fr = trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: 2 * time.Second})
		if err := fr.Start(); err != nil {
			return fmt.Errorf("flight recorder: %w", err)
		}
		defer fr.Stop()
	}
	ws, hasStats := e.(WriteStatser)
	var s0 WriteStats
	if hasStats {
		s0 = ws.WriteStats()
	}
	last := s0
	h := new(Histogram)
	var traced time.Duration
	var (
		sampled     bool
		wait0       time.Duration
		waitAt      time.Time
		schedSample = func() { wait0, sampled = threadRunqueueWait(); waitAt = time.Now() }
	)
	if fr != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	start := time.Now()
	for i, k := range w.present {
		if fr != nil && i%schedSampleEvery == 0 {
			schedSample()
		}
		t := time.Now()
		if err := e.Put(k, w.value(i)); err != nil {
			return fmt.Errorf("put %d: %w", i, err)
		}
		d := time.Since(t)
		h.Record(d)
		if threshold <= 0 || d <= threshold {
			continue
		}
		res.SlowCount++
		// unexplained is the part of d that neither the OS's run queue
		// nor the store's stalls account for (the stalls since the
		// previous slow Put: one writer, so any stall was a Put's, and
		// the Puts in between were fast).
		unexplained := d
		var grew WriteStats
		if hasStats {
			now := ws.WriteStats()
			grew, last = now.since(last), now
			unexplained -= min(grew.StallTime, unexplained)
		}
		var runq time.Duration
		runqOK := false
		if sampled {
			var wait1 time.Duration
			if wait1, runqOK = threadRunqueueWait(); runqOK {
				runq = wait1 - wait0
				unexplained -= min(runq, unexplained)
			}
		}
		if len(res.SlowPuts) < maxSlowPuts {
			sp := SlowPut{Index: i, AtMs: float64(t.Sub(start).Microseconds()) / 1e3, Micros: float64(d.Nanoseconds()) / 1e3,
				Stalls: grew.Stalls, Flushes: grew.Flushes, Compactions: grew.Compactions,
				StallMicros: float64(grew.StallTime.Nanoseconds()) / 1e3}
			if runqOK {
				sp.RunqueueWaitMicros = float64(runq.Nanoseconds()) / 1e3
				sp.SpanMicros = float64(time.Since(waitAt).Nanoseconds()) / 1e3
			}
			res.SlowPuts = append(res.SlowPuts, sp)
		}
		if fr != nil && unexplained > traced {
			traced = unexplained
			// Marks the end of the slow Put in the trace; its message
			// gives the latency, so the Put's span can be found.
			trace.Log(context.Background(), "enginebench slow put", strconv.FormatInt(int64(d), 10))
			if err := snapshot(fr, cfg.Trace); err != nil {
				return err
			}
		}
		if fr != nil {
			schedSample() // the next slow Put's span starts after this one's bookkeeping
		}
	}
	elapsed := time.Since(start)
	res.Seconds, res.OpsPerSec = elapsed.Seconds(), rate(len(w.present), elapsed)
	res.P50, res.P99, res.P999, res.Max = int64(h.Quantile(0.5)), int64(h.Quantile(0.99)), int64(h.Quantile(0.999)), int64(h.Max())
	res.Histogram = h.Buckets()
	if hasStats {
		d := ws.WriteStats().since(s0)
		res.Stalls, res.Flushes, res.Compactions = d.Stalls, d.Flushes, d.Compactions
		res.StallMillis = float64(d.StallTime.Nanoseconds()) / 1e6
		res.FlushStallMillis = float64(d.FlushStallTime.Nanoseconds()) / 1e6
		res.LongestStallMicros = float64(d.LongestStall.Nanoseconds()) / 1e3 // a fresh store: the fill's
	}
	return nil
}

// snapshot writes the flight recorder's window to path.
func snapshot(fr *trace.FlightRecorder, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = fr.WriteTo(f)
	return errors.Join(err, f.Close())
}
