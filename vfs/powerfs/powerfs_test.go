package powerfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/errorfs"
)

// dirState reads the regular files of dir: name → content.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// plScript runs steps against a PowerLoss over dir; each step names files
// relative to dir. It fails the test on any error.
type plScript struct {
	t     *testing.T
	dir   string
	p     *FS
	files map[string]vfs.File
}

func (s *plScript) path(name string) string { return filepath.Join(s.dir, name) }

func (s *plScript) ok(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s *plScript) create(name string) {
	s.t.Helper()
	f, err := s.p.Create(s.path(name))
	s.ok(err)
	s.files[name] = f
}

func (s *plScript) openRW(name string) {
	s.t.Helper()
	f, err := s.p.OpenReadWrite(s.path(name))
	s.ok(err)
	s.files[name] = f
}

func (s *plScript) write(name, data string) {
	s.t.Helper()
	_, err := s.files[name].Write([]byte(data))
	s.ok(err)
}

func (s *plScript) sync(name string) { s.t.Helper(); s.ok(s.files[name].Sync()) }
func (s *plScript) syncDir()         { s.t.Helper(); s.ok(s.p.SyncDir(s.dir)) }
func (s *plScript) remove(name string) {
	s.t.Helper()
	s.unixOnly("removes", name)
	s.ok(s.p.Remove(s.path(name)))
}
func (s *plScript) rename(a, b string) {
	s.t.Helper()
	s.unixOnly("renames", a, b)
	s.ok(s.p.Rename(s.path(a), s.path(b)))
}

// unixOnly skips the test on Windows if the script holds one of names
// open: Windows refuses to remove or rename a file that a handle holds
// open (Go opens without FILE_SHARE_DELETE), where unix removes the name
// and keeps the file. The store never does that to its own files; these
// scripts do it to check the model's bookkeeping of names and inodes.
func (s *plScript) unixOnly(op string, names ...string) {
	if runtime.GOOS != "windows" {
		return
	}
	for _, n := range names {
		if _, open := s.files[n]; open {
			s.closeAll() // or t.TempDir's cleanup cannot remove them
			s.t.Skipf("the script %s %s while it holds it open, which Windows refuses", op, n)
		}
	}
}
func (s *plScript) link(a, b string) { s.t.Helper(); s.ok(s.p.Link(s.path(a), s.path(b))) }
func (s *plScript) truncate(name string, n int64) {
	s.t.Helper()
	s.ok(s.files[name].Truncate(n))
}

// closeAll closes the files, as a store's Close does after the cut.
func (s *plScript) closeAll() {
	for _, f := range s.files {
		f.Close()
	}
}

func newScript(t *testing.T, before map[string]string) *plScript {
	dir := t.TempDir()
	for name, data := range before {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &plScript{t: t, dir: dir, p: New(vfs.Default, nil), files: make(map[string]vfs.File)}
	t.Cleanup(s.closeAll) // before t.TempDir's removal: Windows removes no open file
	return s
}

func TestPowerLossTable(t *testing.T) {
	tests := []struct {
		name   string
		before map[string]string // files on disk before the vfs.FS is wrapped
		steps  func(s *plScript)
		after  map[string]string // with WritebackNone
	}{
		{"synced writes are durable, the rest is lost", nil, func(s *plScript) {
			s.create("a")
			s.syncDir()
			s.write("a", "hello")
			s.sync("a")
			s.write("a", " world")
		}, map[string]string{"a": "hello"}},
		{"sync covers every earlier write", nil, func(s *plScript) {
			s.create("a")
			s.write("a", "one ")
			s.write("a", "two")
			s.sync("a")
			s.syncDir()
			s.write("a", "three")
		}, map[string]string{"a": "one two"}},
		{"unsynced create disappears", nil, func(s *plScript) {
			s.create("a")
			s.write("a", "data")
			s.sync("a") // the content, not the name
		}, map[string]string{}},
		{"synced create survives, empty without a file sync", nil, func(s *plScript) {
			s.create("a")
			s.write("a", "data")
			s.syncDir()
		}, map[string]string{"a": ""}},
		{"pre-existing files are durable", map[string]string{"x": "old"}, func(s *plScript) {
			s.create("a")
		}, map[string]string{"x": "old"}},
		{"unsynced overwrite of a pre-existing file is undone", map[string]string{"x": "old data"}, func(s *plScript) {
			s.openRW("x")
			s.write("x", "NEW")
		}, map[string]string{"x": "old data"}},
		{"synced overwrite of a pre-existing file stays", map[string]string{"x": "old data"}, func(s *plScript) {
			s.openRW("x")
			s.write("x", "NEW")
			s.sync("x")
			s.write("x", "!!")
		}, map[string]string{"x": "NEW data"}},
		{"remove without SyncDir comes back with its durable content", nil, func(s *plScript) {
			s.create("a")
			s.write("a", "kept")
			s.sync("a")
			s.syncDir()
			s.write("a", "lost")
			s.remove("a")
		}, map[string]string{"a": "kept"}},
		{"remove of a pre-existing file without SyncDir comes back", map[string]string{"x": "old"}, func(s *plScript) {
			s.remove("x")
		}, map[string]string{"x": "old"}},
		{"synced remove stays", map[string]string{"x": "old"}, func(s *plScript) {
			s.remove("x")
			s.syncDir()
		}, map[string]string{}},
		{"rename without SyncDir is undone", nil, func(s *plScript) {
			s.create("a")
			s.write("a", "A")
			s.sync("a")
			s.syncDir()
			s.rename("a", "b")
		}, map[string]string{"a": "A"}},
		{"rename over a file without SyncDir brings the old target back", map[string]string{"b": "old B"}, func(s *plScript) {
			s.create("a")
			s.write("a", "new B")
			s.sync("a")
			s.rename("a", "b")
		}, map[string]string{"b": "old B"}},
		{"synced rename stays", map[string]string{"b": "old B"}, func(s *plScript) {
			s.create("a")
			s.write("a", "new B")
			s.sync("a")
			s.rename("a", "b")
			s.syncDir()
		}, map[string]string{"b": "new B"}},
		{"link without SyncDir is undone", map[string]string{"a": "A"}, func(s *plScript) {
			s.link("a", "b")
		}, map[string]string{"a": "A"}},
		{"link then remove, synced: the content follows the link", nil, func(s *plScript) {
			s.create("tmp")
			s.write("tmp", "M")
			s.sync("tmp")
			s.link("tmp", "m")
			s.remove("tmp")
			s.syncDir()
		}, map[string]string{"m": "M"}},
		{"unsynced truncation is undone", nil, func(s *plScript) {
			s.create("a")
			s.write("a", "0123456789")
			s.sync("a")
			s.syncDir()
			s.truncate("a", 3)
		}, map[string]string{"a": "0123456789"}},
		{"synced truncation stays", nil, func(s *plScript) {
			s.create("a")
			s.write("a", "0123456789")
			s.truncate("a", 3)
			s.sync("a")
			s.syncDir()
		}, map[string]string{"a": "012"}},
		{"recreated name: the durable file comes back", nil, func(s *plScript) {
			s.create("a")
			s.write("a", "first")
			s.sync("a")
			s.syncDir()
			s.remove("a")
			s.create("a")
			s.write("a", "second")
			s.sync("a")
		}, map[string]string{"a": "first"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t, tc.before)
			tc.steps(s)
			s.p.Cut()
			s.closeAll()
			if _, err := s.p.Restore(WritebackNone, 1); err != nil {
				t.Fatal(err)
			}
			if got := dirState(t, s.dir); fmt.Sprint(got) != fmt.Sprint(tc.after) {
				t.Fatalf("after the power cut: %q, want %q", got, tc.after)
			}
		})
	}
}

// TestPowerLossLinksPreserved checks that Restore keeps hard links of one
// file one file.
func TestPowerLossLinksPreserved(t *testing.T) {
	s := newScript(t, nil)
	s.create("a")
	s.write("a", "x")
	s.sync("a")
	s.link("a", "b")
	s.syncDir()
	s.remove("a") // not synced: comes back, as a link to b's file
	s.p.Cut()
	s.closeAll()
	if _, err := s.p.Restore(WritebackNone, 1); err != nil {
		t.Fatal(err)
	}
	a, errA := os.Stat(s.path("a"))
	b, errB := os.Stat(s.path("b"))
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		t.Fatalf("a and b after Restore: %v, %v, same file %v", errA, errB, errA == nil && errB == nil && os.SameFile(a, b))
	}
}

// appendHistory makes, in a fresh directory, a file with a synced part
// and several unsynced appends of distinct bytes, and restores it with
// mode and seed; it returns the synced part, the unsynced bytes and the
// restored content.
func appendHistory(t *testing.T, mode Writeback, seed uint64) (synced, unsynced, got string) {
	s := newScript(t, nil)
	s.create("a")
	s.syncDir()
	var sb, ub strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&sb, "s%d;", i)
	}
	s.write("a", sb.String())
	s.sync("a")
	for i := range 40 {
		chunk := strings.Repeat(string(rune('A'+i%26)), 100+i*37)
		ub.WriteString(chunk)
		s.write("a", chunk)
	}
	s.p.Cut()
	s.closeAll()
	st, err := s.p.Restore(mode, seed)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.path("a"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Kept+st.Lost != int64(ub.Len()) || int64(len(b))-int64(sb.Len()) > st.Kept+st.Lost {
		t.Fatalf("stats %+v for %d unsynced bytes, file of %d", st, ub.Len(), len(b))
	}
	return sb.String(), ub.String(), string(b)
}

func TestPowerLossWritebackModes(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		synced, _, got := appendHistory(t, WritebackNone, 1)
		if got != synced {
			t.Fatalf("kept %d bytes, want the %d synced", len(got), len(synced))
		}
	})
	t.Run("prefix", func(t *testing.T) {
		lengths := make(map[int]bool)
		for seed := range uint64(20) {
			synced, unsynced, got := appendHistory(t, WritebackPrefix, seed)
			if !strings.HasPrefix(got, synced) || !strings.HasPrefix(unsynced, got[len(synced):]) {
				t.Fatalf("seed %d: not the synced part plus a prefix of the rest", seed)
			}
			lengths[len(got)] = true
		}
		if len(lengths) < 10 {
			t.Fatalf("20 seeds gave only %d different prefixes", len(lengths))
		}
	})
	t.Run("subset", func(t *testing.T) {
		holes := 0
		for seed := range uint64(20) {
			synced, unsynced, got := appendHistory(t, WritebackSubset, seed)
			if !strings.HasPrefix(got, synced) {
				t.Fatalf("seed %d: the synced part changed", seed)
			}
			rest := got[len(synced):]
			if len(rest) > len(unsynced) {
				t.Fatalf("seed %d: %d bytes beyond the synced part, only %d were written", seed, len(rest), len(unsynced))
			}
			for i := range len(rest) {
				if rest[i] != unsynced[i] && rest[i] != 0 {
					t.Fatalf("seed %d: byte %d is %q, neither written nor a hole", seed, len(synced)+i, rest[i])
				}
			}
			if strings.Contains(rest, "\x00") {
				holes++
			}
			// Each page keeps a prefix of the writes that touched it, in
			// whole pieces (writes cut at page boundaries): its bytes are
			// written ones up to the end of some write, then zeros or the
			// end of the file.
			ends := map[int]bool{}
			off := len(synced)
			for i := range 40 {
				off += 100 + i*37
				ends[off] = true
			}
			for pg := len(synced) / pageSize; pg*pageSize < len(synced)+len(unsynced); pg++ {
				lo, hi := max(pg*pageSize, len(synced)), min((pg+1)*pageSize, len(synced)+len(unsynced))
				n := lo
				for n < hi && n < len(got) && got[n] == unsynced[n-len(synced)] {
					n++
				}
				if n != hi && n != lo && !ends[n] {
					t.Fatalf("seed %d: page %d keeps bytes up to %d, inside a write", seed, pg, n)
				}
				if n < len(got) && strings.Trim(got[n:min(hi, len(got))], "\x00") != "" {
					t.Fatalf("seed %d: page %d has written bytes after a lost one (at %d)", seed, pg, n)
				}
			}
		}
		if holes == 0 {
			t.Fatal("20 seeds never lost a page in the middle")
		}
	})
	t.Run("deterministic per seed", func(t *testing.T) {
		for _, mode := range []Writeback{WritebackPrefix, WritebackSubset} {
			_, _, a := appendHistory(t, mode, 42)
			_, _, b := appendHistory(t, mode, 42)
			_, _, c := appendHistory(t, mode, 43)
			if a != b {
				t.Fatalf("%v: seed 42 gave two results", mode)
			}
			if a == c {
				t.Fatalf("%v: seeds 42 and 43 gave the same result", mode)
			}
		}
	})
}

// TestPowerLossAfterCut checks that every operation fails with EIO after
// the cut, as an *os.PathError, and that Close still releases.
func TestPowerLossAfterCut(t *testing.T) {
	s := newScript(t, map[string]string{"x": "old", "y": "y"})
	s.create("a")
	s.write("a", "data")
	l, err := s.p.Lock(s.path("LOCK"))
	s.ok(err)
	s.p.Cut()
	select {
	case <-s.p.Done():
	default:
		t.Fatal("Done not closed by the cut")
	}
	f := s.files["a"]
	ops := map[string]func() error{
		"Create":        func() error { _, err := s.p.Create(s.path("b")); return err },
		"Open":          func() error { _, err := s.p.Open(s.path("x")); return err },
		"OpenReadWrite": func() error { _, err := s.p.OpenReadWrite(s.path("x")); return err },
		"Remove":        func() error { return s.p.Remove(s.path("x")) },
		"Rename":        func() error { return s.p.Rename(s.path("x"), s.path("z")) },
		"Link":          func() error { return s.p.Link(s.path("x"), s.path("z")) },
		"List":          func() error { _, err := s.p.List(s.dir); return err },
		"MkdirAll":      func() error { return s.p.MkdirAll(s.path("sub")) },
		"SyncDir":       func() error { return s.p.SyncDir(s.dir) },
		"Lock":          func() error { _, err := s.p.Lock(s.path("LOCK2")); return err },
		"Stat":          func() error { _, err := s.p.Stat(s.path("x")); return err },
		"Write":         func() error { _, err := f.Write([]byte("x")); return err },
		"Read":          func() error { _, err := f.Read(make([]byte, 1)); return err },
		"ReadAt":        func() error { _, err := f.ReadAt(make([]byte, 1), 0); return err },
		"Sync":          func() error { return f.Sync() },
		"Truncate":      func() error { return f.Truncate(0) },
		"File.Stat":     func() error { _, err := f.Stat(); return err },
		"Check commit":  func() error { return vfs.Bypass(s.p, vfs.OpCommit, "MANIFEST") },
		"Check create":  func() error { return vfs.Bypass(s.p, vfs.OpCreate, s.path("MANIFEST.tmp")) },
		"Check open":    func() error { return vfs.Bypass(s.p, vfs.OpOpen, s.path("MANIFEST")) },
	}
	for name, op := range ops {
		err := op()
		var pe *os.PathError
		if !errors.Is(err, syscall.EIO) || !errors.As(err, &pe) {
			t.Errorf("%s after the cut: %v, want EIO in an *os.PathError", name, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close after the cut: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("unlock after the cut: %v", err)
	}
	// Nothing reached the disk: z, b and sub do not exist, x is intact.
	if got := dirState(t, s.dir); got["x"] != "old" || got["z"] != "" || got["b"] != "" {
		t.Fatalf("operations after the cut changed the disk: %q", got)
	}
	if _, err := os.Stat(s.path("sub")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("MkdirAll after the cut made the directory")
	}
}

// TestPowerLossCutAfter checks the operation count: the nth mutating
// operation completes, the next fails; reads are not counted.
func TestPowerLossCutAfter(t *testing.T) {
	s := newScript(t, map[string]string{"x": "old"})
	s.p.CutAfter(4)
	s.create("a")                            // 1
	s.write("a", "one")                      // 2
	s.ok(vfs.Bypass(s.p, vfs.OpCommit, "M")) // 3
	if x, err := s.p.Open(s.path("x")); err != nil {
		t.Fatal(err) // not counted
	} else {
		x.Close()
	}
	if _, err := s.p.Stat(s.path("x")); err != nil {
		t.Fatal(err)
	}
	s.sync("a") // 4: completes, then the power goes off
	if !s.p.IsCut() || s.p.Ops() != 4 {
		t.Fatalf("after 4 operations: cut %v, Ops %d", s.p.IsCut(), s.p.Ops())
	}
	if err := s.p.SyncDir(s.dir); !errors.Is(err, syscall.EIO) {
		t.Fatalf("5th operation: %v", err)
	}
	if s.p.Ops() != 4 {
		t.Fatalf("a failed operation was counted: Ops %d", s.p.Ops())
	}

	// CutAfter a number already passed cuts at once.
	p := New(vfs.Default, nil)
	p.CutAfter(0)
	if f, err := p.Create(filepath.Join(t.TempDir(), "a")); err != nil {
		t.Fatal(err)
	} else {
		defer f.Close()
	}
	p.CutAfter(1)
	if !p.IsCut() {
		t.Fatal("CutAfter(1) after one operation did not cut")
	}
}

// TestPowerLossExternal checks files written behind the vfs.FS, as bbolt does
// with the manifest after vfs.Bypass(vfs.OpCreate) or vfs.Bypass(vfs.OpOpen): their content
// is taken as on disk; their names follow the directory syncs.
func TestPowerLossExternal(t *testing.T) {
	external := func(s *plScript, name, data string, create bool) {
		if create {
			s.ok(vfs.Bypass(s.p, vfs.OpCreate, s.path(name)))
		} else {
			s.ok(vfs.Bypass(s.p, vfs.OpOpen, s.path(name)))
		}
		f, err := os.OpenFile(s.path(name), os.O_RDWR|os.O_CREATE, 0o644)
		s.ok(err)
		_, err = f.WriteAt([]byte(data), 0)
		s.ok(errors.Join(err, f.Close()))
	}
	tests := []struct {
		name   string
		before map[string]string
		steps  func(s *plScript)
		after  map[string]string
	}{
		{"created, not dir-synced: gone", nil, func(s *plScript) {
			external(s, "M.tmp", "v1", true)
		}, map[string]string{}},
		{"manifest creation: link, remove, dir sync, commit", nil, func(s *plScript) {
			external(s, "M.tmp", "v1", true)
			s.link("M.tmp", "M")
			s.remove("M.tmp")
			s.syncDir()
			s.ok(vfs.Bypass(s.p, vfs.OpCommit, "M"))
			external(s, "M", "v2", false)
		}, map[string]string{"M": "v2"}},
		{"cut before the dir sync of the link", nil, func(s *plScript) {
			external(s, "M.tmp", "v1", true)
			s.link("M.tmp", "M")
			s.remove("M.tmp")
		}, map[string]string{}},
		{"existing, opened and written: as on disk", map[string]string{"M": "v1"}, func(s *plScript) {
			external(s, "M", "v2", false)
		}, map[string]string{"M": "v2"}},
		{"existing, removed without dir sync: back as it was on disk", map[string]string{"M": "v1"}, func(s *plScript) {
			external(s, "M", "v2", false)
			s.remove("M")
		}, map[string]string{"M": "v2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t, tc.before)
			tc.steps(s)
			if _, err := s.p.Restore(WritebackSubset, 7); err != nil {
				t.Fatal(err)
			}
			if got := dirState(t, s.dir); fmt.Sprint(got) != fmt.Sprint(tc.after) {
				t.Fatalf("after the power cut: %q, want %q", got, tc.after)
			}
		})
	}
}

// TestPowerLossRestoreStartsAfresh checks that after Restore the vfs.FS works
// again on the restored files, which count as durable, and that files
// opened before fail.
func TestPowerLossRestoreStartsAfresh(t *testing.T) {
	s := newScript(t, nil)
	s.create("a")
	s.write("a", "A")
	s.sync("a")
	s.syncDir()
	old := s.files["a"]
	if _, err := s.p.Restore(WritebackNone, 1); err != nil {
		t.Fatal(err)
	}
	if s.p.IsCut() || s.p.Ops() != 0 {
		t.Fatalf("after Restore: cut %v, Ops %d", s.p.IsCut(), s.p.Ops())
	}
	if _, err := old.Write([]byte("x")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write through a file opened before Restore: %v", err)
	}
	old.Close()
	s.create("b") // not dir-synced: goes at the next cut; a stays
	s.remove("a")
	if _, err := s.p.Restore(WritebackNone, 1); err != nil {
		t.Fatal(err)
	}
	if got := dirState(t, s.dir); fmt.Sprint(got) != fmt.Sprint(map[string]string{"a": "A"}) {
		t.Fatalf("second cut: %q", got)
	}
}

// TestPowerLossReadOnly checks that an existing directory can be read
// through the vfs.FS without counting or changing anything.
func TestPowerLossReadOnly(t *testing.T) {
	s := newScript(t, map[string]string{"x": "data", "y": "more"})
	names, err := s.p.List(s.dir)
	if err != nil || fmt.Sprint(names) != "[x y]" {
		t.Fatalf("List: %v, %v", names, err)
	}
	f, err := s.p.Open(s.path("x"))
	s.ok(err)
	b, err := io.ReadAll(f)
	s.ok(errors.Join(err, f.Close()))
	if string(b) != "data" {
		t.Fatalf("read %q", b)
	}
	s.ok(vfs.Bypass(s.p, vfs.OpOpen, s.path("y")))
	if s.p.Ops() != 0 {
		t.Fatalf("reads counted: %d", s.p.Ops())
	}
	if _, err := s.p.Restore(WritebackSubset, 3); err != nil {
		t.Fatal(err)
	}
	if got := dirState(t, s.dir); fmt.Sprint(got) != fmt.Sprint(map[string]string{"x": "data", "y": "more"}) {
		t.Fatalf("after Restore: %q", got)
	}
}

// TestPowerLossOverFaulty checks the stack PowerLoss → Faulty → Default:
// Faulty's faults fire through PowerLoss (a failed sync makes nothing
// durable), Check reaches Faulty, and vfs.Fd finds the descriptor.
func TestPowerLossOverFaulty(t *testing.T) {
	dir := t.TempDir()
	faulty := errorfs.New(vfs.Default)
	p := New(faulty, nil)
	f, err := p.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := vfs.Fd(f); !ok {
		t.Fatal("no vfs.Fd through PowerLoss and Faulty")
	}
	if err := p.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("synced"))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(" not synced"))
	faulty.SetFault(errorfs.Fault{Ops: vfs.OpSync | vfs.OpCommit, Sticky: true})
	if err := f.Sync(); err == nil {
		t.Fatal("Faulty's sync fault did not fire through PowerLoss")
	}
	if err := vfs.Bypass(p, vfs.OpCommit, "MANIFEST"); err == nil {
		t.Fatal("Faulty's commit fault did not fire through Check")
	}
	f.Close()
	if _, err := p.Restore(WritebackNone, 1); err != nil {
		t.Fatal(err)
	}
	if got := dirState(t, dir); got["a"] != "synced" {
		t.Fatalf("after a failed sync and a cut: %q", got)
	}
}

// TestPowerLossConcurrent runs writers, each with its own file, that
// write, sync and sync the directory, while the power goes off after a
// random operation. Each writer knows what its last successful Sync
// covered; with WritebackNone, that is exactly what must be left.
func TestPowerLossConcurrent(t *testing.T) {
	const writers = 6
	rounds := 30
	if testing.Short() {
		rounds = 8
	}
	for round := range rounds {
		dir := t.TempDir()
		p := New(vfs.Default, nil)
		rng := rand.New(rand.NewPCG(uint64(round), 0))
		p.CutAfter(1 + rng.IntN(writers*60))
		durable := make([]string, writers)
		named := make([]bool, writers)
		var wg sync.WaitGroup
		for g := range writers {
			wg.Go(func() {
				name := filepath.Join(dir, fmt.Sprintf("f%d", g))
				f, err := p.Create(name)
				if err != nil {
					return
				}
				defer f.Close()
				if p.SyncDir(dir) == nil {
					named[g] = true
				}
				var written bytes.Buffer
				for i := 0; ; i++ {
					rec := fmt.Sprintf("[%d:%d]", g, i)
					n, err := f.Write([]byte(rec))
					written.WriteString(rec[:n])
					if err != nil {
						return
					}
					if i%3 == 2 {
						if f.Sync() != nil {
							return
						}
						durable[g] = written.String()
					}
				}
			})
		}
		wg.Wait()
		if _, err := p.Restore(WritebackNone, uint64(round)); err != nil {
			t.Fatal(err)
		}
		got := dirState(t, dir)
		for g := range writers {
			name := fmt.Sprintf("f%d", g)
			content, ok := got[name]
			if !ok && named[g] {
				// (Without its own SyncDir a name may still be durable:
				// another writer's SyncDir covered it.)
				t.Fatalf("round %d: %s is gone after the cut, but its SyncDir succeeded", round, name)
			}
			if ok && content != durable[g] {
				t.Fatalf("round %d: %s holds %q, its last sync covered %q", round, name, content, durable[g])
			}
		}
		if len(got) > writers || slices.ContainsFunc(slices.Collect(maps.Keys(got)), func(n string) bool { return !strings.HasPrefix(n, "f") }) {
			t.Fatalf("round %d: unexpected files %q", round, got)
		}
	}
}

// blockingSyncDir is an vfs.FS whose SyncDir waits to be released.
type blockingSyncDir struct {
	vfs.FS
	entered, release chan struct{}
}

func (b blockingSyncDir) SyncDir(dir string) error {
	b.entered <- struct{}{}
	<-b.release
	return b.FS.SyncDir(dir)
}

// TestPowerLossSyncDirUnderWay checks that a SyncDir makes durable the
// directory as it was when it began, even a file removed meanwhile: the
// file's content must survive its last name's removal.
func TestPowerLossSyncDirUnderWay(t *testing.T) {
	for _, synced := range []bool{true, false} {
		t.Run(fmt.Sprintf("content synced=%v", synced), func(t *testing.T) {
			if runtime.GOOS == "windows" {
				t.Skip("removes a file it holds open, which Windows refuses")
			}
			dir := t.TempDir()
			fs := blockingSyncDir{vfs.Default, make(chan struct{}), make(chan struct{})}
			p := New(fs, nil)
			name := filepath.Join(dir, "a")
			f, err := p.Create(name)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("content"))
			if synced {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error)
			go func() { done <- p.SyncDir(dir) }()
			<-fs.entered
			if err := p.Remove(name); err != nil {
				t.Fatal(err)
			}
			f.Write([]byte(" more")) // to a file with no name, for now
			close(fs.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			f.Close()
			if _, err := p.Restore(WritebackNone, 1); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"a": ""}
			if synced {
				want["a"] = "content"
			}
			if got := dirState(t, dir); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after the cut: %q, want %q", got, want)
			}
		})
	}
}

// TestMapFdThrough: a powerfs file over an OS file can be mapped for
// writing (it sees such writes); over a fault injector, which cannot, it
// cannot be.
func TestMapFdThrough(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		want bool
	}{
		{"os", vfs.Default, true},
		{"powerfs over os", New(vfs.Default, nil), true},
		{"errorfs over os", errorfs.New(vfs.Default), false},
		{"powerfs over errorfs over os", New(errorfs.New(vfs.Default), nil), false},
	} {
		f, err := tc.fs.Create(filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := vfs.MapFd(f); ok != tc.want {
			t.Errorf("%s: MapFd ok = %v, want %v", tc.name, ok, tc.want)
		}
		if p, ok := tc.fs.(*FS); ok && p.Mapped() != map[bool]int{true: 1}[tc.want] {
			t.Errorf("%s: Mapped() = %d", tc.name, p.Mapped())
		}
		f.Close()
	}
}
