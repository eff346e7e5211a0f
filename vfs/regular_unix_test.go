//go:build unix

package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOpenRegular: Default's opens refuse a named pipe, a directory and a
// device with ErrNotRegular, without waiting for the pipe's other end, and
// leave a regular file's descriptor in blocking mode.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	names := []string{fifo, dir}
	if _, err := os.Stat("/dev/zero"); err == nil {
		names = append(names, "/dev/zero")
	}
	opens := map[string]func(string) error{
		"Open":          func(n string) error { f, err := Default.Open(n); closeIf(f, err); return err },
		"OpenReadWrite": func(n string) error { f, err := Default.OpenReadWrite(n); closeIf(f, err); return err },
		"LockShared":    func(n string) error { l, err := Default.LockShared(n); closeIf(l, err); return err },
	}
	for _, name := range names {
		for op, open := range opens {
			done := make(chan error, 1)
			go func() { done <- open(name) }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) && !(name == dir && errors.Is(err, syscall.EISDIR)) {
					t.Errorf("%s(%s): %v, want ErrNotRegular", op, name, err)
				}
			case <-time.After(10 * time.Second):
				if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatalf("%s(%s) did not return within 10 s", op, name)
			}
		}
	}
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Default.Open(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl, err := unix.FcntlInt(f.(*os.File).Fd(), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("regular file's flags %#x, %v: want blocking", fl, err)
	}
}

func closeIf[T interface{ Close() error }](c T, err error) {
	if err == nil {
		c.Close()
	}
}
