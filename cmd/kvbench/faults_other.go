//go:build !unix

package main

// majorFaults is not available here; readProcIO fails first anyway.
func majorFaults() uint64 { return 0 }
