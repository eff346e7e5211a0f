package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// memStatus is the process's memory from /proc/self/status (Linux): peak
// and current RSS, and how much of the RSS is anonymous (heap, stacks:
// memory the process owns) and how much is file pages (bloomkv's mapped
// segments and WAL: the kernel's page cache, shared and reclaimable).
type memStatus struct {
	PeakRSS uint64 `json:"rss_peak_bytes"`
	RSS     uint64 `json:"rss_bytes"`
	Anon    uint64 `json:"rss_anon_bytes"`
	File    uint64 `json:"rss_file_bytes"`
}

// readMemStatus reads /proc/self/status; ok is false where it does not
// exist.
func readMemStatus() (m memStatus, ok bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return memStatus{}, false
	}
	fields := map[string]*uint64{"VmHWM:": &m.PeakRSS, "VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[2] == "kB" {
			if dst, found := fields[f[0]]; found {
				if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					*dst, ok = v<<10, true
				}
			}
		}
	}
	return m, ok
}
