package bloomkv

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"

	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/errorfs"
)

// unmappedSegments counts the live segments read without a mapping.
func unmappedSegments(db *DB) (unmapped, live int) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, s := range db.segments {
		if s.mapped == nil {
			unmapped++
		}
	}
	return unmapped, len(db.segments)
}

// checkFaultKeys checks that keys [0, n) hold faultValue, by Get and by
// a scan.
func checkFaultKeys(t *testing.T, db *DB, n int) {
	t.Helper()
	for i := range n {
		v, err := db.Get(faultKey(i))
		if err != nil || string(v) != string(faultValue(i)) {
			t.Fatalf("Get(%s) = %.20q, %v", faultKey(i), v, err)
		}
	}
	it, err := db.NewIterator(nil)
	mustDo(t, err)
	seen := 0
	for k, v := range it.All() {
		if string(k) != string(faultKey(seen)) || string(v) != string(faultValue(seen)) {
			t.Fatalf("scan: entry %d is %s=%.20q", seen, k, v)
		}
		seen++
	}
	mustDo(t, it.Close())
	if seen != n {
		t.Fatalf("scan saw %d keys, want %d", seen, n)
	}
}

// TestMapFailureReadsWithPread: a segment the operating system refuses to
// map (ENOMEM: out of vm.max_map_count mappings or of address space) is
// read with pread instead. The flush or compaction that wrote it
// succeeds, and so does an Open that loads it, where failing would make
// the store read-only and then impossible to open on that machine. The
// fault refuses every mapping, or only the second, so that mapped and
// unmapped segments serve one store.
func TestMapFailureReadsWithPread(t *testing.T) {
	for _, fault := range []errorfs.Fault{
		{Ops: vfs.OpMap, Sticky: true, Err: syscall.ENOMEM},
		{Ops: vfs.OpMap, Nth: 2, Err: syscall.ENOMEM},
	} {
		t.Run(fmt.Sprintf("nth=%d,sticky=%v", fault.Nth, fault.Sticky), func(t *testing.T) {
			dir := t.TempDir()
			fs := errorfs.New(vfs.Default)
			o := smallOptions()
			o.FS = fs
			o.DisableAutoCompaction = true
			fs.SetFault(fault)
			db := mustOpen(t, dir, o)
			const perFlush, flushes = 50, 4
			for f := range flushes {
				for i := f * perFlush; i < (f+1)*perFlush; i++ {
					mustDo(t, db.Put(faultKey(i), faultValue(i)))
				}
				if err := db.Flush(); err != nil {
					t.Fatalf("Flush %d with mappings refused: %v", f, err)
				}
			}
			n := perFlush * flushes
			if fs.Fired() == 0 {
				t.Fatal("no mapping was refused")
			}
			unmapped, live := unmappedSegments(db)
			if want := min(fs.Fired(), live); unmapped != want && runtime.GOOS != "windows" {
				t.Fatalf("%d of %d segments unmapped, want %d (mappings refused)", unmapped, live, want)
			}
			checkFaultKeys(t, db, n)
			if err := db.Compact(); err != nil {
				t.Fatalf("Compact with mappings refused: %v", err)
			}
			checkFaultKeys(t, db, n)
			mustDo(t, db.Put([]byte("after"), []byte("compact")))
			mustDo(t, db.Close())

			// Reopened with every mapping refused, the store opens and
			// reads what it held, including the WAL's write.
			fs.SetFault(errorfs.Fault{Ops: vfs.OpMap, Sticky: true, Err: syscall.ENOMEM})
			db = mustOpen(t, dir, o)
			if unmapped, live := unmappedSegments(db); unmapped != live || live == 0 {
				t.Fatalf("reopened: %d of %d segments unmapped, want all", unmapped, live)
			}
			if v, err := db.Get([]byte("after")); err != nil || string(v) != "compact" {
				t.Fatalf("Get(after) = %q, %v", v, err)
			}
			mustDo(t, db.Delete([]byte("after")))
			checkFaultKeys(t, db, n)
			mustDo(t, db.Close())

			// Mappings allowed again, segments are mapped again.
			fs.Clear()
			db = mustOpen(t, dir, o)
			defer db.Close()
			if unmapped, _ := unmappedSegments(db); unmapped != 0 && runtime.GOOS != "windows" {
				t.Fatalf("%d segments unmapped with mappings allowed", unmapped)
			}
			checkFaultKeys(t, db, n)
		})
	}
}
