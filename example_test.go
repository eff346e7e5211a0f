package bloomkv_test

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"

	"github.com/bloomkv/bloomkv"
)

// tempDir returns a fresh directory for an example's store and a func
// that removes it.
func tempDir() (string, func()) {
	dir, err := os.MkdirTemp("", "bloomkv-example-")
	if err != nil {
		log.Fatal(err)
	}
	return dir, func() { os.RemoveAll(dir) }
}

// Open a store, write, read and delete a key.
func Example() {
	dir, cleanup := tempDir()
	defer cleanup()

	db, err := bloomkv.Open(filepath.Join(dir, "store"), nil) // nil: the defaults
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	if err := db.Put([]byte("user:42"), []byte("Ada")); err != nil {
		log.Fatal(err)
	}
	v, err := db.Get([]byte("user:42"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("user:42 = %s\n", v)

	if err := db.Delete([]byte("user:42")); err != nil {
		log.Fatal(err)
	}
	_, err = db.Get([]byte("user:42"))
	fmt.Println("after Delete:", errors.Is(err, bloomkv.ErrNotFound))
	// Output:
	// user:42 = Ada
	// after Delete: true
}

// A Batch applies puts and deletes atomically: after a crash all of them
// are there or none.
func ExampleDB_Write() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.Put([]byte("from"), []byte("100"))

	b := bloomkv.NewBatch()
	b.Put([]byte("to"), []byte("100"))
	b.Delete([]byte("from"))
	if err := db.Write(b); err != nil { // b may be reused (b.Reset()) now
		log.Fatal(err)
	}
	_, err = db.Get([]byte("from"))
	v, _ := db.Get([]byte("to"))
	fmt.Printf("from: %v; to = %s\n", err, v)
	// Output:
	// from: bloomkv: not found; to = 100
}

// Iterate over every key in order with a range loop; the iteration's
// error, if any, comes from Close (or Error).
func ExampleIterator_All() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	for _, k := range []string{"b", "c", "a"} {
		db.Put([]byte(k), []byte("v-"+k))
	}

	it, err := db.NewIterator(nil)
	if err != nil {
		log.Fatal(err)
	}
	for k, v := range it.All() {
		fmt.Printf("%s=%s\n", k, v) // k and v are valid until the next step: copy to keep
	}
	if err := it.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// a=v-a
	// b=v-b
	// c=v-c
}

// IterOptions.Prefix narrows a scan to the keys that start with it.
func ExampleDB_NewIterator_prefix() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	for _, k := range []string{"order:7", "user:1", "user:2", "users"} {
		db.Put([]byte(k), nil)
	}

	it, err := db.NewIterator(&bloomkv.IterOptions{Prefix: []byte("user:")})
	if err != nil {
		log.Fatal(err)
	}
	defer it.Close()
	for k := range it.Backward() { // in reverse key order
		fmt.Println(string(k))
	}
	if err := it.Error(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// user:2
	// user:1
}

// A Snapshot reads the store as it was when it was taken.
func ExampleDB_NewSnapshot() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.Put([]byte("k"), []byte("old"))

	snap, err := db.NewSnapshot()
	if err != nil {
		log.Fatal(err)
	}
	defer snap.Close() // an open snapshot keeps old versions on disk
	db.Put([]byte("k"), []byte("new"))

	then, _ := snap.Get([]byte("k"))
	now, _ := db.Get([]byte("k"))
	fmt.Printf("snapshot: %s, now: %s\n", then, now)
	// Output:
	// snapshot: old, now: new
}

// Checkpoint writes a consistent copy of a live store, which opens as a
// store of its own.
func ExampleDB_Checkpoint() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(filepath.Join(dir, "live"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.Put([]byte("k"), []byte("v"))

	backup := filepath.Join(dir, "backup") // must not exist, or be empty
	if err := db.Checkpoint(backup); err != nil {
		log.Fatal(err)
	}
	cp, err := bloomkv.Open(backup, &bloomkv.Options{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer cp.Close()
	v, err := cp.Get([]byte("k"))
	fmt.Printf("%s %v\n", v, err)
	// Output:
	// v <nil>
}

// Verify checks an open store, VerifyDir a closed one; damage is in the
// report, and Err turns it into an error.
func ExampleVerifyDir() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	db.Put([]byte("k"), []byte("v"))
	db.Flush()
	rep, err := db.Verify(context.Background())
	if err != nil { // could not check at all
		log.Fatal(err)
	}
	fmt.Println("open:", rep.OK(), rep.Segments, "segment")
	db.Close()

	rep, err = bloomkv.VerifyDir(context.Background(), nil, dir) // nil: the OS's file system
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("closed:", rep.OK(), rep.Err())
	// Output:
	// open: true 1 segment
	// closed: true <nil>
}

// errors.As finds the file and offset of damage behind any error that
// matches ErrCorrupt.
func ExampleCorruptError() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	db.Put([]byte("k"), []byte("v"))
	db.Flush()
	db.Close()

	// Damage the first byte of the segment's first data block.
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	data, _ := os.ReadFile(segs[0])
	data[0] ^= 0xff
	os.WriteFile(segs[0], data, 0o644)

	db, err = bloomkv.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	_, err = db.Get([]byte("k"))
	var ce *bloomkv.CorruptError
	if errors.As(err, &ce) {
		fmt.Println(errors.Is(err, bloomkv.ErrCorrupt), ce.File == filepath.Base(segs[0]), ce.Offset)
	}
	// Output:
	// true true 0
}

// StatsVar publishes Stats through expvar (served at /debug/vars when the
// program serves http.DefaultServeMux).
func ExampleDB_StatsVar() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// A program publishes it once, under a name of its choosing:
	//
	//	expvar.Publish("bloomkv", db.StatsVar())
	//
	// (expvar.Publish panics on a name used twice, so this example, which
	// may run more than once in a process, uses a Map of its own.)
	vars := new(expvar.Map)
	vars.Set("bloomkv", db.StatsVar())
	db.Put([]byte("k"), []byte("v"))
	db.Get([]byte("k"))

	var s bloomkv.Stats
	json.Unmarshal([]byte(vars.Get("bloomkv").String()), &s)
	fmt.Println("gets:", s.Gets, "writes:", s.Writes)
	// Output:
	// gets: 1 writes: 1
}

// DeleteRange deletes every key in [start, end) with one write; keys
// written afterwards are not affected.
func ExampleDB_DeleteRange() {
	dir, err := os.MkdirTemp("", "bloomkv-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	for _, k := range []string{"log/001", "log/002", "log/003", "log/004", "meta"} {
		db.Put([]byte(k), []byte("v"))
	}
	// Truncate the log's head: entries 001 and 002.
	if err := db.DeleteRange([]byte("log/001"), []byte("log/003")); err != nil {
		panic(err)
	}
	it, err := db.NewIterator(nil)
	if err != nil {
		panic(err)
	}
	for k := range it.All() {
		fmt.Println(string(k))
	}
	if err := it.Close(); err != nil {
		panic(err)
	}
	// Output:
	// log/003
	// log/004
	// meta
}

// Update runs a function in a serializable transaction: here a transfer
// between two accounts, which reads both balances and writes both. If
// another commit changes a balance it read before it commits, the commit
// fails with ErrConflict and UpdateWith runs the function again, on fresh
// data. View reads a consistent snapshot.
func ExampleDB_Update() {
	dir, cleanup := tempDir()
	defer cleanup()
	db, err := bloomkv.Open(filepath.Join(dir, "store"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.Put([]byte("acct/alice"), []byte("100"))
	db.Put([]byte("acct/bob"), []byte("50"))

	balance := func(txn *bloomkv.Txn, who string) (int, error) {
		v, err := txn.Get([]byte("acct/" + who))
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(v))
	}
	transfer := func(from, to string, amount int) error {
		return db.UpdateWith(&bloomkv.UpdateOptions{Retries: 10}, func(txn *bloomkv.Txn) error {
			a, err := balance(txn, from)
			if err != nil {
				return err
			}
			b, err := balance(txn, to)
			if err != nil {
				return err
			}
			if a < amount {
				return fmt.Errorf("%s has only %d", from, a)
			}
			txn.Put([]byte("acct/"+from), strconv.AppendInt(nil, int64(a-amount), 10))
			return txn.Put([]byte("acct/"+to), strconv.AppendInt(nil, int64(b+amount), 10))
		})
	}
	if err := transfer("alice", "bob", 30); err != nil {
		log.Fatal(err)
	}
	fmt.Println(transfer("bob", "alice", 500))

	err = db.View(func(txn *bloomkv.Txn) error {
		it, err := txn.NewIterator(&bloomkv.IterOptions{Prefix: []byte("acct/")})
		if err != nil {
			return err
		}
		defer it.Close()
		for k, v := range it.All() {
			fmt.Printf("%s = %s\n", k, v)
		}
		return it.Error()
	})
	if err != nil {
		log.Fatal(err)
	}

	// CompareAndSet is one such transaction: set if the value is still
	// what was read.
	swapped, err := db.CompareAndSet([]byte("acct/bob"), []byte("80"), []byte("81"))
	fmt.Println(swapped, err)
	// Output:
	// bob has only 80
	// acct/alice = 70
	// acct/bob = 80
	// true <nil>
}
