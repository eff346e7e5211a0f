package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"testing"
)

// TestMembership is the README's membership walkthrough: three voters; a
// fourth node joins as a non-voter and gets every key; it is promoted to a
// voter; a voter is killed and removed (replaced by the promoted node);
// the leader removes itself and a remaining node takes over; after each
// step the members' states converge on what was written.
func TestMembership(t *testing.T) {
	nodes := startCluster(t, 4)
	want := map[string]string{}
	write(t, nodes[:3], 0, 100, want)

	converged := func(ps ...*proc) {
		t.Helper()
		for _, p := range ps {
			waitFor(t, p.id+" to hold every key", func() bool {
				var got []entry
				if err := json.Unmarshal(do(t, p, http.MethodGet, "/keys?limit=100000&stale", nil), &got); err != nil {
					t.Fatal(err)
				}
				m := map[string]string{}
				for _, e := range got {
					m[e.Key] = e.Value
				}
				return maps.Equal(m, want)
			})
		}
	}
	membership := func(p *proc) (voters, nonvoters int) {
		st := p.status()
		return st.Voters, st.Nonvoters
	}

	nodes[3].start("-join", nodes[1].http, "-nonvoter") // through a follower: redirected
	waitFor(t, "node4 as a non-voter", func() bool { v, nv := membership(nodes[0]); return v == 3 && nv == 1 })
	converged(nodes[3])
	if st := nodes[3].status(); st.State != "Follower" {
		t.Fatalf("the non-voter is %s", st.State)
	}
	t.Logf("node4 joined as a non-voter and holds all %d keys", len(want))

	do(t, nodes[2], http.MethodPost, fmt.Sprintf("/join?id=node4&raft=%s&http=%s", nodes[3].raft, nodes[3].http), nil)
	waitFor(t, "node4 promoted", func() bool { v, nv := membership(nodes[0]); return v == 4 && nv == 0 })
	t.Log("node4 promoted to a voter")

	nodes[2].kill()
	do(t, nodes[3], http.MethodPost, "/remove?id=node3", nil)
	waitFor(t, "node3 removed", func() bool { v, nv := membership(nodes[0]); return v == 3 && nv == 0 })
	write(t, []*proc{nodes[0], nodes[1], nodes[3]}, 100, 100, want)
	converged(nodes[0], nodes[1], nodes[3])
	t.Log("node3 killed and removed; 100 more keys on node1, node2, node4")

	leader := findLeader(t, []*proc{nodes[0], nodes[1], nodes[3]})
	do(t, leader, http.MethodPost, "/remove?id="+leader.id, nil)
	var rest []*proc
	for _, p := range []*proc{nodes[0], nodes[1], nodes[3]} {
		if p != leader {
			rest = append(rest, p)
		}
	}
	newLeader := findLeader(t, rest)
	waitFor(t, "two voters", func() bool { v, _ := membership(newLeader); return v == 2 })
	write(t, rest, 200, 50, want)
	converged(rest...)
	t.Logf("the leader %s removed itself; %s leads the two left, which hold all %d keys", leader.id, newLeader.id, len(want))
}
