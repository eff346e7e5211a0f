package main

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// workload is one measured loop: op is called with n = 0, 1, 2, ... either
// ops times or, if ops is 0, until dur has passed.
type workload struct {
	name string
	ops  int64
	dur  time.Duration
	op   func(n int64) error
	// finish, if set, runs once after the loop, timed apart (a fill's final
	// flush and compactions, or commit); the counters include it.
	finish func(context.Context) error
	unit   string // non-empty: the progress bar counts operations in this unit
}

// result is the measurement of one workload: a line of the report and a
// JSON record. Counters are totals over the workload; per-operation
// figures are totals divided by Ops.
type result struct {
	Kind       string  `json:"kind"` // "workload"
	Section    string  `json:"section"`
	Store      string  `json:"store"`
	Variant    string  `json:"variant,omitempty"`
	Workload   string  `json:"workload"`
	BitsPerKey float64 `json:"bits_per_key"`
	Ops        int64   `json:"ops"`
	Seconds    float64 `json:"seconds"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	// FinishSeconds is, for fills, the time from the last Put until the
	// store is at rest (final flush, background compactions; for bbolt the
	// last commit); it is not part of Seconds.
	FinishSeconds float64 `json:"finish_seconds,omitempty"`
	// BytesPerOp is, for fills, the user data of one Put: key plus value.
	BytesPerOp int            `json:"bytes_per_op,omitempty"`
	Latency    latencySummary `json:"latency_ns"`
	DB         dbCounters     `json:"db"`
	Shape      dbShape        `json:"shape"`
	IO         *procIO        `json:"proc_io,omitempty"` // nil without /proc/self/io
	Skipped    string         `json:"skipped,omitempty"`
}

// progressEvery is how many operations pass between checks of the context
// and updates of the progress bar; both happen outside the timed region.
const progressEvery = 256

// measure runs w against s and returns its result, with the store's
// counters and the process's I/O counters taken as differences around it.
func (b *bench) measure(ctx context.Context, s kvStore, w workload) (result, error) {
	before := s.stats()
	io0, ioOK := readProcIO()
	start := time.Now()
	n, h, err := b.loop(ctx, w)
	if err != nil {
		return result{}, err
	}
	elapsed := time.Since(start)

	r := result{Kind: "workload", Store: "bloomkv", Workload: w.name, Ops: n,
		Seconds: elapsed.Seconds(), OpsPerSec: float64(n) / elapsed.Seconds(), Latency: h.summary()}
	if w.finish != nil {
		if err := w.finish(ctx); err != nil {
			return result{}, fmt.Errorf("%s, finishing: %w", w.name, err)
		}
		r.FinishSeconds = (time.Since(start) - elapsed).Seconds()
	}
	after := s.stats()
	r.DB, r.Shape = statsDelta(before, after), shapeOf(after)
	if io1, ok := readProcIO(); ok && ioOK {
		d := io1.since(io0, b.ioCost)
		r.IO = &d
	}
	return r, nil
}

// loop calls w.op until w is done and returns how often, with the latency
// of each call. Between calls, outside the timed region, it checks the
// context and moves the progress bar every progressEvery operations.
func (b *bench) loop(ctx context.Context, w workload) (int64, *histogram, error) {
	total, scale := w.ops, int64(1)
	if w.ops == 0 {
		total, scale = w.dur.Milliseconds(), int64(time.Millisecond)
	}
	bar := newProgress(b.stderr, b.cfg.Quiet, w.name, total, w.unit)
	defer bar.done()
	h := new(histogram)
	start := time.Now()
	for n := int64(0); ; n++ {
		if n%progressEvery == 0 {
			if err := ctx.Err(); err != nil {
				return n, h, err
			}
			if w.ops > 0 {
				bar.set(n)
			} else {
				bar.set(int64(time.Since(start)) / scale)
			}
		}
		t := time.Now()
		if (w.ops > 0 && n >= w.ops) || (w.ops == 0 && t.Sub(start) >= w.dur) {
			return n, h, nil
		}
		if err := w.op(n); err != nil {
			return n, h, fmt.Errorf("%s, operation %d: %w", w.name, n, err)
		}
		h.record(time.Since(t))
	}
}

// rngFor returns the random source of a workload: seeded by the run's seed
// and the workload's name, so a workload picks the same keys whatever ran
// before it, and the filters-on and filters-off runs of a comparison see
// the same sequence.
func rngFor(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// fillWorkload puts every key of d into s in the order given by order,
// then finishes the fill outside the timed loop, so that the reads after
// it find everything in the store's files and no merge running.
func fillWorkload(s kvStore, name string, d *dataset, order func(n int64) int) workload {
	return workload{name: name, ops: int64(d.len()), unit: "puts", finish: s.finishFill,
		op: func(n int64) error {
			i := order(n)
			return s.put(d.key(i), d.value(i))
		}}
}

func sequential(n int64) int { return int(n) }

func (d *dataset) randomOrder(n int64) int { return int(d.perm[n]) }

// readWorkload is a Get workload: each operation asks for a present key
// with probability hitRatio, else for an absent one, and checks the answer
// (a wrong answer is a store bug and stops the run).
func (b *bench) readWorkload(s kvStore, name string, d *dataset, hitRatio float64) workload {
	r := rngFor(b.cfg.Seed, name)
	var absent [keySize]byte
	var buf []byte
	op := func(int64) error {
		i := r.IntN(d.len())
		hit := hitRatio >= 1 || (hitRatio > 0 && r.Float64() < hitRatio)
		key := d.key(i)
		if !hit {
			key = d.absentKey(i, &absent)
		}
		v, found, err := s.get(buf, key)
		buf = v
		switch {
		case err != nil:
			return err
		case found != hit:
			return fmt.Errorf("key %x: found=%v, want %v", key, found, hit)
		case hit && !bytes.Equal(v, d.value(i)):
			return fmt.Errorf("key %x: got a value of %d bytes that differs from the one written", key, len(v))
		}
		return nil
	}
	return workload{name: name, ops: b.cfg.Ops, dur: b.cfg.Duration, op: op}
}

// readPhase drops the page cache if asked, then measures a read workload.
func (b *bench) readPhase(ctx context.Context, s kvStore, w workload) (result, error) {
	if b.cfg.DropCache {
		if err := s.reopen(dropCache); err != nil {
			return result{}, err
		}
	}
	return b.measure(ctx, s, w)
}
