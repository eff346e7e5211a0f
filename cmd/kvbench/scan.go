package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// scanLen is the length of the short range scans: Seek to a random present
// key, then 99 Next calls.
const scanLen = 100

// scans measures the two scan workloads on the fill-random store: scan-100
// (short range scans from random keys, timed like the reads) and scan-full
// (every key in order, once). Both check that keys come out strictly
// ascending and that each scan starts at the key it sought.
func (b *bench) scans(ctx context.Context) error {
	short, err := b.readPhase(ctx, b.main, b.scanWorkload())
	if err != nil {
		return err
	}
	short.Variant = fmt.Sprintf("%d keys from a random Seek", scanLen)
	full, err := b.readPhase(ctx, b.main, workload{name: "scan-full", ops: 1, op: b.fullScan})
	if err != nil {
		return err
	}
	full.Variant = fmt.Sprintf("%s keys in order", fmtInt(int64(b.data.len())))
	if err := errors.Join(b.finishResult(&short, workloadsSection, b.cfg.BitsPerKey),
		b.finishResult(&full, workloadsSection, b.cfg.BitsPerKey)); err != nil {
		return err
	}
	latencyTable([]result{short, full}).write(b.rep.text)
	n := float64(b.data.len())
	b.rep.printf("scan-full: %s keys/s, %s/s of keys and values, %s blocks read (and not added to the block cache).\n",
		fmtInt(int64(n/full.Seconds)), fmtBytes(n*float64(keySize+b.cfg.ValueSize)/full.Seconds),
		fmtInt(int64(full.DB.BlockReads)))
	b.rep.printf("scan-100: %s scans/s = %s keys/s.\n", fmtInt(int64(short.OpsPerSec)), fmtInt(int64(short.OpsPerSec*scanLen)))
	return nil
}

// scanWorkload is scan-100: each operation seeks to a random present key
// with a fresh iterator and reads scanLen keys (fewer at the end).
func (b *bench) scanWorkload() workload {
	r := rngFor(b.cfg.Seed, "scan-100")
	d := b.data
	op := func(int64) error {
		i := r.IntN(d.len())
		it, err := b.main.db.NewIterator(nil)
		if err != nil {
			return err
		}
		n := 0
		var prev []byte
		for ok := it.Seek(d.key(i)); ok && n < scanLen; ok = it.Next() {
			if n == 0 && (!bytes.Equal(it.Key(), d.key(i)) || !bytes.Equal(it.Value(), d.value(i))) {
				err := fmt.Errorf("Seek(%x) landed on %x", d.key(i), it.Key()) // before Close ends the key's life
				it.Close()
				return err
			}
			if n > 0 && bytes.Compare(it.Key(), prev) <= 0 {
				err := fmt.Errorf("scan out of order: %x after %x", it.Key(), prev)
				it.Close()
				return err
			}
			prev = append(prev[:0], it.Key()...)
			n++
		}
		return it.Close()
	}
	return workload{name: "scan-100", ops: b.cfg.Ops, dur: b.cfg.Duration, op: op}
}

// fullScan reads every key in order and checks the count.
func (b *bench) fullScan(int64) error {
	it, err := b.main.db.NewIterator(nil)
	if err != nil {
		return err
	}
	n := 0
	var prev []byte
	for k := range it.All() {
		if n > 0 && bytes.Compare(k, prev) <= 0 {
			it.Close()
			return fmt.Errorf("scan out of order: %x after %x", k, prev)
		}
		prev = append(prev[:0], k...)
		n++
	}
	if err := it.Close(); err != nil {
		return err
	}
	if n != b.data.len() {
		return fmt.Errorf("full scan saw %d keys, want %d", n, b.data.len())
	}
	return nil
}
