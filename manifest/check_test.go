package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// built is a manifest file made by Create and Apply, closed.
type built struct {
	path  string
	data  []byte
	state State
}

// buildManifest creates a manifest in a new directory, applies edits and
// closes it.
func buildManifest(t testing.TB, edits ...Edit) built {
	t.Helper()
	path := filepath.Join(t.TempDir(), "MANIFEST")
	m, err := Create(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edits {
		if err := m.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	st := m.State()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return built{path, data, st}
}

// longSeg is a segment whose keys are keyLen bytes long.
func longSeg(fn uint64, keyLen int) base.SegmentMeta {
	s := seg(fn, fn, fn)
	s.Smallest = bytes.Repeat([]byte{'a'}, keyLen)
	s.Largest = bytes.Repeat([]byte{'z'}, keyLen)
	return s
}

// smallEdits are a small store's history: a few flushes and a compaction.
func smallEdits() []Edit {
	return []Edit{
		{Add: []base.SegmentMeta{seg(1, 1, 10)}, FlushedSeq: ptr(10), LogNum: ptr(2)},
		{Add: []base.SegmentMeta{seg(3, 11, 20)}, FlushedSeq: ptr(20), LogNum: ptr(4)},
		{Add: []base.SegmentMeta{seg(5, 1, 20)}, Remove: []uint64{1, 3}},
		{Add: []base.SegmentMeta{seg(6, 21, 30)}, FlushedSeq: ptr(30), LogNum: ptr(7)},
	}
}

// manyEdits adds n segments with keyLen-byte keys in batches, then removes
// every third one, so the segments bucket needs branch pages and has
// freed pages behind it.
func manyEdits(n, keyLen int) []Edit {
	var edits []Edit
	for start := 1; start <= n; start += 200 {
		var e Edit
		for fn := start; fn < start+200 && fn <= n; fn++ {
			e.Add = append(e.Add, longSeg(uint64(fn), keyLen))
		}
		edits = append(edits, e)
	}
	var rm Edit
	for fn := 3; fn <= n; fn += 3 {
		rm.Remove = append(rm.Remove, uint64(fn))
	}
	return append(edits, rm)
}

// validManifests are the files every test starts from.
func validManifests(t testing.TB) map[string]built {
	return map[string]built{
		"fresh":    buildManifest(t),
		"small":    buildManifest(t, smallEdits()...),
		"many":     buildManifest(t, manyEdits(2000, 100)...),
		"overflow": buildManifest(t, Edit{Add: []base.SegmentMeta{longSeg(1, 9000), longSeg(2, 30000), seg(3, 1, 2)}}),
	}
}

// pageStats counts the pages of each kind that name themselves correctly,
// to show which structures a test file exercises.
func pageStats(data []byte, ps int) (branches, overflows int) {
	for id := 0; (id+1)*ps <= len(data); id++ {
		p := data[id*ps:]
		if ne.Uint64(p) != uint64(id) {
			continue
		}
		if ne.Uint16(p[8:]) == branchPage {
			branches++
		}
		if ne.Uint32(p[12:]) > 0 {
			overflows++
		}
	}
	return branches, overflows
}

func TestCheckValid(t *testing.T) {
	for name, b := range validManifests(t) {
		t.Run(name, func(t *testing.T) {
			res, err := Check("MANIFEST", b.data)
			if err != nil {
				t.Fatal(err)
			}
			if res.MetaFallback || res.PageSize != os.Getpagesize() || res.HighWater*uint64(res.PageSize) > uint64(len(b.data)) {
				t.Fatalf("result %+v for a %d-byte file", res, len(b.data))
			}
			br, ov := pageStats(b.data, res.PageSize)
			t.Logf("%d bytes, %d pages in use, txid %d, ~%d branch pages, ~%d with overflow", len(b.data), res.HighWater, res.Txid, br, ov)
			if name == "many" && br == 0 || name == "overflow" && ov == 0 {
				t.Fatalf("%s manifest lacks the pages it is meant to exercise", name)
			}
			if res2, err := checkFile(b.path); err != nil || res2 != res {
				t.Fatalf("CheckFile = %+v, %v; Check = %+v", res2, err, res)
			}
			m, err := Open(vfs.Default, b.path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if !sameState(m.State(), b.state) {
				t.Fatal("reopened state differs")
			}
		})
	}
}

// TestCheckGenericBbolt checks a bbolt database that is not a manifest but
// uses what the validator must understand: nested buckets, inline and
// not, several levels deep, and a stored freelist page.
func TestCheckGenericBbolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o644, nil) // the freelist is synced by default
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		top, err := tx.CreateBucket([]byte("top"))
		if err != nil {
			return err
		}
		for i := range 50 {
			sub, err := top.CreateBucket(fmt.Appendf(nil, "sub%03d", i))
			if err != nil {
				return err
			}
			for j := range i * i { // the larger ones outgrow an inline page
				if err := sub.Put(fmt.Appendf(nil, "k%05d", j), bytes.Repeat([]byte{byte(j)}, 40)); err != nil {
					return err
				}
			}
			if i%10 == 0 {
				deep, err := sub.CreateBucket([]byte("deep"))
				if err != nil {
					return err
				}
				if err := deep.Put([]byte("x"), []byte("y")); err != nil {
					return err
				}
			}
		}
		_, err = tx.CreateBucket([]byte("empty"))
		return err
	})
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("top")).DeleteBucket([]byte("sub049")) })
	}
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check("db", data)
	if err != nil {
		t.Fatal(err)
	}
	if m := readMeta(data, res.Meta*res.PageSize); m.freelist == noFreelist {
		t.Fatal("the file has no freelist page to check")
	}
}

// wantCheckCorrupt checks that err is a CorruptError for MANIFEST.
func wantCheckCorrupt(t *testing.T, err error, what string) *base.CorruptError {
	t.Helper()
	var ce *base.CorruptError
	if !errors.As(err, &ce) || ce.File != "MANIFEST" {
		t.Fatalf("%s: got %v, want a CorruptError for MANIFEST", what, err)
	}
	return ce
}

// TestCheckTruncated truncates valid manifests everywhere that matters:
// Open must report corruption (it used to die of SIGBUS in bbolt's mmap),
// unless the cut only removes unused pages above the high-water mark.
func TestCheckTruncated(t *testing.T) {
	ps := os.Getpagesize()
	for name, b := range validManifests(t) {
		if name == "many" {
			continue // the same as small, only slower
		}
		res, err := Check("MANIFEST", b.data)
		if err != nil {
			t.Fatal(err)
		}
		sizes := []int{0, 1, 16, 80, 1024, 4095, 4096, 4097, 8192}
		for off := ps; off < len(b.data); off += ps {
			sizes = append(sizes, off, off+ps/2, off-1)
		}
		for _, size := range sizes {
			t.Run(fmt.Sprintf("%s/%d", name, size), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "MANIFEST")
				if err := os.WriteFile(path, b.data[:size], 0o644); err != nil {
					t.Fatal(err)
				}
				m, err := Open(vfs.Default, path)
				if size%ps == 0 && uint64(size/ps) >= res.HighWater {
					if err != nil {
						t.Fatalf("cut above the high-water mark: %v", err)
					}
					defer m.Close()
					if !sameState(m.State(), b.state) {
						t.Fatal("state differs")
					}
					return
				}
				wantCheckCorrupt(t, err, "Open")
				_, err = ReadState(vfs.Default, path)
				wantCheckCorrupt(t, err, "ReadState")
				if after, _ := os.ReadFile(path); !bytes.Equal(after, b.data[:size]) {
					t.Fatal("Open modified the file")
				}
			})
		}
	}
}

// reseal recomputes the checksum of meta page slot, as if bbolt had written
// the damage.
func reseal(data []byte, ps, slot int) {
	m := data[slot*ps+pageHeaderSize:]
	h := fnv.New64a()
	h.Write(m[:metaSummed])
	ne.PutUint64(m[metaSummed:], h.Sum64())
}

// TestCheckDamage damages one structure at a time and checks the offset
// reported.
func TestCheckDamage(t *testing.T) {
	many := buildManifest(t, manyEdits(2000, 100)...)
	ps := os.Getpagesize()
	good, err := Check("MANIFEST", many.data)
	if err != nil {
		t.Fatal(err)
	}
	newest, older := good.Meta*ps, (1-good.Meta)*ps
	m := readMeta(many.data, newest)
	root := int(m.root) * ps
	// The root bucket's leaf holds "meta" and "segments"; segments is big
	// enough to have a branch page as its own root.
	segRoot := int(ne.Uint64(many.data[root+pageHeaderSize+elemSize+int(ne.Uint32(many.data[root+pageHeaderSize+elemSize+4:]))+len(segmentsBucket):])) * ps
	if ne.Uint16(many.data[segRoot+8:]) != branchPage {
		t.Fatal("segments bucket root is not a branch page")
	}
	firstChild := segRoot + pageHeaderSize + 8 // pgid of the branch's first element
	tests := []struct {
		name     string
		damage   func(d []byte)
		offset   int  // -1: a pass with MetaFallback set is expected
		fallback bool // which meta is used then: the older one?
	}{
		{"newest meta checksum", func(d []byte) { d[newest+pageHeaderSize+56] ^= 1 }, -1, true},
		{"older meta magic", func(d []byte) { d[older+pageHeaderSize] ^= 1 }, -1, false},
		{"both metas", func(d []byte) { d[pageHeaderSize] ^= 1; d[ps+pageHeaderSize] ^= 1 }, 0, false},
		{"root past high-water mark", func(d []byte) {
			ne.PutUint64(d[newest+pageHeaderSize+16:], m.pgid)
			reseal(d, ps, good.Meta)
		}, newest + pageHeaderSize + 16, false},
		{"high-water mark past end of file", func(d []byte) {
			ne.PutUint64(d[newest+pageHeaderSize+40:], uint64(len(d)/ps+1))
			reseal(d, ps, good.Meta)
		}, newest + pageHeaderSize + 40, false},
		{"page header id", func(d []byte) { d[segRoot] ^= 1 }, segRoot, false},
		{"page flags", func(d []byte) { d[root+8] = freelistPage }, root + 8, false},
		{"cycle", func(d []byte) { ne.PutUint64(d[firstChild:], uint64(segRoot/ps)) }, segRoot, false},
		{"child out of range", func(d []byte) { ne.PutUint64(d[firstChild:], 1) }, firstChild, false},
		{"element count", func(d []byte) { d[segRoot+10]-- }, segRoot + pageHeaderSize, false},
		{"branch keys out of order", func(d []byte) {
			k := segRoot + pageHeaderSize + elemSize + int(ne.Uint32(d[segRoot+pageHeaderSize+elemSize:]))
			clear(d[k : k+8]) // the second separator, file number 0, sorts before the first
		}, segRoot + pageHeaderSize + elemSize, false},
		{"overflow count", func(d []byte) { d[segRoot+15] = 0xFF }, segRoot + 12, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := bytes.Clone(many.data)
			tt.damage(d)
			res, err := Check("MANIFEST", d)
			if tt.offset < 0 {
				if err != nil || !res.MetaFallback || (res.Meta != good.Meta) != tt.fallback {
					t.Fatalf("got %+v, %v; want a pass with MetaFallback, older meta used: %v", res, err, tt.fallback)
				}
				return
			}
			ce := wantCheckCorrupt(t, err, "Check")
			if ce.Offset != int64(tt.offset) {
				t.Fatalf("offset %d, want %d: %v", ce.Offset, tt.offset, err)
			}
		})
	}
}

// TestOpenChecksUnderLock checks that validation waits for bbolt's lock:
// an open manifest is reported locked, not read while it may be changing.
func TestOpenChecksUnderLock(t *testing.T) {
	m, path := createTemp(t)
	for _, open := range []func() error{
		func() error { _, err := Open(vfs.Default, path); return err },
		func() error { _, err := ReadState(vfs.Default, path); return err },
	} {
		if err := open(); !errors.Is(err, ErrLocked) {
			t.Fatalf("got %v, want ErrLocked", err)
		}
	}
	_ = m.Close()
}

// TestCheckFileTooLarge pins the size cap at 64 MiB, as FORMAT.md states:
// a file of exactly 64 MiB is read and checked (a sparse one then fails
// for its content), one byte more is refused for its size.
func TestCheckFileTooLarge(t *testing.T) {
	for _, tt := range []struct {
		size   int64
		larger bool
	}{
		{64 << 20, false},
		{64<<20 + 1, true},
	} {
		path := filepath.Join(t.TempDir(), "MANIFEST")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, tt.size); err != nil { // sparse
			t.Fatal(err)
		}
		_, err := checkFile(path)
		ce := wantCheckCorrupt(t, err, "checkFile")
		if got := strings.Contains(ce.Reason, "larger"); got != tt.larger {
			t.Fatalf("file of %d bytes: %v; want refused for its size: %v", tt.size, err, tt.larger)
		}
	}
}
