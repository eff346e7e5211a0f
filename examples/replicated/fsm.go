package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bloomkv/bloomkv"
	"github.com/hashicorp/raft"
)

// Commands in the raft log: an op byte, the key (uvarint length, bytes),
// and for opPut the value (the rest).
const (
	opPut    = 1
	opDelete = 2
)

// metaPrefix marks the keys the service keeps for itself (a node's HTTP
// address under metaPrefix+"node/"+id); clients' keys may not start with it.
const metaPrefix = "\x00"

func encodeCommand(op byte, key, value []byte) []byte {
	b := append([]byte{op}, binary.AppendUvarint(nil, uint64(len(key)))...)
	b = append(b, key...)
	return append(b, value...)
}

func decodeCommand(b []byte) (op byte, key, value []byte, err error) {
	if len(b) < 2 {
		return 0, nil, nil, errors.New("short command")
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || n > uint64(len(b)-1-w) {
		return 0, nil, nil, errors.New("malformed command")
	}
	key = b[1+w : 1+w+int(n)]
	return b[0], key, b[1+w+int(n):], nil
}

// fsm is the replicated state machine: a bloomkv DB to which the committed
// commands are applied in log order.
type fsm struct {
	db *bloomkv.DB
}

// Apply applies one committed command. The raft log is the durable record,
// so the write is not fsynced: after a crash raft restores the latest
// snapshot and applies the log after it again.
func (f *fsm) Apply(l *raft.Log) any {
	op, key, value, err := decodeCommand(l.Data)
	if err != nil {
		return fmt.Errorf("log %d: %w", l.Index, err)
	}
	switch op {
	case opPut:
		err = f.db.Put(key, value)
	case opDelete:
		err = f.db.Delete(key)
	default:
		err = fmt.Errorf("log %d: unknown op %d", l.Index, op)
	}
	return err
}

// Snapshot fixes the DB's state with a bloomkv snapshot; Persist streams
// it while Apply goes on.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.db.NewSnapshot()
	if err != nil {
		return nil, fmt.Errorf("fsm snapshot: %w", err)
	}
	return &fsmSnapshot{snap: s}, nil
}

// Restore replaces the DB's content with a snapshot's: every key is
// deleted, then the snapshot's keys are loaded, in batches.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.clear(); err != nil {
		return fmt.Errorf("fsm restore: clear: %w", err)
	}
	r := bufio.NewReaderSize(rc, 1<<16)
	b := bloomkv.NewBatch()
	for {
		key, err := readFrame(r)
		if err != nil {
			return fmt.Errorf("fsm restore: %w", err)
		}
		if len(key) == 0 { // the end mark
			break
		}
		value, err := readFrame(r)
		if err != nil {
			return fmt.Errorf("fsm restore: %w", err)
		}
		b.Put(key, value)
		if b.Size() >= 4<<20 {
			if err := f.db.Write(b); err != nil {
				return fmt.Errorf("fsm restore: %w", err)
			}
			b.Reset()
		}
	}
	if err := f.db.Write(b); err != nil {
		return fmt.Errorf("fsm restore: %w", err)
	}
	return nil
}

// clear deletes every key of the DB in one atomic batch: a range
// deletion of everything below the last key, and the last key itself.
func (f *fsm) clear() error {
	it, err := f.db.NewIterator(nil)
	if err != nil {
		return err
	}
	if !it.Last() {
		return it.Close()
	}
	last := bytes.Clone(it.Key())
	if err := it.Close(); err != nil {
		return err
	}
	b := bloomkv.NewBatch()
	b.DeleteRange(nil, last)
	b.Delete(last)
	return f.db.Write(b)
}

// fsmSnapshot streams a bloomkv snapshot: for each key in order, the key and
// the value, each as a uvarint length and its bytes; then an empty key as
// the end mark, so that a truncated stream is an error, not a smaller
// state.
type fsmSnapshot struct {
	snap *bloomkv.Snapshot
}

// Persist writes the snapshot to sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.persist(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("fsm persist: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) persist(sink io.Writer) error {
	it, err := s.snap.NewIterator(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	w := bufio.NewWriterSize(sink, 1<<16)
	for k, v := range it.All() {
		writeFrame(w, k)
		writeFrame(w, v)
	}
	if err := it.Error(); err != nil {
		return err
	}
	writeFrame(w, nil)
	return w.Flush()
}

// Release closes the bloomkv snapshot.
func (s *fsmSnapshot) Release() { s.snap.Close() }

func writeFrame(w *bufio.Writer, b []byte) {
	var n [binary.MaxVarintLen64]byte
	w.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	w.Write(b)
}

func readFrame(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("snapshot frame: %w", noEOF(err))
	}
	if n > bloomkv.MaxValueSize {
		return nil, fmt.Errorf("snapshot frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("snapshot frame: %w", noEOF(err))
	}
	return b, nil
}

// noEOF turns a clean EOF into io.ErrUnexpectedEOF: a snapshot ends with
// its end mark, never with EOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
