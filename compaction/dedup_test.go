package compaction

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

type version struct {
	key  string
	seq  uint64
	kind base.Kind
}

// versions is a forward Iterator over sorted versions.
type versions struct {
	vs []version
	i  int
}

func (v *versions) First() bool { v.i = 0; return v.i < len(v.vs) }
func (v *versions) Next() bool  { v.i++; return v.i < len(v.vs) }
func (v *versions) InternalKey() ([]byte, uint64) {
	return []byte(v.vs[v.i].key), base.MakeTrailer(v.vs[v.i].seq, v.vs[v.i].kind)
}
func (v *versions) Value() []byte { return nil }
func (v *versions) Error() error  { return nil }

// read returns what a reader at seq sees for key in vs: the kind of the
// newest version with seq <= at, or false if there is none (or it is a
// deletion).
func read(vs []version, key string, at uint64) bool {
	for _, v := range vs { // sorted: newest first within a key
		if v.key == key && v.seq <= at {
			return v.kind == base.KindPut
		}
	}
	return false
}

// TestDedupKeepsWhatReadersSee: for random versions and snapshots, every
// snapshot and the latest reader see the same thing after Dedup as before,
// and Dedup keeps at most one version per key and stripe.
func TestDedupKeepsWhatReadersSee(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 2000 {
		var vs []version
		n := rng.IntN(60)
		for seq := 1; seq <= n; seq++ {
			vs = append(vs, version{fmt.Sprintf("k%d", rng.IntN(8)), uint64(seq), base.Kind(rng.IntN(2))})
		}
		sortVersions(vs)
		snaps, drop := randomSnapshots(rng, n)
		d := NewDedup(&versions{vs: vs}, snaps, drop)
		var out []version
		for ok := d.First(); ok; ok = d.Next() {
			k, trailer := d.InternalKey()
			seq, kind := base.SplitTrailer(trailer)
			out = append(out, version{string(k), seq, kind})
		}
		readers := append(slices.Clone(snaps), ^uint64(0))
		for k := range 8 {
			key := fmt.Sprintf("k%d", k)
			for _, at := range readers {
				if read(vs, key, at) != read(out, key, at) {
					t.Fatalf("trial %d: reader at %d sees %s differently after Dedup (snaps %v, drop %v)\nin  %v\nout %v", trial, at, key, snaps, drop, vs, out)
				}
			}
		}
		perStripe := map[string]bool{}
		for _, v := range out {
			ks := fmt.Sprint(v.key, d.stripe(v.seq))
			if perStripe[ks] {
				t.Fatalf("trial %d: two versions of %s kept in one stripe (snaps %v): %v", trial, v.key, snaps, out)
			}
			perStripe[ks] = true
		}
		if drop && len(snaps) == 0 {
			for _, v := range out {
				if v.kind == base.KindDelete {
					t.Fatalf("trial %d: tombstone %v kept with no snapshot open", trial, v)
				}
			}
		}
	}
}

// sortVersions puts vs in the order of internal keys: by key, newest
// first.
func sortVersions(vs []version) {
	slices.SortFunc(vs, func(a, b version) int {
		return base.Compare([]byte(a.key), base.MakeTrailer(a.seq, a.kind), []byte(b.key), base.MakeTrailer(b.seq, b.kind))
	})
}

// randomSnapshots draws up to three snapshot sequence numbers in [0, n]
// and whether a merge may drop the oldest stripe's tombstones.
func randomSnapshots(rng *rand.Rand, n int) (snaps []uint64, drop bool) {
	for range rng.IntN(4) {
		snaps = append(snaps, uint64(rng.IntN(n+1)))
	}
	return snaps, rng.IntN(2) == 0
}
