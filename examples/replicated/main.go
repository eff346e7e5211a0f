// Command replicated is a small replicated key-value service: three (or
// more) processes keep the same bloomkv store through raft
// (github.com/hashicorp/raft), with contrib/raftstore as each node's raft
// log and a bloomkv DB as its state machine.
//
//	replicated -id node1 -dir data/node1 -raft 127.0.0.1:7001 -http 127.0.0.1:8001 -bootstrap
//	replicated -id node2 -dir data/node2 -raft 127.0.0.1:7002 -http 127.0.0.1:8002 -join 127.0.0.1:8001
//	replicated -id node3 -dir data/node3 -raft 127.0.0.1:7003 -http 127.0.0.1:8003 -join 127.0.0.1:8001
//
// The HTTP API (any node; writes, joins, removals and linearizable reads
// on a follower are redirected to the leader with 307):
//
//	GET    /keys/{key}                  the value, 404 if none (linearizable; ?stale: this node's state)
//	PUT    /keys/{key}                  body: the value (header Idempotency-Key: dedup of retries)
//	DELETE /keys/{key}
//	GET    /keys?prefix=P&limit=N       JSON [{"key": ..., "value": ...}] in key order (&stale as for GET)
//	POST   /join?id=ID&raft=ADDR&http=ADDR[&voter=false]   add a voter or non-voter
//	POST   /remove?id=ID                remove a server
//	GET    /status                      JSON: id, state, leader, applied indexes
//
// A write answers 204 when applied, 503 when certainly not applied, 504
// when its outcome is unknown (retry it with the same Idempotency-Key).
//
// A restarted node (same -dir) rejoins by itself: its raft log, term and
// vote are in its raftstore, its state machine in its snapshots and DB.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bloomkv/bloomkv/contrib/raftstore"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func main() {
	var (
		id        = flag.String("id", "", "this node's raft server ID (required)")
		dir       = flag.String("dir", "", "this node's data directory (required)")
		raftAddr  = flag.String("raft", "127.0.0.1:7001", "raft TCP address to bind and advertise")
		httpAddr  = flag.String("http", "127.0.0.1:8001", "HTTP address to bind")
		bootstrap = flag.Bool("bootstrap", false, "bootstrap a new cluster with this node as its only voter (first start of the first node)")
		join      = flag.String("join", "", "HTTP address of a cluster member to join through (first start of the other nodes)")
		nonvoter  = flag.Bool("nonvoter", false, "with -join: join as a non-voter (gets the log, does not vote)")
		verbose   = flag.Bool("v", false, "log raft's and the service's progress to stderr")
		snapN     = flag.Uint64("snapshot-threshold", 8192, "raft: snapshot after this many new log entries")
		snapEvery = flag.Duration("snapshot-interval", 2*time.Minute, "raft: how often to check whether to snapshot")
		trailing  = flag.Uint64("trailing-logs", 10240, "raft: log entries kept after a snapshot")
		window    = flag.Uint64("dedup-window", 100_000, "log entries for which a write's Idempotency-Key is remembered")
	)
	flag.Parse()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("node", *id)
	if *id == "" || *dir == "" {
		fmt.Fprintln(os.Stderr, "replicated: -id and -dir are required")
		flag.Usage()
		os.Exit(2)
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(*id)
	conf.SnapshotThreshold, conf.SnapshotInterval, conf.TrailingLogs = *snapN, *snapEvery, *trailing
	hlevel := hclog.Error
	if *verbose {
		hlevel = hclog.Info
	}
	conf.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Output: os.Stderr, Level: hlevel})
	if err := run(conf, *dir, *raftAddr, *httpAddr, *bootstrap, *join, *nonvoter, *window, logger); err != nil {
		logger.Error("exit", "err", err)
		os.Exit(1)
	}
}

// node is one server of the service.
type node struct {
	id       string
	httpAddr string
	raft     *raft.Raft
	fsm      *fsm
	reads    *readBarrier
	logger   *slog.Logger
}

func run(conf *raft.Config, dir, raftAddr, httpAddr string, bootstrap bool, join string, nonvoter bool, dedupWindow uint64, logger *slog.Logger) error {
	id := string(conf.LocalID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The raft log and stable state: fsynced before raft acknowledges.
	store, err := raftstore.New(raftstore.Options{Path: filepath.Join(dir, "raft")})
	if err != nil {
		return err
	}
	defer store.Close()
	fatal := func(err error) {
		// The state machine cannot go on without a hole in its state.
		logger.Error("fatal", "err", err)
		os.Exit(1)
	}
	sm, err := openFSM(filepath.Join(dir, "fsm"), dedupWindow, fatal)
	if err != nil {
		return err
	}
	defer sm.Close()
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	// The state machine resumes from its DB, which records the index it
	// has applied: raft need not restore the latest snapshot on a start
	// (and replay the log after it), and entries the DB holds already are
	// skipped. Only if the DB's index is below the latest snapshot's (its
	// directory lost, say, or only barriers since its last command) is the
	// snapshot restored, as raft would.
	conf.NoSnapshotRestoreOnStart = true
	if err := catchUpFromSnapshot(sm, snaps, logger); err != nil {
		return err
	}
	addr, err := net.ResolveTCPAddr("tcp", raftAddr)
	if err != nil {
		return fmt.Errorf("raft address: %w", err)
	}
	trans, err := raft.NewTCPTransport(raftAddr, addr, 3, 10*time.Second, io.Discard)
	if err != nil {
		return fmt.Errorf("raft transport: %w", err)
	}
	defer trans.Close()

	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return err
	}
	n := &node{id: id, httpAddr: httpAddr, fsm: sm, logger: logger}
	if bootstrap && !existing {
		cfg := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: trans.LocalAddr()}}}
		if err := raft.BootstrapCluster(conf, store, store, snaps, trans, cfg); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	n.raft, err = raft.NewRaft(conf, n.fsm, store, store, snaps, trans)
	if err != nil {
		return fmt.Errorf("raft: %w", err)
	}
	n.reads = &readBarrier{raft: n.raft, timeout: applyTimeout}
	defer func() {
		if err := n.raft.Shutdown().Error(); err != nil {
			logger.Error("raft shutdown", "err", err)
		}
	}()

	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: n.routes(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	logger.Info("serving", "http", httpAddr, "raft", raftAddr)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case !existing && join != "":
		if err := n.joinCluster(ctx, join, string(trans.LocalAddr()), !nonvoter); err != nil {
			return err
		}
	case bootstrap || existing:
		// Publish our HTTP address once we lead (or once any leader does:
		// each node makes sure its own entry is current).
		go n.announce(ctx)
	}
	<-ctx.Done()
	logger.Info("shutting down")
	return nil
}

// joinCluster asks the cluster (through any member, redirected to the
// leader) to add this node as a voter or non-voter, retrying until it
// succeeds.
func (n *node) joinCluster(ctx context.Context, via, raftAddr string, voter bool) error {
	url := fmt.Sprintf("http://%s/join?id=%s&raft=%s&http=%s&voter=%t", via, n.id, raftAddr, n.httpAddr, voter)
	var last error
	for range 60 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				n.logger.Info("joined", "via", via)
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("join through %s: %w", via, last)
}

// announce records this node's HTTP address in the replicated state (so
// that followers can redirect to it when it leads), through whichever node
// leads, until that worked once.
func (n *node) announce(ctx context.Context) {
	for {
		if v, err := n.fsm.get(nodeKey(n.id)); err == nil && string(v) == n.httpAddr {
			return
		}
		if n.raft.State() == raft.Leader {
			err := n.raft.Apply(encodeCommand(opPut, nil, nodeKey(n.id), []byte(n.httpAddr)), 5*time.Second).Error()
			if err == nil {
				return
			}
			n.logger.Warn("announce", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func nodeKey(id string) []byte { return []byte(metaPrefix + "node/" + id) }

// leaderHTTP returns the leader's HTTP address, if known.
func (n *node) leaderHTTP() (string, error) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", errors.New("no leader")
	}
	v, err := n.fsm.get(nodeKey(string(id)))
	if err != nil {
		return "", fmt.Errorf("leader %s's HTTP address: %w", id, err)
	}
	return string(v), nil
}

// catchUpFromSnapshot restores the latest snapshot into the state machine
// if its DB's index is below the snapshot's: raft, told not to restore on
// start, replays only the log after the snapshot.
//
// A snapshot's index is the last entry raft's FSM goroutine handled, which
// may be a barrier (one per round of linearizable reads), while the DB
// records the index of the last command only. So a DB below the snapshot's
// index may already hold its state (the restore then writes the same state
// again), and a restored DB's index may be below the snapshot's: neither is
// an error. It is never below the index of the DB it replaces, as every
// command up to the snapshot's index is in the snapshot.
func catchUpFromSnapshot(sm *fsm, snaps raft.SnapshotStore, logger *slog.Logger) error {
	list, err := snaps.List()
	if err != nil || len(list) == 0 || list[0].Index <= sm.applied.Load() {
		return err
	}
	logger.Warn("state machine behind the latest snapshot: restoring it",
		"applied", sm.applied.Load(), "snapshot", list[0].Index)
	_, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return fmt.Errorf("open snapshot %s: %w", list[0].ID, err)
	}
	return sm.Restore(rc)
}
