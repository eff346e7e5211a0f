//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestNonRegularStoreFile runs every command that reads a store or a file
// on a store whose live segment, then live WAL, is a named pipe or a link
// to /dev/zero. lsm and dump opened the file themselves and waited on the
// pipe, or read /dev/zero without end; every command must now fail (exit
// 3 or 4) at once.
func TestNonRegularStoreFile(t *testing.T) {
	kinds := map[string]func(string) error{
		"fifo":    func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"devzero": func(p string) error { return os.Symlink("/dev/zero", p) },
	}
	if _, err := os.Stat("/dev/zero"); err != nil {
		delete(kinds, "devzero")
	}
	for kind, mk := range kinds {
		for _, file := range []string{"segment", "wal"} {
			t.Run(kind+"/"+file, func(t *testing.T) {
				dir := makeStore(t)
				path := segFile(t, dir)
				if file == "wal" {
					path = walFile(t, dir)
				}
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				if err := mk(path); err != nil {
					t.Fatal(err)
				}
				cmds := [][]string{
					{"verify", dir}, {"stats", dir}, {"lsm", dir}, {"count", dir},
					{"scan", dir}, {"get", dir, "k0001"}, {"put", dir, "k", "v"},
					{"delete", dir, "k"}, {"compact", dir},
					{"checkpoint", dir, filepath.Join(t.TempDir(), "copy")},
					{"dump", file, path},
				}
				for _, args := range cmds {
					if file == "wal" && args[0] == "lsm" {
						continue // reads no WAL
					}
					done := make(chan int, 1)
					go func() { code, _, _ := runCmd(args...); done <- code }()
					select {
					case code := <-done:
						if code != exitOpen && code != exitCorrupt {
							t.Errorf("%v: exit %d, want %d or %d", args, code, exitOpen, exitCorrupt)
						}
					case <-time.After(10 * time.Second):
						if kind == "fifo" { // let the blocked open go
							if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
								w.Close()
							}
						}
						t.Fatalf("%v did not return within 10 s", args)
					}
				}
			})
		}
	}
}
