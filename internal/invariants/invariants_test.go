package invariants

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

func TestGuardCopiesWhileLeased(t *testing.T) {
	var l Lease
	src := []byte("value of key01745")
	g := l.Guard(src)
	if !bytes.Equal(g, src) {
		t.Fatalf("Guard = %q, want %q", g, src)
	}
	if Enabled && &g[0] == &src[0] {
		t.Fatal("Guard returned the slice itself in an invariants build")
	}
	if !Enabled && &g[0] != &src[0] {
		t.Fatal("Guard copied without the invariants build tag")
	}
	if cap(g) != len(g) {
		t.Fatalf("cap %d > len %d: an append could write past the value", cap(g), len(g))
	}
	if e := l.Guard(nil); e != nil {
		t.Fatalf("Guard(nil) = %v", e)
	}
	l.Expire()
	l.Expire() // twice: nothing left to expire
}

// TestUseAfterExpireFaults is the point of the package: in an invariants
// build, reading a guarded slice after its lease expired kills the process
// at once. The read runs in a child process, which must die of the fault.
func TestUseAfterExpireFaults(t *testing.T) {
	if os.Getenv("INVARIANTS_CHILD") == "1" {
		var l Lease
		g := l.Guard([]byte("segment bytes"))
		l.Expire()
		println("read after expire:", bytes.Clone(g)[0]) // must fault
		os.Exit(0)
	}
	childMustFault(t, "TestUseAfterExpireFaults", "1")
}

// childMustFault runs test again in a child process with INVARIANTS_CHILD
// set to child, where it reads an expired slice, and fails unless the
// child dies of a memory fault. It skips where the fault cannot happen:
// without the invariants build tag, and where regions are poisoned.
func childMustFault(t *testing.T, test, child string) {
	t.Helper()
	if !Enabled {
		t.Skip("needs -tags invariants")
	}
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("expired regions are poisoned, not protected, without mmap")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), "INVARIANTS_CHILD="+child)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child read an expired slice and exited normally:\n%s", out)
	}
	if !strings.Contains(string(out), "unexpected fault address") && !strings.Contains(string(out), "SIGSEGV") {
		t.Fatalf("child failed, but not with a memory fault: %v\n%s", err, out)
	}
}

// TestUseAfterManyExpiriesFaults: a slice read long after its lease
// expired, after many more regions expired and new ones were made and
// still live, still faults: its address is not handed to a newer region,
// whose bytes a stale read would otherwise return without a fault. The
// read runs in a child process, which must die of the fault.
func TestUseAfterManyExpiriesFaults(t *testing.T) {
	if os.Getenv("INVARIANTS_CHILD") == "many" {
		var l Lease
		g := l.Guard(bytes.Repeat([]byte{'s'}, 100))
		l.Expire()
		var live Lease
		for range 20000 {
			var m Lease
			m.Guard(bytes.Repeat([]byte{'x'}, 100))
			m.Expire()
			live.Guard(bytes.Repeat([]byte{'n'}, 100))
		}
		println("read after expire:", bytes.Clone(g)[0]) // must fault
		os.Exit(0)
	}
	childMustFault(t, "TestUseAfterManyExpiriesFaults", "many")
}

func TestCheck(t *testing.T) {
	Check(true, "never")
	defer func() {
		r := recover()
		if Enabled != (r != nil) {
			t.Fatalf("Check(false) recovered %v with Enabled=%v", r, Enabled)
		}
	}()
	Check(false, "count below zero")
}
