package bloomkv

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// syncCountFS is the operating system's file system, counting the fsyncs
// of WAL files; the WALs can still be mapped (vfs.Mapper).
type syncCountFS struct {
	vfs.FS
	syncs atomic.Int64
}

func (c *syncCountFS) Create(name string) (vfs.File, error) {
	f, err := c.FS.Create(name)
	if err != nil || !strings.HasSuffix(name, base.WALExt) {
		return f, err
	}
	return &syncCountFile{File: f, n: &c.syncs}, nil
}

type syncCountFile struct {
	vfs.File
	n *atomic.Int64
}

func (f *syncCountFile) Sync() error {
	f.n.Add(1)
	return f.File.Sync()
}

func (f *syncCountFile) WriteAt(b []byte, off int64) (int, error) {
	return f.File.(*os.File).WriteAt(b, off)
}

func (f *syncCountFile) MapFd() (uintptr, bool) { return vfs.MapFd(f.File) }

// BenchmarkPutParallelSync is BenchmarkPutParallel with Options.Sync:
// every Put is acknowledged only once an fsync covers it, so what it
// measures is how well group commit shares fsyncs among writers (one per
// -cpu) and overlaps them with the next group's write. puts/fsync is the
// sharing, which the machine's load disturbs less than ops/s.
func BenchmarkPutParallelSync(b *testing.B) {
	fs := &syncCountFS{FS: vfs.Default}
	o := DefaultOptions()
	o.Sync, o.FS = true, fs
	db := mustOpen(b, b.TempDir(), o)
	defer db.Close()
	start := fs.syncs.Load()
	runParallelPuts(b, db)
	if syncs := fs.syncs.Load() - start; syncs > 0 {
		b.ReportMetric(float64(b.N)/float64(syncs), "puts/fsync")
	}
}
