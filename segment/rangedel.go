package segment

import (
	"bytes"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/internal/rangedel"
)

// The range-deletion block (format version 2, FORMAT.md "Range-deletion
// block") holds the segment's range tombstones, fragmented: one entry per
// fragment and sequence number, keyed by the internal key (start, seq,
// base.KindRangeDelete), its value the fragment's end. The reader keeps
// them in memory as a rangedel.List, so a Get learns that a key was
// deleted by a range without a block read.

// SetRangeDels makes Finish write l as the segment's range tombstones. The
// writer keeps l, which must not change until Finish returns.
func (w *Writer) SetRangeDels(l *rangedel.List) { w.rangeDels = l }

// encodeRangeDels builds the range-deletion block of l in bw.
func encodeRangeDels(bw *blockWriter, l *rangedel.List) []byte {
	bw.reset()
	var ikey []byte
	for _, f := range l.Fragments() {
		for _, seq := range f.Seqs {
			ikey = appendInternalKey(ikey[:0], f.Start, base.MakeTrailer(seq, base.KindRangeDelete))
			bw.add(ikey, f.End)
		}
	}
	return bw.finish()
}

// countRangeDels folds the tombstones' sequence numbers into the
// properties (MinSeq and MaxSeq cover every sequence number in the file)
// and records their number.
func (p *Properties) countRangeDels(l *rangedel.List) {
	for _, f := range l.Fragments() {
		for _, seq := range f.Seqs {
			if p.Entries == 0 && p.RangeDels == 0 {
				p.MinSeq, p.MaxSeq = seq, seq
			}
			p.RangeDels++
			p.MinSeq, p.MaxSeq = min(p.MinSeq, seq), max(p.MaxSeq, seq)
		}
	}
}

// decodeRangeDels parses and checks a range-deletion block stored at off:
// internal keys of kind range-delete in strictly increasing order, each
// fragment non-empty, the entries of one start sharing one end, fragments
// not overlapping, sequence numbers within the properties' range, and as
// many entries as the properties count. Keys are copied: b may be a
// mapping or a reused buffer.
func decodeRangeDels(b []byte, p *Properties, file string, off int64) (*rangedel.List, error) {
	bad := func(format string, args ...any) error {
		return base.Corruptf(file, off, "range-deletion block: "+format, args...)
	}
	if reason := checkBlock(b); reason != "" {
		return nil, bad("%s", reason)
	}
	if hasHashIndex(b) {
		return nil, bad("hash index outside a data block")
	}
	var it blockIter
	if err := it.init(b, true, file, off); err != nil {
		return nil, err
	}
	var (
		frags []rangedel.Fragment
		n     uint64
		// arena holds every start and end, back to back: the binary
		// search of a Get touches them, and keys in one buffer take fewer
		// cache lines than an allocation each. (Should it outgrow the
		// block's size, earlier fragments keep the old buffer.)
		arena = make([]byte, 0, len(b))
	)
	for ok := it.first(); ok; ok = it.next() {
		start, trailer := splitInternalKey(it.key)
		seq, kind := base.SplitTrailer(trailer)
		end := it.val
		switch {
		case kind != base.KindRangeDelete:
			return nil, bad("entry %d has kind %v", n, kind)
		case len(end) > MaxKeySize:
			return nil, bad("entry %d: end of %d bytes, more than the %d allowed", n, len(end), MaxKeySize)
		case bytes.Compare(start, end) >= 0:
			return nil, bad("entry %d: empty range", n)
		case seq < p.MinSeq || seq > p.MaxSeq:
			return nil, bad("entry %d: sequence number %d outside the segment's [%d, %d]", n, seq, p.MinSeq, p.MaxSeq)
		}
		if k := len(frags); k > 0 && bytes.Equal(frags[k-1].Start, start) {
			last := &frags[k-1]
			if !bytes.Equal(last.End, end) {
				return nil, bad("entry %d: one fragment start with two ends", n)
			}
			if seq >= last.Seqs[len(last.Seqs)-1] {
				return nil, bad("entry %d: sequence numbers of a fragment not descending", n)
			}
			last.Seqs = append(last.Seqs, seq)
		} else {
			if k > 0 && bytes.Compare(frags[k-1].End, start) > 0 {
				return nil, bad("entry %d: fragments overlap", n)
			}
			a, b, c := len(arena), len(arena)+len(start), len(arena)+len(start)+len(end)
			arena = append(append(arena, start...), end...)
			frags = append(frags, rangedel.Fragment{Start: arena[a:b:b], End: arena[b:c:c], Seqs: []uint64{seq}})
		}
		n++
	}
	if it.err != nil {
		return nil, it.err
	}
	if n != p.RangeDels {
		return nil, bad("%d entries, but the properties count %d", n, p.RangeDels)
	}
	return rangedel.FromFragments(frags), nil
}

// loadRangeDels reads and decodes the range-deletion block, if the
// segment has one (nil if not).
func (r *Reader) loadRangeDels() (*rangedel.List, error) {
	h := r.rangeDelBlock
	if r.props.RangeDels == 0 {
		return nil, nil
	}
	b, err := r.readStored(h)
	if err != nil {
		return nil, err
	}
	return decodeRangeDels(b, &r.props, r.opts.Name, int64(h.offset))
}

// RangeDels returns the segment's range tombstones, fragmented; an empty
// list if it has none.
func (r *Reader) RangeDels() *rangedel.List { return r.rangeDels }
