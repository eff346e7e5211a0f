package main

import (
	"os"
	"testing"
)

// TestReadMemStatus: where /proc/self/status exists the numbers are there
// and add up (anonymous and file pages are parts of RSS).
func TestReadMemStatus(t *testing.T) {
	m, ok := readMemStatus()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		if ok {
			t.Fatal("no /proc/self/status, yet readMemStatus says ok")
		}
		t.Skip("no /proc/self/status")
	}
	if !ok || m.PeakRSS == 0 || m.RSS == 0 || m.Anon == 0 || m.Anon+m.File > m.RSS+m.RSS/10 || m.PeakRSS < m.RSS {
		t.Fatalf("readMemStatus = %+v, %v", m, ok)
	}
}
