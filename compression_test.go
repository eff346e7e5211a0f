package bloomkv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/segment"
)

// segmentFiles returns the format version and size of each segment of
// the store in dir.
func segmentFiles(t *testing.T, dir string) (versions []uint32, size int64) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		r, err := segment.Open(f, fi.Size(), segment.ReaderOptions{Name: filepath.Base(name)})
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, r.Properties().FormatVersion)
		size += fi.Size()
		f.Close()
	}
	return versions, size
}

func fillCompressible(t *testing.T, db *DB, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		v := strings.Repeat(fmt.Sprintf("value %d of a compressible store; ", i%7), 8)
		mustDo(t, db.Put(fmt.Appendf(nil, "key-%06d", i), []byte(v)))
	}
	mustDo(t, db.Flush())
}

// TestCompressionOption writes the same data under each setting: zstd
// segments are the smallest, snappy's (the zero value) are smaller than
// uncompressed ones, and DisableCompression is NoCompression. Every
// segment has format version 4, for its data blocks' hash indexes, or 6
// where its data blocks are stored raw, some after padding that starts
// them at a page (segment.WriterOptions.PageAlign).
func TestCompressionOption(t *testing.T) {
	sizes := map[string]int64{}
	for _, tc := range []struct {
		name    string
		opts    Options
		version uint32
	}{
		{"default", Options{}, 4},
		{"snappy", Options{Compression: SnappyCompression}, 4},
		{"none", Options{Compression: NoCompression}, 6},
		{"DisableCompression", Options{DisableCompression: true}, 6},
		{"DisableCompression and NoCompression", Options{DisableCompression: true, Compression: NoCompression}, 6},
		{"zstd", Options{Compression: ZstdCompression}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := mustOpen(t, dir, &tc.opts)
			fillCompressible(t, db, 0, 2000)
			mustDo(t, db.Close())
			versions, size := segmentFiles(t, dir)
			if len(versions) != 1 || versions[0] != tc.version {
				t.Fatalf("segment versions %v, want one of version %d", versions, tc.version)
			}
			sizes[tc.name] = size
		})
	}
	if sizes["default"] != sizes["snappy"] || sizes["none"] != sizes["DisableCompression"] ||
		!(sizes["zstd"] < sizes["snappy"] && sizes["snappy"] < sizes["none"]) {
		t.Fatalf("segment sizes %v", sizes)
	}
}

// TestCompressionInvalid refuses an unknown codec, and DisableCompression
// with zstd, which contradict each other.
func TestCompressionInvalid(t *testing.T) {
	for _, o := range []Options{
		{Compression: ZstdCompression + 1},
		{DisableCompression: true, Compression: ZstdCompression},
	} {
		if _, err := Open(t.TempDir(), &o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Open(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
	for _, name := range []string{"snappy", "none", "zstd"} {
		c, err := ParseCompression(name)
		if err != nil || c.String() != name {
			t.Errorf("ParseCompression(%q) = %v, %v", name, c, err)
		}
	}
	if _, err := ParseCompression("lz4"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("ParseCompression(lz4) = %v", err)
	}
}

// TestCompressionChange reopens a zstd store with snappy: the zstd
// segments still read, and a compaction rewrites them as snappy (version
// 2), keeping every key.
func TestCompressionChange(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, &Options{Compression: ZstdCompression})
	fillCompressible(t, db, 0, 1000)
	mustDo(t, db.Close())
	db = mustOpen(t, dir, &Options{})
	defer db.Close()
	fillCompressible(t, db, 1000, 1000)
	if versions, _ := segmentFiles(t, dir); len(versions) != 2 {
		t.Fatalf("segment versions %v, want a zstd one and a snappy one", versions)
	}
	check := func() {
		for i := range 2000 {
			if _, err := db.Get(fmt.Appendf(nil, "key-%06d", i)); err != nil {
				t.Fatalf("Get key-%06d: %v", i, err)
			}
		}
	}
	check()
	mustDo(t, db.Compact())
	check()
	if versions, _ := segmentFiles(t, dir); len(versions) != 1 || versions[0] != 4 {
		t.Fatalf("after compaction: segment versions %v, want one of version 4", versions)
	}
}

// TestSegmentsPageAligned: with default options, a flush and a
// compaction of incompressible values write segments whose raw data
// blocks start at pages (format version 6: segment.WriterOptions.PageAlign).
func TestSegmentsPageAligned(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]byte, 100)
	for range 2 {
		for i := range 5000 {
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			mustDo(t, db.Put(fmt.Appendf(nil, "key-%06d", i), v))
		}
		mustDo(t, db.Flush())
	}
	mustDo(t, db.Compact())
	mustDo(t, db.Close())
	versions, _ := segmentFiles(t, dir)
	if len(versions) != 1 || versions[0] != 6 {
		t.Fatalf("segment versions %v after Compact, want one of version 6", versions)
	}
}
