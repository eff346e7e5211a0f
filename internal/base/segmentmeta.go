package base

// SegmentMeta describes one live segment file. The manifest records it
// (the manifest package has the encoding and manifest checks its
// invariants); the DB and the compaction policy read it.
type SegmentMeta struct {
	FileNum    uint64
	Size       int64  // file size in bytes
	Entries    uint64 // internal keys in the segment
	Tombstones uint64
	MinSeq     uint64
	MaxSeq     uint64
	Smallest   []byte // smallest user key
	Largest    []byte // largest user key

	// Geometry of the segment's Bloom filter; FilterBits == 0 means the
	// segment has no filter. The manifest stores these without
	// interpreting them.
	FilterLayout uint8
	FilterK      uint8
	FilterBits   uint64

	Tier uint32 // compaction tier (0 = fresh flush); compaction sets it
}
