//go:build linux

package engines

import "golang.org/x/sys/unix"

const madvRandom = unix.MADV_RANDOM
