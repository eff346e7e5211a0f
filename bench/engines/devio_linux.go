//go:build linux

package engines

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioCounters are the process-wide I/O counters the cold workload takes
// deltas of. ReadBytes is /proc/self/io read_bytes: bytes this process
// caused to be fetched from the storage device (page-cache misses of
// read(2)/pread(2) and of faults on mapped files, read-ahead included),
// summed over all its threads. WriteBytes is write_bytes. MajFaults is getrusage's ru_majflt: page
// faults that had to wait for I/O. MinFaults is ru_minflt. CPUNanos is
// ru_utime + ru_stime: CPU time of all the process's threads, so that a
// cold loop's time can be split into CPU and waiting for the device.
type ioCounters struct {
	ReadBytes  int64
	WriteBytes int64 // write_bytes: bytes this process caused to be written to storage
	MajFaults  int64
	MinFaults  int64
	CPUNanos   int64
}

// errNoProcIO is returned where /proc/self/io cannot be read (not Linux,
// or a kernel without task I/O accounting).
var errNoProcIO = errors.New("/proc/self/io read_bytes unavailable")

func readIOCounters() (ioCounters, error) {
	var c ioCounters
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return c, fmt.Errorf("%w: %v", errNoProcIO, err)
	}
	found := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "read_bytes:"); ok {
			c.ReadBytes, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return c, fmt.Errorf("%w: %q", errNoProcIO, line)
			}
			found = true
		}
		if v, ok := strings.CutPrefix(line, "write_bytes:"); ok {
			c.WriteBytes, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if !found {
		return c, errNoProcIO
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return c, err
	}
	c.MajFaults, c.MinFaults = ru.Majflt, ru.Minflt
	c.CPUNanos = ru.Utime.Nano() + ru.Stime.Nano()
	return c, nil
}

// cpuNanos is the process's CPU time so far (user + system), as in
// ioCounters.CPUNanos; 0 if getrusage fails.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// memStatus is this process's resident memory from /proc/self/status, in
// bytes: VmHWM (peak resident set), VmRSS, and its RssAnon (anonymous:
// heap, stacks, Go runtime) and RssFile (file pages mapped into the
// process, e.g. mmap'd segments or tables) parts.
type memStatus struct {
	PeakRSS, RSS, Anon, File int64
}

func readMemStatus() (memStatus, error) {
	var m memStatus
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return m, err
	}
	defer f.Close()
	fields := map[string]*int64{"VmHWM:": &m.PeakRSS, "VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) == 3 && parts[2] == "kB" {
			if p := fields[parts[0]]; p != nil {
				kb, err := strconv.ParseInt(parts[1], 10, 64)
				if err != nil {
					return m, fmt.Errorf("/proc/self/status: %q", sc.Text())
				}
				*p = kb << 10
			}
		}
	}
	return m, sc.Err()
}

// evictDir drops every page of every regular file under dir from the OS
// page cache, with the store still open:
//
//  1. this process's page-table entries for mappings of those files are
//     zapped (madvise MADV_DONTNEED on each range /proc/self/maps lists
//     for them: for a read-only shared file mapping that only unmaps, the
//     next access faults the page back in from the page cache or the
//     device), because the kernel will not drop a page cache page that a
//     process maps; memory reclaim would unmap them the same way;
//  2. each file is fsynced (dirty pages cannot be dropped) and
//     posix_fadvise(POSIX_FADV_DONTNEED) is called on all of it.
//
// No root needed. It returns the pages still resident afterwards
// (mincore), which should be 0.
func evictDir(dir string) (residentPages int64, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return 0, err
	}
	if err := unmapPages(abs); err != nil {
		return 0, err
	}
	err = walkFiles(abs, func(path string) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", path, err)
		}
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		return 0, err
	}
	return residentDir(abs)
}

// adviseMappings calls madvise(advice) on every mapping of a file under
// dir that this process holds: how the harness tries an mmap advice on a
// store without changing the store.
func adviseMappings(dir string, advice int) (ranges int, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return 0, err
	}
	err = forMappings(abs, func(start, end uint64, perms string) error {
		ranges++
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), uintptr(advice)); e != 0 {
			return fmt.Errorf("madvise(%d) %x-%x: %w", advice, start, end, e)
		}
		return nil
	})
	return ranges, err
}

// readAheadKB returns read_ahead_kb of the block device holding dir (of
// its disk, for a partition), or -1 if it cannot be found.
func readAheadKB(dir string) int {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return -1
	}
	base := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, p := range []string{base + "/queue/read_ahead_kb", base + "/../queue/read_ahead_kb"} {
		if b, err := os.ReadFile(p); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return n
			}
		}
	}
	return -1
}

// forMappings calls fn on every range of /proc/self/maps that maps a file
// under dir (an absolute path).
func forMappings(dir string, fn func(start, end uint64, perms string) error) error {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	prefix := dir + string(filepath.Separator)
	for line := range bytes.SplitSeq(maps, []byte("\n")) {
		// address perms offset dev inode path
		fields := strings.Fields(string(line))
		if len(fields) < 6 || !strings.HasPrefix(fields[5], prefix) {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("/proc/self/maps: %q", line)
		}
		if err := fn(start, end, fields[1]); err != nil {
			return err
		}
	}
	return nil
}

// unmapPages zaps this process's page-table entries for every mapping of a
// file under dir (an absolute path).
func unmapPages(dir string) error {
	return forMappings(dir, func(start, end uint64, perms string) error {
		if perms[1] == 'w' && perms[3] == 'p' {
			// A private writable mapping may hold anonymous copies:
			// MADV_DONTNEED would discard data. None of the stores here
			// maps its files so; refuse rather than corrupt.
			return fmt.Errorf("refusing to zap private writable mapping %x-%x", start, end)
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED); e != 0 {
			return fmt.Errorf("madvise(MADV_DONTNEED) %x-%x: %w", start, end, e)
		}
		return nil
	})
}

// residentDir returns how many pages of the regular files under dir are
// in the page cache, by mapping each file and asking mincore.
func residentDir(dir string) (int64, error) {
	var pages int64
	err := walkFiles(dir, func(path string) error {
		n, err := residentFile(path)
		pages += n
		return err
	})
	return pages, err
}

func residentFile(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	// x/sys/unix has no Mincore wrapper on Linux.
	_, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, e)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n, nil
}

// walkFiles calls fn on every regular file under dir. A file removed
// meanwhile (a store may replace its OPTIONS or manifest files at Open) is
// skipped.
func walkFiles(dir string, fn func(path string) error) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if err := fn(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}
