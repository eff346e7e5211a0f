package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestMappedGroupTornByKill: a process killed while copying a group into
// the mapping leaves the bytes of the copies before the interrupted one,
// and any subset of the interrupted copy's bytes (memmove stores in no
// fixed order). For every such moment of every group, the log must read
// as its records up to some point and then a torn tail — never as damage
// followed by a valid record, which would keep the store from opening.
func TestMappedGroupTornByKill(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	mapping := make([]byte, 1<<20)
	f := &fakeFile{}
	w, err := NewMarkedWriter(f, "000007.wal", Mark{Synced: 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(mapping, f.Bytes()) // the header and first mark, written before the mapping is used
	w.UseMapping(Mapping{Bytes: mapping})
	type op struct {
		off int // in the mapping
		src []byte
	}
	var ops []op
	storeHook = func(dst, src []byte) {
		ops = append(ops, op{off: int(uintptr(unsafe.Pointer(&dst[0])) - uintptr(unsafe.Pointer(&mapping[0]))), src: bytes.Clone(src)})
		copy(dst, src)
	}
	defer func() { storeHook = nil }()

	var written [][]byte // payloads of the complete groups
	for group := range 40 {
		before := bytes.Clone(mapping[:w.Size()+1<<14])
		ops = ops[:0]
		var payloads [][]byte
		for range 1 + rng.IntN(4) {
			p := make([]byte, rng.IntN(700))
			for i := range p {
				p[i] = byte(rng.IntN(255) + 1)
			}
			payloads = append(payloads, p)
		}
		if _, err := w.WriteRecords(payloads...); err != nil {
			t.Fatal(err)
		}
		if group%3 == 0 {
			w.synced.Store(w.size.Load()) // as Sync would: the next group starts with a mark
		}
		// Kill during op k, after the bytes picked of it.
		for k := range ops {
			for range 8 {
				state := bytes.Clone(before)
				for _, o := range ops[:k] {
					copy(state[o.off:], o.src)
				}
				o := ops[k]
				for i, c := range o.src {
					if rng.IntN(2) == 0 {
						state[o.off+i] = c
					}
				}
				got := readMapped(t, state)
				if len(got) < len(written) {
					t.Fatalf("group %d, killed in copy %d: %d records read, but %d were complete before", group, k, len(got), len(written))
				}
			}
		}
		written = append(written, payloads...)
	}
}

// readMapped reads the log in b to its end, requiring that it ends cleanly
// or in a torn tail, and returns the payloads.
func readMapped(t *testing.T, b []byte) [][]byte {
	t.Helper()
	r := NewReader(bytes.NewReader(b), "000007.wal")
	var out [][]byte
	for {
		p, err := r.Next()
		switch {
		case err == nil:
			out = append(out, bytes.Clone(p))
			continue
		case err == io.EOF, errors.Is(err, ErrTornTail):
			return out
		default:
			t.Fatalf("after %d records: %v", len(out), err)
		}
	}
}

// TestMappedZeroAhead: a mapped Writer writes zeros through WriteAt just
// ahead of its records (zeroAhead). Every such write must be all zeros,
// lie wholly within the mapping at or past the bytes already appended
// (never over a record), come in chunks (not one per group), and cover
// every byte a record is copied to; past the mapping WriteAt appends the records themselves. A
// failed write of zeros must only stop the zeroing, and without
// Mapping.ZeroAhead there must be none. The log must read back as every
// record, in order, throughout.
func TestMappedZeroAhead(t *testing.T) {
	for _, tc := range []struct{ zeroAhead, fail bool }{{false, false}, {true, false}, {true, true}} {
		fail := tc.fail
		rng := rand.New(rand.NewPCG(21, 22))
		f := &fakeFile{}
		w, err := NewMarkedWriter(f, "000009.wal", Mark{Synced: 1})
		if err != nil {
			t.Fatal(err)
		}
		const mapLen = 5*zeroChunk + 1234
		file := make([]byte, mapLen, 8*zeroChunk) // the file; its first mapLen bytes are mapped
		copy(file, f.Bytes())
		var zeroWrites, pastWrites int
		failed := false
		w.UseMapping(Mapping{
			Bytes: file[:mapLen:mapLen],
			WriteAt: func(b []byte, off int64) (int, error) {
				isZeros := bytes.Equal(b, make([]byte, len(b)))
				if !isZeros && off == w.Size() && off+int64(len(b)) > mapLen {
					pastWrites++ // records that do not fit the mapping
				} else {
					zeroWrites++
					switch {
					case off < w.Size():
						t.Fatalf("zeros written at %d, before the end of the records at %d", off, w.Size())
					case off+int64(len(b)) > mapLen:
						t.Fatalf("zeros written to [%d, %d), past the mapping's %d bytes", off, off+int64(len(b)), mapLen)
					case !isZeros:
						t.Fatalf("a write of zeros at %d holds non-zero bytes", off)
					}
					if fail && zeroWrites == 3 {
						failed = true
						return 0, errors.New("injected failure")
					}
					if failed {
						t.Fatalf("zeros written at %d after a failed write of zeros", off)
					}
				}
				if end := off + int64(len(b)); end > int64(len(file)) {
					file = file[:end]
				}
				copy(file[off:], b)
				return len(b), nil
			},
			ZeroAhead: tc.zeroAhead,
		})
		var want [][]byte
		for len(file) < 7*zeroChunk {
			var payloads [][]byte
			for range 1 + rng.IntN(3) {
				p := make([]byte, rng.IntN(3000))
				for i := range p {
					p[i] = byte(rng.IntN(255) + 1)
				}
				payloads = append(payloads, p)
			}
			if _, err := w.WriteRecords(payloads...); err != nil {
				t.Fatal(err)
			}
			want = append(want, payloads...)
			if end := w.Size(); end <= mapLen && tc.zeroAhead && !failed && w.zeroed < end {
				t.Fatalf("records copied into the mapping up to %d, but zeros written only to %d", end, w.zeroed)
			}
			got := readMapped(t, file[:max(w.Size(), mapLen)])
			if len(got) != len(want) {
				t.Fatalf("%d records read back, %d written", len(got), len(want))
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("record %d differs", i)
				}
			}
		}
		if !tc.zeroAhead {
			if zeroWrites > 0 || pastWrites == 0 {
				t.Fatalf("without ZeroAhead: %d writes of zeros and %d past the mapping; want none and some", zeroWrites, pastWrites)
			}
			continue
		}
		if zeroWrites < 3 || pastWrites == 0 {
			t.Fatalf("fail=%v: %d writes of zeros and %d past the mapping; the test wants several of each", fail, zeroWrites, pastWrites)
		}
		// Zeros go in chunks well ahead, not a system call per group.
		if most := mapLen/zeroChunk + 2; zeroWrites > most {
			t.Fatalf("%d writes of zeros for a %d-byte mapping; want at most %d", zeroWrites, mapLen, most)
		}
	}
}

// TestTornTailInPreallocatedLog: a log written through a mapping of a
// preallocated file, killed in the middle of copying its last group,
// holds that group's complete records, then a torn one, then the file's
// zero bytes. Read by every kind of reader (strict, or allowing a power
// cut's loss under the same boot, another or an unknown one), it must
// give every complete record and end in a torn tail, never in corruption,
// which would keep the store from opening after a crash. The bytes a
// record that fails its checksum claims are searched for a valid record
// (badRecord), and the search must find none here: not in a large record
// of random bytes, whole or half stored, and not in one of byte-sized
// booleans, where a record header is plausible at one position in eight
// or so and the search runs past its budget.
func TestTornTailInPreallocatedLog(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	random := make([]byte, 2<<20)
	for i := 0; i+8 <= len(random); i += 8 {
		binary.LittleEndian.PutUint64(random[i:], rng.Uint64())
	}
	bools := boolArray(rng, 1<<20)
	mapping := make([]byte, len(random)+len(bools)+1<<20) // room for the records, then zeros
	f := &fakeFile{}
	w, err := NewMarkedWriter(f, "000042.wal", Mark{BootID: bootA})
	if err != nil {
		t.Fatal(err)
	}
	copy(mapping, f.Bytes())
	w.UseMapping(Mapping{Bytes: mapping})
	written := 0
	for g := range 6 {
		if _, err := w.WriteRecords(fmt.Appendf(nil, "group %d a", g), fmt.Appendf(nil, "group %d b", g)); err != nil {
			t.Fatal(err)
		}
		written += 2
		w.synced.Store(w.size.Load()) // as Sync would: the next group starts with a mark
	}
	before := bytes.Clone(mapping)
	type op struct {
		off int
		src []byte
	}
	var ops []op
	storeHook = func(dst, src []byte) {
		ops = append(ops, op{off: int(uintptr(unsafe.Pointer(&dst[0])) - uintptr(unsafe.Pointer(&mapping[0]))), src: bytes.Clone(src)})
		copy(dst, src)
	}
	_, err = w.WriteRecords([]byte("small"), random, bools, []byte("after"))
	storeHook = nil
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 5*3 {
		t.Fatalf("%d copies for a mark and four records, want 15", len(ops))
	}
	modes := []struct {
		name  string
		allow bool
		boot  [16]byte
	}{{"strict", false, [16]byte{}}, {"same boot", true, bootA}, {"rebooted", true, bootB}, {"boot unknown", true, [16]byte{}}}
	// Killed during copy k, after none or half of its bytes. Each record
	// takes three copies (length and type, payload, checksum); the first
	// record of the group is its mark.
	for k := range ops {
		for _, half := range []bool{false, true} {
			state := bytes.Clone(before)
			for _, o := range ops[:k] {
				copy(state[o.off:], o.src)
			}
			if half {
				for i := 0; i < len(ops[k].src); i += 2 {
					state[ops[k].off+i] = ops[k].src[i]
				}
			}
			complete := written + max(k/3-1, 0) // batch records whose checksum was stored
			for _, m := range modes {
				r := NewReader(bytes.NewReader(state), "000042.wal")
				if m.allow {
					r.AllowUnsyncedLoss(m.boot)
				}
				got, err := readAll(r)
				if !errors.Is(err, ErrTornTail) || len(got) != complete {
					t.Fatalf("killed in copy %d (half %v), %s: %d records, %v; want %d and a torn tail", k, half, m.name, len(got), err, complete)
				}
			}
		}
	}
}
