package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procIO is the process's I/O accounting from /proc/self/io (Linux),
// summed over all its threads, plus its page faults (getrusage).
//
// rchar/wchar count bytes passed to read/write-like syscalls, served from
// the page cache or not; syscr/syscw count those syscalls; read_bytes and
// write_bytes count what reached the block device. So with pread
// (-no-mmap) a Get answered by a filter costs none of them, a block read
// from the page cache costs one syscr and its rchar, and only a page-cache
// miss adds read_bytes. With the store's default mmap a block costs no
// syscall at all; a page not in memory is a major fault (majflt) and its
// device read still counts in read_bytes.
type procIO struct {
	RChar      uint64 `json:"rchar"`
	WChar      uint64 `json:"wchar"`
	SyscR      uint64 `json:"syscr"`
	SyscW      uint64 `json:"syscw"`
	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
	MajFlt     uint64 `json:"majflt"`

	// sampleBytes is the length of the text this sample read: the rchar
	// that reading it adds to the next sample.
	sampleBytes uint64
}

// readProcIO reads /proc/self/io and the fault count; ok is false where
// /proc/self/io does not exist (other systems, or kernels without task I/O
// accounting).
func readProcIO() (pio procIO, ok bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return procIO{}, false
	}
	if pio, err = parseProcIO(data); err != nil {
		return procIO{}, false
	}
	pio.MajFlt, pio.sampleBytes = majorFaults(), uint64(len(data))
	return pio, true
}

// parseProcIO parses the "name: value" lines of /proc/<pid>/io. Unknown
// lines are ignored (newer kernels may add some); the six fields used must
// all be present.
func parseProcIO(data []byte) (procIO, error) {
	var pio procIO
	fields := map[string]*uint64{
		"rchar": &pio.RChar, "wchar": &pio.WChar, "syscr": &pio.SyscR,
		"syscw": &pio.SyscW, "read_bytes": &pio.ReadBytes, "write_bytes": &pio.WriteBytes,
	}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		p := fields[strings.TrimSpace(name)]
		if !ok || p == nil {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return procIO{}, fmt.Errorf("/proc/self/io: %s: %w", name, err)
		}
		*p = n
		seen++
	}
	if seen != len(fields) {
		return procIO{}, fmt.Errorf("/proc/self/io: found %d of the %d expected fields", seen, len(fields))
	}
	return pio, nil
}

// sub returns a - b field by field, stopping at 0: it serves both for the
// counts since an earlier sample and for taking away the cost of sampling
// (probeCost), which may exceed a quiet workload's own count by a byte.
func (a procIO) sub(b procIO) procIO {
	d := func(x, y uint64) uint64 { return x - min(x, y) }
	return procIO{
		RChar: d(a.RChar, b.RChar), WChar: d(a.WChar, b.WChar),
		SyscR: d(a.SyscR, b.SyscR), SyscW: d(a.SyscW, b.SyscW),
		ReadBytes: d(a.ReadBytes, b.ReadBytes), WriteBytes: d(a.WriteBytes, b.WriteBytes),
		MajFlt: d(a.MajFlt, b.MajFlt),
	}
}

// since returns the counts from sample a to this later sample, without
// what taking sample a added itself: its read syscalls (from cost, the
// difference of two back-to-back samples) and its bytes. So a workload
// that does no I/O shows exactly none.
func (z procIO) since(a, cost procIO) procIO {
	cost.RChar = a.sampleBytes // the text grows as the counters do
	return z.sub(a).sub(cost)
}

// probeCost is what reading /proc/self/io adds to the counters: the
// difference of two samples taken back to back.
func probeCost() procIO {
	a, ok1 := readProcIO()
	b, ok2 := readProcIO()
	if !ok1 || !ok2 {
		return procIO{}
	}
	return b.sub(a)
}
