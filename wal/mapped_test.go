package wal

import (
	"bytes"
	"errors"
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
