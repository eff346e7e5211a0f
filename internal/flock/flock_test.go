package flock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestTryLock: locks on two descriptors of one file conflict as readers
// and writers do, within one process too, and closing a descriptor
// releases its lock.
func TestTryLock(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	open := func() *os.File {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b, c := open(), open(), open()
	if err := TryLock(a, false); err != nil {
		t.Fatal(err)
	}
	if err := TryLock(b, false); !errors.Is(err, ErrLocked) {
		t.Fatalf("exclusive under exclusive = %v, want ErrLocked", err)
	}
	if err := TryLock(b, true); !errors.Is(err, ErrLocked) {
		t.Fatalf("shared under exclusive = %v, want ErrLocked", err)
	}
	a.Close()
	if err := TryLock(b, true); err != nil {
		t.Fatalf("shared after the exclusive holder closed: %v", err)
	}
	if err := TryLock(c, true); err != nil {
		t.Fatalf("second shared: %v", err)
	}
	d := open()
	if err := TryLock(d, false); !errors.Is(err, ErrLocked) {
		t.Fatalf("exclusive under shared = %v, want ErrLocked", err)
	}
}
