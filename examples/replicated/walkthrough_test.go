package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestWalkthrough is the README's walkthrough, driving the built binary:
// it starts three nodes on 127.0.0.1, writes keys through every node
// (followers redirect to the leader), kills the leader with SIGKILL,
// writes and deletes more through the two survivors, restarts the killed
// node from its directory, and requires every node to list exactly the
// same keys and values. -short writes 300 keys and 300 more; the long form
// 3,000 and 3,000. The nodes snapshot every 200 entries and keep 100, so
// the restarted node has fallen behind the leader's log and catches up
// from a snapshot (the FSM's Persist, sent over raft's TCP transport, and
// Restore). go test -v -run Walkthrough narrates it.
func TestWalkthrough(t *testing.T) {
	first, second := 3000, 3000
	if testing.Short() {
		first, second = 300, 300
	}
	nodes := startCluster(t, 3)
	t.Logf("three nodes up: %s (leader), %s, %s", nodes[0].http, nodes[1].http, nodes[2].http)

	want := map[string]string{}
	write(t, nodes, 0, first, want)
	t.Logf("wrote %d keys through all three nodes", first)

	leader := findLeader(t, nodes)
	leader.kill()
	t.Logf("killed the leader %s with SIGKILL", leader.id)
	var alive []*proc
	for _, p := range nodes {
		if p != leader {
			alive = append(alive, p)
		}
	}
	newLeader := findLeader(t, alive)
	t.Logf("new leader: %s", newLeader.id)
	killedAt := newLeader.status().LastIndex // at least the killed node's last index
	write(t, alive, first, second, want)
	for i := 0; i < first; i += 10 {
		k := fmt.Sprintf("key%06d", i)
		do(t, alive[(i/10)%2], http.MethodDelete, "/keys/"+k, nil)
		delete(want, k)
	}
	t.Logf("wrote %d more keys and deleted %d through the two survivors", second, first/10)

	waitFor(t, "a snapshot past the killed node's log", func() bool {
		return newLeader.status().SnapshotIdx > killedAt+100 // 100 trailing logs
	})
	leader.start()
	t.Logf("restarted %s from its directory", leader.id)
	target := newLeader.status().LastIndex
	waitFor(t, "every node to apply the last entry", func() bool {
		for _, p := range nodes {
			if p.status().AppliedIndex < target {
				return false
			}
		}
		return true
	})
	if st := leader.status(); st.SnapshotIdx <= killedAt {
		t.Errorf("%s's last snapshot is at %d: it did not catch up from a snapshot", leader.id, st.SnapshotIdx)
	}
	// Each node's own state (?stale: read locally) must come to exactly
	// what was written.
	for _, p := range nodes {
		var m map[string]string
		waitFor(t, p.id+" to list every key as written", func() bool {
			var got []entry
			if err := json.Unmarshal(do(t, p, http.MethodGet, "/keys?limit=100000&stale", nil), &got); err != nil {
				t.Fatal(err)
			}
			m = map[string]string{}
			for _, e := range got {
				m[e.Key] = e.Value
			}
			return maps.Equal(m, want)
		})
		t.Logf("%s: %d keys, all as written (last snapshot at index %d)", p.id, len(m), p.status().SnapshotIdx)
	}
	// A read of one key, and a prefix listing with a limit, on the
	// restarted node.
	if v := string(do(t, leader, http.MethodGet, "/keys/key000001", nil)); v != want["key000001"] {
		t.Fatalf("key000001 = %q, want %q", v, want["key000001"])
	}
	var some []entry
	if err := json.Unmarshal(do(t, leader, http.MethodGet, "/keys?prefix=key0001&limit=5", nil), &some); err != nil || len(some) != 5 || some[0].Key != "key000101" {
		t.Fatalf("prefix listing: %v, %+v", err, some)
	}
}

// proc is one node's process.
// startCluster builds the example and prepares n nodes on free local
// ports, in directories of a temporary one, killed (and, if the test
// failed, the last 4 KB of each one's stderr logged) when the test ends. It
// starts the first three: node1 bootstraps and leads, node2 and node3
// join it as voters. Nodes past the third are left for the test to start.
func startCluster(t *testing.T, n int) []*proc {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "replicated")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	nodes := make([]*proc, n)
	for i := range nodes {
		nodes[i] = &proc{
			id: fmt.Sprintf("node%d", i+1), dir: filepath.Join(tmp, fmt.Sprintf("node%d", i+1)),
			raft: freeAddr(t), http: freeAddr(t), bin: bin, t: t,
		}
	}
	t.Cleanup(func() {
		for _, p := range nodes {
			if p.cmd != nil {
				p.cmd.Process.Signal(syscall.SIGCONT) // a node a test paused must be able to die
			}
			p.kill()
		}
		if t.Failed() {
			for _, p := range nodes {
				log, _ := os.ReadFile(p.dir + ".log")
				t.Logf("%s's stderr (last 4 KB):\n%s", p.id, tail(log, 4096))
			}
		}
	})
	nodes[0].start("-bootstrap")
	waitFor(t, "node1 to lead", func() bool { return nodes[0].status().State == "Leader" })
	nodes[1].start("-join", nodes[0].http)
	nodes[2].start("-join", nodes[0].http)
	waitFor(t, "three voters", func() bool { return nodes[0].status().Voters == 3 })
	return nodes
}

type proc struct {
	id, dir, raft, http, bin string
	t                        *testing.T
	cmd                      *exec.Cmd
}

func (p *proc) start(args ...string) {
	log, err := os.OpenFile(p.dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close()
	// Snapshots every 200 entries (checked every second), keeping 100: the
	// restarted node is behind the leader's log and gets a snapshot.
	base := []string{"-id", p.id, "-dir", p.dir, "-raft", p.raft, "-http", p.http,
		"-snapshot-threshold", "200", "-snapshot-interval", "1s", "-trailing-logs", "100"}
	p.cmd = exec.Command(p.bin, append(base, args...)...)
	p.cmd.Stderr, p.cmd.Stdout = log, log
	p.cmd.SysProcAttr = childAttr()
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	waitFor(p.t, p.id+"'s HTTP server", func() bool { return p.status().ID == p.id })
}

func (p *proc) kill() {
	if p.cmd != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		p.cmd = nil
	}
}

// status returns the node's /status, zero if it does not answer.
func (p *proc) status() (st status) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + p.http + "/status")
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&st)
	return st
}

// do sends a request to p (following redirects to the leader), retrying
// while the cluster has no leader, and returns the body of the 2xx answer.
func do(t *testing.T, p *proc, method, path string, body []byte) []byte {
	t.Helper()
	var last string
	for range 100 {
		req, _ := http.NewRequest(method, "http://"+p.http+path, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return b
			}
			last = fmt.Sprintf("%s: %s", resp.Status, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s %s on %s: %s", method, path, p.id, last)
	return nil
}

// write puts keys from..from+n-1 through the nodes in turn, 8 at a time.
func write(t *testing.T, nodes []*proc, from, n int, want map[string]string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := from; i < from+n; i++ {
		k, v := fmt.Sprintf("key%06d", i), fmt.Sprintf("value %d", i)
		want[k] = v
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			do(t, nodes[i%len(nodes)], http.MethodPut, "/keys/"+k, []byte(v))
		}()
	}
	wg.Wait()
}

func findLeader(t *testing.T, nodes []*proc) *proc {
	var leader *proc
	waitFor(t, "a leader", func() bool {
		for _, p := range nodes {
			if p.status().State == "Leader" {
				leader = p
				return true
			}
		}
		return false
	})
	return leader
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr returns a free 127.0.0.1 port's address.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tail returns the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
