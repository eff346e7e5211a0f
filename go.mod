module github.com/bloomkv/bloomkv

go 1.25.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/golang/snappy v1.0.0
	go.etcd.io/bbolt v1.5.0
)

require golang.org/x/sys v0.46.0
