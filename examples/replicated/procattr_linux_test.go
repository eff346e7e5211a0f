package main

import "syscall"

// childAttr has the kernel kill a node if the test process dies first (a
// test timeout's panic, say), so no node outlives its test.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
