package compaction

import (
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// tiered returns segments with the given manifest tiers, newest first.
func tiered(tiers ...uint32) []base.SegmentMeta {
	segs := make([]base.SegmentMeta, len(tiers))
	for i, t := range tiers {
		segs[i] = base.SegmentMeta{FileNum: uint64(len(tiers) - i), Tier: t}
	}
	return segs
}

// sized returns segments with the given sizes, newest first.
func sized(sizes ...int64) []base.SegmentMeta {
	segs := make([]base.SegmentMeta, len(sizes))
	for i, s := range sizes {
		segs[i] = base.SegmentMeta{FileNum: uint64(len(sizes) - i), Size: s}
	}
	return segs
}

func TestSizeTieredPick(t *testing.T) {
	const mb = 1 << 20
	bySize := SizeTiered{minSize: mb} // tiers: [1,4) MiB → 0, [4,16) → 1, [16,64) → 2
	tests := []struct {
		name   string
		policy SizeTiered
		segs   []base.SegmentMeta
		want   *Pick
	}{
		{"empty", SizeTiered{}, nil, nil},
		{"below fan-in", SizeTiered{}, tiered(0, 0, 0), nil},
		{"below fan-in in every tier", SizeTiered{}, tiered(0, 0, 0, 1, 1, 1, 2, 2, 2), nil},
		{"exactly fan-in, all segments", SizeTiered{}, tiered(0, 0, 0, 0), &Pick{0, 4, 1, true}},
		{"fan-in with older tiers", SizeTiered{}, tiered(0, 0, 0, 0, 1, 2), &Pick{0, 4, 1, false}},
		{"run in the middle", SizeTiered{}, tiered(0, 1, 1, 1, 1, 2), &Pick{1, 5, 2, false}},
		{"lowest full tier first", SizeTiered{}, tiered(0, 0, 0, 0, 1, 1, 1, 1), &Pick{0, 4, 1, false}},
		{"oldest of a long run", SizeTiered{}, tiered(0, 0, 0, 0, 0, 0, 3), &Pick{2, 6, 1, false}},
		{"oldest of a long run, to the end", SizeTiered{}, tiered(0, 0, 0, 0, 0), &Pick{1, 5, 1, true}},
		// Four tier-0 segments, but a tier-1 one sits between them: merging
		// the four would interleave in time with it, so nothing is picked.
		{"never non-contiguous", SizeTiered{}, tiered(0, 0, 1, 0, 0), nil},
		{"smaller older segment joins the tier above", SizeTiered{}, tiered(1, 1, 0, 1), &Pick{0, 4, 2, true}},
		{"fan-in 2", SizeTiered{FanIn: 2}, tiered(0, 0, 1), &Pick{0, 2, 1, false}},
		{"fan-in 1 means default", SizeTiered{FanIn: 1}, tiered(0, 0, 0), nil},
		{"by size: below fan-in", bySize, sized(mb, mb, 3*mb, 5*mb), nil},
		{"by size: tier 0 run", bySize, sized(mb, 2*mb, mb/2, 3*mb, 5*mb), &Pick{0, 4, 1, false}},
		{"by size: tier 1 run", bySize, sized(mb, 4*mb, 15*mb, 8*mb, 4*mb, 20*mb), &Pick{1, 5, 2, false}},
		{"by size: ignores manifest tier", bySize,
			[]base.SegmentMeta{{Size: mb, Tier: 5}, {Size: mb, Tier: 0}, {Size: mb, Tier: 3}, {Size: mb, Tier: 1}},
			&Pick{0, 4, 1, true}},
		{"by size: exact powers land in the upper tier", bySize, sized(16*mb, 16*mb, 16*mb, 16*mb, 64*mb), &Pick{0, 4, 3, false}},
		{"by size: ratio 2", SizeTiered{minSize: mb, ratio: 2, FanIn: 2}, sized(mb, 2*mb, 3*mb), &Pick{1, 3, 2, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.policy.Pick(tt.segs)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Fatalf("Pick = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSizeTieredPickDoesNotModifyInput(t *testing.T) {
	segs := tiered(0, 0, 0, 0, 1)
	want := tiered(0, 0, 0, 0, 1)
	SizeTiered{}.Pick(segs)
	for i := range segs {
		if segs[i].Tier != want[i].Tier || segs[i].FileNum != want[i].FileNum {
			t.Fatalf("segs[%d] = %+v after Pick, want %+v", i, segs[i], want[i])
		}
	}
}

func TestSizeTieredLimits(t *testing.T) {
	p := SizeTiered{}
	if got := p.Tiers(nil); got != 0 {
		t.Errorf("Tiers(nil) = %d, want 0", got)
	}
	if got := p.Tiers(tiered(0, 2, 1)); got != 3 { // the 1 is lifted to 2
		t.Errorf("Tiers = %d, want 3", got)
	}
	if got := p.MaxSegments(5); got != 16 {
		t.Errorf("MaxSegments(5) = %d, want 3·5+1 = 16", got)
	}
	if got := p.MaxSegments(0); got != 4 {
		t.Errorf("MaxSegments(0) = %d, want that of one tier, 4", got)
	}
	if got := p.StallThreshold(5); got != 24 {
		t.Errorf("StallThreshold(5) = %d, want 16+8 = 24", got)
	}
	if got := p.UrgentThreshold(5); got != 20 {
		t.Errorf("UrgentThreshold(5) = %d, want 16+4 = 20", got)
	}
}

// sim drives a policy through a sequence of flushes like the DB would:
// after each flush it applies Pick until it returns nil.
type sim struct {
	t      *testing.T
	p      SizeTiered
	segs   []base.SegmentMeta // newest first
	seq    uint64
	file   uint64
	merged func(inputs []base.SegmentMeta) int64 // size of a merge's output

	flushed, written int64 // bytes
	maxSegs          int
}

func (s *sim) flush(size int64) {
	s.file++
	s.seq += 10
	seg := base.SegmentMeta{FileNum: s.file, Size: size, MinSeq: s.seq - 9, MaxSeq: s.seq}
	s.segs = append([]base.SegmentMeta{seg}, s.segs...)
	s.flushed += size
	s.written += size
	s.maxSegs = max(s.maxSegs, len(s.segs))
	for s.compactOnce() {
	}
}

// compactOnce applies one Pick, checking what the policy promises.
func (s *sim) compactOnce() bool {
	pk := s.p.Pick(s.segs)
	if pk == nil {
		return false
	}
	tiers := s.p.effectiveTiers(s.segs)
	switch {
	case pk.Start < 0 || pk.End > len(s.segs) || pk.End-pk.Start != s.p.fanIn():
		s.t.Fatalf("pick %+v of %d segments, fan-in %d", pk, len(s.segs), s.p.fanIn())
	case pk.IncludesOldest != (pk.End == len(s.segs)):
		s.t.Fatalf("pick %+v: IncludesOldest wrong for %d segments", pk, len(s.segs))
	case tiers[pk.Start] != tiers[pk.End-1] || pk.Tier != tiers[pk.Start]+1:
		s.t.Fatalf("pick %+v over tiers %v", pk, tiers[pk.Start:pk.End])
	}
	in := s.segs[pk.Start:pk.End]
	s.file++
	out := base.SegmentMeta{
		FileNum: s.file, Size: s.merged(in), Tier: pk.Tier,
		MinSeq: in[len(in)-1].MinSeq, MaxSeq: in[0].MaxSeq,
	}
	s.written += out.Size
	s.segs = append(append(append([]base.SegmentMeta(nil), s.segs[:pk.Start]...), out), s.segs[pk.End:]...)
	s.checkSeqOrder()
	return true
}

// checkSeqOrder fails if two segments' sequence ranges interleave: what a
// non-contiguous merge would cause, and what the DB's ordering forbids.
func (s *sim) checkSeqOrder() {
	for i := 1; i < len(s.segs); i++ {
		if s.segs[i-1].MinSeq <= s.segs[i].MaxSeq {
			s.t.Fatalf("segments %d and %d interleave in time: [%d,%d] vs [%d,%d]", i-1, i,
				s.segs[i-1].MinSeq, s.segs[i-1].MaxSeq, s.segs[i].MinSeq, s.segs[i].MaxSeq)
		}
	}
}

func sumSizes(in []base.SegmentMeta) int64 {
	var n int64
	for _, s := range in {
		n += s.Size
	}
	return n
}

// TestSizeTieredSimulation flushes 1000 equal segments of unique keys and
// checks the segment count bound and write amplification.
func TestSizeTieredSimulation(t *testing.T) {
	const flushes, size = 1000, 1 << 20
	for _, tt := range []struct {
		name string
		p    SizeTiered
	}{
		{"tier field, fan-in 2", SizeTiered{FanIn: 2}},
		{"tier field, fan-in 4", SizeTiered{}},
		{"tier field, fan-in 8", SizeTiered{FanIn: 8}},
		{"by size, fan-in 4", SizeTiered{minSize: size / 2}},
		{"by size, fan-in 10", SizeTiered{minSize: size / 2, FanIn: 10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &sim{t: t, p: tt.p, merged: sumSizes}
			for range flushes {
				s.flush(size)
			}
			fanIn, tiers := tt.p.fanIn(), tt.p.Tiers(s.segs)
			wantTiers := 1 // ⌊log_fanIn(flushes)⌋ + 1
			for n := fanIn; n <= flushes; n *= fanIn {
				wantTiers++
			}
			wa := float64(s.written) / float64(s.flushed)
			t.Logf("fan-in %d: %d tiers, at most %d segments (bound %d), %d now, write amplification %.2f",
				fanIn, tiers, s.maxSegs, tt.p.MaxSegments(tiers), len(s.segs), wa)
			if tiers != wantTiers {
				t.Errorf("%d tiers, want %d", tiers, wantTiers)
			}
			if s.maxSegs > tt.p.MaxSegments(tiers) || s.maxSegs > fanIn*tiers {
				t.Errorf("%d segments at most, want ≤ %d", s.maxSegs, tt.p.MaxSegments(tiers))
			}
			// Flushed once, then rewritten at most once per tier above 0.
			if wa > float64(tiers) {
				t.Errorf("write amplification %.2f, want ≤ %d", wa, tiers)
			}
		})
	}
}

// TestSizeTieredOverwriteSimulation merges segments that all hold the same
// keys, so a merge is no larger than its largest input. Size tiers keep
// such outputs in tier 0; the manifest tier would promote them needlessly.
func TestSizeTieredOverwriteSimulation(t *testing.T) {
	const size = 1 << 20
	p := SizeTiered{minSize: size / 2}
	largest := func(in []base.SegmentMeta) int64 {
		var n int64
		for _, s := range in {
			n = max(n, s.Size)
		}
		return n
	}
	s := &sim{t: t, p: p, merged: largest}
	for range 1000 {
		s.flush(size)
	}
	t.Logf("overwrite-heavy: %d tiers, at most %d segments, write amplification %.2f",
		p.Tiers(s.segs), s.maxSegs, float64(s.written)/float64(s.flushed))
	if got := p.Tiers(s.segs); got != 1 {
		t.Errorf("%d tiers, want 1: outputs the size of a flush belong in tier 0", got)
	}
	if s.maxSegs > p.MaxSegments(1) {
		t.Errorf("%d segments at most, want ≤ %d", s.maxSegs, p.MaxSegments(1))
	}
}

// FuzzPick checks Pick's promises on arbitrary segment lists: a returned
// run is contiguous, FanIn long and of one tier; nil means no tier holds
// FanIn adjacent segments; and applying picks terminates.
func FuzzPick(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1}, false)
	f.Add([]byte{0, 0, 1, 0, 0}, false)
	f.Add([]byte{9, 200, 3, 3, 3, 3, 40}, true)
	f.Fuzz(func(t *testing.T, data []byte, bySize bool) {
		p := SizeTiered{FanIn: 2 + len(data)%4}
		if bySize {
			p.minSize = 1000
		}
		segs := make([]base.SegmentMeta, len(data))
		for i, b := range data {
			segs[i] = base.SegmentMeta{FileNum: uint64(i + 1), Tier: uint32(b % 8), Size: int64(b) * 997}
		}
		for range len(data) + 1 {
			pk := p.Pick(segs)
			tiers := p.effectiveTiers(segs)
			if pk == nil {
				if n := longestRun(tiers); n >= p.fanIn() {
					t.Fatalf("no pick, but a run of %d in tiers %v", n, tiers)
				}
				return
			}
			if pk.Start < 0 || pk.End > len(segs) || pk.End-pk.Start != p.fanIn() ||
				longestRun(tiers[pk.Start:pk.End]) != p.fanIn() || pk.Tier != tiers[pk.Start]+1 {
				t.Fatalf("pick %+v over tiers %v", pk, tiers)
			}
			out := base.SegmentMeta{Tier: pk.Tier, Size: sumSizes(segs[pk.Start:pk.End])}
			segs = append(append(append([]base.SegmentMeta(nil), segs[:pk.Start]...), out), segs[pk.End:]...)
		}
		t.Fatalf("picks did not terminate")
	})
}

// longestRun is the length of the longest run of equal adjacent tiers.
func longestRun(tiers []uint32) int {
	best, n := 0, 0
	for i := range tiers {
		if i > 0 && tiers[i] == tiers[i-1] {
			n++
		} else {
			n = 1
		}
		best = max(best, n)
	}
	return best
}
