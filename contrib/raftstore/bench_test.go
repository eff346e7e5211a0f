package raftstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftbench "github.com/hashicorp/raft/bench"
)

// benchStore is a raft log and stable store under comparison.
type benchStore struct {
	name string
	open func(dir string) (raft.LogStore, raft.StableStore, func() error)
}

var benchStores = []benchStore{
	{"bloomkv", bloomkvStores(false)},
	{"bloomkv-nosync", bloomkvStores(true)},
	{"boltdb", boltStores(false)},
	{"boltdb-nosync", boltStores(true)},
	{"inmem", func(string) (raft.LogStore, raft.StableStore, func() error) {
		s := raft.NewInmemStore()
		return s, s, func() error { return nil }
	}},
}

func boltStores(noSync bool) func(string) (raft.LogStore, raft.StableStore, func() error) {
	return func(dir string) (raft.LogStore, raft.StableStore, func() error) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			panic(err)
		}
		s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), NoSync: noSync})
		if err != nil {
			panic(err)
		}
		return s, s, s.Close
	}
}

// BenchmarkStore runs raft's own store benchmarks (github.com/hashicorp/raft/bench)
// against every store: go test -run '^$' -bench Store.
func BenchmarkStore(b *testing.B) {
	logOps := []struct {
		name string
		fn   func(*testing.B, raft.LogStore)
	}{
		{"FirstIndex", raftbench.FirstIndex},
		{"LastIndex", raftbench.LastIndex},
		{"GetLog", raftbench.GetLog},
		{"StoreLog", raftbench.StoreLog},
		{"StoreLogs", raftbench.StoreLogs},
		{"DeleteRange", raftbench.DeleteRange},
	}
	stableOps := []struct {
		name string
		fn   func(*testing.B, raft.StableStore)
	}{
		{"Set", raftbench.Set},
		{"Get", raftbench.Get},
		{"SetUint64", raftbench.SetUint64},
		{"GetUint64", raftbench.GetUint64},
	}
	for _, st := range benchStores {
		for _, op := range logOps {
			b.Run(st.name+"/"+op.name, func(b *testing.B) {
				logs, _, closeStore := st.open(b.TempDir())
				defer closeStore()
				op.fn(b, logs)
			})
		}
		for _, op := range stableOps {
			b.Run(st.name+"/"+op.name, func(b *testing.B) {
				_, stable, closeStore := st.open(b.TempDir())
				defer closeStore()
				op.fn(b, stable)
			})
		}
	}
}

// BenchmarkClusterApply applies b.N commands (pipelined, 16-byte
// commands) through the leader of a 3-node cluster on raft's in-memory
// transport, each node on the store named, and reports commands/s: go test
// -run '^$' -bench ClusterApply -benchtime 20000x.
func BenchmarkClusterApply(b *testing.B) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			c := newTestCluster(b, 3, 2*time.Second, st.open)
			c.apply(0, 100, 100, nil) // warm up
			b.ResetTimer()
			start := time.Now()
			c.apply(0, b.N, 100_000, nil)
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commands/s")
			b.StopTimer()
			c.shutdown()
		})
	}
}

// BenchmarkFirstIndexAfterCompaction: 200,000 entries of which raft's
// compactions deleted the first 199,000, 8,192 at a time, as raft's
// snapshots do: each deletion is one bloomkv range tombstone, and
// FirstIndex's iterator seeks past the deleted front.
func BenchmarkFirstIndexAfterCompaction(b *testing.B) {
	s, err := New(Options{Path: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n, deleted = 200_000, 199_000
	var logs []*raft.Log
	for i := uint64(1); i <= n; i++ {
		logs = append(logs, &raft.Log{Index: i, Data: []byte("data")})
		if len(logs) == 10_000 {
			if err := s.StoreLogs(logs); err != nil {
				b.Fatal(err)
			}
			logs = logs[:0]
		}
	}
	for lo := uint64(1); lo <= deleted; lo += 8192 {
		if err := s.DeleteRange(lo, min(lo+8191, deleted)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if idx, err := s.FirstIndex(); err != nil || idx != deleted+1 {
			b.Fatal(idx, err)
		}
	}
}
