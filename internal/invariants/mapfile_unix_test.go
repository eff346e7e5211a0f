//go:build unix

package invariants

import (
	"bytes"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestMapFileFailsAsMmap: MapFile answers a mapping the address space
// cannot hold with an error, as mmap does, in an invariants build too,
// where its reservation must not panic (nor, for a size whose rounding to
// pages overflows, slice past the arena); and a mapping it can hold reads
// the file and is ended by UnmapFile.
func TestMapFileFailsAsMmap(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("sizes past the address space do not fit an int")
	}
	f, err := os.Create(t.TempDir() + "/seg")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("segment bytes")); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{math.MaxInt/2 + 1, math.MaxInt - 1} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("MapFile(%d) panicked: %v", size, r)
				}
			}()
			if b, err := MapFile(int(f.Fd()), size); err == nil {
				UnmapFile(b)
				t.Errorf("MapFile(%d) mapped it", size)
			}
		}()
	}
	b, err := MapFile(int(f.Fd()), 13)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "segment bytes" {
		t.Fatalf("mapping reads %q", b)
	}
	if err := UnmapFile(b); err != nil {
		t.Fatal(err)
	}
}

// TestMapFileSizes: MapFile maps sizes that are not whole pages, down to
// one byte, and refuses zero bytes as mmap does; UnmapFile ends the whole
// mapping, its last partial page too, and only it. In an invariants build
// mappings are carved from one arena next to each other: an end rounded
// short leaves the file mapped (a stale read of its last page then
// returns the segment's bytes instead of faulting, and the mapping holds
// a deleted file's blocks), and one rounded long protects the first page
// of the next mapping, which a live reader then faults on.
func TestMapFileSizes(t *testing.T) {
	page := os.Getpagesize()
	dir := t.TempDir()
	content := make([]byte, 3*page)
	for i := range content {
		content[i] = byte(i*7 + i/page)
	}
	open := func(name string) *os.File {
		t.Helper()
		path := dir + "/" + name
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	gone, live := open("gone"), open("live")
	if b, err := MapFile(int(gone.Fd()), 0); err == nil {
		UnmapFile(b)
		t.Fatal("MapFile mapped 0 bytes")
	}
	for _, size := range []int{1, 13, page - 1, page, page + 1, 2 * page} {
		g, err := MapFile(int(gone.Fd()), size)
		if err != nil {
			t.Fatalf("MapFile(%d): %v", size, err)
		}
		l, err := MapFile(int(live.Fd()), size) // next to g in the arena
		if err != nil {
			t.Fatalf("MapFile(%d): %v", size, err)
		}
		if !bytes.Equal(g, content[:size]) || !bytes.Equal(l, content[:size]) {
			t.Fatalf("MapFile(%d) does not read the file", size)
		}
		if err := UnmapFile(g); err != nil {
			t.Fatalf("UnmapFile of %d bytes: %v", size, err)
		}
		if !bytes.Equal(l, content[:size]) { // faults if g's end reached into l
			t.Fatalf("the mapping next to an unmapped one of %d bytes changed", size)
		}
		if maps, err := os.ReadFile("/proc/self/maps"); err == nil && strings.Contains(string(maps), dir+"/gone") {
			t.Fatalf("a file is still mapped after UnmapFile of its %d bytes:\n%s", size, maps)
		}
		if err := UnmapFile(l); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMapFileRefusesUnreadableFile: a file mmap cannot map (here, one
// open for writing only: a read-only shared mapping needs read access)
// is an error from MapFile, never a slice over the reserved addresses
// that the failed mapping left unreadable.
func TestMapFileRefusesUnreadableFile(t *testing.T) {
	f, err := os.OpenFile(t.TempDir()+"/seg", os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("segment bytes")); err != nil {
		t.Fatal(err)
	}
	if b, err := MapFile(int(f.Fd()), 13); err == nil {
		t.Fatalf("MapFile of a write-only file returned %d bytes", len(b))
	}
}
