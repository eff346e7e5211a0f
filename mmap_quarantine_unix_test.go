//go:build unix

package bloomkv

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/internal/invariants"
	"github.com/bloomkv/bloomkv/vfs"
)

// TestUnmappedSegmentStaysProtected checks the invariants build's promise
// for segment mappings: a read through a slice of a segment's mapping
// after the segment was unmapped (a release too early, which no lease
// sees) faults, even once the process has mapped and unmapped many more
// segments and mapped more memory of the same size. With a plain munmap the kernel hands the freed addresses to the
// next mapping, and the stale read returns that mapping's bytes. The read
// runs in a child process, which must die of the fault.
func TestUnmappedSegmentStaysProtected(t *testing.T) {
	if dir := os.Getenv("BLOOMKV_UNMAP_CHILD"); dir != "" {
		f, err := vfs.Default.Open(filepath.Join(dir, "seg"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := mapSegment(f, 1<<20)
		if err != nil || m == nil {
			t.Fatal("mapSegment:", err)
		}
		stale := m[4096:]
		if err := unmapSegment(m); err != nil {
			t.Fatal(err)
		}
		// Many more segments mapped and unmapped, each followed by a
		// mapping of the same size, as new segments' would be: the first
		// to come after a plain munmap of the stale addresses takes them.
		for range 300 {
			m, err := mapSegment(f, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if err := unmapSegment(m); err != nil {
				t.Fatal(err)
			}
			if _, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON); err != nil {
				t.Fatal(err)
			}
		}
		println("read of an unmapped segment:", stale[0]) // must fault
		os.Exit(0)
	}
	if !invariants.Enabled {
		t.Skip("needs -tags invariants")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "seg"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	childMustFault(t, "TestUnmappedSegmentStaysProtected", "BLOOMKV_UNMAP_CHILD", dir, "read an unmapped segment's memory")
}
