package bloomkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// rawCopyValue returns a value a store of separated values holds: mostly
// 4 KiB, half of them compressible and half not (so that value records of
// both stored types are copied by compactions), else 10 to 6,000 bytes.
func rawCopyValue(rng *rand.Rand) []byte {
	size := 4096
	if rng.IntN(3) == 0 {
		size = 10 + rng.IntN(6000)
	}
	v := make([]byte, size)
	compressible := rng.IntN(2) == 0
	for j := range v {
		v[j] = byte(rng.UintN(256))
		if compressible && j%8 != 0 {
			v[j] = 'x'
		}
	}
	return v
}

// checkStoreModel compares every Get of the keys ever written and a full
// scan with the model.
func checkStoreModel(t *testing.T, db *DB, model map[string][]byte, keys int, what string) {
	t.Helper()
	for k := range keys {
		key := fmt.Sprintf("key-%05d", k)
		v, err := db.Get([]byte(key))
		want, ok := model[key]
		switch {
		case !ok && !errors.Is(err, ErrNotFound):
			t.Fatalf("%s: Get(%s) = %d bytes, %v; want not found", what, key, len(v), err)
		case ok && (err != nil || !bytes.Equal(v, want)):
			t.Fatalf("%s: Get(%s) = %d bytes, %v; want its %d bytes", what, key, len(v), err, len(want))
		}
	}
	it, err := db.NewIterator(nil)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := slices.Sorted(maps.Keys(model))
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n >= len(wantKeys) || string(it.Key()) != wantKeys[n] || !bytes.Equal(it.Value(), model[wantKeys[n]]) {
			t.Fatalf("%s: scan entry %d is %q (%d bytes), not the model's", what, n, it.Key(), len(it.Value()))
		}
		n++
	}
	if err := it.Close(); err != nil || n != len(wantKeys) {
		t.Fatalf("%s: scan saw %d of %d keys: %v", what, n, len(wantKeys), err)
	}
}

// TestCompactionCopiesValueRecordsModel writes, overwrites and deletes
// large and mixed-size values through several flushes and compactions,
// and reopens the store between rounds with another codec and another
// LargeValueSize (so that compactions copy records whose codec is not
// the writer's, and decode those the new threshold keeps in blocks):
// every Get and a full scan must match a Go map, and Verify must pass,
// after each compaction, with and without the mapping.
func TestCompactionCopiesValueRecordsModel(t *testing.T) {
	rounds := []struct {
		c     Compression
		large int
	}{
		{SnappyCompression, 1024},
		{ZstdCompression, 1024},
		{NoCompression, 2048},
		{SnappyCompression, 512},
		{SnappyCompression, 4096},
	}
	for _, mmap := range []bool{true, false} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(21, 22))
			dir := t.TempDir()
			model := map[string][]byte{}
			const keys = 300
			for r, round := range rounds {
				o := smallOptions()
				o.Compression, o.LargeValueSize, o.DisableMmap = round.c, round.large, !mmap
				o.MemtableSize = 256 << 10
				db := mustOpen(t, dir, o)
				for step := range 3 {
					for range 150 {
						key := fmt.Sprintf("key-%05d", rng.IntN(keys))
						if rng.IntN(6) == 0 {
							mustDo(t, db.Delete([]byte(key)))
							delete(model, key)
							continue
						}
						v := rawCopyValue(rng)
						mustDo(t, db.Put([]byte(key), v))
						model[key] = v
					}
					mustDo(t, db.Flush())
					if step == 2 {
						mustDo(t, db.Compact())
					} else {
						mustDo(t, db.WaitForCompactions(context.Background()))
					}
					what := fmt.Sprintf("round %d (%v, LargeValueSize %d) step %d", r, round.c, round.large, step)
					checkStoreModel(t, db, model, keys, what)
					if _, err := db.Verify(context.Background()); err != nil {
						t.Fatalf("%s: Verify: %v", what, err)
					}
				}
				mustDo(t, db.Close())
			}
		})
	}
}

// TestCompactionRawCopyDamage flips a bit in a value record of a segment
// (one stored raw, so that it can be found by its bytes): the compaction
// that would copy it as stored must fail with ErrCorrupt naming the file
// and an offset inside the record, never copy it as good, mapped or not.
func TestCompactionRawCopyDamage(t *testing.T) {
	for _, mmap := range []bool{true, false} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(23, 24))
			dir := t.TempDir()
			o := smallOptions()
			o.DisableAutoCompaction, o.DisableMmap = true, !mmap
			db := mustOpen(t, dir, o)
			var victim []byte
			for seg := range 2 {
				for i := range 40 {
					v := make([]byte, 4096)
					for j := range v {
						v[j] = byte(rng.UintN(256))
					}
					if seg == 0 && i == 17 {
						victim = v
					}
					mustDo(t, db.Put(fmt.Appendf(nil, "key-%d-%03d", seg, i), v))
				}
				mustDo(t, db.Flush())
			}
			mustDo(t, db.Close())

			names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
			var file string
			var off int
			for _, name := range names {
				data, err := os.ReadFile(name)
				if err != nil {
					t.Fatal(err)
				}
				if i := bytes.Index(data, victim); i >= 0 {
					file, off = filepath.Base(name), i
					data[i+1000] ^= 0x04
					if err := os.WriteFile(name, data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if file == "" {
				t.Fatal("no segment holds the value as a raw record")
			}
			db = mustOpen(t, dir, o)
			defer db.Close()
			err := db.Compact()
			var ce *base.CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.File != file || ce.Offset != int64(off) {
				t.Fatalf("Compact over a damaged value record of %s at %d: %v", file, off, err)
			}
			if _, err := db.Get([]byte("key-0-017")); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Get of the damaged value after the failed compaction: %v", err)
			}
		})
	}
}
