//go:build unix

package invariants

import (
	"math"
	"os"
	"strconv"
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
