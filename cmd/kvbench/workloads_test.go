package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv"
)

// mapStore is a kvStore over a Go map: the model the workloads are checked
// against. corrupt, if set, changes what get returns.
type mapStore struct {
	m       map[string][]byte
	gets    uint64
	corrupt func(key []byte, v []byte, found bool) ([]byte, bool)
}

func (s *mapStore) put(key, value []byte) error {
	s.m[string(key)] = bytes.Clone(value)
	return nil
}
func (s *mapStore) finishFill(context.Context) error { return nil }
func (s *mapStore) get(dst, key []byte) ([]byte, bool, error) {
	s.gets++
	v, ok := s.m[string(key)]
	if s.corrupt != nil {
		v, ok = s.corrupt(key, v, ok)
	}
	return append(dst[:0], v...), ok, nil
}
func (s *mapStore) stats() bloomkv.Stats                { return bloomkv.Stats{Gets: s.gets} }
func (s *mapStore) dir() string                         { return "" }
func (s *mapStore) reopen(func(dir string) error) error { return nil }
func (s *mapStore) close() error                        { return nil }

func testBench(cfg config) *bench {
	cfg.Quiet = true
	return &bench{cfg: cfg, stderr: io.Discard, rep: &reporter{text: io.Discard}}
}

func TestWorkloadsAgainstMap(t *testing.T) {
	cfg := defaultConfig()
	cfg.Ops = 3000
	b := testBench(cfg)
	d := newDataset(2000, 20, 1)
	s := &mapStore{m: map[string][]byte{}}
	ctx := context.Background()

	fill, err := b.measure(ctx, s, fillWorkload(s, "fill-random", d, d.randomOrder))
	if err != nil {
		t.Fatal(err)
	}
	if fill.Ops != 2000 || len(s.m) != 2000 {
		t.Fatalf("fill: %d ops, %d keys stored; want 2000 of each", fill.Ops, len(s.m))
	}
	for _, hitRatio := range []float64{1, 0, 0.3} {
		r, err := b.measure(ctx, s, b.readWorkload(s, "read", d, hitRatio))
		if err != nil {
			t.Fatalf("hit ratio %v: %v", hitRatio, err)
		}
		if r.Ops != cfg.Ops || r.DB.Gets != uint64(cfg.Ops) {
			t.Errorf("hit ratio %v: %d ops, %d Gets; want %d", hitRatio, r.Ops, r.DB.Gets, cfg.Ops)
		}
		if r.Latency.P50 == 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
			t.Errorf("hit ratio %v: latencies out of order: %+v", hitRatio, r.Latency)
		}
	}
}

func TestReadWorkloadCatchesWrongAnswers(t *testing.T) {
	cfg := defaultConfig()
	cfg.Ops = 500
	b := testBench(cfg)
	d := newDataset(100, 8, 1)
	for name, corrupt := range map[string]func([]byte, []byte, bool) ([]byte, bool){
		"lost key":      func(_, v []byte, _ bool) ([]byte, bool) { return nil, false },
		"phantom key":   func(_, v []byte, _ bool) ([]byte, bool) { return v, true },
		"changed value": func(_, v []byte, ok bool) ([]byte, bool) { return append(bytes.Clone(v), 'x'), ok },
	} {
		s := &mapStore{m: map[string][]byte{}, corrupt: corrupt}
		for i := range d.len() {
			s.put(d.key(i), d.value(i))
		}
		_, err := b.measure(context.Background(), s, b.readWorkload(s, "mixed", d, 0.5))
		if err == nil || !strings.Contains(err.Error(), "mixed") {
			t.Errorf("%s: error %v, want one naming the workload", name, err)
		}
	}
}

func TestMeasureStopsOnDurationAndContext(t *testing.T) {
	b := testBench(defaultConfig())
	s := &mapStore{m: map[string][]byte{}}
	start := time.Now()
	r, err := b.measure(context.Background(), s, workload{name: "spin", dur: 50 * time.Millisecond, op: func(int64) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 50*time.Millisecond || took > 2*time.Second || r.Ops == 0 {
		t.Errorf("a 50ms workload took %v for %d ops", took, r.Ops)
	}

	ctx, cancel := context.WithCancel(context.Background())
	stop := errors.New("stop")
	_, err = b.measure(ctx, s, workload{name: "cancelled", ops: 1 << 40, op: func(n int64) error {
		if n == 1000 {
			cancel()
		}
		if n > 100000 {
			return stop
		}
		return nil
	}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled workload returned %v, want context.Canceled", err)
	}
}
