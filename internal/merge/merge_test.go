package merge

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bloomkv/bloomkv/internal/base"
)

type entry struct {
	key  string
	seq  uint64
	kind base.Kind
}

func cmpEntry(a, b entry) int {
	return base.Compare([]byte(a.key), base.MakeTrailer(a.seq, a.kind), []byte(b.key), base.MakeTrailer(b.seq, b.kind))
}

// sliceSource is a base.InternalIterator over sorted entries.
type sliceSource struct {
	es []entry
	i  int
}

func (s *sliceSource) ok() bool    { return s.i >= 0 && s.i < len(s.es) }
func (s *sliceSource) First() bool { s.i = 0; return s.ok() }
func (s *sliceSource) Last() bool  { s.i = len(s.es) - 1; return s.ok() }
func (s *sliceSource) Next() bool  { s.i++; return s.ok() }
func (s *sliceSource) Prev() bool  { s.i--; return s.ok() }
func (s *sliceSource) SeekGE(k []byte) bool {
	s.i, _ = slices.BinarySearchFunc(s.es, string(k), func(e entry, k string) int {
		if e.key < k {
			return -1
		}
		return 1
	})
	return s.ok()
}
func (s *sliceSource) SeekLT(k []byte) bool {
	s.SeekGE(k)
	s.i--
	return s.ok()
}
func (s *sliceSource) InternalKey() ([]byte, uint64) {
	e := s.es[s.i]
	return []byte(e.key), base.MakeTrailer(e.seq, e.kind)
}
func (s *sliceSource) Value() []byte { return []byte(fmt.Sprint(s.es[s.i].seq)) }
func (s *sliceSource) Error() error  { return nil }

// randomSources returns up to 4 sources of up to 39 entries each over 30
// keys, and all their entries in order.
func randomSources(rng *rand.Rand) ([]base.InternalIterator, []entry) {
	srcs, all := sources(rng, 5, 40)
	return iters(srcs), all
}

// sources returns up to maxSources-1 sources of up to maxEntries-1
// entries each over 30 keys, and all their entries in order.
func sources(rng *rand.Rand, maxSources, maxEntries int) ([]*sliceSource, []entry) {
	var all []entry
	srcs := make([]*sliceSource, rng.IntN(maxSources))
	seq := uint64(1)
	for i := range srcs {
		var es []entry
		for range rng.IntN(maxEntries) {
			es = append(es, entry{fmt.Sprintf("k%02d", rng.IntN(30)), seq, base.Kind(rng.IntN(2))})
			seq++
		}
		slices.SortFunc(es, cmpEntry)
		all = append(all, es...)
		srcs[i] = &sliceSource{es: es}
	}
	slices.SortFunc(all, cmpEntry)
	return srcs, all
}

func current(m *Iter) entry { return entry{string(m.Key()), m.Seq(), m.Kind()} }

func TestMergeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		srcs, all := randomSources(rng)
		m := New(srcs...)
		var fwd []entry
		for ok := m.First(); ok; ok = m.Next() {
			fwd = append(fwd, current(m))
		}
		if !slices.Equal(fwd, all) {
			t.Fatalf("trial %d forward: %v, want %v", trial, fwd, all)
		}
		var back []entry
		for ok := m.Last(); ok; ok = m.Prev() {
			back = append(back, current(m))
		}
		slices.Reverse(back)
		if !slices.Equal(back, all) {
			t.Fatalf("trial %d backward: %v, want %v", trial, back, all)
		}
		k := fmt.Sprintf("k%02d", rng.IntN(32))
		i, _ := slices.BinarySearchFunc(all, k, func(e entry, k string) int {
			if e.key < k {
				return -1
			}
			return 1
		})
		if got := m.SeekGE([]byte(k)); got != (i < len(all)) || got && current(m) != all[i] {
			t.Fatalf("trial %d SeekGE(%s): wrong position", trial, k)
		}
		if got := m.SeekLT([]byte(k)); got != (i > 0) || got && current(m) != all[i-1] {
			t.Fatalf("trial %d SeekLT(%s): wrong position", trial, k)
		}
	}
}

func TestMergeDirectionChangeNeedsSeek(t *testing.T) {
	m := New(&sliceSource{es: []entry{{"a", 1, base.KindPut}, {"b", 2, base.KindPut}}})
	m.First()
	if m.Prev() || m.Error() != ErrDirection {
		t.Fatalf("Prev after First: valid %v err %v, want ErrDirection", m.Valid(), m.Error())
	}
	if !m.Last() || m.Error() != nil {
		t.Fatal("a seek clears ErrDirection")
	}
}

// versionSource is a sliceSource that seeks to a version in one search
// (base.VersionSeeker), as a memtable's iterator does.
type versionSource struct{ sliceSource }

func (s *versionSource) SeekGEVersion(k []byte, seq uint64) bool {
	s.i, _ = slices.BinarySearchFunc(s.es, entry{string(k), seq, 0xff}, cmpEntry)
	return s.ok()
}

// TestSkipToVersion: from a seek to a key, SkipToVersion lands where the
// merged order has the key's newest version at or below seq (or the next
// key), through sources that seek to a version and sources that step,
// and the merge goes on from there in order.
func TestSkipToVersion(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 2000 {
		srcs, all := randomSources(rng)
		for i, s := range srcs {
			if rng.IntN(2) == 0 {
				srcs[i] = &versionSource{*s.(*sliceSource)}
			}
		}
		m := New(srcs...)
		k := fmt.Sprintf("k%02d", rng.IntN(32))
		seq := rng.Uint64N(uint64(len(all) + 2))
		m.SeekGE([]byte(k))
		m.SkipToVersion([]byte(k), seq)
		i, _ := slices.BinarySearchFunc(all, entry{k, seq, 0xff}, cmpEntry)
		for ; i < len(all); i++ {
			if !m.Valid() {
				t.Fatalf("trial %d SkipToVersion(%s, %d): ran out, want %v", trial, k, seq, all[i])
			}
			if current(m) != all[i] {
				t.Fatalf("trial %d SkipToVersion(%s, %d): at %v, want %v", trial, k, seq, current(m), all[i])
			}
			m.Next()
		}
		if m.Valid() || m.Error() != nil {
			t.Fatalf("trial %d SkipToVersion(%s, %d): entries past the end, %v", trial, k, seq, m.Error())
		}
	}
}
