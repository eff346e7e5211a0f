package manifest

import (
	"errors"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
	"github.com/bloomkv/bloomkv/vfs"
)

// model is the reference the property test checks the manifest against:
// a map of live segments and plain counters.
type model struct {
	live                         map[uint64]base.SegmentMeta
	next, flushed, logNum, count uint64 // count: next number NewFileNum returns
}

func (md *model) state() State {
	st := State{NextFileNum: md.next, FlushedSeq: md.flushed, LogNum: md.logNum}
	for _, s := range md.live {
		st.Segments = append(st.Segments, s)
	}
	sort.Slice(st.Segments, func(i, j int) bool {
		a, b := st.Segments[i], st.Segments[j]
		return a.MaxSeq > b.MaxSeq || a.MaxSeq == b.MaxSeq && a.FileNum > b.FileNum
	})
	return st
}

// commit records a successful edit; the caller has made sure it is valid.
func (md *model) commit(e Edit) {
	for _, fn := range e.Remove {
		delete(md.live, fn)
	}
	md.next = max(md.next, md.count+reserveAhead)
	for _, s := range e.Add {
		md.live[s.FileNum] = s
		md.next = max(md.next, s.FileNum+1)
	}
	if e.NextFileNum != nil {
		md.next = max(md.next, *e.NextFileNum)
	}
	if e.FlushedSeq != nil {
		md.flushed = *e.FlushedSeq
	}
	if e.LogNum != nil {
		md.logNum = *e.LogNum
	}
}

// TestPropertyRandomEdits applies random flushes, compactions and invalid
// edits, reopening at random points, and compares every state with the model.
func TestPropertyRandomEdits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	path := filepath.Join(t.TempDir(), "MANIFEST")
	m, err := Create(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	md := &model{live: map[uint64]base.SegmentMeta{}, next: 1, count: 1}
	// newNum hands out a file number, checking it against the model.
	newNum := func() uint64 {
		fn, err := m.NewFileNum()
		if err != nil {
			t.Fatal(err)
		}
		if md.count >= md.next { // the range ran out: NewFileNum committed a new one
			md.next = md.count + reserveAhead
		}
		if fn != md.count {
			t.Fatalf("NewFileNum = %d, model says %d", fn, md.count)
		}
		md.count++
		return fn
	}
	var seq uint64
	const steps = 300
	for step := range steps {
		e, valid := randomEdit(rng, newNum, md, &seq)
		err := m.Apply(e)
		switch {
		case valid && err != nil:
			t.Fatalf("step %d: valid edit %+v failed: %v", step, e, err)
		case !valid && !errors.Is(err, ErrInvalidEdit):
			t.Fatalf("step %d: invalid edit %+v: got %v, want ErrInvalidEdit", step, e, err)
		case valid:
			md.commit(e)
		}
		if rng.IntN(10) == 0 {
			m = reopen(t, m, path)
			m.SkipTo(md.count) // as the DB does, past every file it finds
		}
		if got, want := m.State(), md.state(); !sameState(got, want) {
			t.Fatalf("step %d: got %+v\nwant %+v", step, got, want)
		}
	}
}

// randomEdit returns a random edit and whether it is valid for md, drawing
// new file numbers from newNum.
func randomEdit(rng *rand.Rand, newNum func() uint64, md *model, seq *uint64) (Edit, bool) {
	switch rng.IntN(10) {
	case 0, 1, 2, 3: // flush
		fn := newNum()
		s := randomMeta(rng, fn)
		s.MinSeq, s.MaxSeq = *seq+1, *seq+1+rng.Uint64N(100)
		*seq = s.MaxSeq
		return Edit{Add: []base.SegmentMeta{s}, FlushedSeq: ptr(*seq), LogNum: ptr(fn)}, true
	case 4, 5, 6: // compaction
		return randomCompaction(rng, newNum, md), true
	case 7: // only counters, sometimes with file numbers handed out but unused
		for range rng.IntN(3) {
			newNum()
		}
		return Edit{NextFileNum: ptr(md.next + rng.Uint64N(3))}, true
	}
	return randomInvalidEdit(rng, md), false
}

func randomCompaction(rng *rand.Rand, newNum func() uint64, md *model) Edit {
	live := slices.Sorted(maps.Keys(md.live))
	var e Edit
	rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	e.Remove = live[:min(len(live), rng.IntN(4))]
	for range rng.IntN(3) {
		s := randomMeta(rng, newNum())
		s.Tier = 1 + rng.Uint32N(3)
		e.Add = append(e.Add, s)
	}
	return e
}

func randomInvalidEdit(rng *rand.Rand, md *model) Edit {
	live := slices.Sorted(maps.Keys(md.live))
	switch {
	case rng.IntN(2) == 0 && len(live) > 0:
		return Edit{Add: []base.SegmentMeta{randomMeta(rng, live[rng.IntN(len(live))])}}
	case rng.IntN(2) == 0 && md.flushed > 0:
		return Edit{FlushedSeq: ptr(md.flushed - 1)}
	case rng.IntN(2) == 0 && md.logNum > 0:
		return Edit{LogNum: ptr(rng.Uint64N(md.logNum))}
	}
	// md.count is above every file number ever used, so it is not live.
	return Edit{Remove: append(live, md.count+rng.Uint64N(10))}
}
