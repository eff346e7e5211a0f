// Package segment reads and writes bloomkv's segment files: the immutable,
// sorted files a memtable is flushed to and compactions merge.
//
// A segment holds internal keys (user key, sequence number, kind) and their
// values in prefix-compressed data blocks of about WriterOptions.BlockSize
// bytes, each optionally compressed (snappy or zstd) and followed by a CRC-32C
// trailer; then one Bloom filter (package bloom) over the distinct user
// keys, a properties block (counts, key range, sequence range, filter
// geometry), an index block with one separator key per data block, and a
// fixed footer. FORMAT.md specifies every byte.
//
// Writer builds a segment in one pass over entries added in internal-key
// order. Reader opens one with nothing but io.ReaderAt (or a memory
// mapping, ReaderOptions.Mapped): it checks and keeps the footer,
// properties, index and filter in memory, and reads data blocks on demand
// through a Cache shared by the store. A point lookup is MayContain (the
// filter, given the key's bloom.Hash computed once for all segments), then
// Get (index binary search, one block, a search from its restart points).
// Iter walks the entries in order, in both directions, reading ahead on
// sequential scans of unmapped files.
//
// Every structure read from a file is checked before it is used: damage or
// hostile input is reported as a *base.CorruptError (matching
// bloomkv.ErrCorrupt) naming the file and the offset of the damaged
// structure, never a panic, a wrong value or an allocation beyond what the
// file size allows. Errors of this package do not carry the "bloomkv: "
// prefix; the store adds it when it returns them.
//
// Counters count reads (blocks, cache hits, bytes) for the store's Stats;
// NewIterWithCounters lets a compaction count its reads apart.
package segment
