package manifest

import (
	"errors"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// TestCounterLimits pins the largest values Apply commits and Open loads:
// FlushedSeq up to base.MaxSeq and NextFileNum up to MaxFileNum, both
// inclusive; one more is an invalid edit.
func TestCounterLimits(t *testing.T) {
	tests := []struct {
		name string
		e    Edit
		ok   bool
	}{
		{"flushed seq at the maximum", Edit{FlushedSeq: ptr(base.MaxSeq)}, true},
		{"next file number at the maximum", Edit{NextFileNum: ptr(MaxFileNum)}, true},
		{"segment just below the maximum", Edit{Add: []base.SegmentMeta{seg(MaxFileNum-1, 1, 2)}}, true},
		{"next file number past the maximum", Edit{NextFileNum: ptr(MaxFileNum + 1)}, false},
		{"segment at the maximum", Edit{Add: []base.SegmentMeta{seg(MaxFileNum, 1, 2)}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, path := createTemp(t)
			err := m.Apply(tt.e)
			if !tt.ok {
				if !errors.Is(err, ErrInvalidEdit) {
					t.Fatalf("got %v, want ErrInvalidEdit", err)
				}
				_ = m.Close()
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := m.State()
			m = reopen(t, m, path)
			defer m.Close()
			if got := m.State(); !sameState(got, want) {
				t.Fatalf("after reopen: got %+v, want %+v", got, want)
			}
		})
	}
}
