package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bloomkv/bloomkv"
	"github.com/bloomkv/bloomkv/contrib/raftstore"
	"github.com/hashicorp/raft"
)

const applyTimeout = 10 * time.Second

func (n *node) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /keys/{key...}", n.get)
	mux.HandleFunc("PUT /keys/{key...}", n.put)
	mux.HandleFunc("DELETE /keys/{key...}", n.del)
	mux.HandleFunc("GET /keys", n.list)
	mux.HandleFunc("POST /join", n.join)
	mux.HandleFunc("POST /remove", n.remove)
	mux.HandleFunc("GET /status", n.status)
	return mux
}

// get answers GET /keys/{key}: linearizable by default (see readable),
// from this node's state as it is with ?stale.
func (n *node) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if key == "" || len(key) > bloomkv.MaxKeySize {
		http.Error(w, "bad key", http.StatusBadRequest)
		return
	}
	if !n.readable(w, r) {
		return
	}
	v, err := n.fsm.get([]byte(key))
	if errors.Is(err, bloomkv.ErrNotFound) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Write(v)
}

// readable decides where a read is served. With ?stale (or ?stale=true,
// as strconv.ParseBool reads it) it is served here, from whatever this
// node has applied; another value than a boolean is refused (400), since
// a guess either way gives the client what it did not ask for. Otherwise
// (?stale=false too) it must be linearizable:
// a follower redirects it to the leader (307), and the leader serves it
// only after a read barrier (readBarrier) that started after the request
// arrived has completed, so the state read includes every write
// acknowledged before the request was sent.
func (n *node) readable(w http.ResponseWriter, r *http.Request) bool {
	if v, ok := r.URL.Query()["stale"]; ok {
		stale := true
		if v[0] != "" {
			var err error
			if stale, err = strconv.ParseBool(v[0]); err != nil {
				http.Error(w, fmt.Sprintf("stale=%q: want true or false", v[0]), http.StatusBadRequest)
				return false
			}
		}
		if stale {
			return true
		}
	}
	if !n.leaderOrRedirect(w, r) {
		return false
	}
	if err := n.reads.wait(r.Context()); err != nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "read not confirmed by a quorum: "+err.Error(), http.StatusServiceUnavailable)
		return false
	}
	return true
}

// readBarrier batches linearizable reads into rounds of raft.Barrier. A
// barrier is a log entry of the leader's term: it returns once a quorum has
// stored it, which no deposed leader can achieve, and once this node's
// state machine has applied every entry before it, which includes every
// write acknowledged before the round began (an acknowledged write is
// committed, and a leader's log holds every committed entry). A read that
// arrives while a round is in flight waits for the next round, which
// starts after it arrived; every waiting read shares that round.
//
// raft.VerifyLeader is not enough on its own here: hashicorp/raft counts
// the answer to any heartbeat or append that returns after the call began,
// also one sent before it, as a vote, so a leader resuming from a pause can
// confirm itself with answers from before the pause.
type readBarrier struct {
	raft    *raft.Raft
	timeout time.Duration

	mu      sync.Mutex
	next    *round // the round that readers arriving now join
	running bool
}

type round struct {
	done chan struct{}
	err  error
}

func (b *readBarrier) wait(ctx context.Context) error {
	b.mu.Lock()
	if b.next == nil {
		b.next = &round{done: make(chan struct{})}
	}
	r := b.next
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run does rounds while readers wait for one.
func (b *readBarrier) run() {
	for {
		b.mu.Lock()
		r := b.next
		b.next = nil
		if r == nil {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		r.err = b.raft.Barrier(b.timeout).Error()
		close(r.done)
	}
}

func (n *node) put(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	id, ok := n.writable(w, r, key)
	if !ok {
		return
	}
	value, err := io.ReadAll(io.LimitReader(r.Body, bloomkv.MaxValueSize+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(value) > bloomkv.MaxValueSize {
		http.Error(w, "value too large", http.StatusRequestEntityTooLarge)
		return
	}
	op := byte(opPut)
	if id != nil {
		op = opPutID
	}
	cmd := encodeCommand(op, id, []byte(key), value)
	if len(cmd) > raftstore.MaxLogData {
		// raft would hand it to the leader's log store, which refuses it:
		// the leader steps down and the write's outcome looks unknown.
		http.Error(w, "value too large for a raft log entry", http.StatusRequestEntityTooLarge)
		return
	}
	n.apply(w, cmd)
}

func (n *node) del(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if id, ok := n.writable(w, r, key); ok {
		op := byte(opDelete)
		if id != nil {
			op = opDeleteID
		}
		n.apply(w, encodeCommand(op, id, []byte(key), nil))
	}
}

// writable checks the key and the request ID (the Idempotency-Key header,
// nil if none) and, on a follower, redirects to the leader.
func (n *node) writable(w http.ResponseWriter, r *http.Request, key string) ([]byte, bool) {
	if key == "" || strings.HasPrefix(key, metaPrefix) || len(key) > bloomkv.MaxKeySize {
		http.Error(w, "bad key", http.StatusBadRequest)
		return nil, false
	}
	var id []byte
	if s := r.Header.Get("Idempotency-Key"); s != "" {
		if len(s) > maxRequestID {
			http.Error(w, fmt.Sprintf("Idempotency-Key longer than %d bytes", maxRequestID), http.StatusBadRequest)
			return nil, false
		}
		id = []byte(s)
	}
	return id, n.leaderOrRedirect(w, r)
}

// leaderOrRedirect reports whether this node leads; if not, it answers with
// a 307 to the same request on the leader (503 if there is none).
func (n *node) leaderOrRedirect(w http.ResponseWriter, r *http.Request) bool {
	if n.raft.State() == raft.Leader {
		return true
	}
	addr, err := n.leaderHTTP()
	if err != nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return false
	}
	http.Redirect(w, r, "http://"+addr+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	return false
}

// notApplied reports whether raft's error from Apply means that the
// command certainly never entered the log (so it never will be applied).
// Every other error leaves the outcome unknown: the entry may be in the
// log of a node that becomes leader and commits it.
func notApplied(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrEnqueueTimeout) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress)
}

// apply commits a command through raft and answers once it is applied
// here: 204 when applied (also when its Idempotency-Key was applied
// before: the command took effect once); 503 when it certainly was not
// applied (safe to retry); 504 when the outcome is unknown (a retry with
// the same Idempotency-Key is safe, and answers 204 once it is applied).
func (n *node) apply(w http.ResponseWriter, cmd []byte) {
	f := n.raft.Apply(cmd, applyTimeout)
	if err := f.Error(); err != nil {
		if notApplied(err) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "not applied: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "outcome unknown: "+err.Error(), http.StatusGatewayTimeout)
		return
	}
	switch res := f.Response().(type) {
	case error:
		http.Error(w, res.Error(), http.StatusInternalServerError)
		return
	case applied:
		w.Header().Set("Applied-Index", strconv.FormatUint(res.index, 10))
		if res.duplicate {
			w.Header().Set("Duplicate-Request", "true")
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// list answers GET /keys?prefix=P&limit=N (default 100, at most 100,000),
// linearizable like get, or from this node's state with &stale.
func (n *node) list(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		l, err := strconv.Atoi(s)
		if err != nil || l < 0 || l > 100_000 {
			http.Error(w, "limit: 0 to 100000", http.StatusBadRequest)
			return
		}
		limit = l
	}
	opts := &bloomkv.IterOptions{Prefix: []byte(r.URL.Query().Get("prefix"))}
	if len(opts.Prefix) == 0 {
		opts.LowerBound = []byte{metaPrefix[0] + 1} // not the service's own keys
	}
	if !n.readable(w, r) {
		return
	}
	out := []entry{}
	err := n.fsm.read(func(db *bloomkv.DB) error {
		it, err := db.NewIterator(opts)
		if err != nil {
			return err
		}
		defer it.Close()
		for k, v := range it.All() {
			if len(out) == limit {
				break
			}
			out = append(out, entry{string(k), string(v)})
		}
		return it.Error()
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// join adds a server: POST /join?id=ID&raft=ADDR&http=ADDR[&voter=false],
// on the leader. A voter by default; voter=false adds a non-voter, which
// gets the log but neither votes nor counts for commits (and a later join
// of the same ID as a voter promotes it). Joining an ID that is a member
// already with a new address moves it there.
func (n *node) join(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, raftAddr, httpAddr := q.Get("id"), q.Get("raft"), q.Get("http")
	if id == "" || raftAddr == "" || httpAddr == "" {
		http.Error(w, "id, raft and http are required", http.StatusBadRequest)
		return
	}
	voter := q.Get("voter") != "false"
	if !n.leaderOrRedirect(w, r) {
		return
	}
	add, what := n.raft.AddVoter, "voter"
	if !voter {
		add, what = n.raft.AddNonvoter, "non-voter"
	}
	if err := add(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, applyTimeout).Error(); err != nil {
		n.membershipError(w, "add "+what, err)
		return
	}
	if err := n.raft.Apply(encodeCommand(opPut, nil, nodeKey(id), []byte(httpAddr)), applyTimeout).Error(); err != nil {
		n.membershipError(w, fmt.Sprintf("record %s's address", id), err)
		return
	}
	n.logger.Info("added "+what, "id", id, "raft", raftAddr, "http", httpAddr)
	w.WriteHeader(http.StatusOK)
}

// remove takes a server out of the cluster: POST /remove?id=ID, on the
// leader (followers redirect). The removed node stops taking part in raft
// (raft shuts it down once it learns of its removal); stop its process and
// delete its directory. A leader may remove itself: it steps down once the
// change is committed. Removing a dead voter is how it is replaced: remove
// it, then -join a new node.
func (n *node) remove(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		http.Error(w, "id is required", http.StatusBadRequest)
		return
	}
	if !n.leaderOrRedirect(w, r) {
		return
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, applyTimeout).Error(); err != nil {
		n.membershipError(w, "remove server", err)
		return
	}
	// Then its address record; if this fails, a stale record stays behind
	// (harmless: only a member's record is ever looked up).
	if err := n.raft.Apply(encodeCommand(opDelete, nil, nodeKey(id), nil), applyTimeout).Error(); err != nil {
		n.logger.Warn("forget a removed server's address", "id", id, "err", err)
	}
	n.logger.Info("removed server", "id", id)
	w.WriteHeader(http.StatusOK)
}

// membershipError answers a failed membership change: 503 if it certainly
// did not happen, 504 if it may have.
func (n *node) membershipError(w http.ResponseWriter, what string, err error) {
	if notApplied(err) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("%s: not done: %v", what, err), http.StatusServiceUnavailable)
		return
	}
	http.Error(w, fmt.Sprintf("%s: outcome unknown: %v", what, err), http.StatusGatewayTimeout)
}

type status struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	Leader       string `json:"leader"`
	AppliedIndex uint64 `json:"applied_index"`
	DBApplied    uint64 `json:"db_applied_index"`
	LastIndex    uint64 `json:"last_index"`
	SnapshotIdx  uint64 `json:"last_snapshot_index"`
	Voters       int    `json:"voters"`
	Nonvoters    int    `json:"nonvoters"`
}

func (n *node) status(w http.ResponseWriter, r *http.Request) {
	_, leader := n.raft.LeaderWithID()
	st := status{
		ID: n.id, State: n.raft.State().String(), Leader: string(leader),
		AppliedIndex: n.raft.AppliedIndex(), DBApplied: n.fsm.applied.Load(),
		LastIndex: n.raft.LastIndex(),
	}
	st.SnapshotIdx, _ = strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			if srv.Suffrage == raft.Voter {
				st.Voters++
			} else {
				st.Nonvoters++
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}
