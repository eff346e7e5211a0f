package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// concurrentSection is the section name of the concurrent reads' JSON
// records.
const concurrentSection = "concurrent-reads"

// concurrentReads runs get-hit and get-miss on the fill-random store again
// from each -readers count of goroutines at once: each goroutine draws its
// own keys (its own random source), runs for -duration or its share of
// -ops, and ops/s is the total over all of them. Skipped without -readers.
func (b *bench) concurrentReads(ctx context.Context) error {
	if len(b.cfg.Readers) == 0 {
		return nil
	}
	b.rep.section("Concurrent reads: get-hit and get-miss from several goroutines")
	var results []result
	for _, n := range b.cfg.Readers {
		for _, w := range []struct {
			name string
			hit  bool
		}{{"get-hit", true}, {"get-miss", false}} {
			r, err := b.measureParallel(ctx, b.main, w.name, n, w.hit)
			if err != nil {
				return err
			}
			if err := b.finishResult(&r, concurrentSection, b.cfg.BitsPerKey); err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	b.rep.printf("%s (runtime.NumCPU), GOMAXPROCS %d: with more readers than CPUs the goroutines take turns on the cores,\n",
		plural(runtime.NumCPU(), "CPU"), runtime.GOMAXPROCS(0))
	b.rep.printf("so those rows measure contention, not scaling. ops/s is the total over the readers; latencies are of single Gets.\n")
	latencyTable(results).write(b.rep.text)
	return nil
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

// measureParallel runs a Get workload from n goroutines on s: each its own
// key sequence (rngFor of the workload, n and its index) and histogram,
// for -duration or ceil(-ops/n) Gets each. The store's counters are taken
// around the whole phase.
func (b *bench) measureParallel(ctx context.Context, s kvStore, name string, n int, hit bool) (result, error) {
	ratio := 0.0
	if hit {
		ratio = 1
	}
	ops := int64(0)
	if b.cfg.Ops > 0 {
		ops = (b.cfg.Ops + int64(n) - 1) / int64(n)
	}
	var (
		wg    sync.WaitGroup
		hists = make([]*histogram, n)
		done  = make([]int64, n)
		errs  = make([]error, n)
		start = make(chan struct{})
	)
	before := s.stats()
	for g := range n {
		hists[g] = new(histogram)
		wl := b.readWorkload(s, fmt.Sprintf("%s/%d readers/%d", name, n, g), b.data, ratio)
		wg.Go(func() {
			<-start
			began := time.Now()
			for i := int64(0); ; i++ {
				if i%progressEvery == 0 && ctx.Err() != nil {
					errs[g] = ctx.Err()
					return
				}
				t := time.Now()
				if (ops > 0 && i >= ops) || (ops == 0 && t.Sub(began) >= b.cfg.Duration) {
					done[g] = i
					return
				}
				if err := wl.op(i); err != nil {
					errs[g] = fmt.Errorf("%s, %d readers: %w", name, n, err)
					return
				}
				hists[g].record(time.Since(t))
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return result{}, err
		}
	}
	h := new(histogram)
	var total int64
	for g := range n {
		h.merge(hists[g])
		total += done[g]
	}
	after := s.stats()
	return result{Kind: "workload", Store: "bloomkv", Workload: name, Variant: plural(n, "reader"), Ops: total,
		Seconds: elapsed.Seconds(), OpsPerSec: float64(total) / elapsed.Seconds(), Latency: h.summary(),
		DB: statsDelta(before, after), Shape: shapeOf(after)}, nil
}

// parseCounts parses a comma-separated list of positive counts ("1,4,16").
func parseCounts(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("%q is not a count from 1 to 4096", f)
		}
		out = append(out, n)
	}
	return out, nil
}
