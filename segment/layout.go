package segment

// optionalBlock is one of the optional metadata blocks of format version 2
// that lie between the filter block (or the data blocks) and the
// properties block, in file order. Each is located by a property giving
// its stored length (0: absent); it starts where the previous one's
// trailer ends.
type optionalBlock struct {
	name   string       // for errors
	length uint64       // from the properties; 0 if absent
	h      *blockHandle // set by checkLayout
}

// optionalBlocks lists the optional blocks in file order (FORMAT.md,
// "File layout"). A later block type is one more entry here.
func (r *Reader) optionalBlocks() []optionalBlock {
	return []optionalBlock{
		{"prefix filter", r.props.PrefixFilterSize, &r.prefix.h},
		{"range-deletion", r.props.RangeDelSize, &r.rangeDelBlock},
	}
}

// checkLayout locates the optional blocks from the properties and checks
// that the data blocks, the filter and the optional blocks tile the file
// up to the properties block without gaps: the data blocks end at
// data-size, where the filter (if any) starts, and the optional blocks'
// lengths plus trailers fill exactly the rest. A version-1 file has no
// optional blocks.
func (r *Reader) checkLayout() error {
	ft, p := &r.footer, &r.props
	propsOff := ft.properties.offset
	if p.DataSize > propsOff {
		return r.corrupt(propsOff, "properties: data size %d, but the properties block starts at %d", p.DataSize, propsOff)
	}
	next := p.DataSize // where the next block must start
	if ft.filter != (blockHandle{}) {
		if ft.filter.offset != p.DataSize {
			return r.corrupt(propsOff, "properties: data size %d, but the filter block starts at %d", p.DataSize, ft.filter.offset)
		}
		next = ft.filter.end() // readFooter checked it is <= propsOff
	}
	for _, b := range r.optionalBlocks() {
		*b.h = blockHandle{}
		if b.length == 0 {
			continue
		}
		if ft.version < 2 {
			return r.corrupt(propsOff, "properties: a version-%d segment with a %s block", ft.version, b.name)
		}
		if b.length > propsOff-next || propsOff-next-b.length < blockTrailerLen {
			return r.corrupt(propsOff, "properties: %s block of %d bytes at %d runs past the properties block at %d",
				b.name, b.length, next, propsOff)
		}
		*b.h = blockHandle{offset: next, length: b.length}
		next = b.h.end()
	}
	if next != propsOff {
		return r.corrupt(propsOff, "properties: the data, filter and optional blocks end at %d, but the properties block starts at %d", next, propsOff)
	}
	return nil
}
