package bloomkv

import (
	"expvar"
	"math"
	"sync/atomic"
	"time"

	"github.com/bloomkv/bloomkv/internal/stripe"
)

// Stats is a snapshot of the DB's counters and the shape of its live data.
// Its JSON names (StatsVar, the CLI's and kvbench's -json) are the field
// names in snake_case.
// Counters (uint64) are cumulative since Open and only grow; the others
// describe the moment of the call. Read counters (BlockReads,
// BlockCacheHits, BytesRead) count what Gets and iterators cost;
// compactions count theirs separately (CompactionBlockReads, …), so a
// Compact or a background merge leaves the read counters alone.
type Stats struct {
	Gets           uint64 `json:"gets"`            // Get, Has and ValueSize calls (DB and Snapshot) that reached the lookup, in calls
	SegmentsProbed uint64 `json:"segments_probed"` // segments whose filter Gets consulted (key in the segment's range), in segments
	// FilterNegatives is the segments Gets skipped because their filter
	// said "not here", in segments: each is a block read avoided.
	FilterNegatives uint64 `json:"filter_negatives"`
	// FilterFalsePositives is the segments whose filter said "maybe" to a
	// Get but that did not hold the key, in segments: each cost an index
	// search and, unless cached, a block read. A Get through a Snapshot or
	// a transaction counts none in a segment holding writes made after it
	// began (the segment may hold only versions of the key it cannot see,
	// and then the filter was right).
	FilterFalsePositives uint64 `json:"filter_false_positives"`
	// BlockReads is the data blocks Gets and iterators read from segment
	// files or their mappings (block cache misses), in blocks.
	BlockReads uint64 `json:"block_reads"`
	// BlockCacheHits is the data blocks Gets and iterators found in the
	// block cache, in blocks.
	BlockCacheHits uint64 `json:"block_cache_hits"`
	// BytesRead is the bytes read from segment files by Gets and
	// iterators (data blocks with their trailers, read-ahead windows),
	// plus the metadata (footer, index, filter, properties) read once when
	// a segment is opened — by Open, a flush or a compaction — in bytes.
	BytesRead uint64 `json:"bytes_read"`
	// CompactionBlockReads and CompactionBlockCacheHits are BlockReads
	// and BlockCacheHits of compaction inputs, in blocks;
	// CompactionBytesRead (below) is their volume.
	CompactionBlockReads     uint64 `json:"compaction_block_reads"`
	CompactionBlockCacheHits uint64 `json:"compaction_block_cache_hits"`
	Segments                 int    `json:"segments"`      // live segments now, in segments
	SegmentBytes             int64  `json:"segment_bytes"` // their total file size now, in bytes
	FilterBytes              int64  `json:"filter_bytes"`  // memory held now by their resident filters (after budget folds), in bytes
	// FilterExpectedReads is the predicted block reads per Get of an
	// absent key within every segment's key range: the sum of the resident
	// filters' theoretical FPRs, plus 1 per segment without a filter, in
	// blocks per Get. Its
	// measured counterpart is (BlockReads+BlockCacheHits) per Get over a
	// run of absent-key Gets (kvbench's filter-memory section).
	FilterExpectedReads float64 `json:"filter_expected_reads"`
	Memtables           int     `json:"memtables"` // active plus frozen memtables now, in memtables
	Writes              uint64  `json:"writes"`    // committed batches (a Put or a Delete is one), in batches
	WALBytes            uint64  `json:"wal_bytes"` // bytes commits appended to WALs, record headers and sync marks included, in bytes
	// WriteStalls counts the waits of writers for room: for a flush when
	// too many memtables are frozen, or for a compaction when the segment
	// count passed the policy's stall threshold. One stall that is woken
	// up several times before it ends counts each wait, in waits.
	WriteStalls uint64 `json:"write_stalls"`
	// WriteStallTime is the time commits spent in those waits, summed
	// over the commits that stalled; FlushStallTime is its part spent
	// waiting for a flush (the rest waited for a compaction), and
	// LongestWriteStall the longest time one commit waited, since Open.
	// A Put slower than its stall time waited for something else: a CPU,
	// the device, or the commit ahead of it.
	WriteStallTime    time.Duration `json:"write_stall_ns"`
	FlushStallTime    time.Duration `json:"flush_stall_ns"`
	LongestWriteStall time.Duration `json:"longest_write_stall_ns"`
	Flushes           uint64        `json:"flushes"`     // memtables written to segments, in flushes
	Compactions       uint64        `json:"compactions"` // merges committed (background and Compact), in compactions
	// FlushBytes, CompactionBytesRead and CompactionBytesWritten are the
	// segment bytes written by flushes and read (the inputs' file sizes)
	// and written by merges, in bytes; with WALBytes they give the write
	// amplification.
	FlushBytes             uint64 `json:"flush_bytes"`
	CompactionBytesRead    uint64 `json:"compaction_bytes_read"`
	CompactionBytesWritten uint64 `json:"compaction_bytes_written"`
	// RecentCompactions describes the latest compactions (at most 16),
	// oldest first: inputs, sizes, which filter path ran, its estimated FPR.
	RecentCompactions []CompactionInfo `json:"recent_compactions"`
	// PrefixFilterProbes counts segment prefix filters consulted: one per
	// segment (in the key range, with a prefix filter) per Iterator whose
	// IterOptions.Prefix is a whole prefix of Options.Prefix.
	PrefixFilterProbes uint64 `json:"prefix_filter_probes"`
	// PrefixFilterSkips counts the segments those Iterators left out
	// because their prefix filter said "not here": each saves the
	// segment's index search and data block reads for that Iterator.
	PrefixFilterSkips uint64 `json:"prefix_filter_skips"`
	// RetriedFailures counts the background flushes and compactions that
	// failed for want of a resource (ENOSPC, EDQUOT, EMFILE, ENFILE,
	// ENOMEM) while writing their segment, and the creations of WALs that
	// did, which were retried instead of making the store read-only, in
	// attempts; LastRetriedFailure is the latest one's message ("" if
	// none). A count that keeps growing is a shortage that has not ended:
	// writes stall once the memtables are full, or fail while no new WAL
	// can be created.
	RetriedFailures    uint64 `json:"retried_failures"`
	LastRetriedFailure string `json:"last_retried_failure"`
}

// counters are the DB's live counters. Those every read adds to are the
// fields of reads, striped together (stripe.Group), so that readers on
// many cores write no shared cache line and a Get writes one line of them
// however many it counts; the others are added to by one writer at a time
// (the commit leader, a flush, a compaction) or rarely.
type counters struct {
	reads                                                   stripe.Group
	writes, walBytes, writeStalls, flushes, compactions     atomic.Uint64
	flushBytes, compactionBytesRead, compactionBytesWritten atomic.Uint64
	writeStallNanos, flushStallNanos, longestStallNanos     atomic.Uint64
}

// The fields of counters.reads. A filter probe answers "no" or "maybe"
// and is counted as one of the two, so that a Get of an absent key adds
// to two counters (readGets, readFilterNegatives); SegmentsProbed is
// their sum.
const (
	readGets                 = iota // Gets and Has calls
	readFilterNegatives             // filters that said "no"
	readFilterMaybes                // filters that said "maybe", and segments in range without a filter
	readFilterFalsePositives        // "maybe"s whose segment did not hold the key
	readPrefixFilterProbes
	readPrefixFilterSkips
	readFields
)

// The fields must fit in the Group.
var _ [stripe.GroupFields - readFields]struct{}

// read returns the sum of counter f of counters.reads.
func (c *counters) read(f int) uint64 { return uint64(c.reads.Load(f)) }

// Stats returns the DB's counters and the shape of its live data.
func (db *DB) Stats() Stats {
	s := Stats{
		Gets:                     db.stats.read(readGets),
		SegmentsProbed:           db.stats.read(readFilterNegatives) + db.stats.read(readFilterMaybes),
		FilterNegatives:          db.stats.read(readFilterNegatives),
		FilterFalsePositives:     db.stats.read(readFilterFalsePositives),
		BlockReads:               db.counters.BlockReads.Load(),
		BlockCacheHits:           db.counters.BlockCacheHits.Load(),
		BytesRead:                db.counters.BytesRead.Load(),
		CompactionBlockReads:     db.compactionCounters.BlockReads.Load(),
		CompactionBlockCacheHits: db.compactionCounters.BlockCacheHits.Load(),
		PrefixFilterProbes:       db.stats.read(readPrefixFilterProbes),
		PrefixFilterSkips:        db.stats.read(readPrefixFilterSkips),
		Writes:                   db.stats.writes.Load(),
		WALBytes:                 db.stats.walBytes.Load(),
		WriteStalls:              db.stats.writeStalls.Load(),
		WriteStallTime:           time.Duration(db.stats.writeStallNanos.Load()),
		FlushStallTime:           time.Duration(db.stats.flushStallNanos.Load()),
		LongestWriteStall:        time.Duration(db.stats.longestStallNanos.Load()),
		Flushes:                  db.stats.flushes.Load(),
		Compactions:              db.stats.compactions.Load(),
		FlushBytes:               db.stats.flushBytes.Load(),
		CompactionBytesRead:      db.stats.compactionBytesRead.Load(),
		CompactionBytesWritten:   db.stats.compactionBytesWritten.Load(),
	}
	db.mu.Lock()
	s.RecentCompactions = append([]CompactionInfo(nil), db.history...)
	s.FilterExpectedReads = db.expectedReads
	s.RetriedFailures = db.retried
	if db.lastRetried != nil {
		s.LastRetriedFailure = db.lastRetried.Error()
	}
	db.mu.Unlock()
	if rs := db.acquire(); rs != nil {
		defer rs.release()
		s.Memtables = len(rs.mems)
		s.Segments = len(rs.segments)
		for _, seg := range rs.segments {
			s.SegmentBytes += seg.meta.Size
			if f := seg.reader.ResidentFilter(); f != nil {
				s.FilterBytes += int64(f.SizeBytes())
			}
		}
	}
	return s
}

// StatsVar returns an expvar.Var whose value is the DB's Stats as JSON,
// computed at every read, for scraping through expvar's /debug/vars:
//
//	expvar.Publish("bloomkv", db.StatsVar())
//
// Publishing is left to the caller, who owns the name space (expvar.Publish
// panics on a name used twice; an expvar.Map's Set replaces). After Close
// the Var still reports the counters, with no live data.
func (db *DB) StatsVar() expvar.Var {
	return expvar.Func(func() any { return db.Stats().jsonSafe() })
}

// jsonSafe returns s with non-finite floats set to 0: encoding/json
// refuses NaN and ±Inf, and expvar would then publish nothing at all.
func (s Stats) jsonSafe() Stats {
	finite := func(f *float64) {
		if math.IsNaN(*f) || math.IsInf(*f, 0) {
			*f = 0
		}
	}
	finite(&s.FilterExpectedReads)
	for i := range s.RecentCompactions {
		finite(&s.RecentCompactions[i].EstimatedFPR)
		finite(&s.RecentCompactions[i].MeasuredFPR)
	}
	return s
}
