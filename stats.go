package bloomkv

import "sync/atomic"

// Stats is a snapshot of the DB's counters, cumulative since Open.
type Stats struct {
	Gets                 uint64 // Get calls that reached the lookup
	SegmentsProbed       uint64 // segment filters consulted by Gets
	FilterNegatives      uint64 // segments skipped because their filter said "not here"
	FilterFalsePositives uint64 // filter said "maybe" but the segment did not hold the key
	BlockReads           uint64 // data blocks read from segment files
	BlockCacheHits       uint64 // data blocks served by the block cache
	BytesRead            uint64 // bytes read from segment files for data blocks
	Segments             int    // live segments now
	SegmentBytes         int64  // their total file size
	FilterBytes          int64  // memory held by their resident filters (after budget folds)
	// FilterExpectedReads is the predicted block reads per Get of an
	// absent key within every segment's key range: the sum of the resident
	// filters' theoretical FPRs, plus 1 per segment without a filter. Its
	// measured counterpart is (BlockReads+BlockCacheHits) per Get over a
	// run of absent-key Gets (kvbench's filter-memory section).
	FilterExpectedReads float64
	Memtables           int    // active plus frozen memtables now
	Writes              uint64 // committed batches (a Put is one)
	WALBytes            uint64 // bytes written to WALs
	WriteStalls         uint64 // times a writer waited for a flush
	Flushes             uint64 // memtables written to segments
	Compactions         uint64 // merges committed
	// FlushBytes, CompactionBytesRead and CompactionBytesWritten are the
	// segment bytes written by flushes and read and written by merges;
	// with WALBytes they give the write amplification.
	FlushBytes             uint64
	CompactionBytesRead    uint64
	CompactionBytesWritten uint64
	// RecentCompactions describes the latest compactions (at most 16),
	// oldest first: inputs, sizes, which filter path ran, its estimated FPR.
	RecentCompactions []CompactionInfo
}

// counters are the DB's live counters.
type counters struct {
	gets, segmentsProbed, filterNegatives, filterFalsePositives atomic.Uint64
	writes, walBytes, writeStalls, flushes, compactions         atomic.Uint64
	flushBytes, compactionBytesRead, compactionBytesWritten     atomic.Uint64
}

// Stats returns the DB's counters and the shape of its live data.
func (db *DB) Stats() Stats {
	s := Stats{
		Gets:                   db.stats.gets.Load(),
		SegmentsProbed:         db.stats.segmentsProbed.Load(),
		FilterNegatives:        db.stats.filterNegatives.Load(),
		FilterFalsePositives:   db.stats.filterFalsePositives.Load(),
		BlockReads:             db.counters.BlockReads.Load(),
		BlockCacheHits:         db.counters.BlockCacheHits.Load(),
		BytesRead:              db.counters.BytesRead.Load(),
		Writes:                 db.stats.writes.Load(),
		WALBytes:               db.stats.walBytes.Load(),
		WriteStalls:            db.stats.writeStalls.Load(),
		Flushes:                db.stats.flushes.Load(),
		Compactions:            db.stats.compactions.Load(),
		FlushBytes:             db.stats.flushBytes.Load(),
		CompactionBytesRead:    db.stats.compactionBytesRead.Load(),
		CompactionBytesWritten: db.stats.compactionBytesWritten.Load(),
	}
	db.mu.Lock()
	s.RecentCompactions = append([]CompactionInfo(nil), db.history...)
	s.FilterExpectedReads = db.expectedReads
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
