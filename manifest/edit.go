package manifest

import (
	"errors"
	"fmt"
	"slices"

	"github.com/bloomkv/bloomkv/internal/base"
)

// State is the manifest's content at one moment.
type State struct {
	// Segments are the live segments, newest first: by MaxSeq descending,
	// ties by FileNum descending. Their key bytes are shared and must not
	// be modified.
	Segments []base.SegmentMeta
	// NextFileNum bounds the file numbers handed out: NewFileNum never
	// returns a number at or above the committed NextFileNum, so a file
	// numbered at or above it is not the store's (or the manifest is older
	// than the files). 0 is reserved and never handed out.
	NextFileNum uint64
	// FlushedSeq is the highest sequence number such that every write at or
	// below it is in a segment; WAL records at or below it need no replay.
	FlushedSeq uint64
	// LogNum is the oldest live WAL: WAL files numbered below it are
	// obsolete. Once nonzero, the WAL it names exists: it is created (and
	// its name synced) before the commit that sets LogNum.
	LogNum uint64
	// Legacy is set for a format-1 manifest, which persisted NextFileNum
	// only after handing numbers out: files at or above it may be the
	// leftovers of a crash there. The first Apply upgrades the file.
	Legacy bool
	// PrefixExtractor names the store's prefix extractor (the keys'
	// prefixes in the segments' prefix filters); "" if it has none. It is
	// recorded once (Edit.PrefixExtractor) and never changes.
	PrefixExtractor string
}

// checkCounters reports counters that no Apply could have committed.
func (s State) checkCounters() error {
	switch {
	case s.NextFileNum < firstFileNum || s.NextFileNum > MaxFileNum:
		return fmt.Errorf("next file number %d out of range", s.NextFileNum)
	case s.FlushedSeq > base.MaxSeq:
		return fmt.Errorf("flushed seq %d exceeds 56 bits", s.FlushedSeq)
	case s.LogNum >= s.NextFileNum && !s.Legacy:
		return fmt.Errorf("log number %d not below next file number %d", s.LogNum, s.NextFileNum)
	}
	return nil
}

// clone returns s with its own Segments slice, so callers may reorder or
// modify it without touching the manifest's copy.
func (s State) clone() State {
	s.Segments = slices.Clone(s.Segments)
	return s
}

// Edit is one atomic change to the manifest. A nil counter field leaves
// that counter unchanged; a set one may not move it backwards.
type Edit struct {
	Add    []base.SegmentMeta // segments that become live
	Remove []uint64           // file numbers of segments that stop being live

	NextFileNum *uint64
	FlushedSeq  *uint64
	LogNum      *uint64

	// PrefixExtractor, if set, records the store's prefix extractor. Only
	// a store without one may get one; setting the recorded name again
	// is a no-op.
	PrefixExtractor string
}

// ErrInvalidEdit is matched (errors.Is) by the error Apply returns for an
// edit that contradicts the current state; such an edit changes nothing.
var ErrInvalidEdit = errors.New("manifest: invalid edit")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidEdit, fmt.Sprintf(format, args...))
}

// reserveAhead is how many file numbers every commit reserves beyond those
// handed out, so that NewFileNum rarely needs a commit of its own: a number
// is always committed (below NextFileNum) before its file exists.
const reserveAhead = 1000

// apply returns the state after e, or an ErrInvalidEdit error. counter is
// the in-memory file-number counter (the next number NewFileNum hands out);
// the new NextFileNum reserves reserveAhead numbers beyond it. s is not
// modified: the result has a fresh Segments slice.
func (s State) apply(e Edit, counter uint64) (State, error) {
	next := s
	var err error
	if next.NextFileNum, err = advance("next file number", s.NextFileNum, e.NextFileNum); err != nil {
		return State{}, err
	}
	if next.FlushedSeq, err = advance("flushed seq", s.FlushedSeq, e.FlushedSeq); err != nil {
		return State{}, err
	}
	if next.FlushedSeq > base.MaxSeq {
		return State{}, invalidf("flushed seq %d exceeds 56 bits", next.FlushedSeq)
	}
	if next.LogNum, err = advance("log number", s.LogNum, e.LogNum); err != nil {
		return State{}, err
	}
	if next.PrefixExtractor, err = setPrefixExtractor(s.PrefixExtractor, e.PrefixExtractor); err != nil {
		return State{}, err
	}
	if next.Segments, err = s.applySegments(e); err != nil {
		return State{}, err
	}
	next.NextFileNum = max(next.NextFileNum, counter+reserveAhead)
	for _, seg := range e.Add {
		// An added file number must never be handed out again.
		next.NextFileNum = max(next.NextFileNum, seg.FileNum+1)
	}
	if next.NextFileNum > MaxFileNum {
		return State{}, invalidf("next file number %d exceeds %d", next.NextFileNum, uint64(MaxFileNum))
	}
	next.Legacy = false // the commit writes format 2
	return next, nil
}

// advance returns the new value of a counter that may only grow.
func advance(name string, cur uint64, set *uint64) (uint64, error) {
	if set == nil {
		return cur, nil
	}
	if *set < cur {
		return 0, invalidf("%s would go backwards from %d to %d", name, cur, *set)
	}
	return *set, nil
}

// applySegments validates e's segment changes against s and returns the
// new, sorted segment list.
func (s State) applySegments(e Edit) ([]base.SegmentMeta, error) {
	live := make(map[uint64]bool, len(s.Segments))
	for _, seg := range s.Segments {
		live[seg.FileNum] = true
	}
	removed := make(map[uint64]bool, len(e.Remove))
	for _, fn := range e.Remove {
		if removed[fn] {
			return nil, invalidf("segment %d removed twice", fn)
		}
		if !live[fn] {
			return nil, invalidf("remove of segment %d, which is not live", fn)
		}
		removed[fn] = true
	}
	out := make([]base.SegmentMeta, 0, len(s.Segments)-len(e.Remove)+len(e.Add))
	for _, seg := range s.Segments {
		if !removed[seg.FileNum] {
			out = append(out, seg)
		}
	}
	for _, seg := range e.Add {
		if err := checkSegment(&seg); err != nil {
			return nil, invalidf("segment %d: %v", seg.FileNum, err)
		}
		// Re-adding a removed number is rejected too: file numbers are
		// never reused, so it can only be a bug.
		if live[seg.FileNum] {
			return nil, invalidf("add of segment %d, which is already live", seg.FileNum)
		}
		live[seg.FileNum] = true
		out = append(out, cloneSegment(seg))
	}
	slices.SortFunc(out, newestFirst)
	return out, nil
}
