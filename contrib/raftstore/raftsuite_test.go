package raftstore

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The behaviours of hashicorp/raft's own cluster tests (raft_test.go,
// v1.7.3), run with this Store, fsynced, as every node's LogStore and
// StableStore where raft's harness uses InmemStore: each TestRaftSuite_X
// below follows raft's TestRaft_X. raft's suite itself cannot take another
// store (its harness is in package raft and hard-wires NewInmemStore, its
// tests read raft's unexported state), so these are ports through raft's
// public API onto testCluster (cluster_test.go): raft's in-memory
// transport, a FileSnapshotStore per node, a map FSM.

// suiteCluster starts n nodes with conf applied to every node's config.
func suiteCluster(t *testing.T, n int, conf func(*raft.Config)) *testCluster {
	t.Helper()
	return newTestClusterConf(t, n, time.Second, bloomkvStores(false), conf)
}

// followers returns the running nodes other than the leader.
func (c *testCluster) followers() []*node {
	ld := c.leader()
	var out []*node
	for _, nd := range c.nodes {
		if nd != ld && nd.raft != nil {
			out = append(out, nd)
		}
	}
	return out
}

// disconnect cuts nd off from every other node (both ways); connect undoes it.
func (c *testCluster) disconnect(nd *node) {
	for _, o := range c.nodes {
		if o != nd && o.trans != nil {
			o.trans.Disconnect(nd.trans.LocalAddr())
		}
	}
	nd.trans.DisconnectAll()
}

func (c *testCluster) connect() {
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b && a.trans != nil && b.trans != nil {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
}

// ensureSame waits (up to 20 s) until every running node's FSM equals want
// and its store holds the same entries as the leader's from the first
// index both hold past their snapshots: raft's EnsureSame, which compares
// FSMs and logs.
func (c *testCluster) ensureSame(want map[string]string) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, nd := range c.nodes {
		if nd.raft == nil {
			continue
		}
		for !maps.Equal(nd.fsm.copy(), want) {
			if time.Now().After(deadline) {
				c.t.Fatalf("%s's FSM has %d keys, want %d", nd.id, len(nd.fsm.copy()), len(want))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ld := c.leader()
	if err := ld.raft.Barrier(10 * time.Second).Error(); err != nil {
		c.t.Fatal(err)
	}
	ldStore := ld.store.(*Store)
	for _, nd := range c.nodes {
		if nd.raft == nil || nd == ld {
			continue
		}
		s := nd.store.(*Store)
		var first, last uint64
		for {
			f1, _ := s.FirstIndex()
			f2, _ := ldStore.FirstIndex()
			l1, _ := s.LastIndex()
			l2, _ := ldStore.LastIndex()
			first, last = max(f1, f2), l2
			if l1 == l2 {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("%s's log ends at %d, the leader's at %d", nd.id, l1, l2)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := first; i <= last; i++ {
			var a, b raft.Log
			errA, errB := s.GetLog(i, &a), ldStore.GetLog(i, &b)
			if errors.Is(errA, raft.ErrLogNotFound) || errors.Is(errB, raft.ErrLogNotFound) {
				continue // below one node's snapshot: a gap raft allows there
			}
			if errA != nil || errB != nil {
				c.t.Fatalf("log %d: %v, %v", i, errA, errB)
			}
			if a.Term != b.Term || a.Type != b.Type || string(a.Data) != string(b.Data) {
				c.t.Fatalf("log %d differs: %s has term %d %q, the leader term %d %q", i, nd.id, a.Term, a.Data, b.Term, b.Data)
			}
		}
	}
}

// applyN applies n commands "k<i>=v<i>" through the leader and waits for
// the last one.
func applyN(t *testing.T, r *raft.Raft, from, n int, want map[string]string) {
	t.Helper()
	var f raft.ApplyFuture
	for i := from; i < from+n; i++ {
		f = r.Apply(fmt.Appendf(nil, "k%d=v%d", i, i), 10*time.Second)
		want[fmt.Sprint("k", i)] = fmt.Sprint("v", i)
	}
	if err := f.Error(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// TestRaftSuite_SingleNode: one node elects itself and applies.
func TestRaftSuite_SingleNode(t *testing.T) {
	c := suiteCluster(t, 1, nil)
	want := map[string]string{}
	applyN(t, c.leader().raft, 0, 1, want)
	c.ensureSame(want)
}

// TestRaftSuite_TripleNode: an entry applied on the leader reaches every
// FSM.
func TestRaftSuite_TripleNode(t *testing.T) {
	c := suiteCluster(t, 3, nil)
	want := map[string]string{}
	applyN(t, c.leader().raft, 0, 1, want)
	c.ensureSame(want)
}

// TestRaftSuite_LeaderFail: the leader is cut off; the others elect a new
// leader in a later term, which applies; the old leader, reconnected,
// steps down and converges.
func TestRaftSuite_LeaderFail(t *testing.T) {
	c := suiteCluster(t, 3, nil)
	want := map[string]string{}
	old := c.leader()
	applyN(t, old.raft, 0, 1, want)
	c.ensureSame(want)
	term := old.raft.CurrentTerm()
	c.disconnect(old)
	var newLeader *node
	deadline := time.Now().Add(20 * time.Second)
	for newLeader == nil {
		for _, nd := range c.nodes {
			if nd != old && nd.raft.State() == raft.Leader {
				newLeader = nd
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if newLeader.raft.CurrentTerm() <= term {
		t.Fatalf("new leader's term %d, old %d", newLeader.raft.CurrentTerm(), term)
	}
	applyN(t, newLeader.raft, 1, 1, want)
	// The old leader cannot commit alone.
	if err := old.raft.Apply([]byte("lost=x"), 500*time.Millisecond).Error(); err == nil {
		t.Fatal("a cut-off leader committed")
	}
	c.connect()
	for old.raft.State() == raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("the old leader did not step down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.ensureSame(want)
}

// TestRaftSuite_BehindFollower: a follower cut off while 100 entries are
// applied catches up once reconnected.
func TestRaftSuite_BehindFollower(t *testing.T) {
	c := suiteCluster(t, 3, nil)
	want := map[string]string{}
	behind := c.followers()[0]
	c.disconnect(behind)
	applyN(t, c.leader().raft, 0, 100, want)
	if behind.raft.LastContact().IsZero() {
		t.Fatal("the behind follower never heard from the leader")
	}
	c.connect()
	c.ensureSame(want)
}

// TestRaftSuite_ApplyNonLeader: a follower refuses Apply with ErrNotLeader.
func TestRaftSuite_ApplyNonLeader(t *testing.T) {
	c := suiteCluster(t, 3, nil)
	if err := c.followers()[0].raft.Apply([]byte("a=b"), time.Second).Error(); !errors.Is(err, raft.ErrNotLeader) {
		t.Fatalf("Apply on a follower: %v", err)
	}
}

// TestRaftSuite_ApplyConcurrent: 100 applies from 10 goroutines all
// commit.
func TestRaftSuite_ApplyConcurrent(t *testing.T) {
	c := suiteCluster(t, 3, nil)
	ld := c.leader()
	var wg sync.WaitGroup
	var mu sync.Mutex
	want := map[string]string{}
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				k, v := fmt.Sprintf("g%d-%d", g, i), "x"
				if err := ld.raft.Apply([]byte(k+"="+v), 10*time.Second).Error(); err != nil {
					t.Errorf("apply: %v", err)
					return
				}
				mu.Lock()
				want[k] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.ensureSame(want)
}

// TestRaftSuite_SnapshotRestore: a user snapshot trims the log to
// TrailingLogs entries before it (DeleteRange on the store); the node,
// restarted from its directories, restores the snapshot, keeps its log and
// term, leads again and applies.
func TestRaftSuite_SnapshotRestore(t *testing.T) {
	const trailing = 10
	c := suiteCluster(t, 1, func(conf *raft.Config) {
		conf.TrailingLogs = trailing
		conf.SnapshotThreshold = 1 << 30 // only the user snapshot
	})
	ld := c.leader()
	want := map[string]string{}
	applyN(t, ld.raft, 0, 100, want)
	if err := ld.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	snapIdx := ld.raft.LastIndex() // nothing applied after the snapshot
	first, err := ld.store.(*Store).FirstIndex()
	if err != nil || first != snapIdx-trailing+1 {
		t.Fatalf("log starts at %d (%v) after a snapshot at %d, want %d", first, err, snapIdx, snapIdx-trailing+1)
	}
	term := ld.raft.CurrentTerm()
	c.stop(ld)
	c.start(ld, nil)
	if got := ld.fsm.copy(); !maps.Equal(got, want) {
		t.Fatalf("restored FSM has %d keys, want %d", len(got), len(want))
	}
	c.leader()
	if ld.raft.CurrentTerm() <= term {
		t.Fatalf("term %d after a restart from term %d", ld.raft.CurrentTerm(), term)
	}
	applyN(t, ld.raft, 100, 10, want)
	c.ensureSame(want)
}

// TestRaftSuite_SendSnapshotFollower: a follower cut off while the others
// snapshot and trim their logs past it gets a snapshot (InstallSnapshot)
// when reconnected, and then the log.
func TestRaftSuite_SendSnapshotFollower(t *testing.T) {
	c := suiteCluster(t, 3, func(conf *raft.Config) {
		conf.TrailingLogs = 10
		conf.SnapshotThreshold = 1 << 30
	})
	want := map[string]string{}
	behind := c.followers()[0]
	c.disconnect(behind)
	applyN(t, c.leader().raft, 0, 100, want)
	for _, nd := range c.nodes {
		if err := nd.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			t.Fatal(err)
		}
	}
	c.connect()
	c.ensureSame(want)
	applyN(t, c.leader().raft, 100, 10, want)
	c.ensureSame(want)
}

// TestRaftSuite_MembershipChanges: raft's JoinNode, RemoveFollower and
// ReJoinFollower: a follower removed leaves a two-server configuration
// that still commits; added back (its store still holding its old log) it
// catches up.
func TestRaftSuite_MembershipChanges(t *testing.T) {
	c := suiteCluster(t, 3, func(conf *raft.Config) { conf.ShutdownOnRemove = false })
	ld := c.leader()
	want := map[string]string{}
	applyN(t, ld.raft, 0, 10, want)
	f := c.followers()[0]
	if err := ld.raft.RemoveServer(f.id, 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	servers := func() int {
		fut := ld.raft.GetConfiguration()
		if err := fut.Error(); err != nil {
			t.Fatal(err)
		}
		return len(fut.Configuration().Servers)
	}
	if n := servers(); n != 2 {
		t.Fatalf("%d servers after a removal", n)
	}
	applyN(t, ld.raft, 10, 10, want)
	if err := ld.raft.AddVoter(f.id, f.trans.LocalAddr(), 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if n := servers(); n != 3 {
		t.Fatalf("%d servers after the rejoin", n)
	}
	applyN(t, c.leader().raft, 20, 10, want)
	c.ensureSame(want)
}

// TestRaftSuite_LeadershipTransfer: leadership moves to another node,
// which then applies.
func TestRaftSuite_LeadershipTransfer(t *testing.T) {
	c := suiteCluster(t, 3, nil)
	old := c.leader()
	want := map[string]string{}
	applyN(t, old.raft, 0, 10, want)
	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.leader() == old {
		if time.Now().After(deadline) {
			t.Fatal("leadership did not move")
		}
		time.Sleep(10 * time.Millisecond)
	}
	applyN(t, c.leader().raft, 10, 10, want)
	c.ensureSame(want)
}

// TestRaftSuite_RecoverCluster: every node is shut down and recovered
// with raft.RecoverCluster (a manual configuration, from each node's
// store and snapshots), restarted, and the cluster goes on with every
// entry.
func TestRaftSuite_RecoverCluster(t *testing.T) {
	c := suiteCluster(t, 3, func(conf *raft.Config) {
		conf.TrailingLogs = 10
		conf.SnapshotThreshold = 5
		conf.SnapshotInterval = 50 * time.Millisecond
	})
	want := map[string]string{}
	for i := range 30 { // one at a time, as raft's test, so snapshots come between
		applyN(t, c.leader().raft, i, 1, want)
	}
	fut := c.leader().raft.GetConfiguration()
	if err := fut.Error(); err != nil {
		t.Fatal(err)
	}
	configuration := fut.Configuration()
	for _, nd := range c.nodes {
		c.stop(nd)
	}
	for _, nd := range c.nodes {
		c.start(nd, func(conf *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) {
			if err := raft.RecoverCluster(conf, newMapFSM(), logs, stable, snaps, trans, configuration); err != nil {
				t.Fatalf("recover %s: %v", nd.id, err)
			}
		})
	}
	applyN(t, c.leader().raft, 30, 5, want)
	c.ensureSame(want)
}
