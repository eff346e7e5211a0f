package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/bloomkv/bloomkv/bloom"
)

// fprRow is one line of the FPR sweep: one layout at one bits-per-key
// setting, measured on a filter built directly (no store involved).
type fprRow struct {
	Kind       string  `json:"kind"`    // "fpr"
	Section    string  `json:"section"` // "fpr-sweep"
	Layout     string  `json:"layout"`
	BitsPerKey float64 `json:"bits_per_key"` // as asked
	// MemBitsPerKey is what the filter really allocates per key:
	// GeometryFor rounds the bit count up (by at most 1/32 plus a block).
	MemBitsPerKey  float64 `json:"memory_bits_per_key"`
	K              int     `json:"k"`
	Keys           int     `json:"keys"`
	Probes         int     `json:"probes"`
	FalsePositives int     `json:"false_positives"`
	Measured       float64 `json:"measured_fpr"`
	// Theory is bloom.FPR at the allocated bits per key and the filter's k.
	Theory float64 `json:"theoretical_fpr"`
	// Estimated is the filter's own EstimatedFPR, from its fill ratio.
	Estimated float64 `json:"estimated_fpr"`
}

// Bits-per-key range of the sweep.
const (
	fprMinBits = 2
	fprMaxBits = 20
)

// fprHashes returns the bloom.Hash of n present and probes absent 16-byte
// random keys. As in the data set, present keys have their last bit clear
// and absent ones set, so no probe can be a true positive.
func fprHashes(n, probes int, seed uint64) (present, absent []uint64) {
	r := rand.New(rand.NewPCG(seed, 0x667072)) // "fpr"
	gen := func(count int, lastBit uint64) []uint64 {
		hs := make([]uint64, count)
		var k [keySize]byte
		for i := range hs {
			binary.BigEndian.PutUint64(k[:], r.Uint64())
			binary.BigEndian.PutUint64(k[8:], r.Uint64()&^1|lastBit)
			hs[i] = bloom.Hash(k[:])
		}
		return hs
	}
	return gen(n, 0), gen(probes, 1)
}

// measureFPR builds a filter of the layout at bitsPerKey for the present
// hashes and counts how many absent ones it lets through. A present key
// it denies is a filter bug and an error.
func measureFPR(layout bloom.Layout, bitsPerKey float64, present, absent []uint64) (fprRow, error) {
	g := bloom.GeometryFor(layout, len(present), bitsPerKey)
	f, err := bloom.NewGeometry(g)
	if err != nil {
		return fprRow{}, fmt.Errorf("fpr sweep: %w", err)
	}
	for _, h := range present {
		f.AddHash(h)
	}
	for _, h := range present {
		if !f.ContainsHash(h) {
			return fprRow{}, fmt.Errorf("fpr sweep: %s filter at %v bits/key denies a key it was given", layout, bitsPerKey)
		}
	}
	fp := 0
	for _, h := range absent {
		if f.ContainsHash(h) {
			fp++
		}
	}
	mem := float64(g.Bits) / float64(len(present))
	return fprRow{
		Kind: "fpr", Section: "fpr-sweep", Layout: layout.String(), BitsPerKey: bitsPerKey, MemBitsPerKey: mem, K: g.K,
		Keys: len(present), Probes: len(absent), FalsePositives: fp,
		Measured:  float64(fp) / float64(len(absent)),
		Theory:    bloom.FPR(layout, mem, g.K),
		Estimated: f.EstimatedFPR(),
	}, nil
}

// sweepFPR measures both layouts at every whole bits per key of the range.
// Rows come in pairs: blocked, then classic, for each setting.
func sweepFPR(ctx context.Context, n, probes int, seed uint64, bar *progress) ([]fprRow, error) {
	present, absent := fprHashes(n, probes, seed)
	var rows []fprRow
	for bpk := fprMinBits; bpk <= fprMaxBits; bpk++ {
		for _, layout := range []bloom.Layout{bloom.Blocked, bloom.Classic} {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			row, err := measureFPR(layout, float64(bpk), present, absent)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
			bar.set(int64(len(rows)))
		}
	}
	return rows, nil
}

// fprTable shows the sweep with the two layouts side by side.
func fprTable(rows []fprRow) *table {
	cols := []string{"k", "bits/key", "measured", "theory", "estimate"}
	t := &table{
		groups: []group{{"", 1}, {"blocked", len(cols)}, {"classic", len(cols)}},
		header: append(append([]string{"asked"}, cols...), cols...),
	}
	for i := 0; i+1 < len(rows); i += 2 {
		cells := []string{fmtNum(rows[i].BitsPerKey)}
		for _, r := range rows[i : i+2] {
			cells = append(cells, fmt.Sprint(r.K), fmtNum(r.MemBitsPerKey), fmtPct(r.Measured), fmtPct(r.Theory), fmtPct(r.Estimated))
		}
		t.add(cells...)
	}
	return t
}

// fprSweep is the report section "FPR against theory".
func (b *bench) fprSweep(ctx context.Context) error {
	c := b.cfg
	b.rep.section("Bloom filter FPR against theory")
	bar := newProgress(b.stderr, c.Quiet, "fpr sweep", 2*(fprMaxBits-fprMinBits+1), "")
	rows, err := sweepFPR(ctx, c.FPRKeys, c.FPRProbes, c.Seed, bar)
	bar.done()
	if err != nil {
		return err
	}
	for i := range rows {
		if err := b.rep.record(&rows[i]); err != nil {
			return err
		}
	}
	b.rep.printf("Filters built directly: %s keys each, %s absent probes; theory = bloom.FPR at the bits really\n",
		fmtInt(int64(c.FPRKeys)), fmtInt(int64(c.FPRProbes)))
	b.rep.printf("allocated (bits/key column) and the filter's k; estimate = the filter's EstimatedFPR (fill ratio).\n")
	fprTable(rows).write(b.rep.text)
	if c.Plot != "" {
		if err := writePlot(c.Plot, rows); err != nil {
			return err
		}
		b.rep.printf("plot written to %s\n", c.Plot)
	}
	return nil
}
