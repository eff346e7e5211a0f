package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/bloomkv/bloomkv"
)

// Prefix lookups: a store of many segments (compaction off, as in the
// negative-lookup section) whose 16-byte keys are an 8-byte prefix and an
// 8-byte suffix, prefixKeysPer keys per prefix, written a prefix at a
// time in random prefix order; then prefix scans (IterOptions.Prefix) of
// present and absent prefixes, on a store with Options.Prefix =
// FixedPrefix(8) and on its twin without an extractor.
const (
	prefixLen     = 8
	prefixKeysPer = 16
	// prefixReadTime caps each of the section's four read workloads, to
	// keep the section within about 10 s of a default run.
	prefixReadTime = time.Second
)

// prefixData is the section's data set: prefixes sorted, each with its
// last bit clear, so that the prefix with that bit set is certainly
// absent and sorts right next to a present one (inside a segment's range).
type prefixData struct {
	prefixes []uint64 // sorted, distinct, last bit clear
	order    []int32  // the fill order of the prefixes
}

func newPrefixData(keys int, seed uint64) *prefixData {
	n := max(keys/prefixKeysPer, 1)
	r := rand.New(rand.NewPCG(seed, 0x707265666978)) // "prefix"
	seen := make(map[uint64]bool, n)
	d := &prefixData{prefixes: make([]uint64, 0, n), order: make([]int32, n)}
	for len(d.prefixes) < n {
		p := r.Uint64() &^ 1
		if !seen[p] {
			seen[p] = true
			d.prefixes = append(d.prefixes, p)
		}
	}
	for i := range d.order {
		d.order[i] = int32(i)
	}
	r.Shuffle(n, func(i, j int) { d.order[i], d.order[j] = d.order[j], d.order[i] })
	return d
}

func (d *prefixData) keys() int { return len(d.prefixes) * prefixKeysPer }

// prefix returns prefix i, or its absent twin.
func (d *prefixData) prefix(dst []byte, i int, absent bool) []byte {
	p := d.prefixes[i]
	if absent {
		p |= 1
	}
	return binary.BigEndian.AppendUint64(dst[:0], p)
}

// prefixLookups is the section: load the two stores, scan prefixes.
func (b *bench) prefixLookups(ctx context.Context) error {
	const section = "prefix-lookups"
	b.rep.section("Prefix lookups: many segments, prefix scans with and without prefix filters")
	if b.cfg.BitsPerKey == 0 {
		b.rep.printf("skipped: -disable-filters writes no prefix filters\n")
		return nil
	}
	d := newPrefixData(max(b.cfg.Keys/8, prefixKeysPer), b.cfg.Seed+2)
	perSegment := max((d.keys()+b.cfg.NegSegments-1)/b.cfg.NegSegments, 1)
	var runs [2][2]result // [with extractor, without][present, absent]
	for i, px := range []*bloomkv.PrefixExtractor{bloomkv.FixedPrefix(prefixLen), nil} {
		rs, err := b.prefixRun(ctx, d, perSegment, px)
		if err != nil {
			return err
		}
		for j := range rs {
			rs[j].Variant = "prefix filters"
			if px == nil {
				rs[j].Variant = "no prefix filters"
			}
			if err := b.finishResult(&rs[j], section, b.cfg.BitsPerKey); err != nil {
				return err
			}
		}
		runs[i] = rs
	}
	b.rep.printf("%s keys of %d B (%s prefixes of %d B, %d keys each) written a prefix at a time in random prefix order,\n",
		fmtInt(int64(d.keys())), keySize, fmtInt(int64(len(d.prefixes))), prefixLen, prefixKeysPer)
	b.rep.printf("a Flush every %s Puts, no compaction; each lookup is an Iterator with IterOptions.Prefix read to the end.\n",
		fmtInt(int64(perSegment)))
	b.rep.printf("Prefix filters: Options.Prefix = FixedPrefix(%d), %s bits per prefix; the twin store has no extractor (key filters in both)\n",
		prefixLen, fmtNum(b.cfg.BitsPerKey))
	b.rep.printf("and searches every segment whose key range holds the prefix (it asks no prefix filter: 0 asked, 0 searched counted).\n")
	prefixTable(runs).write(b.rep.text)
	return nil
}

// prefixRun loads d into a fresh store with extractor px (nil: none),
// flushing every perSegment Puts, and measures scans of present and of
// absent prefixes.
func (b *bench) prefixRun(ctx context.Context, d *prefixData, perSegment int, px *bloomkv.PrefixExtractor) (_ [2]result, err error) {
	name := "prefix-filters"
	if px == nil {
		name = "prefix-no-filters"
	}
	s, err := openBloomkv(filepath.Join(b.work, name), b.cfg, b.cfg.BitsPerKey, false)
	if err != nil {
		return [2]result{}, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if px != nil { // reopen with the extractor: a new, empty store records it
		s.opts.Prefix = px
		if err := s.reopen(func(string) error { return nil }); err != nil {
			return [2]result{}, err
		}
	}
	var key, val [keySize]byte
	load := workload{name: "load " + name, ops: int64(d.keys()), unit: "puts", finish: s.finishFill,
		op: func(n int64) error {
			i := int(d.order[n/prefixKeysPer])
			k := binary.BigEndian.AppendUint64(d.prefix(key[:0], i, false), uint64(n%prefixKeysPer))
			binary.LittleEndian.PutUint64(val[:], uint64(n))
			if err := s.put(k, val[:]); err != nil || (n+1)%int64(perSegment) != 0 {
				return err
			}
			return s.db.Flush()
		}}
	if _, err := b.measure(ctx, s, load); err != nil {
		return [2]result{}, err
	}
	var rs [2]result
	for j, absent := range []bool{false, true} {
		wl := b.prefixWorkload(s, d, absent)
		if rs[j], err = b.readPhase(ctx, s, wl); err != nil {
			return [2]result{}, err
		}
	}
	return rs, nil
}

// prefixWorkload scans random present (or absent) prefixes and checks the
// number of keys found.
func (b *bench) prefixWorkload(s *bloomkvStore, d *prefixData, absent bool) workload {
	name, want := "prefix-present", prefixKeysPer
	if absent {
		name, want = "prefix-absent", 0
	}
	r := rngFor(b.cfg.Seed, name)
	var p [prefixLen]byte
	opts := &bloomkv.IterOptions{}
	op := func(int64) error {
		opts.Prefix = d.prefix(p[:0], r.IntN(len(d.prefixes)), absent)
		it, err := s.db.NewIterator(opts)
		if err != nil {
			return err
		}
		n := 0
		for range it.All() {
			n++
		}
		if err := it.Close(); err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("prefix %x: %d keys, want %d", opts.Prefix, n, want)
		}
		return nil
	}
	return workload{name: name, ops: b.cfg.Ops, dur: min(b.cfg.Duration, prefixReadTime), op: op}
}

// prefixTable lines up the four runs: present and absent prefixes, with
// and without prefix filters. "searched" is the segments in the prefix's
// key range whose prefix filter said "maybe" (asked − skipped): the ones
// the iterator opened. The twin store asks no prefix filter and searches
// every segment in range, which the store does not count: its block reads
// show the cost.
func prefixTable(runs [2][2]result) *table {
	t := &table{
		groups: []group{{"", 1}, {"present prefixes", 3}, {"absent prefixes", 3}},
		header: []string{"per lookup", "prefix filters", "none", "gain", "prefix filters", "none", "gain"},
	}
	line := func(metric string, f func(r result) float64, format func(float64) string, word string) {
		cells := []string{metric}
		for j := range 2 {
			with, without := f(runs[0][j]), f(runs[1][j])
			c := comparison{metric, with, without, format, word, countFloor}
			cells = append(cells, format(with), format(without), c.gain())
		}
		t.add(cells...)
	}
	perOp := func(v uint64, r result) float64 { return float64(v) / float64(max(r.Ops, 1)) }
	line("segments", func(r result) float64 { return float64(r.Shape.Segments) }, fmtNum, "")
	line("prefix filters asked", func(r result) float64 { return perOp(r.DB.PrefixFilterProbes, r) }, fmtPerOp, "")
	line("skipped by prefix filter", func(r result) float64 { return perOp(r.DB.PrefixFilterSkips, r) }, fmtPerOp, "")
	line("searched (asked - skipped)", func(r result) float64 {
		return perOp(r.DB.PrefixFilterProbes-r.DB.PrefixFilterSkips, r)
	}, fmtPerOp, "")
	line("block reads + cache hits", func(r result) float64 { return perOp(r.DB.BlockReads+r.DB.BlockCacheHits, r) }, fmtPerOp, "fewer")
	line("bytes read", func(r result) float64 { return perOp(r.DB.BytesRead, r) }, fmtBytesNaN, "fewer")
	line("ops/s", func(r result) float64 { return r.OpsPerSec }, fmtNum, "faster")
	line("p50", func(r result) float64 { return float64(r.Latency.P50) }, func(v float64) string { return fmtLatency(uint64(v)) }, "lower")
	return t
}
