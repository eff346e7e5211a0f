// Package stripe holds counters striped over cache lines, so that
// goroutines on many cores can count without writing one shared line.
//
// An atomic add to a word that every core writes makes that word's cache
// line move from core to core at each add; for an operation as short as a
// Get of an absent key (~0.2 µs) that traffic, not the work, sets the pace
// once several cores run Gets: on 16 cores, 16 readers did fewer absent
// Gets per second than one. A Counter spreads its adds over Stripes cells,
// each on a cache line of its own, and sums them when read; an adder picks
// its cell by the goroutine it runs on (Pick), which costs a nanosecond and
// no shared write.
package stripe

import (
	"sync/atomic"
	"unsafe"
)

// Stripes is the number of cells of a Counter. Goroutines pick cells at
// random (Pick), so some pairs share one however many there are, and a
// shared cell's line moves between their cores at each add. Of n busy
// goroutines about n²/(2·Stripes) pairs share a cell: of 16 readers,
// about two pairs at 64 stripes, four at 32. The cost is a Counter of 8
// KiB and a Load of 64 lines.
const Stripes = 1 << stripeBits

const stripeBits = 6

// cellSize spans two 64-byte lines: x86's adjacent-line prefetcher moves
// lines in pairs, so a 64-byte stride would still share.
const cellSize = 128

type cell struct {
	v atomic.Int64
	_ [cellSize - 8]byte
}

// Counter is a striped counter. Its zero value is 0 and ready to use; it
// must not be copied after first use.
type Counter struct {
	cells [Stripes]cell
}

// Pick returns a stripe for a run of adds: the caller may use it for
// several counters and, where it must take back what it added (a
// reference count), for the matching subtraction.
//
// The stripe is a hash of the address of the caller's stack: goroutines
// have stacks of their own, so concurrent goroutines mostly pick different
// stripes, and a goroutine keeps to one (until its stack moves), which
// keeps that line in its core's cache. (Drawing a random stripe per call
// spreads as well but cost 10-25 ns per call here; Go has no cheap way to
// ask which processor a goroutine runs on.)
func Pick() int {
	var x byte
	a := uint64(uintptr(unsafe.Pointer(&x))) >> 10 // goroutine stacks are at least 2 KiB apart
	return int((a * 0x9e3779b97f4a7c15) >> (64 - stripeBits))
}

// Add adds n to stripe i (from Pick) and returns that stripe's new value.
func (c *Counter) Add(i int, n int64) int64 { return c.cells[i].v.Add(n) }

// Load returns the sum of the stripes. Concurrent adds may or may not be
// counted; a stripe whose adds are each taken back from the same stripe
// never reads below what is still held there, so a sum of zero means none
// is held.
func (c *Counter) Load() int64 {
	var n int64
	for i := range c.cells {
		n += c.cells[i].v.Load()
	}
	return n
}

// GroupFields is how many counters a Group holds: 64 bytes of them.
const GroupFields = 8

// Group is GroupFields striped counters whose cells are shared: counter f
// of stripe i sits beside the group's other counters of stripe i, within
// 64 bytes. An operation that adds to several counters (a Get counts
// itself and its filter probes) thus writes one line, or two where the
// Group does not start on a line, where as many Counters would write one
// line each; and each line written is one more to move between cores
// when two goroutines share a stripe. Its zero value is all zeros and
// ready to use; it must not be copied after first use.
type Group struct {
	cells [Stripes]groupCell
}

type groupCell struct {
	v [GroupFields]atomic.Int64
	_ [cellSize - GroupFields*8]byte
}

// Add adds n to counter f on stripe i (from Pick).
func (g *Group) Add(i, f int, n int64) { g.cells[i].v[f].Add(n) }

// Load returns the sum of counter f's stripes, as Counter.Load.
func (g *Group) Load(f int) int64 {
	var n int64
	for i := range g.cells {
		n += g.cells[i].v[f].Load()
	}
	return n
}

// Uint64 is a striped counter for code that carries no stripe of its own:
// each Add picks one. Its methods match atomic.Uint64's Add and Load.
type Uint64 struct {
	c Counter
}

// Add adds n.
func (u *Uint64) Add(n uint64) { u.c.Add(Pick(), int64(n)) }

// Load returns the sum.
func (u *Uint64) Load() uint64 { return uint64(u.c.Load()) }

// AddTick is Add that also returns the new value of the stripe it added
// to: a number that runs through every value as its adder counts, for
// code that acts once every so many adds (segment reads sample their
// blocks' residency this way) at no cost beyond the add.
func (u *Uint64) AddTick(n uint64) uint64 { return uint64(u.c.Add(Pick(), int64(n))) }
