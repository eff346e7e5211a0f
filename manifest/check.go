package manifest

// This file validates the bbolt structure of a manifest file before bbolt
// is allowed to map it. bbolt trusts its file: it reads pages through an
// mmap and unchecked pointer arithmetic, and answers damage with SIGBUS
// (pages past the end of the file), index panics, assertion panics, some
// on goroutines of its own that no caller can recover. So Open reads the
// whole (small) file with ordinary reads and walks every page bbolt could
// reach, with bounds checked, first. FORMAT.md lists what is checked.
//
// The layout constants and rules below come from go.etcd.io/bbolt v1.5.0
// (internal/common and the Tx/Bucket/Cursor code that reads them).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"

	"github.com/bloomkv/bloomkv/internal/base"
)

// bbolt's on-disk constants, which bbolt does not export.
const (
	boltMagic   = 0xED0CDAED
	boltVersion = 2

	pageHeaderSize   = 16 // id u64, flags u16, count u16, overflow u32
	elemSize         = 16 // leaf: flags, pos, ksize, vsize u32; branch: pos, ksize u32, child pgid u64
	bucketHeaderSize = 16 // root pgid u64 (0: inline bucket), sequence u64
	metaSize         = 64 // magic, version, page size, flags, root bucket, freelist, pgid, txid, checksum
	metaSummed       = 56 // the checksum covers the meta fields before it

	branchPage   = 0x01
	leafPage     = 0x02
	metaPage     = 0x04
	freelistPage = 0x10

	bucketLeafFlag = 0x01               // a leaf element whose value is a bucket
	noFreelist     = 0xFFFFFFFFFFFFFFFF // meta.freelist when none is stored (NoFreelistSync)
)

// Limits on what Check accepts. A manifest holds a few thousand records at
// most, and every real page size (the OS page size) is within the range.
const (
	maxFileSize = 64 << 20
	minPageSize = 1 << 10
	maxPageSize = 64 << 10
)

// bbolt writes its structures in the machine's byte order.
var ne = binary.NativeEndian

// CheckResult describes a manifest file that Check accepted.
type CheckResult struct {
	PageSize  int    // bytes per page
	Meta      int    // the meta page (0 or 1) bbolt will read the file through
	Txid      uint64 // its transaction id
	HighWater uint64 // its page high-water mark: pages at or above it are unused

	// MetaFallback is true when the other meta page failed validation
	// (OtherMetaErr says why). bbolt then silently reads the file through
	// Meta, which may be one commit older than the last commit if the
	// damaged page was the newer one; a caller that must not lose a commit
	// should treat the file as suspect.
	MetaFallback bool
	OtherMetaErr error
}

// checkFile reads the manifest at path and validates it with Check. It
// takes no lock; Open and ReadState validate under bbolt's lock instead.
func checkFile(path string) (CheckResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return CheckResult{}, fmt.Errorf("manifest: check: %w", err)
	}
	defer f.Close()
	return checkOpenFile(f, filepath.Base(path))
}

// openChecked is the OpenFile function Open and ReadState give bbolt. It
// opens the existing file, takes bbolt's lock on it and validates it, all
// before bbolt reads a byte: checking under the lock means a writer in
// another process cannot be halfway through a commit, and checking before
// bbolt means bbolt never maps a file it would crash on.
func openChecked(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := openExisting(name, flag, perm)
	if err != nil {
		return nil, err
	}
	err = lockAsBolt(f, flag&(os.O_WRONLY|os.O_RDWR) != 0, lockTimeout)
	if err == nil {
		_, err = checkOpenFile(f, filepath.Base(name))
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// checkOpenFile reads all of f, refusing more than maxFileSize bytes, and
// validates it. ReadAt leaves the file offset alone for bbolt.
func checkOpenFile(f *os.File, name string) (CheckResult, error) {
	data, err := io.ReadAll(io.NewSectionReader(f, 0, maxFileSize+1))
	if err != nil {
		return CheckResult{}, fmt.Errorf("manifest: check %s: %w", name, err)
	}
	if len(data) > maxFileSize {
		return CheckResult{}, base.Corruptf(name, maxFileSize, "file larger than %d bytes", maxFileSize)
	}
	return Check(name, data)
}

// Check validates data, the whole content of a manifest file called name,
// as the bbolt database bbolt would read: the meta page bbolt would choose
// and every page reachable from it. Damage is reported as a
// *base.CorruptError naming name and the offset of the bad page or field.
// Check never panics, and its work is bounded by len(data).
func Check(name string, data []byte) (CheckResult, error) {
	c := &checker{name: name, data: data}
	res, err := c.chooseMeta()
	if err != nil {
		return CheckResult{}, err
	}
	if err := c.checkPages(res.Meta); err != nil {
		return CheckResult{}, err
	}
	return res, nil
}

// checker holds the file and what the walk has seen so far.
type checker struct {
	name string
	data []byte
	ps   int    // page size
	hwm  uint64 // high-water mark of the chosen meta
	used []bool // pages claimed by the walk, indexed by page id
}

func (c *checker) corrupt(off int, format string, args ...any) error {
	return base.Corruptf(c.name, int64(off), format, args...)
}

// meta is a decoded meta page, with the checksum bbolt would compute.
type meta struct {
	id                                    uint64 // page header
	flags                                 uint16
	magic, version, pageSize              uint32
	root, freelist, pgid, txid, sum, want uint64 // want: FNV-64a of the fields
}

// readMeta decodes the meta page at off, reading zeros past the end of the
// file as bbolt's probe of a short file does.
func readMeta(data []byte, off int) meta {
	var b [pageHeaderSize + metaSize]byte
	if off < len(data) {
		copy(b[:], data[off:])
	}
	h := fnv.New64a()
	h.Write(b[pageHeaderSize : pageHeaderSize+metaSummed])
	m := b[pageHeaderSize:]
	return meta{
		id: ne.Uint64(b[0:]), flags: ne.Uint16(b[8:]),
		magic: ne.Uint32(m[0:]), version: ne.Uint32(m[4:]), pageSize: ne.Uint32(m[8:]),
		root: ne.Uint64(m[16:]), freelist: ne.Uint64(m[32:]), pgid: ne.Uint64(m[40:]),
		txid: ne.Uint64(m[48:]), sum: ne.Uint64(m[56:]), want: h.Sum64(),
	}
}

// boltValid is exactly bbolt's own test of a meta page (Meta.Validate).
func (m meta) boltValid() bool {
	return m.magic == boltMagic && m.version == boltVersion && m.sum == m.want
}

// pageSize finds the page size the way bbolt's Open does: from meta page 0
// if it validates, else from the first valid meta page found at 1 KiB,
// 2 KiB, ... 16 MiB. Checking with any other page size than bbolt's would
// validate a different file from the one bbolt reads.
func (c *checker) pageSize() (int, error) {
	if m := readMeta(c.data, 0); m.boltValid() {
		return int(m.pageSize), nil
	}
	for i := 0; i <= 14; i++ {
		pos := 1024 << i
		if pos >= len(c.data)-1024 {
			break
		}
		if m := readMeta(c.data, pos); m.boltValid() {
			return int(m.pageSize), nil
		}
	}
	return 0, c.corrupt(0, "no valid bbolt meta page")
}

// chooseMeta settles the page size and file size, then picks the meta page
// bbolt will use: the higher txid (meta 0 on a tie) if it passes bbolt's
// own validation, else the other. The chosen page must also pass our
// stricter checks, since bbolt would use it regardless; the other page
// failing them is reported in the result.
func (c *checker) chooseMeta() (CheckResult, error) {
	if len(c.data) < 4*minPageSize {
		return CheckResult{}, c.corrupt(0, "file of %d bytes is too small for a bbolt database", len(c.data))
	}
	ps, err := c.pageSize()
	if err != nil {
		return CheckResult{}, err
	}
	if ps < minPageSize || ps > maxPageSize || ps&(ps-1) != 0 {
		return CheckResult{}, c.corrupt(pageHeaderSize+8, "page size %d: not a power of two in [%d, %d]", ps, minPageSize, maxPageSize)
	}
	if len(c.data)%ps != 0 || len(c.data) < 4*ps {
		return CheckResult{}, c.corrupt(len(c.data)/ps*ps, "file of %d bytes is not at least 4 whole pages of %d bytes", len(c.data), ps)
	}
	c.ps = ps
	metas := [2]meta{readMeta(c.data, 0), readMeta(c.data, ps)}
	chosen := 0
	if metas[1].txid > metas[0].txid {
		chosen = 1
	}
	if !metas[chosen].boltValid() {
		chosen = 1 - chosen
	}
	if !metas[chosen].boltValid() {
		return CheckResult{}, c.corrupt(0, "neither meta page is valid")
	}
	if err := c.checkMeta(metas[chosen], chosen); err != nil {
		return CheckResult{}, err
	}
	m := metas[chosen]
	c.hwm = m.pgid
	res := CheckResult{PageSize: ps, Meta: chosen, Txid: m.txid, HighWater: m.pgid}
	if err := c.checkMeta(metas[1-chosen], 1-chosen); err != nil {
		res.MetaFallback, res.OtherMetaErr = true, err
	}
	return res, nil
}

// checkMeta checks one meta page in full. Fields are protected by the
// checksum, so beyond it these catch a file bbolt did not write.
func (c *checker) checkMeta(m meta, slot int) error {
	off := slot*c.ps + pageHeaderSize
	filePages := uint64(len(c.data) / c.ps)
	switch {
	case m.magic != boltMagic:
		return c.corrupt(off, "meta page %d: magic %#x, want %#x", slot, m.magic, uint32(boltMagic))
	case m.version != boltVersion:
		return c.corrupt(off+4, "meta page %d: version %d, want %d", slot, m.version, boltVersion)
	case m.sum != m.want:
		return c.corrupt(off+metaSummed, "meta page %d: checksum %#x, want %#x", slot, m.sum, m.want)
	case m.id != uint64(slot) || m.flags != metaPage:
		return c.corrupt(off-pageHeaderSize, "meta page %d: header says page %d, flags %#x", slot, m.id, m.flags)
	case m.txid%2 != uint64(slot):
		return c.corrupt(off+48, "meta page %d: txid %d belongs in the other meta page", slot, m.txid)
	case int(m.pageSize) != c.ps:
		return c.corrupt(off+8, "meta page %d: page size %d, file uses %d", slot, m.pageSize, c.ps)
	case m.pgid < 4 || m.pgid > filePages:
		return c.corrupt(off+40, "meta page %d: high-water mark %d pages, file has %d", slot, m.pgid, filePages)
	case m.root < 2 || m.root >= m.pgid:
		return c.corrupt(off+16, "meta page %d: root bucket page %d outside [2, %d)", slot, m.root, m.pgid)
	case m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.pgid):
		return c.corrupt(off+32, "meta page %d: freelist page %d outside [2, %d)", slot, m.freelist, m.pgid)
	}
	return nil
}

// checkPages walks everything the chosen meta page reaches: its freelist
// page, if any, and the B+tree of every bucket.
func (c *checker) checkPages(slot int) error {
	m := readMeta(c.data, slot*c.ps)
	at := slot*c.ps + pageHeaderSize
	c.used = make([]bool, c.hwm)
	var free []uint64
	if m.freelist != noFreelist {
		var err error
		if free, err = c.freelist(m.freelist, at+32); err != nil {
			return err
		}
	}
	if err := c.tree(m.root, at+16, nil, nil); err != nil {
		return err
	}
	// bbolt would hand a free page that is in use to a new write.
	for _, id := range free {
		if c.used[id] {
			return c.corrupt(int(id)*c.ps, "page %d is both on the freelist and in use", id)
		}
	}
	return nil
}

// claim returns page id with its overflow pages, first checking that it is
// below the high-water mark, says it is page id, and was not reached
// before: a page reached twice is a cycle or a shared subtree. from is the
// offset of the reference, for errors.
func (c *checker) claim(id uint64, from int) ([]byte, int, error) {
	if id < 2 || id >= c.hwm {
		return nil, 0, c.corrupt(from, "reference to page %d outside [2, %d)", id, c.hwm)
	}
	off := int(id) * c.ps
	if got := ne.Uint64(c.data[off:]); got != id {
		return nil, 0, c.corrupt(off, "page %d: header says page %d", id, got)
	}
	overflow := uint64(ne.Uint32(c.data[off+12:]))
	if overflow >= c.hwm-id {
		return nil, 0, c.corrupt(off+12, "page %d: %d overflow pages run past the high-water mark %d", id, overflow, c.hwm)
	}
	for p := id; p <= id+overflow; p++ {
		if c.used[p] {
			return nil, 0, c.corrupt(off, "page %d reached twice (cycle or shared page)", p)
		}
		c.used[p] = true
	}
	return c.data[off : off+int(overflow+1)*c.ps], off, nil
}

// freelist checks a stored freelist page and returns the page ids on it:
// strictly increasing (bbolt writes them sorted) and below the high-water
// mark. A count of 0xFFFF means the real count is in the first slot.
func (c *checker) freelist(id uint64, from int) ([]uint64, error) {
	p, off, err := c.claim(id, from)
	if err != nil {
		return nil, err
	}
	if f := ne.Uint16(p[8:]); f != freelistPage {
		return nil, c.corrupt(off+8, "freelist page %d: flags %#x", id, f)
	}
	slots := uint64(len(p)-pageHeaderSize) / 8
	n, first := uint64(ne.Uint16(p[10:])), uint64(0)
	if n == 0xFFFF {
		n, first = ne.Uint64(p[pageHeaderSize:]), 1
	}
	if n > slots-first {
		return nil, c.corrupt(off+10, "freelist page %d: %d ids do not fit in %d slots", id, n, slots-first)
	}
	ids := make([]uint64, n)
	for i := range ids {
		at := pageHeaderSize + int(first+uint64(i))*8
		ids[i] = ne.Uint64(p[at:])
		if ids[i] < 2 || ids[i] >= c.hwm || (i > 0 && ids[i] <= ids[i-1]) {
			return nil, c.corrupt(off+at, "freelist page %d: id %d out of order or outside [2, %d)", id, ids[i], c.hwm)
		}
	}
	return ids, nil
}

// tree checks the branch or leaf page id and, recursively, its children
// and the buckets its leaves hold. Every key under it must lie in [lo, hi)
// (nil: unbounded), the bounds its parent's separators set: bbolt's
// freelist rebuild at open panics on any key out of place.
func (c *checker) tree(id uint64, from int, lo, hi []byte) error {
	p, off, err := c.claim(id, from)
	if err != nil {
		return err
	}
	flags := ne.Uint16(p[8:])
	if flags != branchPage && flags != leafPage {
		return c.corrupt(off+8, "page %d: flags %#x, want branch or leaf", id, flags)
	}
	elems, end, err := c.elements(p, off, flags == leafPage, lo, hi)
	if err != nil {
		return err
	}
	// bbolt allocates exactly the pages a node needs, so a different
	// overflow count is damage (possibly to the element count).
	if need := (end+c.ps-1)/c.ps - 1; int(ne.Uint32(p[12:])) != need {
		return c.corrupt(off+12, "page %d: %d overflow pages, content needs %d", id, ne.Uint32(p[12:]), need)
	}
	if flags == leafPage {
		return c.buckets(elems)
	}
	if len(elems) == 0 {
		return c.corrupt(off+10, "page %d: branch page without children", id)
	}
	for i, e := range elems {
		next := hi
		if i+1 < len(elems) {
			next = elems[i+1].key
		}
		if err := c.tree(e.child, e.at+8, e.key, next); err != nil {
			return err
		}
	}
	return nil
}

// element is one decoded leaf or branch element.
type element struct {
	at         int    // file offset of the element, for errors
	vat        int    // file offset of the value
	flags      uint32 // leaf only
	key, value []byte // value: leaf only
	child      uint64 // branch only
}

// elements decodes and checks the elements of page p at file offset off.
// bbolt writes them as a packed run: element headers, then each key and
// value in element order with no gaps. Requiring exactly that layout
// catches a damaged count, position or size, not only one that points out
// of the page. It returns the elements and where their data ends.
func (c *checker) elements(p []byte, off int, leaf bool, lo, hi []byte) ([]element, int, error) {
	count := int(ne.Uint16(p[10:]))
	data := pageHeaderSize + count*elemSize
	if data > len(p) {
		return nil, 0, c.corrupt(off+10, "%d elements do not fit in a %d-byte page", count, len(p))
	}
	elems := make([]element, count)
	for i := range elems {
		at := pageHeaderSize + i*elemSize
		h, e := p[at:at+elemSize], &elems[i]
		e.at = off + at
		var pos, ksize, vsize uint64
		if leaf {
			e.flags, pos, ksize, vsize = ne.Uint32(h), uint64(ne.Uint32(h[4:])), uint64(ne.Uint32(h[8:])), uint64(ne.Uint32(h[12:]))
		} else {
			pos, ksize, e.child = uint64(ne.Uint32(h)), uint64(ne.Uint32(h[4:])), ne.Uint64(h[8:])
		}
		switch {
		case uint64(at)+pos != uint64(data):
			return nil, 0, c.corrupt(e.at, "element %d: data at %d, want %d (packed)", i, uint64(at)+pos, data)
		case ksize == 0:
			return nil, 0, c.corrupt(e.at, "element %d: empty key", i)
		case ksize+vsize > uint64(len(p)-data):
			return nil, 0, c.corrupt(e.at, "element %d: %d+%d bytes overrun the page", i, ksize, vsize)
		case e.flags&^bucketLeafFlag != 0:
			return nil, 0, c.corrupt(e.at, "element %d: unknown flags %#x", i, e.flags)
		}
		e.key = p[data : data+int(ksize)]
		e.value = p[data+int(ksize) : data+int(ksize+vsize)]
		e.vat = off + data + int(ksize)
		data += int(ksize + vsize)
		if err := c.inOrder(elems[:i+1], lo, hi); err != nil {
			return nil, 0, err
		}
	}
	return elems, data, nil
}

// inOrder checks the last of elems against its predecessor and the bounds.
func (c *checker) inOrder(elems []element, lo, hi []byte) error {
	i, e := len(elems)-1, elems[len(elems)-1]
	switch {
	case i == 0 && lo != nil && bytes.Compare(e.key, lo) < 0:
		return c.corrupt(e.at, "key %x sorts before its parent's separator %x", e.key, lo)
	case i > 0 && bytes.Compare(elems[i-1].key, e.key) >= 0:
		return c.corrupt(e.at, "key %x does not sort after the previous key %x", e.key, elems[i-1].key)
	case hi != nil && bytes.Compare(e.key, hi) >= 0:
		return c.corrupt(e.at, "key %x does not sort before the next separator %x", e.key, hi)
	}
	return nil
}

// buckets checks the nested buckets among a leaf's elements. A bucket
// value is a bucket header: a root page of its own, or root 0 and an
// inline leaf page right after the header.
func (c *checker) buckets(elems []element) error {
	for _, e := range elems {
		if e.flags&bucketLeafFlag == 0 {
			continue
		}
		if len(e.value) < bucketHeaderSize {
			return c.corrupt(e.at, "bucket %x: %d-byte header", e.key, len(e.value))
		}
		root := ne.Uint64(e.value)
		var err error
		switch {
		case root == 0:
			err = c.inline(e)
		case len(e.value) != bucketHeaderSize:
			err = c.corrupt(e.at, "bucket %x: %d bytes after a header with root page %d", e.key, len(e.value)-bucketHeaderSize, root)
		default:
			err = c.tree(root, e.at, nil, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// inline checks the leaf page embedded in the value of bucket element e.
// bbolt writes it with page id 0 and no overflow, sized exactly to its
// content, and never inlines a bucket that holds buckets.
func (c *checker) inline(e element) error {
	p := e.value[bucketHeaderSize:]
	if len(p) < pageHeaderSize {
		return c.corrupt(e.at, "inline bucket %x: %d-byte page", e.key, len(p))
	}
	if id, f, o := ne.Uint64(p), ne.Uint16(p[8:]), ne.Uint32(p[12:]); id != 0 || f != leafPage || o != 0 {
		return c.corrupt(e.at, "inline bucket %x: page header id %d, flags %#x, overflow %d", e.key, id, f, o)
	}
	elems, end, err := c.elements(p, e.vat+bucketHeaderSize, true, nil, nil)
	if err != nil {
		return err
	}
	if end != len(p) {
		return c.corrupt(e.at, "inline bucket %x: page of %d bytes, content ends at %d", e.key, len(p), end)
	}
	for _, in := range elems {
		if in.flags&bucketLeafFlag != 0 {
			return c.corrupt(e.at, "inline bucket %x holds bucket %x", e.key, in.key)
		}
	}
	return nil
}
