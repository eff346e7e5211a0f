package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bloomkv/bloomkv"
	"github.com/hashicorp/raft"
)

// Commands in the raft log: an op byte; for opPutID and opDeleteID the
// request ID (uvarint length, bytes); the key (uvarint length, bytes); and
// for the puts the value (the rest). opPut and opDelete carry no request
// ID (the service's own writes use them).
const (
	opPut      = 1
	opDelete   = 2
	opPutID    = 3
	opDeleteID = 4
)

// metaPrefix marks the keys the service keeps for itself (a node's HTTP
// address, the applied index, the request IDs seen); clients' keys may not
// start with it.
const metaPrefix = "\x00"

// Keys of the state machine's own records, all under metaPrefix.
var (
	appliedKey   = []byte(metaPrefix + "applied") // the last log index applied, 8 bytes big-endian
	reqPrefix    = []byte(metaPrefix + "req/")    // + request ID -> the index that applied it
	reqIdxPrefix = []byte(metaPrefix + "rqi/")    // + 8-byte index -> the request ID, for pruning in index order
)

// maxRequestID bounds a request ID's length.
const maxRequestID = 128

type command struct {
	op         byte
	id         []byte // request ID, nil if none
	key, value []byte
}

func encodeCommand(op byte, id, key, value []byte) []byte {
	b := []byte{op}
	if op == opPutID || op == opDeleteID {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
	}
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return append(b, value...)
}

func decodeCommand(b []byte) (c command, err error) {
	if len(b) < 2 {
		return c, errors.New("short command")
	}
	c.op, b = b[0], b[1:]
	field := func() ([]byte, error) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, errors.New("malformed command")
		}
		f := b[w : w+int(n)]
		b = b[w+int(n):]
		return f, nil
	}
	switch c.op {
	case opPutID, opDeleteID:
		if c.id, err = field(); err != nil {
			return c, err
		}
	case opPut, opDelete:
	default:
		return c, fmt.Errorf("unknown op %d", c.op)
	}
	if c.key, err = field(); err != nil {
		return c, err
	}
	c.value = b
	return c, nil
}

// applied is what Apply returns for a command: the index that applied it,
// which for a retried request is the index of its first application.
type applied struct {
	index     uint64
	duplicate bool
}

// fsm is the replicated state machine: a bloomkv DB to which the committed
// commands are applied in log order. The DB records the index of the last
// entry applied, in the same batch as that entry's change, so the DB alone
// says how far it is: a restarted node resumes from it, and raft's replay
// of entries it already holds is skipped.
//
// The DB lives in a generation directory DIR/g<N> named by DIR/CURRENT. A
// Restore builds the next generation beside it and swaps, so a reader sees
// either the old state or the new one, never an empty or partial store.
type fsm struct {
	dir    string
	opts   *bloomkv.Options
	window uint64 // request IDs are remembered for this many log entries
	fatal  func(error)

	mu  sync.RWMutex // held for reading by readers of db; for writing by the swap
	db  *bloomkv.DB
	gen uint64
	// lastGen is the newest generation directory made; a Restore makes
	// the one after it, never one that a failed switch may have left
	// CURRENT naming.
	lastGen uint64

	applied atomic.Uint64 // the DB's applied index
	snapSeq atomic.Uint64 // names checkpoint directories
}

// openFSM opens the state machine in dir (creating it if needed) and
// removes what an interrupted Restore or snapshot left.
func openFSM(dir string, window uint64, fatal func(error)) (*fsm, error) {
	f := &fsm{dir: dir, window: window, fatal: fatal}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cur, err := os.ReadFile(filepath.Join(dir, "CURRENT"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		f.gen = 1
	case err != nil:
		return nil, err
	default:
		g, err := strconv.ParseUint(strings.TrimSpace(string(cur)), 10, 64)
		if err != nil || g == 0 {
			return nil, fmt.Errorf("state machine: CURRENT holds %q", cur)
		}
		f.gen = g
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries { // other generations, checkpoints
		if e.IsDir() && e.Name() != f.genName(f.gen) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return nil, err
			}
		}
	}
	if f.db, err = bloomkv.Open(filepath.Join(dir, f.genName(f.gen)), f.opts); err != nil {
		return nil, fmt.Errorf("open state machine: %w", err)
	}
	f.lastGen = f.gen
	if _, err := f.writeCurrent(f.gen); err != nil {
		f.db.Close()
		return nil, err
	}
	idx, err := appliedIndex(f.db)
	if err != nil {
		f.db.Close()
		return nil, err
	}
	f.applied.Store(idx)
	return f, nil
}

func (f *fsm) genName(g uint64) string { return fmt.Sprintf("g%06d", g) }

// writeCurrent makes gen the current generation, atomically and durably.
// renamed says whether CURRENT may name gen (on disk or in the page
// cache) after a failure: the rename happened, its sync failed.
func (f *fsm) writeCurrent(gen uint64) (renamed bool, err error) {
	tmp := filepath.Join(f.dir, "CURRENT.tmp")
	if err := writeFileSync(tmp, []byte(strconv.FormatUint(gen, 10)+"\n")); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, "CURRENT")); err != nil {
		return false, err
	}
	return true, syncDir(f.dir)
}

// Close closes the DB.
func (f *fsm) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.db.Close()
}

// read runs fn on the current DB; a Restore waits until it returns.
func (f *fsm) read(fn func(db *bloomkv.DB) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return fn(f.db)
}

// get reads one key of the current DB.
func (f *fsm) get(key []byte) (v []byte, err error) {
	err = f.read(func(db *bloomkv.DB) error {
		v, err = db.Get(key)
		return err
	})
	return v, err
}

// appliedIndex reads the applied index a DB records, 0 if none.
func appliedIndex(db *bloomkv.DB) (uint64, error) {
	v, err := db.Get(appliedKey)
	if errors.Is(err, bloomkv.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("state machine: applied index: %w", err)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("state machine: applied index of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func u64(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

// Apply applies one committed command, and records its index, in one
// batch. An entry at or below the DB's applied index is already in the DB
// (raft replays the log after its latest snapshot on a restart) and is
// skipped. A command whose request ID the DB has seen within the window is
// not applied again. The write is not fsynced: it survives a process
// crash, and Snapshot syncs the DB before raft may drop log entries it
// covers.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Index <= f.applied.Load() {
		return nil
	}
	b := bloomkv.NewBatch()
	res, cmdErr := f.command(b, l)
	b.Put(appliedKey, u64(l.Index))
	if err := f.db.Write(b); err != nil {
		// The entry is committed but not in this DB: going on would leave a
		// hole in the state. Stop; a restart resumes from the DB's index.
		f.fatal(fmt.Errorf("state machine: apply %d: %w", l.Index, err))
		return err
	}
	f.applied.Store(l.Index)
	if cmdErr != nil {
		return cmdErr
	}
	return res
}

// command adds the changes of the command in l to b.
func (f *fsm) command(b *bloomkv.Batch, l *raft.Log) (applied, error) {
	c, err := decodeCommand(l.Data)
	if err != nil {
		return applied{}, fmt.Errorf("log %d: %w", l.Index, err)
	}
	if c.id != nil {
		v, err := f.db.Get(append(slices.Clip(reqPrefix), c.id...))
		switch {
		case err == nil && len(v) == 8:
			return applied{index: binary.BigEndian.Uint64(v), duplicate: true}, nil
		case err != nil && !errors.Is(err, bloomkv.ErrNotFound):
			f.fatal(fmt.Errorf("state machine: apply %d: %w", l.Index, err))
			return applied{}, err
		}
		b.Put(append(slices.Clip(reqPrefix), c.id...), u64(l.Index))
		b.Put(append(slices.Clip(reqIdxPrefix), u64(l.Index)...), c.id)
		if err := f.prune(b, l.Index); err != nil {
			f.fatal(fmt.Errorf("state machine: apply %d: %w", l.Index, err))
			return applied{}, err
		}
	}
	switch c.op {
	case opPut, opPutID:
		b.Put(c.key, c.value)
	case opDelete, opDeleteID:
		b.Delete(c.key)
	}
	if err := b.Err(); err != nil {
		return applied{}, fmt.Errorf("log %d: %w", l.Index, err)
	}
	return applied{index: l.Index}, nil
}

// prune forgets at most two request IDs recorded more than window entries
// before idx: each command with an ID adds one, so the table stays near
// window entries. It depends only on the DB, so every replica prunes alike.
func (f *fsm) prune(b *bloomkv.Batch, idx uint64) error {
	if idx <= f.window {
		return nil
	}
	it, err := f.db.NewIterator(&bloomkv.IterOptions{
		LowerBound: reqIdxPrefix,
		UpperBound: append(slices.Clip(reqIdxPrefix), u64(idx-f.window)...),
	})
	if err != nil {
		return err
	}
	defer it.Close()
	n := 0
	for k, v := range it.All() {
		if n == 2 {
			break
		}
		b.Delete(bytes.Clone(k))
		b.Delete(append(slices.Clip(reqPrefix), v...))
		n++
	}
	return it.Error()
}

// Snapshot syncs the DB (so that after power loss it still holds at least
// what the snapshot does, before raft may compact the log behind it) and
// takes a checkpoint of it: segments hard-linked, the WAL tail copied.
// Persist streams the checkpoint's files while Apply goes on.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.db.Sync(); err != nil {
		return nil, fmt.Errorf("fsm snapshot: %w", err)
	}
	dir := filepath.Join(f.dir, fmt.Sprintf("checkpoint-%d", f.snapSeq.Add(1)))
	os.RemoveAll(dir)
	if err := f.db.Checkpoint(dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("fsm snapshot: %w", err)
	}
	return &fsmSnapshot{dir: dir}, nil
}

// Restore replaces the state with a snapshot's: the snapshot's files are
// written into the next generation's directory and opened there; then the
// DB is swapped under the lock (readers finish first) and the generation
// made current. A failed Restore leaves the state as it was.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	gen := f.lastGen + 1
	dir := filepath.Join(f.dir, f.genName(gen))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("fsm restore: %w", err)
	}
	if err := extractSnapshot(rc, dir); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("fsm restore: %w", err)
	}
	db, err := bloomkv.Open(dir, f.opts)
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("fsm restore: %w", err)
	}
	idx, err := appliedIndex(db)
	if err != nil {
		db.Close()
		os.RemoveAll(dir)
		return fmt.Errorf("fsm restore: %w", err)
	}
	// CURRENT is switched before the DB: a failed switch then leaves the
	// old generation serving, as every failed Restore does. Both
	// generations are whole states raft knows how to go on from (the one
	// applied so far, and the snapshot's), so if the rename happened but
	// its sync failed, a restart may open either, and removes the other.
	if renamed, err := f.writeCurrent(gen); err != nil {
		db.Close()
		if renamed {
			f.lastGen = gen
		} else {
			os.RemoveAll(dir)
		}
		return fmt.Errorf("fsm restore: %w", err)
	}
	f.lastGen = gen
	f.mu.Lock()
	old, oldGen := f.db, f.gen
	f.db, f.gen = db, gen
	f.applied.Store(idx)
	f.mu.Unlock()
	old.Close()
	os.RemoveAll(filepath.Join(f.dir, f.genName(oldGen)))
	return nil
}

// fsmSnapshot is a checkpoint directory of the DB.
type fsmSnapshot struct {
	dir string
}

// Persist writes the checkpoint to sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(sink, s.dir); err != nil {
		sink.Cancel()
		return fmt.Errorf("fsm persist: %w", err)
	}
	return sink.Close()
}

// Release removes the checkpoint.
func (s *fsmSnapshot) Release() { os.RemoveAll(s.dir) }

// The snapshot stream: snapMagic; then for each file of the checkpoint its
// name and its content, each as a uvarint length and the bytes, and the
// CRC-32C of the content (4 bytes, big-endian); then an empty name as the
// end mark, so that a truncated stream is an error, not a smaller state.
const snapMagic = "bloomkv-checkpoint-1\n"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func writeSnapshot(sink io.Writer, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(sink, 1<<16)
	w.WriteString(snapMagic)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return fmt.Errorf("checkpoint holds %s, not a file", e.Name())
		}
		if err := writeSnapFile(w, dir, e.Name()); err != nil {
			return err
		}
	}
	w.WriteByte(0) // the end mark: a name of length 0
	return w.Flush()
}

func writeSnapFile(w *bufio.Writer, dir, name string) error {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	w.Write(binary.AppendUvarint(nil, uint64(len(name))))
	w.WriteString(name)
	w.Write(binary.AppendUvarint(nil, uint64(fi.Size())))
	h := crc32.New(castagnoli)
	if n, err := io.Copy(io.MultiWriter(w, h), f); err != nil {
		return err
	} else if n != fi.Size() {
		return fmt.Errorf("%s: read %d bytes of %d", name, n, fi.Size())
	}
	_, err = w.Write(binary.BigEndian.AppendUint32(nil, h.Sum32()))
	return err
}

// extractSnapshot writes the files of a snapshot stream into dir, each
// fsynced, and the directory too.
func extractSnapshot(r io.Reader, dir string) error {
	br := bufio.NewReaderSize(r, 1<<16)
	magic := make([]byte, len(snapMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapMagic {
		return fmt.Errorf("not a bloomkv checkpoint stream (%q, %v)", magic, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("snapshot: file name: %w", noEOF(err))
		}
		if n == 0 {
			break
		}
		if n > 255 {
			return fmt.Errorf("snapshot: file name of %d bytes", n)
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			return fmt.Errorf("snapshot: file name: %w", noEOF(err))
		}
		if s := string(name); s != filepath.Base(s) || s == "." || s == ".." || strings.ContainsAny(s, `/\`) {
			return fmt.Errorf("snapshot: bad file name %q", s)
		}
		size, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("snapshot: %s: size: %w", name, noEOF(err))
		}
		if err := extractFile(br, filepath.Join(dir, string(name)), size); err != nil {
			return fmt.Errorf("snapshot: %s: %w", name, err)
		}
	}
	return syncDir(dir)
}

func extractFile(br *bufio.Reader, path string, size uint64) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	h := crc32.New(castagnoli)
	_, err = io.CopyN(io.MultiWriter(out, h), br, int64(size))
	if err == nil {
		var sum [4]byte
		if _, err = io.ReadFull(br, sum[:]); err == nil && binary.BigEndian.Uint32(sum[:]) != h.Sum32() {
			err = errors.New("checksum mismatch")
		}
	}
	if err == nil {
		err = out.Sync()
	}
	return errors.Join(noEOF(err), out.Close())
}

func writeFileSync(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// noEOF turns a clean EOF into io.ErrUnexpectedEOF: a snapshot ends with
// its end mark, never with EOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
