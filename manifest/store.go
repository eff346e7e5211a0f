package manifest

import (
	"bytes"
	"encoding/binary"
	"slices"
	"unsafe"

	bolt "go.etcd.io/bbolt"

	"github.com/bloomkv/bloomkv/internal/base"
)

// formatVersion is the value of meta/format-version this package writes;
// see FORMAT.md. Version 1 manifests (three unprotected counter keys, file
// numbers persisted after use) are still read, and upgraded by the first
// Apply.
const (
	formatVersion       = 2
	legacyFormatVersion = 1
)

// FormatVersion is the manifest format version this package writes
// (FORMAT.md); it also reads MinFormatVersion, and upgrades it.
const FormatVersion = formatVersion

// MinFormatVersion is the oldest manifest format version this package
// reads.
const MinFormatVersion = legacyFormatVersion

// Bucket and key names; see FORMAT.md.
const (
	metaBucket     = "meta"
	segmentsBucket = "segments"

	keyFormatVersion = "format-version"
	keyCounters      = "counters"

	// Version 1 kept each counter under its own key, without a checksum.
	keyNextFileNum = "next-file-num"
	keyFlushedSeq  = "flushed-seq"
	keyLogNum      = "log-num"
)

// firstFileNum is the NextFileNum of a new manifest. File number 0 is
// reserved so that it can mean "none" elsewhere.
const firstFileNum = 1

// MaxFileNum bounds file numbers. No store comes near it (a file a
// millisecond for two million years), so a larger number on disk is damage
// or a foreign file, and counters never overflow.
const MaxFileNum = 1 << 56

// u64 encodes v as the 8-byte big-endian value (or key) the layout uses.
// Big-endian keys make bbolt's byte order match numeric order.
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// initialize creates the buckets of an empty manifest holding st.
func initialize(tx *bolt.Tx, st State) error {
	if _, err := tx.CreateBucket([]byte(metaBucket)); err != nil {
		return err
	}
	if _, err := tx.CreateBucket([]byte(segmentsBucket)); err != nil {
		return err
	}
	return writeCounters(tx.Bucket([]byte(metaBucket)), st)
}

// writeCounters stores st's counters as one checksummed record. It also
// writes the format version, so that the first commit to a version-1
// manifest upgrades it (and removes the old, unprotected keys).
func writeCounters(meta *bolt.Bucket, st State) error {
	for _, k := range []string{keyNextFileNum, keyFlushedSeq, keyLogNum} {
		if err := meta.Delete([]byte(k)); err != nil {
			return err
		}
	}
	if err := meta.Put([]byte(keyFormatVersion), u64(formatVersion)); err != nil {
		return err
	}
	c := counters{NextFileNum: st.NextFileNum, FlushedSeq: st.FlushedSeq, LogNum: st.LogNum}
	return meta.Put([]byte(keyCounters), encodeCounters(c))
}

// writeEdit stores an already validated edit whose resulting state is st.
func writeEdit(tx *bolt.Tx, e Edit, st State) error {
	segs := tx.Bucket([]byte(segmentsBucket))
	for _, fn := range e.Remove {
		if err := segs.Delete(u64(fn)); err != nil {
			return err
		}
	}
	for _, seg := range e.Add {
		if err := segs.Put(u64(seg.FileNum), encodeSegmentMeta(seg)); err != nil {
			return err
		}
	}
	if err := writePrefixExtractor(tx.Bucket([]byte(metaBucket)), e); err != nil {
		return err
	}
	return writeCounters(tx.Bucket([]byte(metaBucket)), st)
}

// load reads and checks the whole manifest. name is the file's base name,
// for error messages.
func load(tx *bolt.Tx, name string) (State, error) {
	meta := tx.Bucket([]byte(metaBucket))
	if meta == nil {
		return State{}, base.Corruptf(name, -1, "no %q bucket: not a bloomkv manifest", metaBucket)
	}
	version, err := getU64(meta, name, keyFormatVersion)
	if err != nil {
		return State{}, err
	}
	versionAt := valueOffset(meta, meta.Get([]byte(keyFormatVersion)), 0)
	var st State
	switch version {
	case formatVersion:
		err = loadCounters(meta, name, &st)
	case legacyFormatVersion:
		err = loadLegacyCounters(meta, name, &st)
		st.Legacy = true
	default:
		err = base.Corruptf(name, versionAt, "format version %d, this build reads %d and %d", version, legacyFormatVersion, formatVersion)
	}
	if err != nil {
		return State{}, err
	}
	if err := st.checkCounters(); err != nil {
		at := valueOffset(meta, meta.Get([]byte(keyCounters)), 0) // -1 in a legacy manifest: three values
		return State{}, base.Corruptf(name, at, "%v", err)
	}
	if err := loadPrefixExtractor(meta, name, &st); err != nil {
		return State{}, err
	}
	segs, err := loadSegments(tx, name, st.NextFileNum)
	if err != nil {
		return State{}, err
	}
	st.Segments = segs
	return st, nil
}

// loadCounters decodes the checksummed counters record of version 2.
func loadCounters(meta *bolt.Bucket, name string, st *State) error {
	v := meta.Get([]byte(keyCounters))
	if v == nil {
		return base.Corruptf(name, -1, "meta/%s missing", keyCounters)
	}
	c, off, err := decodeCounters(v)
	if err != nil {
		return base.Corruptf(name, valueOffset(meta, v, off), "meta/%s: byte %d: %v", keyCounters, off, err)
	}
	st.NextFileNum, st.FlushedSeq, st.LogNum = c.NextFileNum, c.FlushedSeq, c.LogNum
	return nil
}

// loadLegacyCounters reads version 1's three separate counter keys.
func loadLegacyCounters(meta *bolt.Bucket, name string, st *State) (err error) {
	for _, f := range []struct {
		key string
		dst *uint64
	}{
		{keyNextFileNum, &st.NextFileNum},
		{keyFlushedSeq, &st.FlushedSeq},
		{keyLogNum, &st.LogNum},
	} {
		if *f.dst, err = getU64(meta, name, f.key); err != nil {
			return err
		}
	}
	return nil
}

// getU64 reads one 8-byte big-endian value of the meta bucket.
func getU64(meta *bolt.Bucket, name, key string) (uint64, error) {
	v := meta.Get([]byte(key))
	if len(v) != 8 {
		return 0, base.Corruptf(name, valueOffset(meta, v, 0), "meta/%s: %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// valueOffset returns the offset in the file of v[off], a byte of a value
// read from b, so that damage inside a record is reported where it is, as
// in the store's other files; -1 if it cannot be told. bbolt returns a
// value in place, as a slice of its read-only mapping of the file, whose
// start DB.Info gives: the difference of the addresses is the offset
// (nothing is read through them). A bucket small enough to be stored
// inline in its parent may be a copy instead (bbolt copies one that is
// not aligned); its value's bytes are then looked for in the file, which
// tells where they are if they occur once. Only for errors: the search
// reads the whole file.
func valueOffset(b *bolt.Bucket, v []byte, off int) int64 {
	if len(v) == 0 || off < 0 || off >= len(v) {
		return -1
	}
	tx := b.Tx()
	start := tx.DB().Info().Data
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(v))); p >= start && int64(p-start) <= tx.Size()-int64(len(v)) {
		return int64(p-start) + int64(off)
	}
	var file bytes.Buffer
	if _, err := tx.WriteTo(&file); err != nil {
		return -1
	}
	data := file.Bytes()
	i := bytes.Index(data, v)
	if i < 0 || bytes.Contains(data[i+1:], v) {
		return -1
	}
	return int64(i + off)
}

// loadSegments decodes every segment record, checking that each is stored
// under its own file number and that the number was handed out.
func loadSegments(tx *bolt.Tx, name string, nextFileNum uint64) ([]base.SegmentMeta, error) {
	b := tx.Bucket([]byte(segmentsBucket))
	if b == nil {
		return nil, base.Corruptf(name, -1, "no %q bucket: not a bloomkv manifest", segmentsBucket)
	}
	var segs []base.SegmentMeta
	err := b.ForEach(func(k, v []byte) error {
		if len(k) != 8 || v == nil {
			return base.Corruptf(name, valueOffset(b, v, 0), "segments: key %x is not an 8-byte file number with a value", k)
		}
		fn := binary.BigEndian.Uint64(k)
		seg, off, err := decodeSegmentMetaAt(v)
		switch {
		case err != nil:
			return base.Corruptf(name, valueOffset(b, v, off), "segments/%d: byte %d of value: %v", fn, off, err)
		case seg.FileNum != fn:
			return base.Corruptf(name, valueOffset(b, v, 0), "segments/%d: value describes file %d", fn, seg.FileNum)
		case fn >= nextFileNum:
			return base.Corruptf(name, valueOffset(b, v, 0), "segments/%d: not below next file number %d", fn, nextFileNum)
		}
		segs = append(segs, seg)
		return nil
	})
	slices.SortFunc(segs, newestFirst)
	return segs, err
}
