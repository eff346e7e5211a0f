package manifest

import (
	"bytes"
	"strings"
	"testing"
)

// TestCountersLayout pins the counters record of FORMAT.md: version 1,
// the three counters as shortest uvarints, a CRC-32C.
func TestCountersLayout(t *testing.T) {
	body := []byte{
		1,          // version
		0xac, 0x02, // next file number 300
		7, // flushed seq
		2, // log number
	}
	want := withCRC(body)
	c := counters{NextFileNum: 300, FlushedSeq: 7, LogNum: 2}
	if got := encodeCounters(c); !bytes.Equal(got, want) {
		t.Fatalf("encoding:\n got %x\nwant %x", got, want)
	}
	if got, _, err := decodeCounters(want); err != nil || got != c {
		t.Fatalf("decode: %+v, %v", got, err)
	}
}

// TestDecodeCountersRejects checks that a well-framed counters record
// with the wrong number of fields is refused, with the offset of the
// first byte that does not belong.
func TestDecodeCountersRejects(t *testing.T) {
	tests := []struct {
		name, want string
		body       []byte
		off        int
	}{
		{"trailing byte", "trailing", []byte{1, 5, 0, 0, 0}, 4},
		{"trailing bytes", "trailing", []byte{1, 5, 0, 0, 9, 9}, 4},
		{"two counters", "truncated", []byte{1, 5, 0}, 3},
		{"non-minimal", "non-minimal", []byte{1, 0x85, 0x00, 0, 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, off, err := decodeCounters(withCRC(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) || off != tt.off {
				t.Fatalf("got offset %d, %v; want offset %d, an error saying %q", off, err, tt.off, tt.want)
			}
		})
	}
}
