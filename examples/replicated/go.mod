module github.com/bloomkv/bloomkv/examples/replicated

go 1.25.0

replace (
	github.com/bloomkv/bloomkv => ../..
	github.com/bloomkv/bloomkv/contrib/raftstore => ../../contrib/raftstore
)

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/bloomkv/bloomkv v0.0.0
	github.com/bloomkv/bloomkv/contrib/raftstore v0.0.0
	github.com/hashicorp/go-hclog v1.6.2
	github.com/hashicorp/raft v1.7.3
)

require (
	github.com/armon/go-metrics v0.4.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/golang/snappy v1.0.0 // indirect
	github.com/hashicorp/go-immutable-radix v1.0.0 // indirect
	github.com/hashicorp/go-metrics v0.5.4 // indirect
	github.com/hashicorp/go-msgpack/v2 v2.1.2 // indirect
	github.com/hashicorp/golang-lru v0.5.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
)
