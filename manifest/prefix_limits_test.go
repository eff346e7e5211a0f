package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// TestPrefixExtractorLayout pins the record of FORMAT.md: version 1, the
// name's length as a uvarint, the name, a CRC-32C.
func TestPrefixExtractorLayout(t *testing.T) {
	want := withCRC([]byte{1, 5, 'c', 'o', 'l', 'o', 'n'})
	if got := encodePrefixExtractor("colon"); !bytes.Equal(got, want) {
		t.Fatalf("encoding:\n got %x\nwant %x", got, want)
	}
}

// TestDecodePrefixExtractorRejects checks that a record whose frame and
// CRC are intact but whose content breaks FORMAT.md (a name of 1 to 255
// bytes filling the rest of the record) is refused, with the offset of the
// length field if it cannot be read or exceeds 255, else of the name.
func TestDecodePrefixExtractorRejects(t *testing.T) {
	tests := []struct {
		name, want string
		body       []byte
		off        int
	}{
		{"empty name", "empty name", []byte{1, 0}, 2},
		{"length short of the name", "remain", []byte{1, 1, 'a', 'b'}, 2},
		{"length past the name", "remain", []byte{1, 3, 'a', 'b'}, 2},
		{"name of 256 bytes", "exceeds 255", append(binary.AppendUvarint([]byte{1}, 256), bytes.Repeat([]byte{'n'}, 256)...), 1},
		{"non-minimal length", "non-minimal", []byte{1, 0x81, 0x00, 'a'}, 1},
		{"no length", "truncated", []byte{1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, off, err := decodePrefixExtractor(withCRC(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) || off != tt.off {
				t.Fatalf("got %q at offset %d, %v; want offset %d, an error saying %q", got, off, err, tt.off, tt.want)
			}
		})
	}
}

// TestPrefixExtractorNameLength pins the name limit at 255 bytes for
// Apply: 255 is recorded and reloads, 256 is an invalid edit.
func TestPrefixExtractorNameLength(t *testing.T) {
	for _, tt := range []struct {
		n  int
		ok bool
	}{{1, true}, {255, true}, {256, false}} {
		m, path := createTemp(t)
		name := strings.Repeat("n", tt.n)
		err := m.Apply(Edit{PrefixExtractor: name})
		if !tt.ok {
			if !errors.Is(err, ErrInvalidEdit) {
				t.Fatalf("name of %d bytes: got %v, want ErrInvalidEdit", tt.n, err)
			}
			_ = m.Close()
			continue
		}
		if err != nil {
			t.Fatalf("name of %d bytes: %v", tt.n, err)
		}
		m = reopen(t, m, path)
		if got := m.State().PrefixExtractor; got != name {
			t.Fatalf("name of %d bytes reloaded as %d bytes", tt.n, len(got))
		}
		_ = m.Close()
	}
}
