module github.com/bloomkv/bloomkv/contrib/datastore

go 1.25.0

replace github.com/bloomkv/bloomkv => ../..

require (
	github.com/bloomkv/bloomkv v0.0.0
	github.com/ipfs/go-datastore v0.9.2
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/golang/snappy v1.0.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/ipfs/go-detect-race v0.0.1 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
)
