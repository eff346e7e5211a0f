//go:build !linux

package engines

const madvRandom = 1
