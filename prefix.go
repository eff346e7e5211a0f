package bloomkv

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/manifest"
	"github.com/bloomkv/bloomkv/memtable"
	"github.com/bloomkv/bloomkv/segment"
)

// A PrefixExtractor tells the store what a key's prefix is, as Pebble's
// Comparer.Split does: with Options.Prefix set, every segment carries a
// second Bloom filter, of the distinct prefixes of its keys, and an
// Iterator whose IterOptions.Prefix is, or begins with, a whole prefix
// skips, with no I/O, every segment whose prefix filter says that prefix
// is not there.
//
// Split returns the length of key's prefix: n in [1, len(key)] means
// key[:n] is its prefix; 0 means the key has no prefix (such keys are
// not in the prefix filters, and are found by every scan as before). A
// prefix p is whole if Split(p) == len(p) > 0. Split must be a pure
// function of its argument, and must keep this contract, on which the
// absence of false negatives rests:
//
//	if Split(p) == len(p) > 0, every key k that begins with p has Split(k) == len(p).
//
// That is, the keys a scan of a whole prefix p finds are exactly the keys
// whose prefix is p. FixedPrefix and SeparatorPrefix keep it.
//
// The extractor is fixed for the life of a store: its Name is recorded in
// the store (the manifest) when the store is created, and Open refuses
// (ErrPrefixExtractor) a different one. Name identifies the function:
// change the name whenever Split changes.
type PrefixExtractor struct {
	// Name identifies Split in the store; 1 to 255 bytes.
	Name string
	// Split returns the length of key's prefix, or 0 if it has none.
	Split func(key []byte) int
}

// ErrPrefixExtractor is returned by Open when Options.Prefix does not
// match the prefix extractor recorded in the store: another name; one
// given for a non-empty store created without one; none given to a
// writable Open of a store that has one (a read-only Open may omit it,
// and then uses no prefix filter). It also matches ErrInvalidOptions.
var ErrPrefixExtractor error = &narrowError{"bloomkv: prefix extractor does not match the store's", ErrInvalidOptions}

// Names of the ready extractors; builtinPrefix parses them back.
const (
	fixedPrefixName     = "bloomkv.FixedPrefix(%d)"
	separatorPrefixName = "bloomkv.SeparatorPrefix(%#02x)"
)

// FixedPrefix returns the extractor whose prefix is a key's first n
// bytes; a key shorter than n has no prefix. n must be 1 to MaxKeySize,
// or Open refuses the extractor (ErrInvalidOptions). Its name is
// "bloomkv.FixedPrefix(n)".
func FixedPrefix(n int) *PrefixExtractor {
	px := &PrefixExtractor{Name: fmt.Sprintf(fixedPrefixName, n)}
	if n >= 1 && n <= MaxKeySize {
		px.Split = func(key []byte) int {
			if len(key) < n {
				return 0
			}
			return n
		}
	}
	return px
}

// SeparatorPrefix returns the extractor whose prefix runs up to and
// including the first sep in the key ("user:" of "user:42" with ':'); a
// key without sep has no prefix. Its name is
// "bloomkv.SeparatorPrefix(0xHH)".
func SeparatorPrefix(sep byte) *PrefixExtractor {
	return &PrefixExtractor{
		Name: fmt.Sprintf(separatorPrefixName, sep),
		Split: func(key []byte) int {
			for i, c := range key {
				if c == sep {
					return i + 1
				}
			}
			return 0
		},
	}
}

// builtinPrefix returns the ready extractor of the given name, or nil if
// the name is not one of FixedPrefix's or SeparatorPrefix's: VerifyDir,
// which has no Options, uses it to check the prefix filters.
func builtinPrefix(name string) *PrefixExtractor {
	if s, ok := strings.CutPrefix(name, "bloomkv.FixedPrefix("); ok {
		if s, ok := strings.CutSuffix(s, ")"); ok {
			if n, err := strconv.Atoi(s); err == nil && FixedPrefix(n).Name == name && n >= 1 && n <= MaxKeySize {
				return FixedPrefix(n)
			}
		}
	}
	if s, ok := strings.CutPrefix(name, "bloomkv.SeparatorPrefix("); ok {
		if s, ok := strings.CutSuffix(s, ")"); ok {
			if n, err := strconv.ParseUint(s, 0, 8); err == nil && SeparatorPrefix(byte(n)).Name == name {
				return SeparatorPrefix(byte(n))
			}
		}
	}
	return nil
}

// validatePrefix checks Options.Prefix.
func validatePrefix(px *PrefixExtractor) error {
	switch {
	case px == nil:
		return nil
	case px.Split == nil:
		return fmt.Errorf("%w: Prefix %q has no Split function", ErrInvalidOptions, px.Name)
	case len(px.Name) == 0 || len(px.Name) > manifest.MaxPrefixExtractorLen:
		return fmt.Errorf("%w: Prefix.Name of %d bytes, want 1 to %d", ErrInvalidOptions, len(px.Name), manifest.MaxPrefixExtractorLen)
	}
	return nil
}

// prefixLen is Split(key), with anything outside [1, len(key)] read as
// "no prefix" (0).
func (px *PrefixExtractor) prefixLen(key []byte) int {
	n := px.Split(key)
	if n < 1 || n > len(key) {
		return 0
	}
	return n
}

// checkPrefixExtractor compares Options.Prefix with the extractor the
// store records (after the manifest was loaded and the WALs replayed),
// and decides whether this Open records it: db.recordPrefix is the name
// startFresh commits, for a store that has none yet and is empty.
func (db *DB) checkPrefixExtractor(st manifest.State, replayed *memtable.Memtable) error {
	px, stored := db.opts.Prefix, st.PrefixExtractor
	mismatch := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrPrefixExtractor, fmt.Sprintf(format, args...))
	}
	empty := len(st.Segments) == 0 && st.FlushedSeq == 0 && replayed.Empty()
	switch {
	case px == nil && stored == "":
	case px == nil:
		if !db.opts.ReadOnly {
			return mismatch("the store was created with prefix extractor %q; Options.Prefix must name it", stored)
		}
	case stored == "" && !empty:
		return mismatch("Options.Prefix is %q, but the store has data and no prefix extractor", px.Name)
	case stored == "":
		if !db.opts.ReadOnly {
			db.recordPrefix = px.Name
		}
	case px.Name != stored:
		return mismatch("Options.Prefix is %q, but the store was created with %q", px.Name, stored)
	}
	return nil
}

// prefixProbe decides whether an iterator over IterOptions.Prefix p can
// skip segments by their prefix filters, and counts what it does.
type prefixProbe struct {
	name          string // the extractor's name; "" if the filters are not used
	h             uint64 // bloom.Hash of p's whole prefix
	probes, skips uint64
}

// newPrefixProbe returns the probe for p: active if the DB has a prefix
// extractor and p begins with a whole prefix q of it (p itself, or a
// longer scan prefix: "p213/1" under FixedPrefix(4), "user:4" under
// SeparatorPrefix(':')). By the extractor's contract every key that
// begins with the whole prefix q has prefix q, so the keys p finds are
// among those q's filter holds.
func (db *DB) newPrefixProbe(p []byte) prefixProbe {
	px := db.opts.Prefix
	if px == nil || len(p) == 0 {
		return prefixProbe{}
	}
	n := px.prefixLen(p)
	if n == 0 || n < len(p) && px.prefixLen(p[:n]) != n {
		return prefixProbe{}
	}
	return prefixProbe{name: px.Name, h: bloom.Hash(p[:n])}
}

// skip reports whether segment s cannot hold a key with the prefix: its
// prefix filter, built by this extractor, says no.
func (pp *prefixProbe) skip(s *segHandle) bool {
	if pp.name == "" {
		return false
	}
	f, name := s.reader.PrefixFilter()
	if f == nil || name != pp.name {
		return false
	}
	pp.probes++
	if f.ContainsHash(pp.h) {
		return false
	}
	pp.skips++
	return true
}

// publish adds the probe's counts to the DB's statistics, on stripe pin.
func (pp *prefixProbe) publish(c *counters, pin int) {
	if pp.probes > 0 {
		c.reads.Add(pin, readPrefixFilterProbes, int64(pp.probes))
	}
	if pp.skips > 0 {
		c.reads.Add(pin, readPrefixFilterSkips, int64(pp.skips))
	}
}

// verifyReaderOptions are the options of the reader verify opens on a
// segment: with px, Verify checks the prefix filter against every key.
func verifyReaderOptions(name string, px *PrefixExtractor) segment.ReaderOptions {
	ro := segment.ReaderOptions{Name: name}
	if px != nil {
		ro.Prefix, ro.PrefixName = px.Split, px.Name
	}
	return ro
}

// checkSegmentPrefix reports a segment whose prefix filter was built by
// another extractor than the store's: its filter would be ignored (every
// prefix scan searches it), which is safe, but no writer of this store
// made it.
func checkSegmentPrefix(r *segment.Reader, px *PrefixExtractor, name string, rep *VerifyReport) {
	if _, got := r.PrefixFilter(); got != "" && px != nil && got != px.Name {
		rep.problemf(name, "prefix filter built by extractor %q, the store's is %q", got, px.Name)
	}
}

// closedDirPrefix is the extractor VerifyDir checks prefix filters with:
// the store's, if it is a ready one (FixedPrefix, SeparatorPrefix). A
// store with another extractor gets a note: its prefix filters are
// checked for structure and geometry only (DB.Verify on a store opened
// with the extractor checks them in full).
func closedDirPrefix(st manifest.State, rep *VerifyReport) *PrefixExtractor {
	if st.PrefixExtractor == "" {
		return nil
	}
	px := builtinPrefix(st.PrefixExtractor)
	if px == nil {
		rep.notef(base.ManifestName, "prefix extractor %q is not a ready one: prefix filters are checked for structure only (DB.Verify checks them in full)", st.PrefixExtractor)
	}
	return px
}
