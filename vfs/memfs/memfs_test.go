package memfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/bloomkv/bloomkv/vfs"
)

// fsUnderTest is each file system the contract tests run on: this
// package's, and the operating system's, which it must behave like.
func fsUnderTest(t *testing.T) map[string]func() (vfs.FS, string) {
	return map[string]func() (vfs.FS, string){
		"memfs": func() (vfs.FS, string) {
			f := New()
			if err := f.MkdirAll("/tmp/x"); err != nil {
				t.Fatal(err)
			}
			return f, "/tmp/x"
		},
		"os": func() (vfs.FS, string) { return vfs.Default, t.TempDir() },
	}
}

// TestContract runs the vfs package's TestOSFS steps on both file
// systems.
func TestContract(t *testing.T) {
	for name, mk := range fsUnderTest(t) {
		t.Run(name, func(t *testing.T) {
			fsys, dir := mk()
			a := filepath.Join(dir, "a")
			f, err := fsys.Create(a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Create(a); !errors.Is(err, os.ErrExist) {
				t.Fatalf("Create of an existing file: %v, want ErrExist", err)
			}
			if _, err := f.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(f.Sync(), f.Truncate(4), f.Close(), fsys.SyncDir(dir)); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("x")); err == nil {
				t.Fatal("Write after Close succeeded")
			}
			b, c := filepath.Join(dir, "b"), filepath.Join(dir, "c")
			if err := fsys.Link(a, b); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Link(a, b); !errors.Is(err, os.ErrExist) {
				t.Fatalf("Link onto an existing name: %v", err)
			}
			if err := fsys.Rename(b, c); err != nil {
				t.Fatal(err)
			}
			names, err := fsys.List(dir)
			if err != nil || fmt.Sprint(names) != "[a c]" {
				t.Fatalf("List = %v, %v", names, err)
			}
			r, err := fsys.Open(c)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(r)
			if string(got) != "hell" {
				t.Fatalf("read %q after Truncate(4)", got)
			}
			if _, err := r.(io.Writer).Write([]byte("x")); err == nil {
				t.Fatal("Write to a file opened read-only succeeded")
			}
			r.Close()
			// A hard link is the same file: writing through one name shows
			// through the other.
			w, err := fsys.OpenReadWrite(a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.(io.WriterAt).WriteAt([]byte("J"), 0); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 8)
			if n, err := w.ReadAt(buf, 1); n != 3 || err != io.EOF || string(buf[:n]) != "ell" {
				t.Fatalf("ReadAt past the end = %d, %v, %q", n, err, buf[:n])
			}
			if st, err := w.Stat(); err != nil || st.Size() != 4 || st.IsDir() {
				t.Fatalf("Stat = %v, %v", st, err)
			}
			w.Close()
			if got, _ := readAll(fsys, c); got != "Jell" {
				t.Fatalf("the link holds %q, want Jell", got)
			}
			if err := fsys.Remove(a); err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Stat(a); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Stat after Remove: %v", err)
			}
			if st, err := fsys.Stat(dir); err != nil || !st.IsDir() {
				t.Fatalf("Stat of the directory = %v, %v", st, err)
			}
		})
	}
}

// TestMissing runs the vfs package's TestOSMissing table on both.
func TestMissing(t *testing.T) {
	for name, mk := range fsUnderTest(t) {
		t.Run(name, func(t *testing.T) {
			fsys, dir := mk()
			missing := filepath.Join(dir, "missing")
			calls := map[string]func() error{
				"SyncDir":       func() error { return fsys.SyncDir(missing) },
				"Open":          func() error { _, err := fsys.Open(missing); return err },
				"OpenReadWrite": func() error { _, err := fsys.OpenReadWrite(missing); return err },
				"Remove":        func() error { return fsys.Remove(missing) },
				"Rename":        func() error { return fsys.Rename(missing, filepath.Join(dir, "x")) },
				"List":          func() error { _, err := fsys.List(missing); return err },
				"Link":          func() error { return fsys.Link(missing, filepath.Join(dir, "x")) },
				"Lock in a missing directory": func() error {
					_, err := fsys.Lock(filepath.Join(missing, "LOCK"))
					return err
				},
				"Create in a missing directory": func() error {
					_, err := fsys.Create(filepath.Join(missing, "f"))
					return err
				},
			}
			for call, fn := range calls {
				if err := fn(); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: %v, want ErrNotExist", call, err)
				}
				if names, err := fsys.List(dir); err != nil || len(names) != 0 {
					t.Fatalf("%s: directory holds %v (%v) afterwards, want nothing", call, names, err)
				}
			}
		})
	}
}

// TestLocks runs the vfs package's TestLockShared steps on both, and
// checks that a held exclusive lock refuses a second one.
func TestLocks(t *testing.T) {
	for name, mk := range fsUnderTest(t) {
		t.Run(name, func(t *testing.T) {
			fsys, dir := mk()
			lockName := filepath.Join(dir, "LOCK")
			if _, err := fsys.LockShared(lockName); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("LockShared of a missing file = %v", err)
			}
			if _, err := fsys.Stat(lockName); !errors.Is(err, fs.ErrNotExist) {
				t.Fatal("LockShared created the file")
			}
			ex, err := fsys.Lock(lockName)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Lock(lockName); !errors.Is(err, vfs.ErrLocked) {
				t.Fatalf("second Lock = %v", err)
			}
			if _, err := fsys.LockShared(lockName); !errors.Is(err, vfs.ErrLocked) {
				t.Fatalf("LockShared under an exclusive lock = %v", err)
			}
			ex.Close()
			a, err := fsys.LockShared(lockName)
			if err != nil {
				t.Fatal(err)
			}
			b, err := fsys.LockShared(lockName)
			if err != nil {
				t.Fatalf("second shared lock: %v", err)
			}
			if _, err := fsys.Lock(lockName); !errors.Is(err, vfs.ErrLocked) {
				t.Fatalf("Lock under shared locks = %v", err)
			}
			a.Close()
			b.Close()
			ex, err = fsys.Lock(lockName)
			if err != nil {
				t.Fatalf("Lock after the shared holders left: %v", err)
			}
			ex.Close()
		})
	}
}

func readAll(fsys vfs.FS, name string) (string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

func writeFile(t *testing.T, fsys vfs.FS, name, data string, sync bool) vfs.File {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// state is every file of fsys under dir: name → content.
func state(t *testing.T, fsys vfs.FS, dir string) string {
	t.Helper()
	names, err := fsys.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, n := range names {
		b, err := readAll(fsys, filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		s += fmt.Sprintf("%s=%q ", n, b)
	}
	return s
}

// TestCrashClone checks what a crash clone keeps: synced content under
// synced names, and nothing else.
func TestCrashClone(t *testing.T) {
	const d = "/db"
	p := func(n string) string { return filepath.Join(d, n) }
	tests := []struct {
		name string
		run  func(t *testing.T, f *FS)
		want string
	}{
		{"unsynced name is lost", func(t *testing.T, f *FS) {
			writeFile(t, f, p("a"), "x", true)
		}, ""},
		{"synced name, unsynced data", func(t *testing.T, f *FS) {
			writeFile(t, f, p("a"), "x", false)
			f.SyncDir(d)
		}, `a="" `},
		{"synced name and data, unsynced append", func(t *testing.T, f *FS) {
			w := writeFile(t, f, p("a"), "x", true)
			f.SyncDir(d)
			w.Write([]byte("y"))
		}, `a="x" `},
		{"unsynced truncate", func(t *testing.T, f *FS) {
			w := writeFile(t, f, p("a"), "xyz", true)
			f.SyncDir(d)
			w.Truncate(1)
		}, `a="xyz" `},
		{"unsynced remove comes back", func(t *testing.T, f *FS) {
			writeFile(t, f, p("a"), "x", true)
			f.SyncDir(d)
			f.Remove(p("a"))
		}, `a="x" `},
		{"synced remove", func(t *testing.T, f *FS) {
			writeFile(t, f, p("a"), "x", true)
			f.SyncDir(d)
			f.Remove(p("a"))
			f.SyncDir(d)
		}, ""},
		{"unsynced rename is undone", func(t *testing.T, f *FS) {
			writeFile(t, f, p("a"), "x", true)
			f.SyncDir(d)
			f.Rename(p("a"), p("b"))
		}, `a="x" `},
		{"synced rename over a file", func(t *testing.T, f *FS) {
			writeFile(t, f, p("a"), "new", true)
			writeFile(t, f, p("b"), "old", true)
			f.SyncDir(d)
			f.Rename(p("a"), p("b"))
			f.SyncDir(d)
		}, `b="new" `},
		{"file synced after its rename", func(t *testing.T, f *FS) {
			w := writeFile(t, f, p("a"), "x", false)
			f.SyncDir(d)
			f.Rename(p("a"), p("b"))
			w.Sync() // the inode's content is durable under whichever name is
		}, `a="x" `},
		{"links share content", func(t *testing.T, f *FS) {
			w := writeFile(t, f, p("a"), "x", true)
			f.Link(p("a"), p("b"))
			f.SyncDir(d)
			w.Write([]byte("y"))
			w.Sync()
		}, `a="xy" b="xy" `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := New()
			if err := f.MkdirAll(d); err != nil {
				t.Fatal(err)
			}
			tc.run(t, f)
			c := f.CrashClone()
			if got := state(t, c, d); got != tc.want {
				t.Fatalf("after the crash: %s, want %s", got, tc.want)
			}
			if c.BootID() == f.BootID() {
				t.Fatal("a crash clone has the same boot ID")
			}
			// The clone is independent: changing it leaves f alone.
			after := state(t, f, d)
			writeFile(t, c, p("z"), "z", true)
			if state(t, f, d) != after {
				t.Fatal("writing the clone changed the original")
			}
		})
	}
}

// TestCrashCloneLinksStayShared: two durable names of one file are still
// one file in the clone.
func TestCrashCloneLinksStayShared(t *testing.T) {
	f := New()
	f.MkdirAll("/d")
	writeFile(t, f, "/d/a", "x", true).Close()
	f.Link("/d/a", "/d/b")
	f.SyncDir("/d")
	c := f.CrashClone()
	w, err := c.OpenReadWrite("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("Y"))
	w.Close()
	if got, _ := readAll(c, "/d/b"); got != "Y" {
		t.Fatalf("b holds %q after a write through a, want Y", got)
	}
}

// TestNoFd: memfs files have no descriptor, so the store reads segments
// on it with ReadAt rather than mapping them.
func TestNoFd(t *testing.T) {
	f := New()
	w, err := f.Create("/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := vfs.Fd(w); ok {
		t.Fatal("a memfs file has a descriptor")
	}
}
