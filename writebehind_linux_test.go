package bloomkv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bloomkv/bloomkv/vfs"
)

// TestWriteBehind writes 8 MiB in 1 MiB writes to a file through
// writeBehind and to one without, and asks the kernel (cachestat) how
// many of each file's pages are still dirty: without writeBehind all of
// them (the kernel's background writeback waits for seconds or for
// gigabytes), with it few, their writeback started at each write. The
// bytes read back are the bytes written.
func TestWriteBehind(t *testing.T) {
	const chunk, chunks = 1 << 20, 8
	data := make([]byte, chunk)
	for i := range data {
		data[i] = byte(i * 31)
	}
	dir := t.TempDir()
	dirty := func(behind bool) uint64 {
		name := filepath.Join(dir, map[bool]string{false: "plain", true: "behind"}[behind])
		f, err := vfs.Default.Create(name)
		mustDo(t, err)
		defer f.Close()
		w := f
		if behind {
			w = writeBehind(f)
		}
		for range chunks {
			if n, err := w.Write(data); err != nil || n != chunk {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		fd, _ := vfs.Fd(f)
		var st unix.Cachestat_t
		if err := unix.Cachestat(uint(fd), &unix.CachestatRange{Off: 0, Len: chunk * chunks}, &st, 0); err != nil {
			if errors.Is(err, unix.ENOSYS) {
				t.Skip("no cachestat (Linux 6.5 and later)")
			}
			t.Fatalf("cachestat: %v", err)
		}
		got, err := os.ReadFile(name)
		mustDo(t, err)
		for i := range chunks {
			if string(got[i*chunk:(i+1)*chunk]) != string(data) {
				t.Fatalf("chunk %d read back differs", i)
			}
		}
		t.Logf("writeBehind %v: %d pages cached, %d dirty, %d under writeback", behind, st.Cache, st.Dirty, st.Writeback)
		return st.Dirty
	}
	pages := uint64(chunk * chunks / os.Getpagesize())
	if d := dirty(false); d < pages/2 {
		t.Skipf("%d of %d pages dirty right after plain writes: the kernel writes back eagerly here, nothing to compare", d, pages)
	}
	if d := dirty(true); d > pages/4 {
		t.Fatalf("%d of %d pages still dirty after writes through writeBehind, want at most a quarter", d, pages)
	}
}
