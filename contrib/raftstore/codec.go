package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/bloomkv/bloomkv"
	"github.com/hashicorp/raft"
)

// errCorrupt is behind every error for a stored value this package cannot
// decode.
var errCorrupt = errors.New("raftstore: corrupt value")

// logVersion is the first byte of every encoded log entry.
const logVersion = 1

// maxLogOverhead bounds what encodeLog adds to an entry's Data and
// Extensions: version and type, the term, the two lengths (each below
// bloomkv.MaxValueSize) and AppendedAt.
const maxLogOverhead = 1 + 1 + binary.MaxVarintLen64 + 2*binary.MaxVarintLen32 + 1 + binary.MaxVarintLen64 + binary.MaxVarintLen32

// MaxLogData is the most bytes of Data and Extensions together that one
// entry may hold. An entry is one bloomkv value, at most
// bloomkv.MaxValueSize bytes with its encoding, and StoreLogs refuses a
// larger one: raft then fails the Apply that carried it, with an error
// that leaves its outcome unknown, and a leader steps down. An application
// should refuse such a command before it calls raft.Apply.
const MaxLogData = bloomkv.MaxValueSize - maxLogOverhead

// encodeLog appends the encoding of l (all but its Index, which is the
// key) to buf:
//
//	version    byte     logVersion
//	type       byte     raft.LogType
//	term       uvarint
//	data       uvarint length, bytes
//	extensions uvarint length, bytes
//	appendedAt byte 0 (zero time), or byte 1, varint Unix seconds, uvarint nanoseconds
func encodeLog(buf []byte, l *raft.Log) []byte {
	buf = append(buf, logVersion, byte(l.Type))
	buf = binary.AppendUvarint(buf, l.Term)
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	if l.AppendedAt.IsZero() {
		return append(buf, 0)
	}
	buf = append(buf, 1)
	buf = binary.AppendVarint(buf, l.AppendedAt.Unix())
	return binary.AppendUvarint(buf, uint64(l.AppendedAt.Nanosecond()))
}

// decodeLog decodes what encodeLog wrote into l (all but Index). Data and
// Extensions are fresh slices, nil when empty.
func decodeLog(b []byte, l *raft.Log) error {
	d := decoder{b: b}
	if v := d.byte(); v != logVersion && d.err == nil {
		return fmt.Errorf("%w: log encoding version %d, want %d", errCorrupt, v, logVersion)
	}
	typ := raft.LogType(d.byte())
	term := d.uvarint()
	data := d.bytes()
	ext := d.bytes()
	var at time.Time
	switch d.byte() {
	case 0:
	case 1:
		sec, nsec := d.varint(), d.uvarint()
		if nsec >= 1e9 {
			d.fail()
		}
		at = time.Unix(sec, int64(nsec))
	default:
		d.fail()
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return d.err
	}
	*l = raft.Log{Term: term, Type: typ, Data: data, Extensions: ext, AppendedAt: at}
	return nil
}

// decoder reads the fields of an encoded log; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: malformed log entry", errCorrupt)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	if n == 0 {
		return nil
	}
	out := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return out
}
