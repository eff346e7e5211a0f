package segment

import (
	"bytes"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

// twoBlockSegment is a segment of the keys a and b, one per data block,
// whose index holds the separators seps (internal keys of seq 1) in that
// order, each pointing at the next block.
func twoBlockSegment(seps []string, props Properties) []byte {
	return twoBlockRaw(seps, props).assemble()
}

// twoBlockRaw is twoBlockSegment before assembly.
func twoBlockRaw(seps []string, props Properties) rawSegment {
	var data []byte
	var handles []blockHandle
	for _, k := range []string{"a", "b"} {
		bw := &blockWriter{restartInterval: 16}
		bw.add(appendInternalKey(nil, []byte(k), base.MakeTrailer(1, base.KindPut)), []byte("v"))
		blk := bw.finish()
		handles = append(handles, blockHandle{uint64(len(data)), uint64(len(blk))})
		data = append(data, storedBlock(blk, compressionNone)...)
	}
	ib := &blockWriter{restartInterval: 1}
	for i, s := range seps {
		ib.add(appendInternalKey(nil, []byte(s), base.MakeTrailer(1, base.KindPut)), appendHandle(nil, handles[i]))
	}
	return rawSegment{data: data, blocks: 2, props: props, index: bytes.Clone(ib.finish())}
}

// TestOpenChecksIndexOrder: Open refuses an index whose separators do not
// strictly increase, from the first pair on (a later Lookup's binary
// search would go astray), and opens the same blocks under increasing
// ones.
func TestOpenChecksIndexOrder(t *testing.T) {
	props := Properties{Entries: 2, DistinctKeys: 2, MinSeq: 1, MaxSeq: 1, Smallest: []byte("a"), Largest: []byte("b")}
	file := twoBlockSegment([]string{"a", "b"}, props)
	if _, err := Open(bytes.NewReader(file), int64(len(file)), ReaderOptions{Name: corruptName}); err != nil {
		t.Fatalf("increasing separators: %v", err)
	}
	for name, seps := range map[string][]string{
		"descending": {"b", "a"},
		"equal":      {"b", "b"},
	} {
		file := twoBlockSegment(seps, props)
		_, err := Open(bytes.NewReader(file), int64(len(file)), ReaderOptions{Name: corruptName})
		requireCorruptNaming(t, name+" separators", err)
	}
}

// TestOpenChecksFilterProperties: a segment without a filter block whose
// properties still describe a filter, by any one of its fields (bits, k,
// layout), is refused.
func TestOpenChecksFilterProperties(t *testing.T) {
	for name, set := range map[string]func(*Properties){
		"none":   func(*Properties) {},
		"bits":   func(p *Properties) { p.FilterBits = 512 },
		"k":      func(p *Properties) { p.FilterK = 3 },
		"layout": func(p *Properties) { p.FilterLayout = 1 },
	} {
		props := Properties{Entries: 2, DistinctKeys: 2, MinSeq: 1, MaxSeq: 1, Smallest: []byte("a"), Largest: []byte("b")}
		set(&props)
		file := twoBlockSegment([]string{"a", "b"}, props)
		_, err := Open(bytes.NewReader(file), int64(len(file)), ReaderOptions{Name: corruptName})
		if name == "none" {
			if err != nil {
				t.Fatalf("no filter, none described: %v", err)
			}
			continue
		}
		requireCorruptNaming(t, "no filter, "+name+" described", err)
	}
}

// TestOpenChecksBlockSizes: Open refuses properties whose index or filter
// size disagrees with the block the footer points at, by one byte either
// way.
func TestOpenChecksBlockSizes(t *testing.T) {
	props := Properties{Entries: 2, DistinctKeys: 2, MinSeq: 1, MaxSeq: 1, Smallest: []byte("a"), Largest: []byte("b")}
	for name, fix := range map[string]func(*Properties){
		"index size +1":  func(p *Properties) { p.IndexSize++ },
		"index size -1":  func(p *Properties) { p.IndexSize-- },
		"filter size +1": func(p *Properties) { p.FilterSize++ },
	} {
		s := twoBlockRaw([]string{"a", "b"}, props)
		s.fix = fix
		file := s.assemble()
		_, err := Open(bytes.NewReader(file), int64(len(file)), ReaderOptions{Name: corruptName})
		requireCorruptNaming(t, name, err)
	}
}
