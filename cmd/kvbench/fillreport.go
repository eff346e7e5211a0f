package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/bloomkv/bloomkv"
)

// fillCheckpoints is how many times the fill report stops to look.
const fillCheckpoints = 20

// fillProbes is the number of absent-key Gets at each checkpoint.
const fillProbes = 2000

// fillPoint is one checkpoint of the fill report.
type fillPoint struct {
	Kind        string  `json:"kind"` // "fill-report"
	Keys        int64   `json:"keys"`
	Segments    int     `json:"segments"`
	SegmentMiB  float64 `json:"segment_mib"`
	Compactions uint64  `json:"compactions"`
	Stalls      uint64  `json:"write_stalls"`
	// WriteAmp is bytes written (WAL, flushes, compactions) per user byte
	// put; WriteAmpNoWAL leaves the WAL out.
	WriteAmp      float64 `json:"write_amp"`
	WriteAmpNoWAL float64 `json:"write_amp_no_wal"`
	// Per absent-key Get at this moment: segments whose filter was asked,
	// filter false positives, data blocks touched (read or from the cache),
	// and the prediction: Stats.FilterExpectedReads, the Σ FPR of the
	// segments' filters as built (under FilterOptimal each segment has its
	// own bits per key), for a key in every segment's range.
	Probed     float64 `json:"probed_per_get"`
	FalsePos   float64 `json:"false_positives_per_get"`
	Blocks     float64 `json:"blocks_per_get"`
	Predicted  float64 `json:"predicted_blocks_per_get"`
	KeysPerSec float64 `json:"fill_keys_per_sec"`
}

// fillReport is the long fill: a random fill of -fill-report-keys
// keys into a fresh store, stopping fillCheckpoints times to record the
// write amplification so far, the segment count and how many blocks a Get
// of an absent key touches, next to the filters' prediction.
func (b *bench) fillReport(ctx context.Context) (err error) {
	n := b.cfg.FillReportKeys
	if n <= 0 {
		return nil
	}
	b.rep.section(fmt.Sprintf("Fill report: %s keys in random order, checkpoints every %s", fmtInt(int64(n)), fmtInt(int64(max(n/fillCheckpoints, 1)))))
	d := newDataset(n, b.cfg.ValueSize, b.cfg.Seed+2)
	s, err := openBloomkv(filepath.Join(b.work, "fill-report"), b.cfg, b.cfg.BitsPerKey, true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	t := &table{header: []string{"keys", "keys/s", "segments", "on disk", "compactions", "stalls", "W-amp", "W-amp no WAL",
		"probed/Get", "false+/Get", "blocks/Get", "predicted"}}
	var points []fillPoint
	step := max(n/fillCheckpoints, 1)
	bar := newProgress(b.stderr, b.cfg.Quiet, "fill-report", int64(n), "puts")
	defer bar.done()
	for done := 0; done < n; {
		end := min(done+step, n)
		start := time.Now()
		for i := done; i < end; i++ {
			if i%progressEvery == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
				bar.set(int64(i))
			}
			j := d.randomOrder(int64(i))
			if err := s.put(d.key(j), d.value(j)); err != nil {
				return err
			}
		}
		p, err := b.fillCheckpoint(ctx, s, d, int64(end))
		if err != nil {
			return err
		}
		p.KeysPerSec = float64(end-done) / time.Since(start).Seconds()
		done = end
		points = append(points, p)
		if err := b.rep.record(p); err != nil {
			return err
		}
		t.add(fmtInt(p.Keys), fmtInt(int64(p.KeysPerSec)), fmtInt(int64(p.Segments)), fmtBytes(p.SegmentMiB*(1<<20)),
			fmtInt(int64(p.Compactions)), fmtInt(int64(p.Stalls)), fmt.Sprintf("%.2f", p.WriteAmp), fmt.Sprintf("%.2f", p.WriteAmpNoWAL),
			fmtPerOp(p.Probed), fmtPerOp(p.FalsePos), fmtPerOp(p.Blocks), fmtPerOp(p.Predicted))
	}
	t.write(b.rep.text)
	b.rep.printf("W-amp = (WAL + flush + compaction bytes written) / user bytes put. Per Get of an absent key: probed =\n")
	b.rep.printf("segments whose filter was asked, blocks = data blocks touched, predicted = Stats.FilterExpectedReads (Σ of the\n")
	b.rep.printf("filters' theoretical FPRs, each at its own bits/key and k: FilterOptimal sizes them per segment; +1 per segment\n")
	b.rep.printf("without a filter). Each checkpoint waits for running compactions first (keys/s includes that).\n")
	return nil
}

// fillCheckpoint records the store's state after keys Puts and measures
// fillProbes Gets of absent keys.
//
// It first waits for running compactions: their reads would count as block
// reads of the Gets, and the store they leave is the one Gets see.
func (b *bench) fillCheckpoint(ctx context.Context, s *bloomkvStore, d *dataset, keys int64) (fillPoint, error) {
	if err := s.db.WaitForCompactions(ctx); err != nil {
		return fillPoint{}, err
	}
	before := s.db.Stats()
	r := rngFor(b.cfg.Seed, fmt.Sprintf("fill-report-%d", keys))
	var absent [keySize]byte
	for range fillProbes {
		_, err := s.db.Get(d.absentKey(r.IntN(d.len()), &absent))
		if !errors.Is(err, bloomkv.ErrNotFound) {
			return fillPoint{}, fmt.Errorf("fill report: Get of an absent key: %v", err)
		}
	}
	after := s.db.Stats()
	user := float64(keys) * float64(keySize+b.cfg.ValueSize)
	written := float64(after.FlushBytes + after.CompactionBytesWritten)
	per := func(a, b uint64) float64 { return float64(a-b) / fillProbes }
	p := fillPoint{
		Kind: "fill-report", Keys: keys, Segments: after.Segments, SegmentMiB: float64(after.SegmentBytes) / (1 << 20),
		Compactions: after.Compactions, Stalls: after.WriteStalls,
		WriteAmp: (written + float64(after.WALBytes)) / user, WriteAmpNoWAL: written / user,
		Probed:   per(after.SegmentsProbed, before.SegmentsProbed),
		FalsePos: per(after.FilterFalsePositives, before.FilterFalsePositives),
		Blocks:   per(after.BlockReads+after.BlockCacheHits, before.BlockReads+before.BlockCacheHits),
		// The filters' own prediction: Σ FPR at each one's geometry. The
		// FPR of -bits-per-key times probed would be that of uniform
		// filters, not of these (2-5× higher on the default run's).
		Predicted: after.FilterExpectedReads,
	}
	return p, nil
}
