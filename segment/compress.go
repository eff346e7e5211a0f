package segment

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Compression is a block codec. Its value is the compression type byte of
// a block trailer (FORMAT.md, "Block trailer"), so every block records how
// it was stored, and one segment may mix codecs: a block the codec does
// not shrink by at least 1/8 is stored raw.
type Compression uint8

// The block codecs.
const (
	// NoCompression stores blocks as they are.
	NoCompression Compression = compressionNone
	// SnappyCompression compresses with snappy (block format): fast, the
	// default of the store.
	SnappyCompression Compression = compressionSnappy
	// ZstdCompression compresses with Zstandard (one frame per block, at
	// klauspost/compress's SpeedFastest, about zstd's level 1): smaller
	// blocks than snappy's for more CPU time per block written and read. A segment holding a zstd block has
	// format version 3.
	ZstdCompression Compression = compressionZstd
)

// String returns "none", "snappy" or "zstd".
func (c Compression) String() string {
	switch c {
	case NoCompression:
		return "none"
	case SnappyCompression:
		return "snappy"
	case ZstdCompression:
		return "zstd"
	}
	return fmt.Sprintf("Compression(%d)", uint8(c))
}

// Valid reports whether c is one of the codecs above.
func (c Compression) Valid() bool { return c <= ZstdCompression }

// zstdCodec holds one encoder and one decoder for the whole process, made
// on first use. Both are safe for concurrent EncodeAll and DecodeAll calls
// and keep pools of their internal state, so a block costs no allocation
// beyond its output (and none when the caller's buffer is large enough):
// a codec per block, or per writer, would allocate its tables (hundreds of
// KiB) each time.
var zstdCodec struct {
	once sync.Once
	enc  *zstd.Encoder
	dec  *zstd.Decoder
	err  error
}

func zstdInit() {
	c := &zstdCodec
	// SpeedFastest (about zstd's level 1): on 4 KiB blocks the default
	// level took twice the CPU time for 7% smaller blocks of text-like
	// data and none smaller of kvbench's (measured with BenchmarkCodec's
	// blocks and a level switch when this was chosen: every block is a
	// fresh frame, so the higher levels' larger tables buy little).
	// The block trailer's CRC-32C already covers the stored bytes, so a
	// frame checksum would add 4 bytes per block and check nothing more.
	// A single-segment frame always declares its content size (otherwise
	// frames under 256 bytes omit it), which the reader checks before it
	// allocates; blocks are below MaxBlockSize, so the window it implies
	// (the whole block) is bounded too.
	c.enc, c.err = zstd.NewWriter(nil,
		zstd.WithEncoderCRC(false),
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithSingleSegment(true))
	if c.err != nil {
		return
	}
	// A block is untrusted input. WithDecodeAllCapLimit makes DecodeAll
	// write at most cap(dst)-len(dst) bytes, which the reader sizes from
	// the frame's declared content size after checking it (readBlock), so
	// neither a lying header nor extra concatenated frames can make it
	// allocate; WithDecoderMaxMemory is a second bound at MaxBlockSize.
	// Concurrency 0 lets GOMAXPROCS blocks decode at once, as Gets do.
	c.dec, c.err = zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(MaxBlockSize),
		zstd.WithDecodeAllCapLimit(true))
}

// zstdEncoder returns the process's zstd encoder.
func zstdEncoder() (*zstd.Encoder, error) {
	zstdCodec.once.Do(zstdInit)
	return zstdCodec.enc, zstdCodec.err
}

// zstdDecoder returns the process's zstd decoder.
func zstdDecoder() (*zstd.Decoder, error) {
	zstdCodec.once.Do(zstdInit)
	return zstdCodec.dec, zstdCodec.err
}

// zstdDecodedLen returns the content size a zstd block declares in its
// frame header, after checking that the block is that one frame and
// nothing more (FORMAT.md, "Block trailer"): its blocks, walked by their
// 3-byte headers, and its checksum if it has one, end where the stored
// bytes do. The decoder alone would accept frames after it: DecodeAll
// decodes concatenated frames, and an empty or a skippable frame adds
// nothing to the output, so the check of the decoded length does not
// see them. The walk reads a header per zstd block (at most 128 KiB
// each), without decoding. The writer always records the content size;
// a frame without one is corruption.
func zstdDecodedLen(stored []byte) (uint64, error) {
	var h zstd.Header
	rest, err := h.DecodeAndStrip(stored)
	if err != nil {
		return 0, err
	}
	if h.Skippable {
		return 0, fmt.Errorf("skippable frame")
	}
	if !h.HasFCS {
		return 0, fmt.Errorf("frame declares no content size")
	}
	for last := false; !last; {
		if len(rest) < 3 {
			return 0, fmt.Errorf("frame ends inside a block header")
		}
		bh := uint32(rest[0]) | uint32(rest[1])<<8 | uint32(rest[2])<<16
		last, rest = bh&1 != 0, rest[3:]
		size := int(bh >> 3)
		switch bh >> 1 & 3 {
		case 1: // RLE: one byte, repeated size times
			size = 1
		case 3:
			return 0, fmt.Errorf("block of the reserved type")
		}
		if len(rest) < size {
			return 0, fmt.Errorf("frame ends inside a block of %d bytes", size)
		}
		rest = rest[size:]
	}
	if h.HasCheckSum {
		if len(rest) < 4 {
			return 0, fmt.Errorf("frame ends inside its checksum")
		}
		rest = rest[4:]
	}
	if len(rest) != 0 {
		return 0, fmt.Errorf("%d bytes after the frame", len(rest))
	}
	return h.FrameContentSize, nil
}
