package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/bloomkv/bloomkv/internal/base"
)

// Properties describes a segment. The writer stores them in the
// properties block; Writer.Finish and Reader.Properties return them.
type Properties struct {
	Entries      uint64 // internal keys: every version, tombstones included
	Tombstones   uint64 // entries of kind base.KindDelete
	DistinctKeys uint64 // distinct user keys
	MinSeq       uint64 // smallest sequence number; 0 if the segment is empty
	MaxSeq       uint64 // largest sequence number; 0 if the segment is empty
	Smallest     []byte // smallest user key; empty if the segment is empty
	Largest      []byte // largest user key; empty if the segment is empty

	DataBlocks int
	DataSize   uint64 // bytes of all data blocks, trailers included
	IndexSize  uint64 // bytes of the stored index block, trailer excluded
	FilterSize uint64 // bytes of the filter block (the bloom encoding); 0 if none

	// RangeDels counts the range tombstones (one per fragment and
	// sequence number) in the range-deletion block, stored RangeDelSize
	// bytes long (trailer excluded). Both 0 without one, and in every
	// version-1 file.
	RangeDels    uint64
	RangeDelSize uint64

	// Geometry of the Bloom filter (bloom.Geometry); all 0 if none.
	FilterLayout uint8
	FilterK      uint8
	FilterBits   uint64

	// PrefixExtractor names the prefix extractor whose prefixes the
	// prefix filter holds; empty if the segment has no prefix filter.
	PrefixExtractor string
	// PrefixFilterSize is the length of the prefix filter block (the
	// bloom encoding, trailer excluded); 0 if none (FORMAT.md).
	PrefixFilterSize uint64

	// Values counts the value records: values stored apart from their
	// keys (version 5; FORMAT.md, "Value records"). 0 in earlier versions.
	Values uint64

	// RangeCovered counts the puts that are the newest version of their
	// key in the segment and that a range tombstone newer than them
	// deletes for a reader of the latest state: versions a writer kept
	// only because an open snapshot could still see them, and that a
	// scan of the latest state steps over. The writer records what its
	// caller tells it (Writer.SetRangeCovered); 0 when absent. Together
	// with Tombstones and Entries − DistinctKeys (older versions) it
	// tells the store how much a merge with no snapshot open would drop.
	RangeCovered uint64

	FormatVersion uint32 // from the footer
}

// Property names, in the byte order in which they must appear in the
// properties block (FORMAT.md, "Properties block").
const (
	propDataBlocks   = "data-blocks"
	propDataSize     = "data-size"
	propDistinctKeys = "distinct-keys"
	propEntries      = "entries"
	propFilterBits   = "filter-bits"
	propFilterK      = "filter-k"
	propFilterLayout = "filter-layout"
	propFilterSize   = "filter-size"
	propIndexSize    = "index-size"
	propLargest      = "largest"
	propMaxSeq       = "max-seq"
	propMinSeq       = "min-seq"
	propRangeCovered = "range-covered"  // optional (any version; FORMAT.md)
	propRangeDelSize = "range-del-size" // optional (version 2)
	propRangeDels    = "range-dels"     // optional (version 2)
	propSmallest     = "smallest"
	propTombstones   = "tombstones"
	propValues       = "values" // optional (version 5)

	// numProperties counts the properties every segment has; the optional
	// ones are written only when not zero.
	numProperties = 14
)

// encodeProperties builds the properties block in bw.
func encodeProperties(bw *blockWriter, p *Properties) []byte {
	bw.reset()
	var v []byte
	u := func(name string, x uint64) {
		v = binary.AppendUvarint(v[:0], x)
		bw.add([]byte(name), v)
	}
	u(propDataBlocks, uint64(p.DataBlocks))
	u(propDataSize, p.DataSize)
	u(propDistinctKeys, p.DistinctKeys)
	u(propEntries, p.Entries)
	u(propFilterBits, p.FilterBits)
	u(propFilterK, uint64(p.FilterK))
	u(propFilterLayout, uint64(p.FilterLayout))
	u(propFilterSize, p.FilterSize)
	u(propIndexSize, p.IndexSize)
	bw.add([]byte(propLargest), p.Largest)
	u(propMaxSeq, p.MaxSeq)
	u(propMinSeq, p.MinSeq)
	encodePrefixProperties(bw, p, u) // optional, between min-seq and smallest
	if p.RangeCovered > 0 {
		u(propRangeCovered, p.RangeCovered)
	}
	if p.RangeDels > 0 {
		u(propRangeDelSize, p.RangeDelSize)
		u(propRangeDels, p.RangeDels)
	}
	bw.add([]byte(propSmallest), p.Smallest)
	u(propTombstones, p.Tombstones)
	if p.Values > 0 {
		u(propValues, p.Values)
	}
	return bw.finish()
}

// decodeProperties parses a properties block. Names must strictly
// increase, which also rules out duplicates; unknown names are skipped so
// that a later writer may add properties without a new format version.
// The block iterator rejects names over maxPropertyNameLen bytes, so the
// work per entry is small however many entries the block holds.
func decodeProperties(block []byte, file string, off int64) (Properties, error) {
	var p Properties
	if hasHashIndex(block) {
		return p, base.Corruptf(file, off, "properties block with a hash index")
	}
	var it blockIter
	if err := it.init(block, false, file, off); err != nil {
		return p, err
	}
	known := 0
	var prev []byte
	for ok := it.first(); ok; ok = it.next() {
		if prev != nil && bytes.Compare(it.key, prev) <= 0 {
			return p, base.Corruptf(file, off, "properties out of order at %q", it.key)
		}
		prev = append(prev[:0], it.key...)
		isKnown, reason := p.set(it.key, it.val)
		if reason != "" {
			return p, base.Corruptf(file, off, "property %q: %s", it.key, reason)
		}
		if isKnown {
			known++
		}
	}
	if it.err != nil {
		return p, it.err
	}
	if known != numProperties {
		return p, base.Corruptf(file, off, "%d of %d properties present", known, numProperties)
	}
	if reason := p.check(); reason != "" {
		return p, base.Corruptf(file, off, "properties: %s", reason)
	}
	return p, nil
}

// set stores one property. It reports whether the name is known, and a
// reason if the value is malformed. (switch string(name) compares without
// converting, so skipping an unknown name allocates nothing.)
func (p *Properties) set(name, val []byte) (known bool, reason string) {
	if optional, reason := p.setOptional(name, val); optional {
		return false, reason // known, but not among the required ones counted
	}
	switch string(name) {
	case propLargest, propSmallest:
		if len(val) > MaxKeySize {
			return true, fmt.Sprintf("key of %d bytes, more than the %d allowed", len(val), MaxKeySize)
		}
		if string(name) == propLargest {
			p.Largest = bytes.Clone(val)
		} else {
			p.Smallest = bytes.Clone(val)
		}
		return true, ""
	}
	x, n := binary.Uvarint(val)
	ok := n > 0 && n == len(val)
	switch string(name) {
	case propDataBlocks:
		ok = ok && x <= math.MaxInt32
		p.DataBlocks = int(x)
	case propDataSize:
		p.DataSize = x
	case propDistinctKeys:
		p.DistinctKeys = x
	case propEntries:
		p.Entries = x
	case propFilterBits:
		p.FilterBits = x
	case propFilterK:
		ok = ok && x <= math.MaxUint8
		p.FilterK = uint8(x)
	case propFilterLayout:
		ok = ok && x <= math.MaxUint8
		p.FilterLayout = uint8(x)
	case propFilterSize:
		p.FilterSize = x
	case propIndexSize:
		p.IndexSize = x
	case propMaxSeq:
		p.MaxSeq = x
	case propMinSeq:
		p.MinSeq = x
	case propTombstones:
		p.Tombstones = x
	case propRangeDelSize:
		p.RangeDelSize = x
		return false, reasonIf(!ok)
	case propRangeDels:
		p.RangeDels = x
		return false, reasonIf(!ok)
	case propValues:
		p.Values = x
		return false, reasonIf(!ok)
	case propRangeCovered:
		p.RangeCovered = x
		return false, reasonIf(!ok)
	default:
		return false, ""
	}
	return true, reasonIf(!ok)
}

// rangeCoveredFits reports whether RangeCovered is possible: at most one
// version of a key is counted, and only a put.
func (p *Properties) rangeCoveredFits() bool {
	return p.RangeCovered <= p.DistinctKeys && p.RangeCovered <= p.Entries-p.Tombstones
}

// reasonIf is the reason a malformed numeric property gives.
func reasonIf(bad bool) string {
	if bad {
		return "bad or out-of-range uvarint"
	}
	return ""
}

// check returns the first violated relation between properties, or "".
func (p *Properties) check() string {
	switch {
	case p.Tombstones > p.Entries:
		return "more tombstones than entries"
	case p.DistinctKeys > p.Entries:
		return "more distinct keys than entries"
	case (p.Entries == 0) != (p.DistinctKeys == 0):
		return "entries and distinct keys disagree about emptiness"
	case p.MinSeq > p.MaxSeq || p.MaxSeq > base.MaxSeq:
		return "bad sequence number range"
	case bytes.Compare(p.Smallest, p.Largest) > 0:
		return "smallest key above largest key"
	case (p.RangeDels == 0) != (p.RangeDelSize == 0):
		return "range-deletion count and size disagree"
	case (p.PrefixFilterSize == 0) != (p.PrefixExtractor == ""):
		return "prefix filter size and prefix extractor disagree"
	case p.Values > p.Entries-p.Tombstones || p.Values > p.DataSize/blockTrailerLen:
		// Each record takes at least its trailer of the data region.
		return "more value records than puts, or than the data region holds"
	case !p.rangeCoveredFits():
		// Tombstones <= Entries was checked above.
		return "more range-covered versions than keys, or than puts"
	}
	return ""
}
