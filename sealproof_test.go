package bloomkv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// rebootedFS is the operating system's file system under another boot
// than the one that wrote the store: recovery must allow for a power cut
// since every WAL was written.
type rebootedFS struct{ vfs.FS }

func (rebootedFS) BootID() [16]byte { return [16]byte{'a', 'n', 'o', 't', 'h', 'e', 'r'} }

// walFirstMarkEnd is where a WAL's first mark ends (wal/FORMAT.md: the
// file header, then a mark record with a 25-byte payload): the fsync
// that creates a WAL covers that much and no more.
const walFirstMarkEnd = walHeaderLen + walRecordHeaderLen + 25

// walSealProof returns the first mark of the WAL in data, read in order
// from its start up to its end or its first damage, that proves every
// older WAL sealed (wal/FORMAT.md, "A later log's proof"), described; ""
// if none does. Such a mark claims more than walFirstMarkEnd synced (it
// was written after an fsync that covered a write to the WAL) or has the
// prev-sealed flag (it was written once the older seals were durable).
func walSealProof(data []byte) string {
	tab := crc32.MakeTable(crc32.Castagnoli)
	for off := walHeaderLen; off+walRecordHeaderLen <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[off+4:]))
		end := off + walRecordHeaderLen + n
		if n < 0 || end > len(data) || crc32.Checksum(data[off+4:end], tab) != binary.LittleEndian.Uint32(data[off:]) {
			return ""
		}
		if data[off+8] == 2 && n == 25 {
			if s := int64(binary.LittleEndian.Uint64(data[off+walRecordHeaderLen+16:])); s > walFirstMarkEnd {
				return fmt.Sprintf("a mark at %d claiming %d bytes synced", off, s)
			}
			if data[end-1]&(1<<2) != 0 {
				return fmt.Sprintf("a mark at %d with the prev-sealed flag", off)
			}
		}
		off = end
	}
	return ""
}

// fillUntilRotated Puts faultKey(i) from i = 0 until db rotates its WAL,
// and returns how many it wrote and the number of the WAL the rotation
// replaced, which stays live while its flush cannot finish. That WAL
// holds every write but the last, which rotated and went to the next.
func fillUntilRotated(t *testing.T, db *DB) (n int, replaced uint64) {
	t.Helper()
	frozen := func() uint64 {
		db.mu.Lock()
		defer db.mu.Unlock()
		if len(db.imm) == 0 {
			return 0
		}
		return db.imm[0].logNum
	}
	for ; frozen() == 0; n++ {
		mustDo(t, db.Put(faultKey(n), faultValue(n)))
	}
	return n, frozen()
}

// wantKeys checks that db holds faultKey(i) for every i in [lo, hi).
func wantKeys(t *testing.T, db *DB, lo, hi int, what string) {
	t.Helper()
	for i := lo; i < hi; i++ {
		if v, err := db.Get(faultKey(i)); err != nil || string(v) != string(faultValue(i)) {
			t.Fatalf("%s: Get(%s) = %q, %v; want it recovered", what, faultKey(i), v, err)
		}
	}
}

// wantVerifyProblem checks that VerifyDir on store, through fsys, reports
// a problem for the file name at offset off exactly when want, and
// returns its report.
func wantVerifyProblem(t *testing.T, fsys vfs.FS, store, name string, off int, want bool) *VerifyReport {
	t.Helper()
	rep, err := VerifyDir(context.Background(), fsys, store)
	mustDo(t, err)
	flagged := slices.ContainsFunc(rep.Problems, func(p Problem) bool { return p.File == name && p.Offset == int64(off) })
	if flagged != want {
		t.Errorf("VerifyDir problems %v; want one for %s at %d: %v", rep.Problems, name, off, want)
	}
	return rep
}

// sealedThenSynced makes a store whose WAL a rotation replaced and sealed
// (its flush held, so it stays live), with synced writes acknowledged by
// WriteSync in the next WAL after it, each after an fsync; and returns a
// copy of the store's files (crashed), the replaced WAL's name and bytes,
// and how many writes the store holds (faultKey(0) to faultKey(n-1)).
// With one synced write, the next WAL's first fsync past its creation
// acknowledges it, and only a mark written between the seal and that
// fsync can prove the seal durable. Without boot, the store runs as on a
// platform with no boot ID, where the rotation itself seals the old WAL
// before the next takes a write (sealNow).
func sealedThenSynced(t *testing.T, synced int, boot bool) (crashed, name string, data []byte, n int) {
	t.Helper()
	db, dir, release := openHoldingSegments(t, boot)
	n, replaced := fillUntilRotated(t, db)
	for range synced {
		b := NewBatch()
		mustDo(t, b.Put(faultKey(n), faultValue(n)))
		mustDo(t, db.WriteSync(b))
		n++
	}
	crashed = copyStoreFiles(t, dir)
	release()
	name = base.WALFileName(replaced)
	data, err := os.ReadFile(filepath.Join(crashed, name))
	mustDo(t, err)
	return crashed, name, data, n
}

// TestDamagedSealOfReplacedWAL: a WAL a rotation replaced is sealed
// before any write to the next WAL is acknowledged as synced, and the
// next WAL gets a mark proving it before that happens, so the seal is
// known durable. If the media then damage the seal, or lose it with the
// end of the file, recovery after a reboot used to read it as the torn
// tail of a WAL that was never sealed, end the store's history there,
// and drop the later WALs with their acknowledged synced writes. Open
// must report ErrCorrupt at the seal instead, and leave the file alone,
// and VerifyDir must report the problem there; the intact image opens
// with every write. With a single synced write, acknowledged by the next
// WAL's first fsync, no mark claiming synced bytes follows it, and the
// proof is the mark the seal's holder leaves in the next WAL.
func TestDamagedSealOfReplacedWAL(t *testing.T) {
	for _, sc := range []struct {
		name   string
		synced int
		boot   bool
	}{
		{"three synced writes", 3, true},
		{"one synced write", 1, true},
		{"one synced write, no boot ID", 1, false},
	} {
		t.Run(sc.name, func(t *testing.T) { testDamagedSeal(t, sc.synced, sc.boot) })
	}
}

func testDamagedSeal(t *testing.T, syncedWrites int, boot bool) {
	crashed, name, data, n := sealedThenSynced(t, syncedWrites, boot)
	synced := n - syncedWrites
	_, seal := walRecordStarts(t, data)
	if len(data) != seal+walRecordHeaderLen+25 || !isSealMark(data[seal:]) {
		t.Fatalf("%s (%d bytes) does not end in a seal at %d: not the case under test", name, len(data), seal)
	}
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"intact", nil},
		{"flipped", func(b []byte) []byte { b[len(b)-3] ^= 0x40; return b }}, // its synced claim
		{"cut", func(b []byte) []byte { return b[:len(b)-7] }},
		{"lost", func(b []byte) []byte { return b[:seal] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := copyStoreFiles(t, crashed)
			bad := data
			if tc.damage != nil {
				bad = tc.damage(append([]byte(nil), data...))
				mustDo(t, os.WriteFile(filepath.Join(store, name), bad, 0o644))
			}
			rep := wantVerifyProblem(t, rebootedFS{vfs.Default}, store, name, seal, tc.damage != nil)
			// A note that Open ignores a torn tail there, or recovers
			// the writes before it, would contradict the problem.
			if i := slices.IndexFunc(rep.Notes, func(p Problem) bool { return p.File == name }); i >= 0 {
				t.Errorf("VerifyDir notes %s: %q; want no note beside the problem", name, rep.Notes[i].Message)
			}
			db2, err := Open(store, &Options{FS: rebootedFS{vfs.Default}, MemtableSize: 64 << 10})
			if tc.damage == nil {
				mustDo(t, err)
				defer db2.Close()
				wantKeys(t, db2, 0, n, "intact image")
				return
			}
			if err == nil {
				defer db2.Close()
				for i := synced; i < n; i++ {
					if _, err := db2.Get(faultKey(i)); err != nil {
						t.Fatalf("Open with the seal of %s damaged succeeded, and the synced write %d, acknowledged in a later WAL, is lost: Get = %v", name, i, err)
					}
				}
				t.Fatalf("Open with the seal of %s damaged succeeded", name)
			}
			wantCorrupt(t, err, name, seal, seal, "Open")
			wantUnchanged(t, store, name, bad)
		})
	}
}

// sealFailure opens a store on a sealFailFS (write path; segment fsyncs
// held, and failing once released, so that a WAL a rotation replaced is
// sealed rather than dropped and stays live), fills it until it rotates,
// and arms the seal of the replaced WAL to fail; then it writes more
// (unsynced) to the next WAL. It returns the store, its directory, the
// number of writes, the replaced WAL's number and the next's, and a
// function that releases the segment fsyncs, to call before Close.
func sealFailure(t *testing.T, fsys func(*sealFailFS) vfs.FS) (db *DB, dir string, n int, replaced, next uint64, release func()) {
	t.Helper()
	s := &sealFailFS{FS: vfs.Default, release: make(chan struct{}), failSegs: true}
	db, dir, release = openSealFail(t, s, fsys(s))
	n, replaced = fillUntilRotated(t, db)
	s.mu.Lock()
	s.failW = base.WALFileName(replaced)
	s.mu.Unlock()
	for range 5 {
		mustDo(t, db.Put(faultKey(n), faultValue(n)))
		n++
	}
	db.mu.Lock()
	next = db.logNum
	db.mu.Unlock()
	return db, dir, n, replaced, next, release
}

// checkNoSyncClaimAfterFailedSeal checks the store a failed seal left,
// closed: the WAL after the unsealed one holds no mark that claims
// synced bytes (that would say the older WAL's seal was durable), and a
// reopen under another boot succeeds with every write of the older WAL,
// fsynced before its seal failed.
func checkNoSyncClaimAfterFailedSeal(t *testing.T, dir string, replaced, next uint64, inReplaced int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, base.WALFileName(next)))
	mustDo(t, err)
	if s := walSealProof(data); s != "" {
		t.Errorf("after the seal of %s failed, %s holds %s: recovery would take it for proof that %s was sealed",
			base.WALFileName(replaced), base.WALFileName(next), s, base.WALFileName(replaced))
	}
	db, err := Open(copyStoreFiles(t, dir), &Options{FS: rebootedFS{vfs.Default}})
	if err != nil {
		t.Fatalf("reopen after the failed seal, under another boot: %v", err)
	}
	defer db.Close()
	wantKeys(t, db, 0, inReplaced, "reopen after the failed seal")
}

// TestSealFailureThenCloseWritesNoSyncClaim: the seal of a WAL a rotation
// replaced fails, and the store is closed. Close used to seal the next
// WAL all the same, with a mark claiming its writes synced, though the
// older WAL was left unsealed.
func TestSealFailureThenCloseWritesNoSyncClaim(t *testing.T) {
	db, dir, n, replaced, next, release := sealFailure(t, func(s *sealFailFS) vfs.FS { return s })
	inReplaced := n - 6
	b := NewBatch()
	mustDo(t, b.Put([]byte("synced"), []byte("1")))
	if err := db.WriteSync(b); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WriteSync, which needs the failing seal: %v, want ErrReadOnly", err)
	}
	release()
	if err := db.Close(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Close after the failed seal: %v, want ErrReadOnly", err)
	}
	checkNoSyncClaimAfterFailedSeal(t, dir, replaced, next, inReplaced)
}

// TestSealFailureThenSyncWritesNoSyncClaim: DB.Sync waits for the seal of
// the WAL a rotation replaced, and the seal fails. Sync used to go on and
// fsync the next WAL, after which any mark written there would claim
// synced bytes; it must fail without that fsync.
func TestSealFailureThenSyncWritesNoSyncClaim(t *testing.T) {
	var h *holdFS
	db, dir, n, replaced, next, release := sealFailure(t, func(s *sealFailFS) vfs.FS {
		h = &holdFS{FS: s, entered: make(chan struct{}), release: make(chan struct{}), sealed: map[string]bool{}}
		return h
	})
	inReplaced := n - 6
	h.mu.Lock()
	h.held = base.WALFileName(replaced) // the seal's fsync
	h.mu.Unlock()
	synced := make(chan error, 1)
	go func() { synced <- db.Sync() }()
	<-h.entered // Sync, past its checks, waits for the seal
	db.mu.Lock()
	logw := db.logw
	db.mu.Unlock()
	before := logw.Synced()
	close(h.release) // the seal's fsync succeeds, its mark's write fails
	if err := <-synced; !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Sync across the failed seal: %v, want ErrReadOnly", err)
	}
	if got := logw.Synced(); got != before {
		t.Errorf("after the seal of %s failed, %s was fsynced (synced %d bytes, was %d): a mark written after would claim them",
			base.WALFileName(replaced), base.WALFileName(next), got, before)
	}
	release()
	db.Close()
	checkNoSyncClaimAfterFailedSeal(t, dir, replaced, next, inReplaced)
}

// TestCrashDuringSealIsTornTail: a crash while the seal of a WAL a
// rotation replaced is being made durable (its mark written, its fsync
// not returned) may leave the seal whole, torn or missing after a power
// cut. No write in the next WAL was acknowledged as synced yet, and none
// of its marks claims synced bytes, so recovery under another boot reads
// a torn or missing seal as the end of the store's history, not as
// corruption, and loses no write of the sealed WAL.
func TestCrashDuringSealIsTornTail(t *testing.T) {
	h := &holdFS{FS: vfs.Default, segs: true, afterSeal: true, entered: make(chan struct{}), release: make(chan struct{}), sealed: map[string]bool{}}
	o := smallOptions()
	o.FS, o.DisableMmap = h, true
	dir := t.TempDir()
	db := mustOpen(t, dir, o)
	var once sync.Once
	let := func() { once.Do(func() { close(h.release) }) }
	defer func() { let(); db.Close() }()
	n, replaced := fillUntilRotated(t, db)
	inReplaced := n - 1
	for range 5 {
		mustDo(t, db.Put(faultKey(n), faultValue(n)))
		n++
	}
	db.mu.Lock()
	next := db.logNum
	db.mu.Unlock()
	h.mu.Lock()
	h.held = base.WALFileName(replaced)
	h.mu.Unlock()
	synced := make(chan error, 1)
	go func() {
		b := NewBatch()
		b.Put([]byte("synced"), []byte("1"))
		synced <- db.WriteSync(b)
	}()
	<-h.entered // the seal's mark is written, its fsync held
	crashed := copyStoreFiles(t, dir)
	let()
	mustDo(t, <-synced)

	name := base.WALFileName(replaced)
	data, err := os.ReadFile(filepath.Join(crashed, name))
	mustDo(t, err)
	_, seal := walRecordStarts(t, data)
	if !isSealMark(data[seal:]) {
		t.Fatalf("%s does not end in a seal at %d: not the case under test", name, seal)
	}
	nextData, err := os.ReadFile(filepath.Join(crashed, base.WALFileName(next)))
	mustDo(t, err)
	if s := walSealProof(nextData); s != "" {
		t.Fatalf("while the seal of %s was not durable, %s got %s", name, base.WALFileName(next), s)
	}
	for _, cut := range []int{len(data), len(data) - 7, seal + 3, seal} {
		t.Run(fmt.Sprintf("seal %d of %d bytes", cut-seal, len(data)-seal), func(t *testing.T) {
			store := copyStoreFiles(t, crashed)
			mustDo(t, os.WriteFile(filepath.Join(store, name), data[:cut], 0o644))
			db2, err := Open(store, &Options{FS: rebootedFS{vfs.Default}})
			if err != nil {
				t.Fatalf("Open after a crash during the seal of %s: %v", name, err)
			}
			defer db2.Close()
			wantKeys(t, db2, 0, inReplaced, "after a crash during the seal")
		})
	}
}

// TestCutReplacedWALSameBoot: under the boot that wrote them, a replaced
// WAL is recovered whole (the page cache held it), so a WAL that a later
// WAL proves sealed but that ends before its seal, at a record boundary,
// was cut by the file system or the media, not by a crash. Recovery used
// to replay it to the cut and go on with the later WALs: a store with a
// hole, the replaced WAL's last writes missing and later ones present.
// Open must report ErrCorrupt where the WAL ends instead; a WAL that
// lost only its seal loses no write, and is corruption too (the seal was
// durable). The intact image opens with every write.
func TestCutReplacedWALSameBoot(t *testing.T) {
	crashed, name, data, n := sealedThenSynced(t, 3, true)
	starts, seal := walRecordStarts(t, data)
	if len(starts) < 4 || !isSealMark(data[seal:]) {
		t.Fatalf("%s: %d records, seal at %d: not the case under test", name, len(starts), seal)
	}
	lastBatch := starts[len(starts)-2] // the record before the seal
	for _, tc := range []struct {
		name string
		cut  int // bytes of the WAL kept; 0: intact
	}{
		{"intact", 0},
		{"seal lost", seal},
		{"last records lost", lastBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := copyStoreFiles(t, crashed)
			if tc.cut > 0 {
				mustDo(t, os.WriteFile(filepath.Join(store, name), data[:tc.cut], 0o644))
			}
			wantVerifyProblem(t, vfs.Default, store, name, tc.cut, tc.cut > 0)
			db2, err := Open(store, &Options{MemtableSize: 64 << 10})
			if tc.cut == 0 {
				mustDo(t, err)
				defer db2.Close()
				wantKeys(t, db2, 0, n, "intact image")
				return
			}
			if err == nil {
				defer db2.Close()
				missing := 0
				for i := range n {
					if _, err := db2.Get(faultKey(i)); err != nil {
						missing++
					}
				}
				t.Fatalf("Open of a store whose replaced WAL %s was cut at %d (a later WAL proves it sealed) succeeded, %d of %d writes missing", name, tc.cut, missing, n)
			}
			wantCorrupt(t, err, name, tc.cut, tc.cut, "Open")
		})
	}
}

// TestPrevSealedMarkFailure: once the seal of a WAL a rotation replaced is
// durable, the next WAL gets the mark that proves it before its first
// fsync. If that write fails, no write in the next WAL may be
// acknowledged as synced (it would have no proof, and a damaged seal
// would lose it): the synced write fails with ErrReadOnly, as after a
// failed seal, and the store is read-only. Where the boot is unknown the
// rotation writes the mark itself, and the write that rotates fails. A
// store reopened as after a reboot holds every acknowledged write.
func TestPrevSealedMarkFailure(t *testing.T) {
	for _, boot := range []bool{true, false} {
		t.Run(fmt.Sprint("boot ID ", boot), func(t *testing.T) {
			s := &sealFailFS{FS: vfs.Default, release: make(chan struct{}), failPrevSealed: true}
			var fsys vfs.FS = s
			if !boot {
				fsys = noBootFS{s}
			}
			db, dir, release := openSealFail(t, s, fsys)
			logNum := func() uint64 { return activeLogNum(db) }
			first := logNum()
			acked := 0
			var err error
			for ; logNum() == first && err == nil; acked++ {
				if err = db.Put(faultKey(acked), faultValue(acked)); err != nil {
					acked--
				}
			}
			if err == nil {
				b := NewBatch()
				mustDo(t, b.Put(faultKey(acked), faultValue(acked)))
				if err = db.WriteSync(b); err == nil {
					t.Fatalf("WriteSync in the WAL after %s succeeded without the mark that proves its seal", base.WALFileName(first))
				}
			}
			if !errors.Is(err, ErrReadOnly) {
				t.Fatalf("write after the failed mark: %v, want ErrReadOnly", err)
			}
			if err := db.Put([]byte("after"), []byte("x")); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("Put after the failed mark: %v, want ErrReadOnly", err)
			}
			release()
			db.Close()
			db2 := mustOpen(t, copyStoreFiles(t, dir), &Options{FS: rebootedFS{vfs.Default}})
			defer db2.Close()
			wantKeys(t, db2, 0, acked, "after the failed mark, under another boot")
		})
	}
}
