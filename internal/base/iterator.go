package base

// ForwardIterator walks a sorted source of internal keys forward: user
// keys ascending, the versions of one key newest first. It is what a
// segment writer consumes; compaction.Dedup, which filters a merged stream
// and only goes forward, is one.
//
// First and Next report whether the iterator is at an entry; InternalKey
// and Value are valid until the next move and must not be modified. When a
// move returns false, Error says whether the source ran out (nil) or
// failed.
type ForwardIterator interface {
	First() bool
	Next() bool
	// InternalKey returns the user key and the trailer (MakeTrailer:
	// sequence number and kind) of the current entry.
	InternalKey() (key []byte, trailer uint64)
	Value() []byte
	Error() error
}

// InternalIterator is a ForwardIterator that also moves backward and
// seeks: the one vocabulary of bloomkv's sorted sources (as Pebble's
// InternalIterator is). memtable.Iter, segment.Iter and merge.Iter
// implement it.
//
// Backward (Last, Prev, SeekLT) entries come in the reverse order: keys
// descending and, for one key, the oldest version first.
type InternalIterator interface {
	ForwardIterator
	Last() bool
	Prev() bool
	// SeekGE moves to the first entry with user key >= key: its newest
	// version.
	SeekGE(key []byte) bool
	// SeekLT moves to the last entry with user key < key: its oldest
	// version.
	SeekLT(key []byte) bool
}

// RawValuer is implemented by iterators that can hand out the current
// entry's value as the value record a segment stores it in
// (segment.Iter.KeepValueRecords), for a compaction that copies the
// record into its output without decoding it; merge.Iter and
// compaction.Dedup pass it on from their sources.
type RawValuer interface {
	// RawValue returns the current entry's value record as stored, its
	// checksum verified, and the length of the value it decodes to; ok
	// is false when the value is not such a record. rec is valid until
	// the next move and must not be modified.
	RawValue() (rec []byte, n int, ok bool)
}

// VersionSeeker is implemented by sources that can seek to a version of
// a key in one search: memtable.Iter, whose memtable may hold any number
// of versions of one key written after a reader's sequence number.
// merge.Iter.SkipToVersion uses it, and steps sources that lack it.
type VersionSeeker interface {
	// SeekGEVersion moves to the first entry at or after the version seq
	// of key in internal order: the newest version of key whose sequence
	// number is at most seq or, if there is none, the first entry of the
	// next user key.
	SeekGEVersion(key []byte, seq uint64) bool
}

// VersionTrailer is the largest trailer of sequence number seq: no entry
// of seq or below sorts before (key, VersionTrailer(seq)), and every
// newer version of key does.
func VersionTrailer(seq uint64) uint64 { return MakeTrailer(seq, 0xff) }
