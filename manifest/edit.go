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
	Segments []SegmentMeta
	// NextFileNum is the committed file-number counter: every number below
	// it has been handed out (0 is reserved and never handed out).
	NextFileNum uint64
	// FlushedSeq is the highest sequence number such that every write at or
	// below it is in a segment; WAL records at or below it need no replay.
	FlushedSeq uint64
	// LogNum is the oldest live WAL: WAL files numbered below it are obsolete.
	LogNum uint64
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
	Add    []SegmentMeta // segments that become live
	Remove []uint64      // file numbers of segments that stop being live

	NextFileNum *uint64
	FlushedSeq  *uint64
	LogNum      *uint64
}

// ErrInvalidEdit is matched (errors.Is) by the error Apply returns for an
// edit that contradicts the current state; such an edit changes nothing.
var ErrInvalidEdit = errors.New("manifest: invalid edit")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidEdit, fmt.Sprintf(format, args...))
}

// apply returns the state after e, or an ErrInvalidEdit error. counter is
// the in-memory file-number counter, which the new NextFileNum must cover
// so that numbers handed out before this commit are never handed out again.
// s is not modified: the result has a fresh Segments slice.
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
	if next.Segments, err = s.applySegments(e); err != nil {
		return State{}, err
	}
	next.NextFileNum = max(next.NextFileNum, counter)
	for _, seg := range e.Add {
		// An added file number must never be handed out again.
		next.NextFileNum = max(next.NextFileNum, seg.FileNum+1)
	}
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
func (s State) applySegments(e Edit) ([]SegmentMeta, error) {
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
	out := make([]SegmentMeta, 0, len(s.Segments)-len(e.Remove)+len(e.Add))
	for _, seg := range s.Segments {
		if !removed[seg.FileNum] {
			out = append(out, seg)
		}
	}
	for _, seg := range e.Add {
		if err := seg.check(); err != nil {
			return nil, invalidf("segment %d: %v", seg.FileNum, err)
		}
		// Re-adding a removed number is rejected too: file numbers are
		// never reused, so it can only be a bug.
		if live[seg.FileNum] {
			return nil, invalidf("add of segment %d, which is already live", seg.FileNum)
		}
		live[seg.FileNum] = true
		out = append(out, seg.clone())
	}
	slices.SortFunc(out, newestFirst)
	return out, nil
}
