package metamorphic

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// kv is a key and its value as printed (describe).
type kv struct{ key, val string }

// model is what a store must answer: a map from key to value, the maps of
// the open snapshots, and the open iterators, each over a sorted copy of
// the keys in its range when it was made (an iterator sees the writes
// before its creation only).
type model struct {
	state map[string]string
	snaps map[int]map[string]string
	iters map[int]*modelIter
}

type modelIter struct {
	src map[string]string // what the iterator reads, for SetBounds; never changed
	kvs []kv
	pos int // -1: not positioned
}

func newModel() *model {
	return &model{state: map[string]string{}, snaps: map[int]map[string]string{}, iters: map[int]*modelIter{}}
}

// Results shared by the model and the runner.
const (
	resOK       = "ok"
	resNotFound = "not-found"
	resInvalid  = "invalid"
	resNoSnap   = "no-such-snapshot"
	resNoIter   = "no-such-iterator"
)

func posResult(key, val string) string { return strconv.Quote(key) + " " + val }

// digest is how a whole scan prints: its count and one hash of every key
// and value in order.
func digest(kvs []kv) string {
	h := fnv.New64a()
	for _, e := range kvs {
		fmt.Fprintf(h, "%q=%s\n", e.key, e.val)
	}
	return fmt.Sprintf("%d keys %016x", len(kvs), h.Sum64())
}

// sortedRange returns the entries of m within the iterator bounds of o.
func sortedRange(m map[string]string, o op) []kv {
	var out []kv
	for k, v := range m {
		if inRange(k, o) {
			out = append(out, kv{k, v})
		}
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	return out
}

func inRange(k string, o op) bool {
	return (o.lower == nil || k >= string(o.lower)) &&
		(o.upper == nil || k < string(o.upper)) &&
		(o.prefix == nil || strings.HasPrefix(k, string(o.prefix)))
}

func (m *model) write(o op) {
	switch o.kind {
	case opPut:
		m.state[string(o.key)] = describe(o.val.bytes())
	case opDelete:
		delete(m.state, string(o.key))
	case opDeleteRange:
		for k := range m.state {
			if k >= string(o.key) && k < string(o.end) {
				delete(m.state, k)
			}
		}
	}
}

func lookup(m map[string]string, k []byte) string {
	if v, ok := m[string(k)]; ok {
		return v
	}
	return resNotFound
}

// apply runs o on the model and returns the line a correct store prints.
func (m *model) apply(o op) string {
	switch o.kind {
	case opPut, opDelete, opDeleteRange:
		m.write(o)
	case opBatch:
		for _, b := range o.batch {
			m.write(b)
		}
	case opGet:
		return lookup(m.state, o.key)
	case opHas:
		_, ok := m.state[string(o.key)]
		return strconv.FormatBool(ok)
	case opValueSize:
		v, ok := m.state[string(o.key)]
		if !ok {
			return resNotFound
		}
		n, _, _ := strings.Cut(v, ":")
		return n
	case opSnapNew:
		m.snaps[o.id] = maps.Clone(m.state)
	case opSnapGet:
		s, ok := m.snaps[o.id]
		if !ok {
			return resNoSnap
		}
		return lookup(s, o.key)
	case opSnapClose:
		if _, ok := m.snaps[o.id]; !ok {
			return resNoSnap
		}
		delete(m.snaps, o.id)
	case opIterNew:
		src := m.state
		if o.snap != 0 {
			var ok bool
			if src, ok = m.snaps[o.snap]; !ok {
				return resNoSnap
			}
		}
		if _, ok := m.iters[o.id]; ok {
			return "duplicate-iterator"
		}
		if o.snap == 0 {
			src = maps.Clone(src) // the snapshots' maps are never changed
		}
		m.iters[o.id] = &modelIter{src: src, kvs: sortedRange(src, o), pos: -1}
	case opIterSetBounds, opIterSetPrefix, opIterSetPrefixOwn:
		it, ok := m.iters[o.id]
		if !ok {
			return resNoIter
		}
		r := op{lower: o.lower, upper: o.upper, prefix: o.prefix}
		if o.kind == opIterSetPrefixOwn {
			r = op{}
			if it.pos >= 0 {
				k := it.kvs[it.pos].key
				r.prefix = []byte(k[:min(int(o.n), len(k))])
			}
		}
		it.kvs, it.pos = sortedRange(it.src, r), -1
	case opIterFirst, opIterLast, opIterSeek, opIterSeekLT, opIterSeekOwn, opIterSeekLTOwn, opIterNext, opIterPrev:
		it, ok := m.iters[o.id]
		if !ok {
			return resNoIter
		}
		return it.move(o)
	case opIterClose:
		if _, ok := m.iters[o.id]; !ok {
			return resNoIter
		}
		delete(m.iters, o.id)
	case opScan, opCheckpoint:
		return digest(sortedRange(m.state, op{}))
	case opReopen, opReadOnly:
		clear(m.iters)
		clear(m.snaps)
		if o.kind == opReadOnly {
			return digest(sortedRange(m.state, op{}))
		}
	}
	return resOK
}

func (it *modelIter) move(o op) string {
	n := len(it.kvs)
	switch o.kind {
	case opIterFirst:
		it.pos = 0
	case opIterLast:
		it.pos = n - 1
	case opIterSeek:
		it.pos, _ = slices.BinarySearchFunc(it.kvs, string(o.key), func(e kv, k string) int { return strings.Compare(e.key, k) })
	case opIterSeekLT:
		i, _ := slices.BinarySearchFunc(it.kvs, string(o.key), func(e kv, k string) int { return strings.Compare(e.key, k) })
		it.pos = i - 1
	case opIterSeekOwn: // at a key: stays; at none: Seek(nil), the first key
		if it.pos < 0 || it.pos >= n {
			it.pos = 0
		}
	case opIterSeekLTOwn: // at a key: the one before; at none: SeekLT(nil), no key
		if it.pos < 0 || it.pos >= n {
			it.pos = -1
		} else {
			it.pos--
		}
	case opIterNext:
		if it.pos >= 0 {
			it.pos++
		}
	case opIterPrev:
		if it.pos >= 0 {
			it.pos--
		}
	}
	if it.pos < 0 || it.pos >= n {
		it.pos = -1
		return resInvalid
	}
	return posResult(it.kvs[it.pos].key, it.kvs[it.pos].val)
}
