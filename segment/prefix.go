package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/bloomkv/bloomkv/bloom"
)

// MaxPrefixNameLen bounds the name of a prefix extractor stored in a
// segment's properties.
const MaxPrefixNameLen = 255

// Names of the optional properties of the prefix filter (FORMAT.md). In
// the block they sit between min-seq and smallest.
const (
	propPrefixExtractor  = "prefix-extractor"
	propPrefixFilterSize = "prefix-filter-size"
)

// encodePrefixProperties adds the prefix filter's properties, if the
// segment has one; u adds a uvarint property.
func encodePrefixProperties(bw *blockWriter, p *Properties, u func(string, uint64)) {
	if p.PrefixFilterSize == 0 {
		return
	}
	bw.add([]byte(propPrefixExtractor), []byte(p.PrefixExtractor))
	u(propPrefixFilterSize, p.PrefixFilterSize)
}

// setOptional stores an optional property: optional reports whether name
// is one, and reason is non-empty if its value is malformed.
func (p *Properties) setOptional(name, val []byte) (optional bool, reason string) {
	switch string(name) {
	case propPrefixExtractor:
		if len(val) == 0 || len(val) > MaxPrefixNameLen {
			return true, fmt.Sprintf("name of %d bytes, want 1 to %d", len(val), MaxPrefixNameLen)
		}
		p.PrefixExtractor = string(val)
	case propPrefixFilterSize:
		x, n := binary.Uvarint(val)
		if n <= 0 || n != len(val) {
			return true, "bad or out-of-range uvarint"
		}
		p.PrefixFilterSize = x
	default:
		return false, ""
	}
	return true, ""
}

// prefixHashes gathers, while a Writer runs, the hashes of the distinct
// prefixes of the added user keys. Keys arrive sorted, so the keys of one
// prefix are adjacent (for an extractor that keeps its contract) and
// comparing with the last prefix removes the repeats; a repeat that slips
// through only costs a redundant AddHash.
type prefixHashes struct {
	hashes []uint64
	last   []byte
	has    bool
}

// addPrefix records the prefix of a new distinct user key.
func (w *Writer) addPrefix(key []byte) {
	if w.opts.Prefix == nil || w.opts.BitsPerKey <= 0 {
		return
	}
	n := w.opts.Prefix(key)
	if n <= 0 || n > len(key) {
		return // no prefix
	}
	p := key[:n]
	if w.prefixes.has && bytes.Equal(p, w.prefixes.last) {
		return
	}
	w.prefixes.last = append(w.prefixes.last[:0], p...)
	w.prefixes.has = true
	w.prefixes.hashes = append(w.prefixes.hashes, bloom.Hash(p))
}

// writePrefixFilter writes the prefix filter block, if the writer builds
// one, right after the filter block, and records its size and extractor.
// A segment without prefixed keys still gets one (empty): it lets a
// prefix scan skip the segment.
//
// Compaction gets its prefix filter this way too, rebuilt from the merged
// keys, even when it ORs the inputs' key filters (Writer.SetFilter). An
// OR of the inputs' prefix filters would be exact when their geometries
// match (bloom.Filter.Union), but compaction.PlanFilter's choice rests
// on per-input key counts that prefix filters do not record, and inputs
// usually share prefixes, which a rebuild counts once.
func (w *Writer) writePrefixFilter() error {
	if w.opts.Prefix == nil || w.opts.BitsPerKey <= 0 {
		return nil
	}
	if name := w.opts.PrefixName; name == "" || len(name) > MaxPrefixNameLen {
		w.err = fmt.Errorf("segment: prefix extractor name of %d bytes, want 1 to %d", len(name), MaxPrefixNameLen)
		return w.err
	}
	f := bloom.NewBitsPerKey(len(w.prefixes.hashes), w.opts.BitsPerKey)
	for _, h := range w.prefixes.hashes {
		f.AddHash(h)
	}
	w.prefixes = prefixHashes{}
	enc, err := f.MarshalBinary()
	if err != nil {
		w.err = fmt.Errorf("segment: encode prefix filter: %w", err)
		return w.err
	}
	w.props.PrefixFilterSize = uint64(len(enc))
	w.props.PrefixExtractor = w.opts.PrefixName
	_, err = w.emit(enc, compressionNone)
	return err
}

// prefixFilter is a Reader's prefix filter block.
type prefixFilter struct {
	h blockHandle   // located by checkLayout; zero if none
	f *bloom.Filter // decoded, on the heap
}

// readPrefixFilter loads the prefix filter block located by checkLayout,
// if any.
func (r *Reader) readPrefixFilter() error {
	h := r.prefix.h
	if h == (blockHandle{}) {
		return nil
	}
	b, src, err := r.readBlock(h, nil)
	if err != nil {
		return err
	}
	if src == srcMapped {
		b = bytes.Clone(b) // as the filter: on the heap, safe from eviction
	}
	f, err := bloom.Decode(b)
	if err != nil {
		return r.corrupt(h.offset, "prefix filter: %v", err)
	}
	if g := f.Geometry(); g.Seed != bloom.DefaultSeed {
		return r.corrupt(h.offset, "prefix filter seed %d, want bloom's default %d", g.Seed, bloom.DefaultSeed)
	}
	r.prefix.f = f
	return nil
}

// PrefixFilter returns the segment's prefix filter and the name of the
// extractor whose prefixes it holds, or nil and "" if it has none. The
// filter aliases the Reader's memory: do not modify it.
func (r *Reader) PrefixFilter() (*bloom.Filter, string) {
	return r.prefix.f, r.props.PrefixExtractor
}

// mayContainPrefix reports whether the segment may hold a key whose
// prefix (by the extractor named in its properties) has bloom.Hash h. It
// is true when the segment has no prefix filter.
func (r *Reader) mayContainPrefix(h uint64) bool {
	return r.prefix.f == nil || r.prefix.f.ContainsHash(h)
}

// verifyPrefix checks that the prefix filter holds the prefix of ukey,
// by ReaderOptions.Prefix; it does nothing without either, or if the
// filter was built by an extractor of another name.
func (r *Reader) verifyPrefix(ukey []byte) error {
	split := r.opts.Prefix
	if r.prefix.f == nil || split == nil || r.opts.PrefixName != r.props.PrefixExtractor {
		return nil
	}
	n := split(ukey)
	if n <= 0 || n > len(ukey) {
		return nil
	}
	if !r.prefix.f.ContainsHash(bloom.Hash(ukey[:n])) {
		return r.corrupt(r.prefix.h.offset, "prefix filter misses prefix %q of key %q", ukey[:n], ukey)
	}
	return nil
}
