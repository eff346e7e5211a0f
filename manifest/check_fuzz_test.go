package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/vfs"
)

// FuzzCheckFile feeds whole files to Check. Check must never panic, and
// whatever it accepts, bbolt must open, read, check and write without
// panicking or faulting: a panic on one of bbolt's own goroutines kills
// the fuzz worker, which the fuzzer reports like any other failure.
//
// With reseal set, the meta checksums are recomputed after mutation, so
// the fuzzer gets past them to the pages, as a bug in bbolt would.
func FuzzCheckFile(f *testing.F) {
	for _, ps := range []int{1024, 4096} {
		for _, edits := range [][]Edit{nil, smallEdits(), manyEdits(60, 20)} {
			data := buildSmallPages(f, ps, edits)
			f.Add(data, false)
			f.Add(data, true)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, resealMetas bool) {
		if resealMetas && len(data) >= 4*minPageSize {
			ps := int(ne.Uint32(data[pageHeaderSize+8:]))
			if ps < minPageSize || ps > maxPageSize || 2*ps > len(data) {
				ps = minPageSize
			}
			reseal(data, ps, 0)
			reseal(data, ps, 1)
		}
		res, err := Check("MANIFEST", data)
		if err != nil {
			wantCheckCorrupt(t, err, "Check")
			return
		}
		exerciseBolt(t, data, res)
	})
}

// FuzzCheckPatch damages real manifests in place: patch is a list of
// (offset, value) pairs of 3 bytes, offset big-endian, written over one
// of the seed files (chosen by which) before the meta checksums are
// resealed. Unlike FuzzCheckFile, whose mutations mostly resize a file
// into one that fails the first checks, every input here reaches the
// page walk, and many pass it.
func FuzzCheckPatch(f *testing.F) {
	type seed struct {
		data []byte
		ps   int
	}
	var seeds []seed
	for _, ps := range []int{1024, 4096} {
		for _, edits := range [][]Edit{smallEdits(), manyEdits(60, 20)} {
			seeds = append(seeds, seed{buildSmallPages(f, ps, edits), ps})
		}
	}
	f.Add(uint8(0), []byte{0x08, 0x00, 0x01}, true)
	f.Add(uint8(2), []byte{0x10, 0x0a, 0x03, 0x10, 0x10, 0x00}, true)
	f.Fuzz(func(t *testing.T, which uint8, patch []byte, resealMetas bool) {
		s := seeds[int(which)%len(seeds)]
		data := bytes.Clone(s.data)
		for ; len(patch) >= 3; patch = patch[3:] {
			data[(int(patch[0])<<8|int(patch[1]))%len(data)] = patch[2]
		}
		if resealMetas {
			reseal(data, s.ps, 0)
			reseal(data, s.ps, 1)
		}
		res, err := Check("MANIFEST", data)
		if err != nil {
			wantCheckCorrupt(t, err, "Check")
			return
		}
		exerciseBolt(t, data, res)
	})
}

// buildSmallPages builds a manifest with page size ps and cuts the file
// after its last page in use, which keeps fuzz inputs small.
func buildSmallPages(t testing.TB, ps int, edits []Edit) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "MANIFEST")
	opts := boltOptions(nil)
	opts.PageSize = ps
	db, err := bolt.Open(path, 0o644, opts)
	if err != nil {
		t.Fatal(err)
	}
	st := State{NextFileNum: firstFileNum}
	err = db.Update(func(tx *bolt.Tx) error { return initialize(tx, st) })
	for _, e := range edits {
		next, aerr := st.apply(e, st.NextFileNum)
		err = errors.Join(err, aerr, db.Update(func(tx *bolt.Tx) error { return writeEdit(tx, e, next) }))
		st = next
	}
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check("MANIFEST", data)
	if err != nil {
		t.Fatal(err)
	}
	return data[:res.HighWater*uint64(ps)]
}

// exerciseBolt opens data, which Check accepted, the ways bloomkv and
// bbolt can: manifest.Open, then bbolt read-write (which rebuilds the
// freelist by walking every page), reading every bucket, bbolt's own
// consistency check, and a write that deletes from every bucket.
func exerciseBolt(t *testing.T, data []byte, res CheckResult) {
	path := filepath.Join(t.TempDir(), "MANIFEST")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := Open(vfs.Default, path); err == nil {
		_ = m.State()
		_ = m.Close()
	}
	db, err := bolt.Open(path, 0o644, boltOptions(nil))
	if err != nil {
		t.Fatalf("bbolt cannot open what Check accepted: %v", err)
	}
	defer db.Close()
	db.NoSync, db.NoGrowSync = true, true // speed: durability is not under test
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			if !expectedCheckError(err, res) {
				t.Errorf("bbolt's check of what Check accepted: %v", err)
			}
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return readBucket(b) })
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return deleteFirst(b) }); err != nil {
			return err
		}
		b, err := tx.CreateBucketIfNotExists([]byte("fuzz"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), bytes.Repeat([]byte("v"), 3000))
	})
	if err != nil {
		t.Fatalf("write to what Check accepted: %v", err)
	}
}

// expectedCheckError reports whether an error of bbolt's Tx.Check is one
// Check lets through on purpose. A stored freelist that misses a free page
// is a leak, not damage bbolt trips over. A damaged header of the meta
// page bbolt does not use (MetaFallback) trips only Tx.Check, which
// recovers; the next commit rewrites that page.
func expectedCheckError(err error, res CheckResult) bool {
	msg, other := err.Error(), 1-res.Meta
	return strings.Contains(msg, "unreachable unfreed") ||
		res.MetaFallback && (strings.Contains(msg, fmt.Sprintf("Page expected to be: %d,", other)) ||
			strings.Contains(msg, fmt.Sprintf("page %d: has unexpected type", other)))
}

// readBucket reads every key and value of b and its nested buckets. b is
// nil for a plain value in the root bucket, which bbolt permits.
func readBucket(b *bolt.Bucket) error {
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if child := b.Bucket(k); child != nil {
				return readBucket(child)
			}
		}
		_ = bytes.Count(k, v)
		return nil
	})
}

// deleteFirst deletes the first key of b, or the first key of the first
// nested bucket, so the write touches the existing tree.
func deleteFirst(b *bolt.Bucket) error {
	if b == nil {
		return nil
	}
	k, v := b.Cursor().First()
	switch {
	case k == nil:
		return nil
	case v == nil:
		if child := b.Bucket(k); child != nil {
			return deleteFirst(child)
		}
		return nil
	}
	return b.Delete(k)
}
