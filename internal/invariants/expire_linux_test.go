package invariants

import (
	"bytes"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident reports how many pages of b are in memory (mincore).
func resident(t *testing.T, b []byte) int {
	t.Helper()
	page := os.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestExpireGivesMemoryBack: an expired region's pages go back to the
// kernel, not only out of reach. The invariants build guards a copy of
// every value and key it hands out and never reuses the addresses, so a
// run of the suite would otherwise keep every byte it ever guarded.
func TestExpireGivesMemoryBack(t *testing.T) {
	if !Enabled {
		t.Skip("needs -tags invariants")
	}
	var l Lease
	src := bytes.Repeat([]byte("value of key01745"), 4096)
	g := l.Guard(src)
	if n := resident(t, g); n == 0 {
		t.Fatal("no page of a guarded copy just written is resident: mincore tells nothing here")
	}
	l.Expire()
	if n := resident(t, g); n != 0 {
		t.Fatalf("%d pages of an expired region still resident", n)
	}
}
