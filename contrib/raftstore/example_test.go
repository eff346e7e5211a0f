package raftstore_test

import (
	"fmt"
	"log"
	"os"

	"github.com/bloomkv/bloomkv/contrib/raftstore"
	"github.com/hashicorp/raft"
)

func Example() {
	dir, err := os.MkdirTemp("", "raftstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// One bloomkv store holds the raft log and the stable state (term,
	// vote). Every write is fsynced before it returns.
	s, err := raftstore.New(raftstore.Options{Path: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	// raft.NewRaft(conf, fsm, s, s, snapshots, transport) would use it as
	// both its LogStore and its StableStore; here, by hand:
	if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}}); err != nil {
		log.Fatal(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	var l raft.Log
	if err := s.GetLog(2, &l); err != nil {
		log.Fatal(err)
	}
	_, err = s.GetUint64([]byte("CurrentTerm"))
	fmt.Println(first, last, string(l.Data), err)
	// Output: 1 2 b not found
}
