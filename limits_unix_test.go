//go:build unix

package bloomkv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// openFds returns how many descriptors the process has open (listing
// /dev/fd takes one, counted too).
func openFds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/dev/fd")
	mustDo(t, err)
	return len(entries)
}

// limitLeaving returns the RLIMIT_NOFILE that leaves free descriptors
// for the process: new descriptors take the lowest free numbers, below
// the limit.
func limitLeaving(t *testing.T, free int) uint64 {
	t.Helper()
	entries, err := os.ReadDir("/dev/fd")
	mustDo(t, err)
	used := make(map[int]bool)
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		mustDo(t, err)
		used[fd] = true
	}
	n := 0
	for free > 0 {
		if !used[n] {
			free--
		}
		n++
	}
	return uint64(n)
}

// setFileLimit sets the soft RLIMIT_NOFILE of the process and returns the
// one it replaced.
func setFileLimit(t *testing.T, n uint64) uint64 {
	t.Helper()
	var r syscall.Rlimit
	mustDo(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r))
	old := r.Cur
	r.Cur = n
	mustDo(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r))
	return old
}

const fileLimitEnv = "BLOOMKV_TEST_FILE_LIMIT_DIR"

// TestOpenFileLimit: every live segment holds an open file, so a store
// flushed again and again with no compaction runs into the process's
// limit on open files (RLIMIT_NOFILE). A child process with a low limit
// does that and checks what the README promises: the failing write or
// flush returns an error matching syscall.EMFILE; if the creation of a
// WAL ran out, the store turns read-only (later writes return ErrReadOnly
// wrapping it), and if a flush's segment did, the flush is retried and
// the store stays writable, and Flush succeeds once the limit is raised;
// reads go on either way; Close releases every descriptor; an Open under a limit too low for
// the store's segments fails with EMFILE, its message naming the
// segments and the limit, and changes nothing. Then, under the usual
// limit, the store opens with every acknowledged write.
func TestOpenFileLimit(t *testing.T) {
	if dir := os.Getenv(fileLimitEnv); dir != "" {
		fileLimitChild(t, dir)
		return
	}
	dir := filepath.Join(t.TempDir(), "store")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenFileLimit$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fileLimitEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	b, err := os.ReadFile(dir + ".acked")
	mustDo(t, err)
	acked, err := strconv.Atoi(string(b))
	mustDo(t, err)
	db := mustOpen(t, dir, smallOptions())
	defer db.Close()
	checkFaultKeys(t, db, acked)
	mustDo(t, db.Compact())
	checkFaultKeys(t, db, acked)
}

func fileLimitChild(t *testing.T, dir string) {
	// The runtime's poller takes descriptors of its own with the first
	// file opened: before the count, so that it is not taken for a leak.
	f, err := os.Open(os.Args[0])
	mustDo(t, err)
	f.Close()
	before := openFds(t)
	// Room for the store's own files (LOCK, MANIFEST, WALs) and about a
	// dozen segments.
	orig := setFileLimit(t, limitLeaving(t, 20))
	o := smallOptions()
	o.DisableAutoCompaction = true
	db := mustOpen(t, dir, o)
	acked := 0
	var failure error
	for i := 0; failure == nil; i++ {
		if i == 1000 {
			t.Fatal("1,000 flushes never ran out of files")
		}
		if failure = db.Put(faultKey(i), faultValue(i)); failure == nil {
			acked = i + 1
			failure = db.Flush()
		}
	}
	t.Logf("after %d flushes: %v", acked, failure)
	if !errors.Is(failure, syscall.EMFILE) {
		t.Fatalf("the write or flush that ran out of files: %v, want EMFILE", failure)
	}
	if errors.Is(failure, ErrReadOnly) {
		// Nothing that runs out of descriptors is sticky: a segment's
		// creation and a WAL's are retried.
		t.Fatalf("running out of files made the store read-only: %v", failure)
	}
	// A flush ran out writing its segment, or a WAL's creation: retried,
	// the store stays writable, and with descriptors to spare again the
	// next Flush succeeds (once past a failed WAL creation's backoff).
	checkFaultKeys(t, db, acked) // reads go on
	if err := db.Put(faultKey(acked), faultValue(acked)); err != nil {
		t.Fatalf("Put after a flush ran out of files: %v, want success", err)
	}
	acked++
	if n := db.Stats().RetriedFailures; n == 0 {
		t.Fatal("the flush that ran out of files is not counted as retried")
	}
	setFileLimit(t, orig)
	err = db.Flush()
	for deadline := time.Now().Add(5 * maxWALRetryDelay); err != nil && time.Now().Before(deadline); {
		time.Sleep(maxWALRetryDelay / 10)
		err = db.Flush()
	}
	if err != nil {
		t.Fatalf("Flush with descriptors to spare again: %v", err)
	}
	checkFaultKeys(t, db, acked)
	mustDo(t, db.Close())
	if after := openFds(t); after != before {
		t.Fatalf("%d descriptors open after Close, %d before Open", after, before)
	}
	setFileLimit(t, orig)
	mustDo(t, os.WriteFile(dir+".acked", []byte(strconv.Itoa(acked)), 0o644))

	// Too few descriptors for the segments: Open fails, touching nothing.
	hash := dirHash(t, dir)
	setFileLimit(t, limitLeaving(t, 4))
	_, err = Open(dir, o)
	setFileLimit(t, orig)
	if !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "RLIMIT_NOFILE") {
		t.Fatalf("Open with too few descriptors: %v, want EMFILE and a hint to raise RLIMIT_NOFILE", err)
	}
	t.Logf("Open with too few descriptors: %v", err)
	if dirHash(t, dir) != hash {
		t.Fatalf("the failed Open (%v) changed the directory", err)
	}
	if after := openFds(t); after != before {
		t.Fatalf("%d descriptors open after the failed Open, %d before", after, before)
	}
}
