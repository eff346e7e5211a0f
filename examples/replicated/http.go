package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bloomkv/bloomkv"
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
	mux.HandleFunc("GET /status", n.status)
	return mux
}

func (n *node) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if key == "" || len(key) > bloomkv.MaxKeySize {
		http.Error(w, "bad key", http.StatusBadRequest)
		return
	}
	v, err := n.fsm.db.Get([]byte(key))
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

func (n *node) put(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if !n.writable(w, r, key) {
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
	n.apply(w, encodeCommand(opPut, []byte(key), value))
}

func (n *node) del(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if n.writable(w, r, key) {
		n.apply(w, encodeCommand(opDelete, []byte(key), nil))
	}
}

// writable checks the key and, on a follower, redirects to the leader.
func (n *node) writable(w http.ResponseWriter, r *http.Request, key string) bool {
	if key == "" || strings.HasPrefix(key, metaPrefix) || len(key) > bloomkv.MaxKeySize {
		http.Error(w, "bad key", http.StatusBadRequest)
		return false
	}
	return n.leaderOrRedirect(w, r)
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

// apply commits a command through raft and answers once it is applied
// here.
func (n *node) apply(w http.ResponseWriter, cmd []byte) {
	f := n.raft.Apply(cmd, applyTimeout)
	if err := f.Error(); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
		return
	}
	if err, _ := f.Response().(error); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// list answers GET /keys?prefix=P&limit=N (default 100, at most 100,000)
// from the local state machine.
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
	it, err := n.fsm.db.NewIterator(opts)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer it.Close()
	out := []entry{}
	for k, v := range it.All() {
		if len(out) == limit {
			break
		}
		out = append(out, entry{string(k), string(v)})
	}
	if err := it.Error(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// join adds a voter: POST /join?id=ID&raft=ADDR&http=ADDR, on the leader.
func (n *node) join(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, raftAddr, httpAddr := q.Get("id"), q.Get("raft"), q.Get("http")
	if id == "" || raftAddr == "" || httpAddr == "" {
		http.Error(w, "id, raft and http are required", http.StatusBadRequest)
		return
	}
	if !n.leaderOrRedirect(w, r) {
		return
	}
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, applyTimeout).Error(); err != nil {
		http.Error(w, fmt.Sprintf("add voter: %v", err), http.StatusInternalServerError)
		return
	}
	if err := n.raft.Apply(encodeCommand(opPut, nodeKey(id), []byte(httpAddr)), applyTimeout).Error(); err != nil {
		http.Error(w, fmt.Sprintf("record %s's address: %v", id, err), http.StatusInternalServerError)
		return
	}
	n.logger.Info("added voter", "id", id, "raft", raftAddr, "http", httpAddr)
	w.WriteHeader(http.StatusOK)
}

type status struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	Leader       string `json:"leader"`
	AppliedIndex uint64 `json:"applied_index"`
	LastIndex    uint64 `json:"last_index"`
	SnapshotIdx  uint64 `json:"last_snapshot_index"`
	Voters       int    `json:"voters"`
}

func (n *node) status(w http.ResponseWriter, r *http.Request) {
	_, leader := n.raft.LeaderWithID()
	st := status{
		ID: n.id, State: n.raft.State().String(), Leader: string(leader),
		AppliedIndex: n.raft.AppliedIndex(), LastIndex: n.raft.LastIndex(),
	}
	st.SnapshotIdx, _ = strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		st.Voters = len(f.Configuration().Servers)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}
