package bloom

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

// opsRun drives a filter through a sequence of operations read from a byte
// program and checks it against a model after every step: the list of keys
// added. Since Union, Fold and the encodings all preserve bit identity,
// the filter must always equal, bit for bit, the filter of its current
// geometry built directly from the model's keys — which implies no false
// negatives. FuzzOperations and TestOperationsProperty share it.
type opsRun struct {
	t    testing.TB
	f    *Filter
	keys [][]byte
	next uint32 // numbers fresh keys, so that most adds are new keys
}

// opsUnits are the starting sizes in units (blocks or words): odd ones that
// cannot be halved, powers of two and c·2^j mixtures.
var opsUnits = []uint64{1, 2, 3, 4, 5, 8, 12, 16, 24, 40, 64, 96}

// newOpsRun picks the starting geometry from the first three bytes of prog
// and returns the rest of the program.
func newOpsRun(t testing.TB, prog []byte) (*opsRun, []byte) {
	var hdr [3]byte
	n := copy(hdr[:], prog)
	prog = prog[n:]
	g := Geometry{Layout: Blocked, K: 1 + int(hdr[1])%MaxK, Seed: uint64(hdr[2] >> 6)}
	unit := uint64(blockBits)
	if hdr[0]&1 == 1 {
		g.Layout, unit = Classic, wordBits
	}
	g.Bits = unit * opsUnits[int(hdr[0]>>1)%len(opsUnits)]
	return &opsRun{t: t, f: mustGeometry(t, g)}, prog
}

// newKey returns a fresh key, sometimes repeating an earlier one so that
// duplicates are exercised too.
func (r *opsRun) newKey(arg byte) []byte {
	if arg%8 == 0 && len(r.keys) > 0 {
		return r.keys[int(arg)%len(r.keys)]
	}
	r.next++
	k := binary.LittleEndian.AppendUint32([]byte{arg}, r.next)
	return k
}

// run executes the program: each op is two bytes, an opcode and an argument.
func (r *opsRun) run(prog []byte) {
	for len(prog) >= 2 {
		op, arg := prog[0], prog[1]
		prog = prog[2:]
		r.step(op%7, arg)
		r.check(op % 7)
	}
}

func (r *opsRun) step(op, arg byte) {
	t := r.t
	switch op {
	case 0, 1: // add 1..16 keys
		for range 1 + int(arg)%16 {
			k := r.newKey(arg)
			r.f.Add(k)
			r.keys = append(r.keys, k)
		}
	case 2: // union with a filter of the same geometry holding other keys
		other := mustGeometry(t, r.f.Geometry())
		for range int(arg) % 32 {
			k := r.newKey(arg)
			other.Add(k)
			r.keys = append(r.keys, k)
		}
		if err := r.f.Union(other); err != nil {
			t.Fatalf("Union of equal geometries: %v", err)
		}
	case 3: // union with a mismatched geometry must fail and change nothing
		g := r.f.Geometry()
		g.Seed++
		if arg&1 == 1 {
			g.K = g.K%MaxK + 1
		}
		before := clone(r.f)
		if err := r.f.Union(mustGeometry(t, g)); !errors.Is(err, ErrGeometry) {
			t.Fatalf("Union with %+v into %+v: error %v, want ErrGeometry", g, r.f.Geometry(), err)
		}
		sameBits(t, "after refused union", r.f, before)
	case 4: // halve, or be refused when no halvings are left
		left := r.f.Geometry().Halvings()
		err := r.f.Fold()
		if (left > 0) != (err == nil) || (err != nil && !errors.Is(err, ErrGeometry)) {
			t.Fatalf("Fold with %d halvings left: %v", left, err)
		}
	case 5: // MarshalBinary, UnmarshalBinary into a used filter
		data, err := r.f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		g := NewBitsPerKey(10, 10) // overwritten entirely
		g.Add([]byte("stale"))
		if err := g.UnmarshalBinary(data); err != nil {
			t.Fatalf("UnmarshalBinary of MarshalBinary: %v", err)
		}
		r.f = g
	case 6: // AppendBinary after a prefix, Decode in place
		prefix := bytes.Repeat([]byte{arg}, int(arg)%9)
		data := r.f.AppendBinary(prefix)
		if !bytes.Equal(data[:len(prefix)], prefix) {
			t.Fatal("AppendBinary overwrote its prefix")
		}
		d, err := Decode(data[len(prefix):])
		if err != nil {
			t.Fatalf("Decode of AppendBinary: %v", err)
		}
		r.f = d
	}
}

func (r *opsRun) check(op byte) {
	r.t.Helper()
	for _, k := range r.keys {
		if !r.f.Contains(k) {
			r.t.Fatalf("after op %d: false negative for key %x (%+v, %d keys)", op, k, r.f.Geometry(), len(r.keys))
		}
	}
	if got, want := r.f.Count(), uint64(len(r.keys)); got != want {
		r.t.Fatalf("after op %d: Count %d, want %d", op, got, want)
	}
	sameBits(r.t, "filter vs. direct build", r.f, buildFilter(r.t, r.f.Geometry(), r.keys))
}

func TestOperationsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 300 {
		prog := make([]byte, 3+2*(5+rng.IntN(40)))
		for j := range prog {
			prog[j] = byte(rng.Uint32())
		}
		r, ops := newOpsRun(t, prog)
		r.run(ops)
		if t.Failed() {
			t.Fatalf("program %d: %x", i, prog)
		}
	}
}

func FuzzOperations(f *testing.F) {
	f.Add([]byte{0x00, 6, 0, 0, 5, 2, 9, 4, 0, 5, 0, 6, 3, 4, 0})      // blocked, 1 block
	f.Add([]byte{0x15, 9, 0x40, 0, 15, 2, 31, 4, 0, 4, 0, 5, 1, 6, 7}) // classic, 64 words, seed 1
	f.Add([]byte{0x16, 31, 0xc0, 1, 200, 3, 1, 4, 0, 2, 8, 6, 3, 4, 0, 4, 0, 4, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 99 {
			// Each op checks every key so far and rebuilds the filter, so
			// a run costs O(ops²): 48 ops keep every input well under the
			// fuzzer's per-input patience; longer ones add only time.
			prog = prog[:99]
		}
		r, ops := newOpsRun(t, prog)
		r.run(ops)
	})
}
