package segment

import (
	"bytes"
	"context"

	"github.com/bloomkv/bloomkv/bloom"
	"github.com/bloomkv/bloomkv/internal/base"
)

// Verify reads every data block from the file (bypassing the cache) and
// checks checksums, block structure, that keys strictly increase and lie
// between their blocks' separators, that every distinct user key passes
// the filter, and that the counts match the properties. It returns the
// first problem as a *base.CorruptError (or an I/O error).
func (r *Reader) Verify() error {
	_, err := r.VerifyContext(context.Background())
	return err
}

// VerifyContext is Verify for long runs: it checks ctx before each data
// block and returns ctx's error, unwrapped, when ctx is done. blocks is the
// number of data blocks read and found intact before it stopped, so a
// caller can report its progress on a large file.
//
// It makes the same checks as Verify, in the same order, and returns the
// same errors.
func (r *Reader) VerifyContext(ctx context.Context) (blocks int, err error) {
	var got Properties
	var it blockIter
	var prev []byte // previous internal key, across blocks
	for i := range r.index {
		if err := ctx.Err(); err != nil {
			return i, err
		}
		if err := r.verifyBlock(i, &it, &prev, &got); err != nil {
			return i, err
		}
	}
	if len(prev) > 0 {
		got.Largest, _ = splitInternalKey(prev)
	}
	return len(r.index), r.compareCounts(&got)
}

// verifyBlock reads data block i from the file and checks each entry
// against the one before it (prev, updated) and the block's separators,
// adding it to the tally got.
func (r *Reader) verifyBlock(i int, it *blockIter, prev *[]byte, got *Properties) error {
	off := r.index[i].h.offset
	b, err := r.dataBlock(i, cacheBypass, nil)
	if err != nil {
		return err
	}
	if err := it.init(b, true, r.opts.Name, int64(off)); err != nil {
		return err
	}
	n := 0
	for ok := it.first(); ok; ok = it.next() {
		if reason := r.checkEntry(i, *prev, it.key); reason != "" {
			return r.corrupt(off, "entry %d: %s", n, reason)
		}
		newKey := *prev == nil || !sameUserKey(*prev, it.key)
		if err := r.countEntry(got, it.key, newKey); err != nil {
			return err
		}
		*prev = append((*prev)[:0], it.key...)
		n++
	}
	if it.err != nil {
		return it.err
	}
	if n == 0 {
		return r.corrupt(off, "empty data block")
	}
	return nil
}

// checkEntry checks one key of data block i against its kind, the
// previous key and the separators around the block.
func (r *Reader) checkEntry(i int, prev, ikey []byte) string {
	ukey, t := splitInternalKey(ikey)
	if _, kind := base.SplitTrailer(t); kind != base.KindPut && kind != base.KindDelete {
		return "unknown kind"
	}
	if prev != nil && compareInternal(prev, ukey, t) >= 0 {
		return "key not above the previous key"
	}
	if sep := &r.index[i]; base.Compare(ukey, t, sep.userKey, sep.trailer) > 0 {
		return "key above the block's separator"
	}
	if i > 0 {
		if sep := &r.index[i-1]; base.Compare(ukey, t, sep.userKey, sep.trailer) <= 0 {
			return "key not above the previous block's separator"
		}
	}
	return ""
}

// countEntry adds an entry to the tally and checks the filter for each new
// user key: a false negative would make Get miss data.
func (r *Reader) countEntry(p *Properties, ikey []byte, newKey bool) error {
	ukey, t := splitInternalKey(ikey)
	seq, kind := base.SplitTrailer(t)
	p.count(ukey, seq, kind)
	if !newKey {
		return nil
	}
	p.DistinctKeys++
	if r.filter != nil && !r.filter.ContainsHash(bloom.Hash(ukey)) {
		return r.corrupt(r.footer.filter.offset, "filter misses key %q", ukey)
	}
	return nil
}

func sameUserKey(a, b []byte) bool {
	ak, _ := splitInternalKey(a)
	bk, _ := splitInternalKey(b)
	return bytes.Equal(ak, bk)
}

// compareCounts checks the tally of the data blocks against the stored
// properties.
func (r *Reader) compareCounts(got *Properties) error {
	p := &r.props
	if got.Entries != p.Entries || got.Tombstones != p.Tombstones || got.DistinctKeys != p.DistinctKeys ||
		got.MinSeq != p.MinSeq || got.MaxSeq != p.MaxSeq ||
		!bytes.Equal(got.Smallest, p.Smallest) || !bytes.Equal(got.Largest, p.Largest) {
		return r.corrupt(r.footer.properties.offset,
			"properties disagree with the data: stored %d entries, %d tombstones, %d keys, seqs [%d, %d], keys [%q, %q]; found %d, %d, %d, [%d, %d], [%q, %q]",
			p.Entries, p.Tombstones, p.DistinctKeys, p.MinSeq, p.MaxSeq, p.Smallest, p.Largest,
			got.Entries, got.Tombstones, got.DistinctKeys, got.MinSeq, got.MaxSeq, got.Smallest, got.Largest)
	}
	return nil
}
