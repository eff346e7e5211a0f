package manifest

import (
	"bytes"
	"errors"
	"strings"
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

// TestSegmentKeyLengthLimit pins the key limit of a segment's bounds at
// maxKeyLen bytes, inclusive, for either bound: Apply and the decoder
// accept it, and refuse one byte more.
func TestSegmentKeyLengthLimit(t *testing.T) {
	at, over := bytes.Repeat([]byte{'k'}, maxKeyLen), bytes.Repeat([]byte{'k'}, maxKeyLen+1)
	zAt := bytes.Repeat([]byte{'z'}, maxKeyLen)
	tests := []struct {
		name              string
		smallest, largest []byte
		ok                bool
	}{
		{"both at the limit", at, at, true},
		{"smallest over", over, zAt, false},
		{"largest over", nil, over, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := seg(7, 1, 2)
			s.Smallest, s.Largest = tt.smallest, tt.largest
			err := checkSegment(&s)
			if (err == nil) != tt.ok {
				t.Fatalf("checkSegment: %v, want ok %v", err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "longer than") {
				t.Fatalf("checkSegment: %v, want the key length reported", err)
			}
			_, derr := decodeSegmentMeta(encodeSegmentMeta(s))
			if (derr == nil) != tt.ok {
				t.Fatalf("decode: %v, want ok %v", derr, tt.ok)
			}
		})
	}
}
