package bloomkv

import (
	"fmt"

	"github.com/bloomkv/bloomkv/segment"
)

// Compression is the codec of segment blocks (Options.Compression). Each
// block records its codec in its trailer, so a store opened with another
// setting reads every existing segment, and compaction rewrites blocks
// with the codec of the options in force.
type Compression uint8

// The codecs. The zero value is snappy, the default.
const (
	// SnappyCompression compresses blocks with snappy: fast to write and
	// to read, a smaller saving than zstd's.
	SnappyCompression Compression = iota
	// NoCompression stores blocks raw: uncompressed blocks of a mapped
	// segment are read without a copy or a cache entry.
	NoCompression
	// ZstdCompression compresses blocks with Zstandard (default level):
	// smaller files than snappy's for more CPU per block written and read.
	// Its segments have format version 3, which builds before it do not
	// read (segment/FORMAT.md).
	ZstdCompression
)

// String returns "snappy", "none" or "zstd": the segment codec's name.
func (c Compression) String() string {
	if c > ZstdCompression {
		return fmt.Sprintf("Compression(%d)", uint8(c))
	}
	return c.codec().String()
}

// codec is the segment codec c names.
func (c Compression) codec() segment.Compression {
	switch c {
	case NoCompression:
		return segment.NoCompression
	case ZstdCompression:
		return segment.ZstdCompression
	}
	return segment.SnappyCompression
}

// ParseCompression returns the codec named "snappy", "none" or "zstd" (as
// String writes them), for flags and configuration files.
func ParseCompression(name string) (Compression, error) {
	for _, c := range []Compression{SnappyCompression, NoCompression, ZstdCompression} {
		if name == c.String() {
			return c, nil
		}
	}
	return 0, fmt.Errorf("%w: compression %q, want snappy, none or zstd", ErrInvalidOptions, name)
}

// checkCompression refuses an unknown codec, and DisableCompression with
// a codec other than snappy (the zero value, which DisableCompression
// overrides as it always did) or none: that setting contradicts itself.
func checkCompression(o *Options) error {
	switch {
	case o.Compression > ZstdCompression:
		return fmt.Errorf("%w: Compression = %v, want SnappyCompression, NoCompression or ZstdCompression", ErrInvalidOptions, o.Compression)
	case o.DisableCompression && o.Compression == ZstdCompression:
		return fmt.Errorf("%w: DisableCompression with Compression = %v: set one of them", ErrInvalidOptions, o.Compression)
	}
	return nil
}

// segmentCompression is the codec segment writers use under o, which
// passed checkCompression.
func (o *Options) segmentCompression() segment.Compression {
	if o.DisableCompression {
		return segment.NoCompression
	}
	return o.Compression.codec()
}
