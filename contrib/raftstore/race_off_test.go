//go:build !race

package raftstore

const raceEnabled = false
