// Package invariants holds the checks that make a broken memory lifetime
// fail a test run instead of a user's process.
//
// bloomkv hands out slices that alias memory it does not own for long: a
// segment's read-only file mapping (unmapped when the last reader of the
// segment is done), an iterator's reused key and value buffers, a
// memtable's arena. Each such slice has one owner and a documented end
// (LIFETIMES.md at the repository root lists them all). A slice used past
// its end usually still reads plausible bytes — until a compaction unmaps
// the segment under it, and then it crashes the process or returns another
// key's bytes, rarely and only under load.
//
// Built with the invariants build tag (go test -tags invariants ./...),
// every such slice is handed out through a Lease: a private copy in memory
// of its own, which Lease.Expire makes unreadable (the pages are protected,
// PROT_NONE) at the very moment the slice's lifetime ends. A use past the
// end then faults deterministically, on the first run, at the line that
// does it. Without the tag, Enabled is false, Guard returns its argument
// and Expire returns at once: the compiler removes the checks.
//
// Reference counts are checked too: Check panics if a count goes below
// zero, the symptom of a double release.
package invariants

// Check panics with msg if ok is false, when the invariants build tag is
// set; otherwise it does nothing.
func Check(ok bool, msg string) {
	if Enabled && !ok {
		panic("bloomkv invariant violated: " + msg)
	}
}

// A Lease hands out guarded copies of slices that all end together: when
// Expire is called. The zero value is ready to use. A Lease is used by one
// goroutine at a time.
type Lease struct {
	regions []region
}

// Guard returns b, or, in an invariants build, a copy of b that becomes
// unreadable when the lease expires. An empty b is returned as it is.
func (l *Lease) Guard(b []byte) []byte {
	if !Enabled {
		return b
	}
	return l.guard(b)
}

func (l *Lease) guard(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	r := newRegion(len(b))
	copy(r.data, b)
	l.regions = append(l.regions, r)
	return r.data[:len(b):len(b)]
}

// Expire ends the lifetime of every slice Guard returned since the last
// Expire: reading one of them from now on faults (in an invariants build).
func (l *Lease) Expire() {
	if !Enabled {
		return
	}
	l.expire()
}

func (l *Lease) expire() {
	for _, r := range l.regions {
		r.expire()
	}
	clear(l.regions)
	l.regions = l.regions[:0]
}
