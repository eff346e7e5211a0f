//go:build !windows

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

var (
	jepsenDuration = flag.Duration("jepsen.duration", 0, "TestJepsen: run the fault schedule over again for this long (the long form); 0 runs it once (about 20 s of faults)")
	jepsenOut      = flag.String("jepsen.out", "", "TestJepsen: directory for a failing run's history and visualization (default: a new directory under the system's temporary directory)")
)

// The workload: jepsenClients clients each doing one operation at a time
// (half GETs, 40% PUTs of a value never written before, 10% DELETEs) on
// jepsenKeys keys, through a node picked at random for each operation.
const (
	jepsenClients = 8
	jepsenKeys    = 5
	// clientTimeout is longer than the leader's pause, so that requests
	// sent to it while it is stopped are answered when it resumes, before
	// it learns of the new leader: the moment that catches a deposed
	// leader serving stale reads.
	clientTimeout = 5 * time.Second
	retryFor      = 10 * time.Second // how long a write of unknown outcome is retried
)

// regInput and regOutput are one operation on one key's register; ""
// stands for "no value" (every value written is non-empty and unique).
type regInput struct {
	Op    string // "get", "put", "delete"
	Key   string
	Value string
}

type regOutput struct {
	Value   string
	Unknown bool // a write whose outcome the client never learned
}

// registerModel is a map of keys to registers, checked key by key: a get
// returns the last value put since the last delete.
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(regInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in, out := input.(regInput), output.(regOutput)
		switch in.Op {
		case "get":
			return out.Value == state.(string), state
		case "put":
			return true, in.Value
		default:
			return true, ""
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch {
		case in.Op == "get":
			return fmt.Sprintf("get(%s) -> %q", in.Key, out.Value)
		case out.Unknown:
			return fmt.Sprintf("%s(%s, %q) -> ?", in.Op, in.Key, in.Value)
		}
		return fmt.Sprintf("%s(%s, %q)", in.Op, in.Key, in.Value)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
}

// history collects the operations of all clients.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	// counts
	reads, writes, unknown, refused, dups, retried atomic.Int64
	// unexpected is the first answer no correct node gives (4xx, 500)
	unexpected atomic.Pointer[string]
}

func (h *history) now() int64 { return time.Since(h.start).Nanoseconds() }

func (h *history) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// TestJepsen runs three nodes on 127.0.0.1 under a client workload while
// faults hit them, records every operation's invocation, response and
// outcome, and checks the history with porcupine against a per-key
// register model: every read must be linearizable, and no acknowledged
// write may be lost — the last reads come after every node was killed
// with SIGKILL and restarted. The fault schedule: SIGKILL of the leader
// (restarted 2 s later); SIGSTOP of a follower for 2 s; SIGSTOP of the
// leader for 3 s (longer than an election); SIGKILL of a follower
// (restarted 1 s later); SIGKILL of all three, restarted. The nodes
// snapshot every 200 entries, so restarted nodes catch up from snapshots
// too. It also checks that no node's state machine goes back in time
// (its applied index, sampled every 20 ms, never decreases, restarts
// included) and that all nodes end with the same state.
//
// By default the schedule runs once (about 20 s of faults); with
// -jepsen.duration=60s it runs over again for that long. A failing run
// saves the history (JSON) and porcupine's visualization (HTML) and logs
// where.
func TestJepsen(t *testing.T) {
	nodes := startCluster(t, 3)

	h := &history{start: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The nodes' addresses do not change over restarts, so the clients
	// may read them without a lock.
	addrs := []string{nodes[0].http, nodes[1].http, nodes[2].http}
	for c := range jepsenClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client(h, c, addrs, stop)
		}()
	}
	mon := newMonitor(addrs)
	go mon.run(stop)

	faults := runFaults(t, h, nodes, *jepsenDuration)
	time.Sleep(2 * time.Second) // operations after the last restart
	close(stop)
	wg.Wait()
	if msg := h.unexpected.Load(); msg != nil {
		t.Errorf("unexpected answer: %s", *msg)
	}
	if msg := mon.violation(); msg != "" {
		t.Errorf("a state machine went back in time: %s", msg)
	}

	// The last word on durability: each key read (linearizably) after
	// every node was restarted.
	for k := range jepsenKeys {
		key := fmt.Sprintf("k%d", k)
		call := h.now()
		v, ok := getRetry(addrs, key, 30*time.Second)
		if !ok {
			t.Fatalf("final read of %s: no answer in 30 s", key)
		}
		h.add(porcupine.Operation{ClientId: jepsenClients, Input: regInput{Op: "get", Key: key}, Call: call, Output: regOutput{Value: v}, Return: h.now()})
	}
	// Writes of unknown outcome may have taken effect at any time after
	// their call: they return at the end of the history.
	end := h.now() + 1
	for i := range h.ops {
		if h.ops[i].Output.(regOutput).Unknown {
			h.ops[i].Return = end
		}
	}
	t.Logf("%d operations (%d reads, %d writes acknowledged, %d writes of unknown outcome, %d refused as not applied; %d retried, %d answered as duplicates) under %d faults in %v",
		len(h.ops), h.reads.Load(), h.writes.Load(), h.unknown.Load(), h.refused.Load(), h.retried.Load(), h.dups.Load(), faults, time.Since(h.start).Round(time.Second))
	if h.reads.Load() == 0 || h.writes.Load() == 0 {
		t.Fatalf("no reads or no writes succeeded")
	}
	res, info := porcupine.CheckOperationsVerbose(registerModel, h.ops, 2*time.Minute)
	t.Logf("linearizability (porcupine, per-key register): %s", res)
	if res != porcupine.Ok {
		dir := *jepsenOut
		if dir == "" {
			dir, _ = os.MkdirTemp("", "replicated-jepsen-")
		}
		os.MkdirAll(dir, 0o755)
		js, _ := json.MarshalIndent(h.ops, "", " ")
		os.WriteFile(filepath.Join(dir, "history.json"), js, 0o644)
		if err := porcupine.VisualizePath(registerModel, info, filepath.Join(dir, "history.html")); err != nil {
			t.Logf("visualization: %v", err)
		}
		t.Fatalf("history not linearizable (%s): history and visualization in %s", res, dir)
	}

	// Every node ends with the same state as the leader.
	want := listing(t, addrs[0], "")
	for _, a := range addrs {
		waitFor(t, a+" to converge", func() bool { return listing(t, a, "&stale") == want })
	}
}

// runFaults runs the fault schedule once, or over again until d has
// passed, and returns the number of faults.
func runFaults(t *testing.T, h *history, nodes []*proc, d time.Duration) int {
	begin := time.Now()
	faults := 0
	others := func(p *proc) []*proc {
		var o []*proc
		for _, q := range nodes {
			if q != p {
				o = append(o, q)
			}
		}
		return o
	}
	step := func(what string, f func()) {
		t.Logf("%6.1fs %s", time.Since(begin).Seconds(), what)
		f()
		faults++
	}
	for round := 0; round == 0 || time.Since(begin) < d; round++ {
		time.Sleep(2 * time.Second)
		step("SIGKILL the leader, restart it 2 s later", func() {
			l := findLeader(t, nodes)
			l.kill()
			time.Sleep(2 * time.Second)
			l.start()
		})
		time.Sleep(2 * time.Second)
		step("SIGSTOP a follower for 2 s", func() {
			f := others(findLeader(t, nodes))[rand.IntN(2)]
			f.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(2 * time.Second)
			f.cmd.Process.Signal(syscall.SIGCONT)
		})
		time.Sleep(1 * time.Second)
		step("SIGSTOP the leader for 3 s, probing it with reads of a newer write", func() {
			l := findLeader(t, nodes)
			l.cmd.Process.Signal(syscall.SIGSTOP)
			paused := time.Now()
			done := probeDeposed(t, h, l, findLeader(t, others(l)), round)
			time.Sleep(3*time.Second - time.Since(paused))
			l.cmd.Process.Signal(syscall.SIGCONT)
			<-done
		})
		time.Sleep(2 * time.Second)
		step("SIGKILL a follower, restart it 1 s later", func() {
			f := others(findLeader(t, nodes))[rand.IntN(2)]
			f.kill()
			time.Sleep(1 * time.Second)
			f.start()
		})
		time.Sleep(2 * time.Second)
		step("SIGKILL all three, restart them", func() {
			findLeader(t, nodes) // not while one is still stopped
			for _, p := range nodes {
				p.kill()
			}
			for _, p := range nodes {
				p.start()
			}
			findLeader(t, nodes)
		})
	}
	return faults
}

// probeDeposed targets the moment a paused leader resumes, before it learns
// that it was deposed: it writes a new value through the new leader and,
// once that is acknowledged, sends reads of the key to the stopped old
// leader (each on its own connection; they wait in its listen queue). A
// leader that served them from its state when it resumes would return the
// older value: a stale read porcupine rejects. The returned channel is
// closed when every read has its answer.
func probeDeposed(t *testing.T, h *history, old, leader *proc, round int) chan struct{} {
	done := make(chan struct{})
	const readers = 16
	id := jepsenClients + 1 // client IDs above the workload's and the final reads'
	in := regInput{Op: "put", Key: "k0", Value: fmt.Sprintf("probe-%d", round)}
	call := h.now()
	out, ok := writeOp(h, &http.Client{Timeout: clientTimeout}, []string{leader.http}, leader.http, in, fmt.Sprintf("probe-%d-%d", round, rand.Uint64()))
	switch {
	case !ok:
		h.refused.Add(1)
	case out.Unknown:
		h.unknown.Add(1)
		h.add(porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out})
	default:
		h.writes.Add(1)
		h.add(porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: h.now()})
	}
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 2 * clientTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
			call := h.now()
			if v, ok := get(hc, old.http, "k0"); ok {
				h.reads.Add(1)
				h.add(porcupine.Operation{ClientId: id + 1 + i, Input: regInput{Op: "get", Key: "k0"}, Call: call, Output: regOutput{Value: v}, Return: h.now()})
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// client does operations until stop is closed.
func client(h *history, c int, addrs []string, stop chan struct{}) {
	hc := &http.Client{Timeout: clientTimeout}
	rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		key := fmt.Sprintf("k%d", rng.IntN(jepsenKeys))
		addr := addrs[rng.IntN(len(addrs))]
		switch r := rng.IntN(10); {
		case r < 5:
			call := h.now()
			v, ok := get(hc, addr, key)
			if ok {
				h.reads.Add(1)
				h.add(porcupine.Operation{ClientId: c, Input: regInput{Op: "get", Key: key}, Call: call, Output: regOutput{Value: v}, Return: h.now()})
			}
		default:
			in := regInput{Op: "put", Key: key, Value: fmt.Sprintf("c%d-%d", c, n)}
			if r == 9 {
				in = regInput{Op: "delete", Key: key}
			}
			call := h.now()
			out, ok := writeOp(h, hc, addrs, addr, in, fmt.Sprintf("c%d-%d-%d", c, n, rng.Uint64()))
			switch {
			case !ok:
				h.refused.Add(1) // certainly not applied: not in the history
			case out.Unknown:
				h.unknown.Add(1)
				h.add(porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out})
			default:
				h.writes.Add(1)
				h.add(porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: h.now()})
			}
		}
		if n%64 == 63 { // do not spin against a cluster without a leader
			time.Sleep(time.Millisecond)
		}
	}
}

// get reads key linearizably through addr; ok is false when the read had
// no definite answer (an error, a timeout, 503).
func get(hc *http.Client, addr, key string) (string, bool) {
	resp, err := hc.Get("http://" + addr + "/keys/" + key)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return "", false
	case resp.StatusCode == http.StatusOK:
		return string(b), true
	case resp.StatusCode == http.StatusNotFound:
		return "", true
	}
	return "", false
}

func getRetry(addrs []string, key string, d time.Duration) (string, bool) {
	hc := &http.Client{Timeout: clientTimeout}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		for _, a := range addrs {
			if v, ok := get(hc, a, key); ok {
				return v, true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", false
}

// writeOp sends a PUT or DELETE with the request ID id; while its outcome is
// unknown (504, a timeout, a broken connection) it retries with the same
// ID, through any node, for up to retryFor. ok is false when the first
// attempt was certainly not applied (503).
func writeOp(h *history, hc *http.Client, addrs []string, addr string, in regInput, id string) (out regOutput, ok bool) {
	deadline := time.Now().Add(retryFor)
	for attempt := 0; ; attempt++ {
		method := http.MethodPut
		if in.Op == "delete" {
			method = http.MethodDelete
		}
		req, _ := http.NewRequest(method, "http://"+addr+"/keys/"+in.Key, bytes.NewReader([]byte(in.Value)))
		req.Header.Set("Idempotency-Key", id)
		resp, err := hc.Do(req)
		status := 0
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		switch {
		case status == http.StatusNoContent:
			if resp.Header.Get("Duplicate-Request") != "" {
				h.dups.Add(1)
			}
			return regOutput{}, true
		case status == http.StatusServiceUnavailable && attempt == 0:
			return regOutput{}, false
		case status/100 == 4 || status == http.StatusInternalServerError:
			msg := fmt.Sprintf("%s %s: %d", method, in.Key, status)
			h.unexpected.CompareAndSwap(nil, &msg)
			return regOutput{Unknown: true}, true
		}
		// Unknown so far: a 504, an error or timeout, or a 503 after an
		// attempt of unknown outcome.
		if time.Now().After(deadline) {
			return regOutput{Unknown: true}, true
		}
		h.retried.Add(1)
		time.Sleep(100 * time.Millisecond)
		addr = addrs[rand.IntN(len(addrs))]
	}
}

// listing is a node's whole listing, as text.
func listing(t *testing.T, addr, mode string) string {
	hc := &http.Client{Timeout: clientTimeout}
	for range 100 {
		resp, err := hc.Get("http://" + addr + "/keys?limit=100000" + mode)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(b)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no listing from %s", addr)
	return ""
}

// monitor samples each node's state machine applied index and notes a
// decrease: a node whose state goes back in time.
type monitor struct {
	addrs []string
	mu    sync.Mutex
	max   []uint64
	msg   string
}

func newMonitor(addrs []string) *monitor {
	return &monitor{addrs: addrs, max: make([]uint64, len(addrs))}
}

func (m *monitor) run(stop chan struct{}) {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	for {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		for i, a := range m.addrs {
			resp, err := hc.Get("http://" + a + "/status")
			if err != nil {
				continue
			}
			var st status
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil {
				continue
			}
			m.mu.Lock()
			if st.DBApplied < m.max[i] && m.msg == "" {
				m.msg = fmt.Sprintf("%s's applied index went from %d to %d", a, m.max[i], st.DBApplied)
			}
			m.max[i] = max(m.max[i], st.DBApplied)
			m.mu.Unlock()
		}
	}
}

func (m *monitor) violation() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.msg
}
