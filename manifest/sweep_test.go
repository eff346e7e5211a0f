package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

var sweepMode = flag.String("manifest.sweep", "sample",
	"TestBitFlipSweep: 'sample' flips ~400 offsets spread over every page; 'all' flips bits 0, 3 and 7 of every byte")

// The child side of TestBitFlipSweep: the directory holding the pristine
// file and the job list, and the first job to run.
const (
	sweepDirEnv   = "BLOOMKV_MANIFEST_SWEEP_DIR"
	sweepStartEnv = "BLOOMKV_MANIFEST_SWEEP_START"
)

// sweepJobTimeout bounds one Open in the child; past it the child is
// killed and the flip counts as a hang.
const sweepJobTimeout = 30 * time.Second

// flip is one sweep job: flip bit of the byte at off.
type flip struct{ off, bit int }

// Outcomes. A crash, a hang, an error that is not corruption, and a
// different state with no warning are failures.
const (
	outCorrupt  = "corrupt"        // Open reported ErrCorrupt
	outSame     = "same"           // Open succeeded, same state: the flip hit unused bytes
	outFallback = "fallback"       // Open succeeded, and CheckFile reports the meta fallback
	outCounter  = "silent-counter" // Open succeeded, only a counter differs: see counterGap
	outSilent   = "silent"         // Open succeeded with different segments, no warning
	outError    = "error"          // Open failed with a non-corruption error
	outCrash    = "crash"          // the child died (panic, signal, exit)
	outHang     = "hang"           // the child timed out
)

// counterGap explains outCounter. The three counters in the meta bucket
// are bare 8-byte values in unchecksummed bbolt pages; a flip in one is a
// valid different number, which no structural check can see. Closing the
// gap needs a format change (a checksum over the counters).
const counterGap = "a flip inside a meta-bucket counter value is a valid different number (no checksum in format v1)"

// TestBitFlipSweep flips one bit at a time in a small store's manifest and
// opens each damaged copy in a child process, so that a crash (which can
// happen on bbolt's own goroutines, beyond recover) is observed rather
// than suffered. One child runs jobs until it dies; the parent then blames
// the job it was on and starts a new child after it.
func TestBitFlipSweep(t *testing.T) {
	if dir := os.Getenv(sweepDirEnv); dir != "" {
		sweepChild(dir)
		return
	}
	if testing.Short() && *sweepMode != "all" {
		t.Skip("subprocess sweep skipped in -short mode")
	}
	b := buildManifest(t, smallEdits()...)
	ps := os.Getpagesize()
	var jobs []flip
	switch *sweepMode {
	case "all":
		for off := range len(b.data) {
			jobs = append(jobs, flip{off, 0}, flip{off, 3}, flip{off, 7})
		}
	case "sample":
		jobs = sampleFlips(b.data, ps, 400)
	default:
		t.Fatalf("-manifest.sweep=%q: want sample or all", *sweepMode)
	}
	dir := t.TempDir()
	var list strings.Builder
	for _, j := range jobs {
		fmt.Fprintf(&list, "%d %d\n", j.off, j.bit)
	}
	if err := errors.Join(os.WriteFile(filepath.Join(dir, "pristine"), b.data, 0o644),
		os.WriteFile(filepath.Join(dir, "jobs"), []byte(list.String()), 0o644)); err != nil {
		t.Fatal(err)
	}

	outcomes := runSweep(t, dir, len(jobs))
	tally := map[string]int{}
	for i, o := range outcomes {
		class, detail, _ := strings.Cut(o, " ")
		tally[class]++
		switch class {
		case outCorrupt, outSame, outFallback:
		case outCounter:
			t.Logf("offset %d bit %d: %s", jobs[i].off, jobs[i].bit, detail)
		default:
			t.Errorf("offset %d bit %d (page %d +%d): %s %s", jobs[i].off, jobs[i].bit, jobs[i].off/ps, jobs[i].off%ps, class, detail)
		}
	}
	t.Logf("%d flips over %d bytes (%d pages): corrupt %d, same %d, fallback %d, silent-counter %d, silent %d, error %d, crash %d, hang %d",
		len(jobs), len(b.data), len(b.data)/ps, tally[outCorrupt], tally[outSame], tally[outFallback],
		tally[outCounter], tally[outSilent], tally[outError], tally[outCrash], tally[outHang])
	if tally[outCounter] > 0 {
		t.Logf("silent-counter: %s", counterGap)
	}
}

// sampleFlips picks about n offsets covering every page: all of each
// page's written bytes get an even share (headers, elements and data are
// where damage matters), and a few offsets land in each page's zero tail.
// The bit rotates with the offset so every bit position is tried.
func sampleFlips(data []byte, ps, n int) []flip {
	pages := len(data) / ps
	const perTail = 4
	var used []int // written extent of each page
	total := 0
	for p := range pages {
		page := data[p*ps : (p+1)*ps]
		end := len(bytes.TrimRight(page, "\x00"))
		used = append(used, end)
		total += end
	}
	budget := max(n-perTail*pages, pages)
	var jobs []flip
	for p, end := range used {
		share := max(1, budget*end/max(total, 1))
		for i := range min(share, end) {
			off := p*ps + i*end/min(share, end)
			jobs = append(jobs, flip{off, off % 8})
		}
		for i := range perTail {
			off := p*ps + end + (i+1)*(ps-end)/(perTail+1)
			jobs = append(jobs, flip{off, off % 8})
		}
	}
	return slices.CompactFunc(jobs, func(a, b flip) bool { return a.off == b.off })
}

// runSweep runs the jobs in as many children as it takes and returns each
// job's outcome line ("class detail"). A job that times out is retried
// once in a fresh child: on a loaded machine a child can stall on I/O.
func runSweep(t *testing.T, dir string, n int) []string {
	outcomes := make([]string, n)
	retried := map[int]bool{}
	for next := 0; next < n; {
		done, crash := runChild(t, dir, next, outcomes)
		next = done
		if next == n || crash == "" {
			continue
		}
		if crash == outHang && !retried[next] {
			retried[next] = true
			t.Logf("job %d timed out; retrying it once", next)
			continue
		}
		outcomes[next] = crash
		next++
	}
	return outcomes
}

// runChild runs one child from job start and records the outcomes it
// reports. It returns the index of the first job without an outcome and,
// if the child died there, why.
func runChild(t *testing.T, dir string, start int, outcomes []string) (int, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBitFlipSweep$", "-test.count=1")
	cmd.Env = append(os.Environ(), sweepDirEnv+"="+dir, sweepStartEnv+"="+strconv.Itoa(start))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next, hung := start, false
	timer := time.NewTimer(sweepJobTimeout)
	defer timer.Stop()
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			var i int
			var rest string
			if _, err := fmt.Sscanf(line, "SWEEP %d", &i); err != nil || i != next {
				continue // test framework output
			}
			_, rest, _ = strings.Cut(strings.TrimPrefix(line, "SWEEP "), " ")
			outcomes[i] = rest
			next = i + 1
			timer.Reset(sweepJobTimeout)
		case <-timer.C:
			hung = true
			_ = cmd.Process.Kill()
		}
	}
	err = cmd.Wait()
	switch {
	case next == len(outcomes):
		return next, ""
	case hung:
		return next, outHang
	}
	return next, fmt.Sprintf("%s %v: %s", outCrash, err, firstPanicLine(stderr.String()))
}

// firstPanicLine picks the line of a child's stderr that says why it died.
func firstPanicLine(s string) string {
	for line := range strings.Lines(s) {
		if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") || strings.HasPrefix(line, "unexpected fault") {
			return strings.TrimSpace(line)
		}
	}
	return strings.TrimSpace(s[:min(len(s), 200)])
}

// sweepChild runs jobs from the start index to the end, printing one
// "SWEEP i class detail" line each. It exits the process when done so the
// parent's test output stays out of the protocol.
func sweepChild(dir string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "sweep child:", err); os.Exit(3) }
	pristine, err := os.ReadFile(filepath.Join(dir, "pristine"))
	if err != nil {
		fail(err)
	}
	list, err := os.ReadFile(filepath.Join(dir, "jobs"))
	if err != nil {
		fail(err)
	}
	start, _ := strconv.Atoi(os.Getenv(sweepStartEnv))
	path := filepath.Join(dir, fmt.Sprintf("flip-%d", os.Getpid()))
	want, err := openState(path, pristine)
	if err != nil {
		fail(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		if i < start {
			continue
		}
		var j flip
		if _, err := fmt.Sscanf(line, "%d %d", &j.off, &j.bit); err != nil {
			fail(err)
		}
		d := bytes.Clone(pristine)
		d[j.off] ^= 1 << j.bit
		fmt.Printf("SWEEP %d %s\n", i, classify(path, d, want))
	}
	os.Exit(0)
}

// openState writes data to path and returns the state Open reads from it.
func openState(path string, data []byte) (State, error) {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return State{}, err
	}
	m, err := Open(vfs.Default, path)
	if err != nil {
		return State{}, err
	}
	st := m.State()
	return st, m.Close()
}

// classify opens a damaged copy and names the outcome.
func classify(path string, data []byte, want State) string {
	got, err := openState(path, data)
	if errors.Is(err, base.ErrCorrupt) {
		return outCorrupt
	}
	if err != nil {
		return fmt.Sprintf("%s %v", outError, err)
	}
	res, cerr := Check("MANIFEST", data)
	switch {
	case cerr == nil && res.MetaFallback:
		return fmt.Sprintf("%s older=%v", outFallback, !sameState(got, want))
	case sameState(got, want):
		return outSame
	case cerr != nil:
		return fmt.Sprintf("%s bbolt accepted what Check rejects: %v", outSilent, cerr)
	case slices.EqualFunc(got.Segments, want.Segments, sameMeta):
		return fmt.Sprintf("%s next-file-num %d, flushed-seq %d, log-num %d (want %d, %d, %d)", outCounter,
			got.NextFileNum, got.FlushedSeq, got.LogNum, want.NextFileNum, want.FlushedSeq, want.LogNum)
	}
	return fmt.Sprintf("%s got %+v", outSilent, got)
}
