package bloomkv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// storeFilesHeld lists the descriptors and mappings of the process that
// refer to a file under dir.
func storeFilesHeld(t *testing.T, dir string) []string {
	t.Helper()
	var held []string
	fds, err := os.ReadDir("/proc/self/fd")
	mustDo(t, err)
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
			held = append(held, "descriptor "+fd.Name()+": "+target)
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	mustDo(t, err)
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.Contains(line, dir) {
			held = append(held, "mapped: "+line)
		}
	}
	return held
}

// TestFailedSegmentOpenReleasesFile: a segment whose reader cannot be
// opened (a damaged footer) fails Open, and the file it mapped and opened
// for that is let go on the spot: the handle that would have owned the
// file and the mapping was never made, so no reference count will ever
// close them. A store left damaged is opened again and again (by a
// supervisor retrying, or a tool probing it), and each failed attempt
// that kept the mapping and the descriptor would leak both for the life
// of the process.
func TestFailedSegmentOpenReleasesFile(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, dir, smallOptions())
	for i := range 2000 {
		mustDo(t, db.Put(fmt.Appendf(nil, "key%05d", i), bytes.Repeat([]byte{'v'}, 50)))
	}
	mustDo(t, db.Compact())
	mustDo(t, db.Close())
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt))
	if len(segs) != 1 {
		t.Fatalf("want 1 segment after Compact, have %v", segs)
	}
	data, err := os.ReadFile(segs[0])
	mustDo(t, err)
	data[len(data)-1] ^= 0x40 // the footer: segment.Open refuses the file
	mustDo(t, os.WriteFile(segs[0], data, 0o644))
	for range 3 {
		db, err := Open(dir, smallOptions())
		if err == nil {
			db.Close()
			t.Fatal("Open accepted a segment with a damaged footer")
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open = %v, want ErrCorrupt", err)
		}
		if held := storeFilesHeld(t, dir); len(held) > 0 {
			t.Fatalf("after the failed Open the store's files are still held:\n%s", strings.Join(held, "\n"))
		}
	}
}

// TestEmptyMergeClosesItsFile: a merge whose inputs cancel out (every key
// deleted, no snapshot to keep a version for) writes no segment: the file
// it created for one is removed, and closed. A descriptor left open on
// the removed file keeps its blocks allocated, invisible to ls, for the
// life of the process, one more at every such merge.
func TestEmptyMergeClosesItsFile(t *testing.T) {
	dir := t.TempDir()
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	defer db.Close()
	for i := range 500 {
		mustDo(t, db.Put(fmt.Appendf(nil, "key%05d", i), bytes.Repeat([]byte{'v'}, 50)))
	}
	mustDo(t, db.Flush())
	for i := range 500 {
		mustDo(t, db.Delete(fmt.Appendf(nil, "key%05d", i)))
	}
	mustDo(t, db.Compact())
	if segs, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt)); len(segs) != 0 {
		t.Fatalf("segments %v after a merge of deleted keys, want none", segs)
	}
	for _, h := range storeFilesHeld(t, dir) {
		if strings.HasSuffix(h, " (deleted)") {
			t.Errorf("%s", h)
		}
	}
}
