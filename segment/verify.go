package segment

import (
	"bytes"
	"context"
	"fmt"

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
// block and every verifyCheckEvery entries within one, and returns ctx's
// error, unwrapped, when ctx is done. blocks is the number of data blocks
// read and found intact before it stopped, so a caller can report its
// progress on a large file.
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
		if err := r.verifyBlock(ctx, i, &it, &prev, &got); err != nil {
			return i, err
		}
	}
	if len(prev) > 0 {
		got.Largest, _ = splitInternalKey(prev)
	}
	// The range-deletion block is read and checked again from the file,
	// and its sequence numbers join the tally, as the writer counted them.
	rangeDels, err := r.loadRangeDels()
	if err != nil {
		return len(r.index), err
	}
	got.countRangeDels(rangeDels)
	return len(r.index), r.compareCounts(&got)
}

// verifyCheckEvery is how many entries verifyBlock checks between looks
// at ctx. An entry costs at most a few passes over one key of at most
// 64 KiB (a comparison, a hash): 256 of them are a few milliseconds of
// work even in a block of hostile entries, so a cancel is noticed
// promptly, while the check itself stays negligible next to the entries.
const verifyCheckEvery = 256

// verifyBlock reads data block i from the file and checks each entry
// against the one before it (prev, updated) and the block's separators,
// adding it to the tally got.
//
// The work per entry is proportional to the bytes the entry stores, not
// to its key's length: prev is compared and updated only after the prefix
// the entry shares with it, and only the first and last keys are compared
// with the separators (keys increase, so the others lie between them).
// Otherwise a block of tiny entries that each repeat a 64 KiB prefix would
// cost 64 KiB of work per few bytes.
func (r *Reader) verifyBlock(ctx context.Context, i int, it *blockIter, prev *[]byte, got *Properties) error {
	off := r.index[i].h.offset
	b, err := r.dataBlock(i, cacheBypass, nil)
	if err != nil {
		return err
	}
	if err := it.init(b, true, r.opts.Name, int64(off)); err != nil {
		return err
	}
	n, interval := 0, -1 // interval: the restart interval of the entry
	at := uint64(0)      // where the block's next value record must start
	if i > 0 {
		at = r.index[i-1].h.end()
	}
	for ok := it.first(); ok; ok = it.next() {
		if n%verifyCheckEvery == verifyCheckEvery-1 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		newKey, reason := r.checkEntry(i, *prev, it.key, it.shared, n == 0)
		if reason != "" {
			return r.corrupt(off, "entry %d: %s", n, reason)
		}
		if interval+1 < it.numRestarts && it.offset == it.restart(interval+1) {
			interval++
		}
		// bloom.Hash of the user key, for its first entry in the block,
		// where a filter or the hash index asks for it: hashing reads the
		// whole key, which is no part of the work per stored byte without
		// them.
		var h uint64
		if (n == 0 || newKey) && (r.filter != nil || it.numBuckets > 0) {
			ukey, _ := splitInternalKey(it.key)
			h = bloom.Hash(ukey)
		}
		if it.numBuckets > 0 && (n == 0 || newKey) {
			if reason := checkBucket(it, h, interval); reason != "" {
				return r.corrupt(off, "entry %d: %s", n, reason)
			}
		}
		if err := r.countEntry(got, it.key, newKey, h); err != nil {
			return err
		}
		if isValueHandle(it.key) {
			if err := r.verifyValue(i, n, it.val, &at, got); err != nil {
				return err
			}
		}
		// prev and it.key agree on it.shared bytes (0 for a block's first
		// entry, which is stored whole): copy only the rest.
		*prev = append((*prev)[:it.shared], it.key[it.shared:]...)
		n++
	}
	if it.err != nil {
		return it.err
	}
	if n == 0 {
		return r.corrupt(off, "empty data block")
	}
	if err := r.verifyPadding(i, at); err != nil {
		return err
	}
	if sep := &r.index[i]; compareInternal(*prev, sep.userKey, sep.trailer) > 0 {
		return r.corrupt(off, "entry %d: key above the block's separator", n-1)
	}
	return nil
}

// verifyPadding checks the bytes between at, where the value records of
// data block i end (or the previous block, if it has none), and the
// block: none before version 6, and from version 6 zeros, fewer than a
// page (WriterOptions.PageAlign).
func (r *Reader) verifyPadding(i int, at uint64) error {
	off := r.index[i].h.offset
	if at == off {
		return nil
	}
	if r.footer.version < formatVersionPadding || off-at >= PageSize {
		return r.corrupt(at, "%d bytes before data block %d belong to no value record", off-at, i)
	}
	var buf [PageSize]byte
	pad := buf[:off-at]
	if err := r.readAt(pad, at, nil); err != nil {
		return err
	}
	for j, c := range pad {
		if c != 0 {
			return r.corrupt(at+uint64(j), "padding before data block %d holds a byte %#x, want zeros", i, c)
		}
	}
	return nil
}

// checkBucket checks that the hash index takes a lookup of the current
// entry's user key (bloom.Hash h), whose first entry in the block this is,
// to its restart interval or an earlier one (or to the search of the whole
// block): a bucket that said "absent", or named a later interval, would
// make Get miss the key.
func checkBucket(it *blockIter, h uint64, interval int) string {
	b := it.data[it.bucketsOff+bucketOf(h, it.numBuckets)]
	if b != bucketCollision && int(b) > interval {
		return fmt.Sprintf("hash bucket says %d, but the key's first entry is in restart interval %d", b, interval)
	}
	return ""
}

// checkEntry checks one key of data block i against its kind, the
// previous key (with which it shares its first shared bytes) and, for the
// block's first key, the previous block's separator. newKey reports
// whether its user key differs from the previous key's.
func (r *Reader) checkEntry(i int, prev, ikey []byte, shared int, first bool) (newKey bool, reason string) {
	ukey, t := splitInternalKey(ikey)
	switch _, kind := base.SplitTrailer(t); {
	case kind == kindValueHandle && r.footer.version >= formatVersionValues:
	case kind != base.KindPut && kind != base.KindDelete:
		return false, "unknown kind"
	}
	newKey = true
	if prev != nil {
		c, sameUser := compareAfterShared(prev, ikey, shared)
		if c >= 0 {
			return false, "key not above the previous key"
		}
		newKey = !sameUser
	}
	if first && i > 0 {
		if sep := &r.index[i-1]; base.Compare(ukey, t, sep.userKey, sep.trailer) <= 0 {
			return false, "key not above the previous block's separator"
		}
	}
	return newKey, ""
}

// countEntry adds an entry to the tally and checks the filter for each new
// user key, whose bloom.Hash is h: a false negative would make Get miss
// data.
func (r *Reader) countEntry(p *Properties, ikey []byte, newKey bool, h uint64) error {
	ukey, t := splitInternalKey(ikey)
	seq, kind := base.SplitTrailer(publicTrailer(t))
	p.count(ukey, seq, kind)
	if !newKey {
		return nil
	}
	p.DistinctKeys++
	if r.filter != nil && !r.filter.ContainsHash(h) {
		return r.corrupt(r.footer.filter.offset, "filter misses key %q", ukey)
	}
	return r.verifyPrefix(ukey)
}

// compareCounts checks the tally of the data blocks against the stored
// properties.
func (r *Reader) compareCounts(got *Properties) error {
	p := &r.props
	if got.Entries != p.Entries || got.Tombstones != p.Tombstones || got.Values != p.Values || got.DistinctKeys != p.DistinctKeys || got.RangeDels != p.RangeDels ||
		got.MinSeq != p.MinSeq || got.MaxSeq != p.MaxSeq ||
		!bytes.Equal(got.Smallest, p.Smallest) || !bytes.Equal(got.Largest, p.Largest) {
		return r.corrupt(r.footer.properties.offset,
			"properties disagree with the data: stored %d entries, %d tombstones, %d keys, %d value records, seqs [%d, %d], keys [%q, %q]; found %d, %d, %d, %d, [%d, %d], [%q, %q]",
			p.Entries, p.Tombstones, p.DistinctKeys, p.Values, p.MinSeq, p.MaxSeq, p.Smallest, p.Largest,
			got.Entries, got.Tombstones, got.DistinctKeys, got.Values, got.MinSeq, got.MaxSeq, got.Smallest, got.Largest)
	}
	return nil
}

// verifyValue checks the value record that entry n of data block i names
// by its handle enc: the records of a block's entries tile the gap before
// it in entry order (at is where the next must start, updated), their
// ordinals count from 0 across the file (got.Values, updated), and each
// is read from the file and its checksum and encoding checked.
func (r *Reader) verifyValue(i, n int, enc []byte, at *uint64, got *Properties) error {
	off := r.index[i].h.offset
	h, ok := decodeValueHandle(enc)
	switch {
	case !ok:
		return r.corrupt(off, "entry %d: bad value handle", n)
	case h.offset != *at || h.ordinal != got.Values:
		return r.corrupt(off, "entry %d: value record #%d at %d, want #%d at %d", n, h.ordinal, h.offset, got.Values, *at)
	case h.length > off-h.offset || off-h.offset-h.length < blockTrailerLen:
		return r.corrupt(off, "entry %d: value record at %d overruns data block %d", n, h.offset, i)
	}
	if _, err := r.readStored(h.blockHandle); err != nil {
		return err
	}
	*at = h.end()
	got.Values++
	return nil
}
