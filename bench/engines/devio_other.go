//go:build !linux

package engines

import "errors"

type ioCounters struct{ ReadBytes, WriteBytes, MajFaults, MinFaults, CPUNanos int64 }

var errNoProcIO = errors.New("/proc/self/io read_bytes unavailable (not Linux)")

func readIOCounters() (ioCounters, error) { return ioCounters{}, errNoProcIO }

func cpuNanos() int64 { return 0 }

type memStatus struct{ PeakRSS, RSS, Anon, File int64 }

func readMemStatus() (memStatus, error) {
	return memStatus{}, errors.New("/proc/self/status unavailable")
}

func evictDir(string) (int64, error)    { return 0, errNoProcIO }
func residentDir(string) (int64, error) { return 0, errNoProcIO }

func adviseMappings(string, int) (int, error) { return 0, errNoProcIO }
func readAheadKB(string) int                  { return -1 }
