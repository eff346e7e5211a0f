package metamorphic

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/bloomkv/bloomkv"
)

// optionSet is one drawn configuration of a store, plus how the runner
// drives it (concurrent: background snapshot readers and flushes).
type optionSet struct {
	mmap        bool
	compression int // 0: NoCompression, 1: snappy, 2: zstd (bloomkv.Compression by name)
	memtable    int
	block       int
	apart       int // LargeValueSize; 0: DisableValueSeparation
	cache       int64
	fanIn       int
	concurrency int
	filters     string // off, uniform, optimal, budget, uniform-budget
	bits        float64
	budget      int64
	prefix      string // "", "fixed:N", "sep"
	sync        bool
	autoCompact bool
	concurrent  bool
	vary        bool // each reopen draws new options (variant)
}

// filterDraws are the filter settings an option set draws from: none,
// BitsPerKey for every segment (uniform) or allocated over them
// (optimal), and each of the two under a FilterBudget, which folds the
// filters to fit it.
var filterDraws = []string{"off", "uniform", "optimal", "budget", "uniform-budget"}

// logUniform draws from [lo, hi] with every power of two equally likely.
func logUniform(r *rand.Rand, lo, hi int) int {
	x := math.Exp(math.Log(float64(lo)) + r.Float64()*(math.Log(float64(hi))-math.Log(float64(lo))))
	return min(max(int(x), lo), hi)
}

// randomOptions draws an option set. The memtable and block sizes span
// what changes the layout most: 8 KiB memtables flush every few puts (many
// segments, constant compaction), 64 MiB ones never fill; 256 B blocks
// hold one or two entries, 64 KiB ones hundreds.
func randomOptions(r *rand.Rand) optionSet {
	o := optionSet{
		mmap:        r.IntN(3) > 0,
		compression: r.IntN(3),
		memtable:    logUniform(r, 8<<10, 64<<20),
		block:       logUniform(r, 256, 64<<10),
		fanIn:       2 + r.IntN(7),
		concurrency: 1 + r.IntN(4),
		filters:     filterDraws[r.IntN(len(filterDraws))],
		bits:        float64(1 + r.IntN(20)),
		sync:        r.IntN(8) == 0,
		autoCompact: r.IntN(6) > 0,
		concurrent:  r.IntN(2) == 0,
		vary:        r.IntN(3) == 0,
	}
	if r.IntN(3) == 0 {
		o.cache = int64(logUniform(r, 4<<10, 1<<20)) // evictions all the time
	}
	if r.IntN(4) > 0 { // values stored apart from their keys, from 1 byte up
		o.apart = logUniform(r, 1, 8<<10)
	}
	if strings.HasSuffix(o.filters, "budget") {
		o.budget = int64(logUniform(r, 64, 256<<10))
	}
	switch r.IntN(3) {
	case 1:
		o.prefix = fmt.Sprintf("fixed:%d", 1+r.IntN(3))
	case 2:
		o.prefix = "sep"
	}
	return o
}

func (o optionSet) String() string {
	return fmt.Sprintf("mmap=%d compression=%d memtable=%d block=%d apart=%d cache=%d fanin=%d concurrency=%d filters=%s bits=%g budget=%d prefix=%s sync=%d autocompact=%d concurrent=%d vary=%d",
		b2i(o.mmap), o.compression, o.memtable, o.block, o.apart, o.cache, o.fanIn, o.concurrency,
		o.filters, o.bits, o.budget, cmpOr(o.prefix, "none"), b2i(o.sync), b2i(o.autoCompact), b2i(o.concurrent), b2i(o.vary))
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func parseOptionSet(s string) (optionSet, error) {
	var o optionSet
	for _, f := range strings.Fields(s) {
		name, v, ok := strings.Cut(f, "=")
		if !ok {
			return o, fmt.Errorf("bad option %q", f)
		}
		n, nerr := strconv.ParseInt(v, 10, 64)
		var err error
		switch name {
		case "mmap":
			o.mmap, err = n == 1, nerr
		case "compression":
			o.compression, err = int(n), nerr
			if nerr == nil && (n < 0 || n > 2) {
				err = fmt.Errorf("bad compression %d", n)
			}
		case "memtable":
			o.memtable, err = int(n), nerr
		case "block":
			o.block, err = int(n), nerr
		case "apart":
			o.apart, err = int(n), nerr
		case "cache":
			o.cache, err = n, nerr
		case "fanin":
			o.fanIn, err = int(n), nerr
		case "concurrency":
			o.concurrency, err = int(n), nerr
		case "filters":
			o.filters = v
			if !slices.Contains(filterDraws, v) {
				err = fmt.Errorf("bad filters %q", v)
			}
		case "bits":
			o.bits, err = strconv.ParseFloat(v, 64)
		case "budget":
			o.budget, err = n, nerr
		case "prefix":
			if v != "none" {
				o.prefix = v
			}
		case "sync":
			o.sync, err = n == 1, nerr
		case "autocompact":
			o.autoCompact, err = n == 1, nerr
		case "concurrent":
			o.concurrent, err = n == 1, nerr
		case "vary":
			o.vary, err = n == 1, nerr
		default:
			err = fmt.Errorf("unknown option %q", name)
		}
		if err != nil {
			return o, fmt.Errorf("option %q: %v", f, err)
		}
	}
	return o, nil
}

// variant is the option set of the n-th reopen of a store first opened
// with o (vary): everything a store may change between opens is drawn
// again, from o and n so that a replay draws the same. The prefix
// extractor is fixed for the life of a store, and how the runner drives
// it (concurrent, vary) stays.
func (o optionSet) variant(n int) optionSet {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", o, n)
	v := randomOptions(rand.New(rand.NewPCG(h.Sum64(), 0x76617279)))
	v.prefix, v.concurrent, v.vary = o.prefix, o.concurrent, o.vary
	return v
}

// options is the set as bloomkv.Options.
func (o optionSet) options() *bloomkv.Options {
	opts := &bloomkv.Options{
		DisableMmap:            !o.mmap,
		Compression:            [...]bloomkv.Compression{bloomkv.NoCompression, bloomkv.SnappyCompression, bloomkv.ZstdCompression}[o.compression],
		MemtableSize:           o.memtable,
		BlockSize:              o.block,
		LargeValueSize:         o.apart,
		DisableValueSeparation: o.apart == 0,
		BlockCacheSize:         o.cache,
		CompactionFanIn:        o.fanIn,
		CompactionConcurrency:  o.concurrency,
		BitsPerKey:             o.bits,
		Sync:                   o.sync,
		DisableAutoCompaction:  !o.autoCompact,
	}
	switch o.filters {
	case "off":
		opts.DisableFilters = true
	case "uniform":
		opts.FilterAllocation = bloomkv.FilterUniform
	case "budget":
		opts.FilterBudget = o.budget
	case "uniform-budget":
		opts.FilterAllocation = bloomkv.FilterUniform
		opts.FilterBudget = o.budget
	}
	if n, ok := strings.CutPrefix(o.prefix, "fixed:"); ok {
		k, _ := strconv.Atoi(n)
		opts.Prefix = bloomkv.FixedPrefix(k)
	} else if o.prefix == "sep" {
		opts.Prefix = bloomkv.SeparatorPrefix('/')
	}
	return opts
}

// generator draws an op log. Keys come from a small key space that grows
// as the log goes on, so that most ops meet keys written before (over-
// writes, deletes of live keys, ranges over live keys), and they share
// prefixes, so that prefix iterators and prefix filters have work.
type generator struct {
	r        *rand.Rand
	keys     [][]byte
	nextVal  uint64
	nextSnap int
	nextIter int
	nextTxn  int
	snaps    []int
	iters    []int
	txns     []*genTxn       // open, oldest first
	ended    []int           // the last few transactions ended, for uses after the end
	iterTxn  map[int]*genTxn // the transaction of each iterator made on one
	// fresh holds the iterators made and not yet positioned: a step of
	// one does nothing but report false, so a step drawn for one is
	// mostly preceded by a First or Last.
	fresh  map[int]bool
	recent [][]byte // the last keys put outside transactions: mostly live
	ops    []op

	// m is the model, run over ops as far as applied, so that a
	// CompareAndSet can be drawn to find the value its key holds; vals
	// finds the value each printed value was made from.
	m       *model
	applied int
	vals    map[string]valSpec
}

// genTxn is an open transaction: the keys it read, which other writes
// sometimes hit so that commits conflict; those it wrote, which its reads,
// range deletions and iterators often cover so that it meets its own
// writes; and where its iterators' ranges begin, where other writes
// sometimes add a key its scans ran past (a phantom).
type genTxn struct {
	id     int
	update bool
	born   int // len(generator.ops) when it began
	life   int // ops after which it ends, if nothing ended it before
	read   [][]byte
	wrote  [][]byte
	starts [][]byte
}

// maxTxnAge is how many ops a transaction stays open at most. The store's
// record of the writes a transaction's commit is checked against is
// capped (64 MiB of keys), and a transaction older than what it holds
// fails its commit whatever it read; a short life keeps every log far from
// the cap, however many ops it has, so that the model's rule is the
// store's. Most live much shorter (txnLife): a transaction that many
// writes hit conflicts whatever the rule for any one of them says, and
// then no bug in that rule shows.
const maxTxnAge = 150

// txnLife draws how long a transaction stays open at most.
func (g *generator) txnLife() int {
	if g.r.IntN(5) == 0 {
		return maxTxnAge
	}
	return 4 + g.r.IntN(40)
}

// prefixes of the keys: several end in '/', the separator of the
// SeparatorPrefix option set; "" and 0xff test the ends of the key space.
var keyPrefixes = []string{"a/", "ab/", "abc/", "b/", "b", "user/", "u", "\xff/", "\xff\xff", ""}

// weights of the ops. Writes dominate, so the store fills and flushes.
var opWeights = []struct {
	kind opKind
	w    int
}{
	{opPut, 40}, {opDelete, 5}, {opDeleteRange, 3}, {opBatch, 8},
	{opGet, 15}, {opHas, 3}, {opValueSize, 3},
	{opSnapNew, 2}, {opSnapGet, 6}, {opSnapClose, 2},
	{opIterNew, 4}, {opIterFirst, 2}, {opIterLast, 2}, {opIterSeek, 4}, {opIterSeekLT, 3},
	{opIterSeekOwn, 2}, {opIterSeekLTOwn, 1},
	{opIterNext, 12}, {opIterPrev, 8}, {opIterClose, 3},
	{opIterSetBounds, 2}, {opIterSetPrefix, 2}, {opIterSetPrefixOwn, 1},
	{opScan, 1}, {opFlush, 2}, {opCompact, 1}, {opWait, 1}, {opSync, 1},
	{opReopen, 1}, {opReadOnly, 1}, {opCheckpoint, 1},
	{opSetBudget, 1}, {opRebuild, 1},
	{opTxnNew, 3}, {opTxnGet, 8}, {opTxnHas, 1}, {opTxnPut, 8}, {opTxnDelete, 2}, {opTxnDeleteRange, 2},
	{opTxnCommit, 2}, {opTxnDiscard, 1},
	{opUpdate, 3}, {opView, 1}, {opCAS, 3},
}

func generate(seed uint64, n int) []op {
	g := &generator{r: rand.New(rand.NewPCG(seed, 0x6f70730a)), iterTxn: map[int]*genTxn{}, fresh: map[int]bool{},
		m: newModel(), vals: map[string]valSpec{}}
	total := 0
	for _, w := range opWeights {
		total += w.w
	}
	for len(g.ops) < n {
		if i := slices.IndexFunc(g.txns, func(t *genTxn) bool { return len(g.ops)-t.born > t.life }); i >= 0 {
			g.endTxn(i, "")
			continue
		}
		x := g.r.IntN(total)
		for _, w := range opWeights {
			if x -= w.w; x < 0 {
				g.emit(w.kind)
				break
			}
		}
	}
	// Leave nothing open, so that the end of every log is the same.
	g.closeAll()
	g.ops = append(g.ops, op{kind: opScan})
	return g.ops
}

// key returns a key: mostly one used before, sometimes a new one, which
// may extend or shorten a known key so that keys nest.
func (g *generator) key() []byte {
	if len(g.keys) > 0 && g.r.IntN(100) < 65 {
		return g.keys[g.r.IntN(len(g.keys))]
	}
	var k []byte
	switch {
	case len(g.keys) > 0 && g.r.IntN(4) == 0:
		k = slices.Clone(g.keys[g.r.IntN(len(g.keys))])
		if g.r.IntN(2) == 0 || len(k) < 2 {
			k = append(k, g.suffixByte())
		} else {
			k = k[:len(k)-1]
		}
	default:
		k = []byte(keyPrefixes[g.r.IntN(len(keyPrefixes))])
		for range g.r.IntN(5) {
			k = append(k, g.suffixByte())
		}
	}
	if len(k) == 0 {
		k = []byte{g.suffixByte()}
	}
	g.keys = append(g.keys, k)
	return k
}

func (g *generator) suffixByte() byte {
	const alphabet = "abcdxyz019/"
	if g.r.IntN(40) == 0 {
		return []byte{0, 0xff, 0x80}[g.r.IntN(3)]
	}
	return alphabet[g.r.IntN(len(alphabet))]
}

// boundKey is an iterator bound or seek target: a key, or a prefix of one,
// or a key just past one.
func (g *generator) boundKey() []byte {
	k := slices.Clone(g.key())
	switch g.r.IntN(4) {
	case 0:
		return k[:g.r.IntN(len(k)+1)]
	case 1:
		return append(k, 0)
	}
	return k
}

func (g *generator) value() valSpec {
	g.nextVal++
	v := valSpec{seed: g.nextVal, random: g.r.IntN(2) == 0}
	switch x := g.r.IntN(100); {
	case x < 40:
		v.n = g.r.IntN(17)
	case x < 70:
		v.n = 16 + g.r.IntN(240)
	case x < 90:
		v.n = 256 + g.r.IntN(4<<10)
	case x < 98:
		v.n = 4<<10 + g.r.IntN(12<<10)
	default:
		v.n = 16<<10 + g.r.IntN(48<<10+1)
	}
	g.vals[describe(v.bytes())] = v
	return v
}

// current returns the value key holds after the ops drawn so far: the
// value it was made from, and false if the key is absent.
func (g *generator) current(key []byte) (valSpec, bool) {
	for ; g.applied < len(g.ops); g.applied++ {
		g.m.apply(g.ops[g.applied])
	}
	v, ok := g.m.state[string(key)]
	if !ok {
		return valSpec{}, false
	}
	return g.vals[v], true
}

// writeKey is the key of a write outside a transaction: sometimes one an
// open transaction read, or a new one in the range of one of its
// iterators, after the keys there (a byte high in the alphabet appended
// to where the range begins), so that its commit conflicts; or one it
// wrote (and may have read back), which must not make it conflict.
func (g *generator) writeKey() []byte {
	switch x := g.r.IntN(10); {
	case x < 1:
		if k := g.readKey(); k != nil {
			return k
		}
	case x < 2 && len(g.txns) > 0:
		if k := g.pick(g.txns[g.r.IntN(len(g.txns))].wrote); k != nil {
			return k
		}
	case x < 3:
		var starts [][]byte
		for _, t := range g.txns {
			starts = append(starts, t.starts...)
		}
		if k := g.pick(starts); k != nil {
			return append(slices.Clone(k), "yz\xff"[g.r.IntN(3)])
		}
	}
	return g.key()
}

// pick returns one of keys, or nil if there are none.
func (g *generator) pick(keys [][]byte) []byte {
	if len(keys) == 0 {
		return nil
	}
	return keys[g.r.IntN(len(keys))]
}

// putKey is writeKey for a put, which it remembers (recent).
func (g *generator) putKey() []byte {
	k := g.writeKey()
	if g.recent = append(g.recent, k); len(g.recent) > 32 {
		g.recent = g.recent[1:]
	}
	return k
}

// readKey returns a key an open transaction read, or nil if none did.
func (g *generator) readKey() []byte {
	if len(g.txns) == 0 {
		return nil
	}
	t := g.txns[g.r.IntN(len(g.txns))]
	if len(t.read) == 0 {
		return nil
	}
	return t.read[g.r.IntN(len(t.read))]
}

func (g *generator) write() op {
	switch x := g.r.IntN(100); {
	case x < 78:
		return op{kind: opPut, key: g.putKey(), val: g.value()}
	case x < 88:
		return op{kind: opDelete, key: g.writeKey()}
	default:
		return g.deleteRange()
	}
}

// deleteRange draws a range: mostly a narrow one (a key to the same key
// with a byte added or a prefix's end), which deletes a few keys, and
// sometimes one between two keys drawn apart, which may delete many, or,
// reversed, none.
func (g *generator) deleteRange() op {
	// Sometimes over a key an open transaction read, so that its commit
	// conflicts.
	if k := g.readKey(); k != nil && g.r.IntN(2) == 0 {
		return op{kind: opDeleteRange, key: slices.Clone(k[:g.r.IntN(len(k)+1)]), end: append(slices.Clone(k), g.suffixByte())}
	}
	a := g.boundKey()
	var b []byte
	switch g.r.IntN(4) {
	case 0, 1:
		b = append(slices.Clone(a), g.suffixByte())
	case 2:
		b = slices.Clone(a)
		if len(b) > 0 && b[len(b)-1] < 0xff {
			b[len(b)-1]++
		}
	default:
		b = g.boundKey()
		if string(a) > string(b) && g.r.IntN(8) > 0 {
			a, b = b, a
		}
	}
	if len(b) == 0 {
		// An empty end is no key: refused by newer versions of DeleteRange
		// (and a no-op in older ones), so the model and the store would
		// disagree about it by design, not by a bug.
		b = []byte{g.suffixByte()}
	}
	return op{kind: opDeleteRange, key: a, end: b}
}

func (g *generator) emit(kind opKind) {
	o := op{kind: kind}
	switch kind {
	case opPut:
		o.key, o.val = g.putKey(), g.value()
	case opDelete:
		o.key = g.writeKey()
	case opDeleteRange:
		o = g.deleteRange()
	case opBatch:
		o.sync = g.r.IntN(4) == 0
		for range 1 + g.r.IntN(8) {
			o.batch = append(o.batch, g.write())
		}
	case opGet, opHas, opValueSize:
		o.key = g.key()
	case opSnapNew:
		if len(g.snaps) >= 3 {
			return
		}
		g.nextSnap++
		o.id = g.nextSnap
		g.snaps = append(g.snaps, o.id)
	case opSnapGet, opSnapClose:
		if len(g.snaps) == 0 {
			return
		}
		i := g.r.IntN(len(g.snaps))
		o.id, o.key = g.snaps[i], g.key()
		if kind == opSnapClose {
			o.key = nil
			g.snaps = slices.Delete(g.snaps, i, i+1)
		}
	case opIterNew:
		if len(g.iters) >= 4 {
			return
		}
		g.nextIter++
		o.id = g.nextIter
		g.iters = append(g.iters, o.id)
		g.fresh[o.id] = true
		if len(g.snaps) > 0 && g.r.IntN(3) == 0 {
			o.snap = g.snaps[g.r.IntN(len(g.snaps))]
		}
		if g.r.IntN(3) == 0 {
			o.lower, o.upper = g.bounds()
		} else if g.r.IntN(2) == 0 {
			o.upper = g.boundKey()
		}
		if g.r.IntN(3) == 0 {
			o.prefix = g.prefix()
		}
		if len(g.txns) > 0 && g.r.IntN(2) == 0 {
			o.snap, o.txn = 0, g.txnID()
			if t := g.openTxn(o.txn); t != nil {
				g.iterTxn[o.id] = t
				// Mostly over the prefix of a key, often one it wrote: a
				// scan to the end of the key space is a read that most
				// later writes conflict with, whatever the rule for any
				// one of them.
				if g.r.IntN(4) > 0 {
					k := g.pick(t.wrote)
					if k == nil || g.r.IntN(3) == 0 {
						k = g.key()
					}
					o.lower, o.upper, o.prefix = nil, nil, g.txnPrefix(k)
				}
				switch {
				case o.prefix != nil:
					t.starts = append(t.starts, o.prefix)
				case o.lower != nil:
					t.starts = append(t.starts, o.lower)
				}
			}
		}
	case opIterSetBounds, opIterSetPrefix, opIterSetPrefixOwn:
		if len(g.iters) == 0 {
			g.emit(opIterNew)
			return
		}
		o.id = g.iters[g.r.IntN(len(g.iters))]
		switch kind {
		case opIterSetBounds:
			o.lower, o.upper = g.bounds()
		case opIterSetPrefix:
			o.prefix = g.prefix()
		default:
			o.n = int64(g.r.IntN(6))
		}
		// A reused iterator serves lookups: a seek, and a few steps.
		g.ops = append(g.ops, o)
		o = op{kind: []opKind{opIterFirst, opIterLast, opIterSeek, opIterSeekLT}[g.r.IntN(4)], id: o.id}
		delete(g.fresh, o.id)
		if o.kind == opIterSeek || o.kind == opIterSeekLT {
			o.key = g.boundKey()
		}
	case opIterFirst, opIterLast, opIterSeek, opIterSeekLT, opIterSeekOwn, opIterSeekLTOwn, opIterNext, opIterPrev, opIterClose:
		if len(g.iters) == 0 {
			g.emit(opIterNew)
			return
		}
		i := g.r.IntN(len(g.iters))
		o.id = g.iters[i]
		if kind == opIterSeek || kind == opIterSeekLT {
			o.key = g.boundKey()
			// A transaction's iterator seeks its writes half the time.
			if t := g.iterTxn[o.id]; t != nil && len(t.wrote) > 0 && g.r.IntN(2) == 0 {
				o.key = g.pick(t.wrote)
			}
		}
		if kind == opIterClose {
			g.iters = slices.Delete(g.iters, i, i+1)
		}
		if kind != opIterNext && kind != opIterPrev {
			delete(g.fresh, o.id) // positioned, or closed
		} else if g.fresh[o.id] && g.r.IntN(4) > 0 {
			start := op{kind: opIterFirst, id: o.id}
			if kind == opIterPrev {
				start.kind = opIterLast
			}
			g.ops = append(g.ops, start)
			delete(g.fresh, o.id)
		}
		// Steps come in runs, so iterators walk and change direction.
		if kind == opIterNext || kind == opIterPrev {
			for range g.r.IntN(4) {
				g.ops = append(g.ops, o)
			}
		}
	case opReopen, opReadOnly:
		g.closeAll()
	case opSetBudget:
		o.n = int64(logUniform(g.r, 1, 1<<20))
		if g.r.IntN(4) == 0 {
			o.n = 0
		}
	case opUpdate, opView:
		o = g.closure(kind)
	case opCAS:
		o = g.cas()
	case opTxnNew:
		if len(g.txns) >= 3 {
			return
		}
		g.nextTxn++
		o.id, o.update = g.nextTxn, g.r.IntN(5) > 0
		g.txns = append(g.txns, &genTxn{id: o.id, update: o.update, born: len(g.ops), life: g.txnLife()})
	case opTxnGet, opTxnHas, opTxnPut, opTxnDelete, opTxnDeleteRange, opTxnCommit, opTxnDiscard:
		if len(g.txns) == 0 {
			g.emit(opTxnNew)
			return
		}
		if kind == opTxnCommit || kind == opTxnDiscard {
			g.endTxn(g.r.IntN(len(g.txns)), kind)
			return
		}
		o.id = g.txnID()
		t := g.openTxn(o.id)
		if t == nil {
			t = &genTxn{} // an ended one: what it does is not kept
		}
		switch kind {
		case opTxnGet, opTxnHas:
			// A key it wrote (its own write, or what its range
			// deletion hid), one put lately (mostly found), or any.
			switch x := g.r.IntN(3); {
			case x == 0 && len(t.wrote) > 0:
				o.key = g.pick(t.wrote)
			case x == 1 && len(g.recent) > 0:
				o.key = g.pick(g.recent)
			default:
				o.key = g.key()
			}
			if len(t.read) < 32 {
				t.read = append(t.read, o.key)
			}
		case opTxnDeleteRange:
			r := g.deleteRange()
			o.key, o.end = r.key, r.end
			// Mostly over a key it wrote, which the range hides.
			if k := g.pick(t.wrote); k != nil && g.r.IntN(3) > 0 {
				o.key = slices.Clone(k[:g.r.IntN(len(k)+1)])
				o.end = append(slices.Clone(k), g.suffixByte())
			}
		default:
			// Mostly a key read before (read, modify, write back), one
			// another transaction read, or one put lately (so that the
			// write hides a value of the snapshot).
			x := g.r.IntN(6)
			if kind == opTxnDelete && x >= 3 && g.r.IntN(2) == 0 {
				x = 3 // a delete that hides a value is worth more
			}
			switch {
			case x < 2 && len(t.read) > 0:
				o.key = g.pick(t.read)
			case x < 3:
				o.key = g.writeKey()
			case x < 4 && len(g.recent) > 0:
				o.key = g.pick(g.recent)
			default:
				o.key = g.key()
			}
			if kind == opTxnPut {
				o.val = g.value()
			}
			t.wrote = append(t.wrote, o.key)
		}
		if t.update && (kind == opTxnPut || kind == opTxnDelete || kind == opTxnDeleteRange) {
			g.ops = append(g.ops, o)
			g.afterTxnWrite(t, o)
			return
		}
	}
	g.ops = append(g.ops, o)
}

// closure draws an update or a view: a few reads, scans and writes. Once
// the body has written, its reads and scans often look at a key it wrote,
// so that it reads its own writes. An update's writes often hit what an
// open transaction read, so that the transaction's commit conflicts. One
// view in three tries a write, which must fail. Half the updates, and a
// few views, commit plain writes while they run (interfere).
func (g *generator) closure(kind opKind) op {
	o := op{kind: kind, abort: g.r.IntN(5) == 0}
	// An update that others' writes interfere with is mostly an
	// UpdateWith that may retry, and mostly reads first and writes last,
	// so that they can make its commit conflict.
	interfere := kind == opUpdate && g.r.IntN(2) == 0 || kind == opView && g.r.IntN(6) == 0
	switch {
	case kind != opUpdate:
	case interfere && g.r.IntN(4) > 0:
		o.with, o.sync, o.retries = true, g.r.IntN(4) == 0, 1+g.r.IntN(3)
	case g.r.IntN(2) == 0:
		o.with, o.sync, o.retries = true, g.r.IntN(4) == 0, g.r.IntN(4)
	}
	var wrote, read [][]byte
	var scans []op
	n := 1 + g.r.IntN(5)
	write := -1
	if kind == opView && g.r.IntN(3) == 0 {
		write = g.r.IntN(n)
	}
	if interfere && kind == opUpdate && g.r.IntN(5) > 0 {
		n = max(n, 2)
	}
	for i := range n {
		var b op
		x := g.r.IntN(10)
		switch {
		case kind == opView && i != write:
			x = min(x, 4) // a read
		case kind == opView:
			x = 5 + g.r.IntN(5) // the write
		case interfere && i == 0 && n > 1:
			x = []int{0, 1, 2, 3, 3, 4}[g.r.IntN(6)] // a read, a third of them scans
		case interfere && i == n-1 && len(wrote) == 0:
			x = max(x, 5)
		}
		switch {
		case x < 3:
			b.kind = opGet
			if x == 2 {
				b.kind = opHas
			}
			b.key = g.pick(wrote)
			if b.key == nil || g.r.IntN(3) == 0 {
				b.key = g.key()
			}
			read = append(read, b.key)
		case x < 4:
			b = op{kind: opRangeScan, n: int64(g.r.IntN(6)), reverse: g.r.IntN(2) == 0}
			k := g.pick(wrote)
			if k == nil || g.r.IntN(3) == 0 {
				k = g.key()
			}
			b.prefix = g.txnPrefix(k)
			if g.r.IntN(4) == 0 {
				b.lower, b.upper = g.bounds()
			}
			scans = append(scans, b)
		case x < 5: // a key written before the op, or none
			b = op{kind: opGet, key: g.key()}
			read = append(read, b.key)
		default:
			// Often of a key an open transaction read, so that the
			// transaction's commit conflicts. A range's start is a key
			// it deletes, unless empty: no key, which a read refuses.
			b = g.write()
			if k := g.readKey(); k != nil && b.kind != opDeleteRange && g.r.IntN(3) == 0 {
				b.key = k
			}
			if len(b.key) > 0 {
				wrote = append(wrote, b.key)
			}
		}
		o.batch = append(o.batch, b)
	}
	if interfere {
		g.interfere(&o, read, scans, wrote)
	}
	return o
}

// interfere adds interfere ops to a closure's body, each at the end or
// anywhere in it: one write in each of the closure's first few runs. An
// UpdateWith's are drawn for one to retries+2 runs, so that some use up
// its retries (a run past the last one never happens) and others leave a
// run that commits; an Update's mostly for its one run, sometimes for a
// second that must not happen; a view's for its one run, whose reads
// must not see it. Half the time every run's write is to the first's
// key, so that a conflict in one is a conflict in all, and the retries
// are spent: the writes of the failed runs show only then, as the last
// run does not write them over.
func (g *generator) interfere(o *op, read [][]byte, scans []op, wrote [][]byte) {
	runs := 1
	switch {
	case o.kind == opView:
	case o.with:
		runs = 1 + g.r.IntN(max(o.retries, 0)+2)
	case g.r.IntN(4) == 0:
		runs = 2
	}
	same := g.r.IntN(2) == 0
	var first op
	for run := 1; run <= runs; run++ {
		at := len(o.batch)
		if g.r.IntN(2) == 0 {
			at = g.r.IntN(len(o.batch) + 1)
		}
		w := g.interfereWrite(read, scans, wrote)
		if run == 1 {
			first = w
		} else if same {
			w = first
			if w.kind == opPut {
				w.val = g.value()
			}
		}
		o.batch = slices.Insert(o.batch, at, op{kind: opInterfere, n: int64(run), batch: []op{w}})
	}
}

// interfereWrite draws an interfering write: mostly one that the run's
// commit conflicts with, of a key the body read (or a range deletion over
// one) or of a key in a range it scanned (its first key, one just after
// it, or one at the end of its prefix, which a scan that stopped early
// did not reach); otherwise of a key the body only wrote, or any key,
// which must not make it conflict unless the body read it too.
func (g *generator) interfereWrite(read [][]byte, scans []op, wrote [][]byte) op {
	w := g.write()
	var k []byte
	x := g.r.IntN(10)
	switch {
	case x < 6 && len(scans) > 0 && (len(read) == 0 || g.r.IntN(2) == 0):
		s := scans[g.r.IntN(len(scans))]
		lo := s.prefix
		if string(s.lower) > string(lo) {
			lo = s.lower
		}
		switch g.r.IntN(3) {
		case 0:
			k = slices.Clone(lo)
		case 1:
			k = append(slices.Clone(lo), g.suffixByte())
		default:
			k = append(slices.Clone(s.prefix), 0xff)
		}
	case x < 6:
		k = g.pick(read)
	case x < 8:
		k = g.pick(wrote)
	}
	if len(k) == 0 {
		return w
	}
	if w.kind == opDeleteRange {
		return op{kind: opDeleteRange, key: slices.Clone(k[:g.r.IntN(len(k)+1)]), end: append(slices.Clone(k), g.suffixByte())}
	}
	w.key = k
	return w
}

// cas draws a CompareAndSet: mostly of a key put lately, with the value it
// holds as the old one (so that it swaps), sometimes a wrong one (another
// value of the same length, or nil for a live key, a value for an absent
// one), an empty one or nil; the new value is mostly a value, sometimes
// empty or nil. One in six comes after another that sets its key empty,
// and compares with an empty old value or a nil one, which must differ.
func (g *generator) cas() op {
	o := op{kind: opCAS, key: g.pick(g.recent)}
	if o.key == nil || g.r.IntN(3) == 0 {
		o.key = g.writeKey()
	}
	cur, ok := g.current(o.key)
	x := g.r.IntN(20)
	if g.r.IntN(6) == 0 {
		set := op{kind: opCAS, key: o.key, new: g.emptyValue()}
		if ok {
			set.old = &cur
		}
		g.ops = append(g.ops, set)
		cur, ok = *set.new, true
		x = 15 + 2*g.r.IntN(2) // an empty old, or a nil one
	}
	switch {
	case x < 12: // the key's value, or nil if it has none
		if ok {
			o.old = &cur
		}
	case x < 15: // a wrong one
		if !ok {
			v := g.value()
			o.old = &v
		} else if x > 12 { // of the same length
			g.nextVal++
			o.old = &valSpec{seed: g.nextVal, n: cur.n, random: cur.random}
		} // else nil, for a live key
	case x < 17:
		o.old = g.emptyValue()
	} // else nil
	switch x := g.r.IntN(10); {
	case x < 7:
		v := g.value()
		o.new = &v
	case x < 8:
		o.new = g.emptyValue()
	}
	return o
}

// emptyValue returns a new empty value, which is not nil.
func (g *generator) emptyValue() *valSpec {
	g.nextVal++
	v := valSpec{seed: g.nextVal}
	g.vals[describe(nil)] = v
	return &v
}

// afterTxnWrite sometimes looks at a transaction's write at once, so that
// reads of its own writes are many: a Get of the key (after a range
// deletion, of a key it wrote there), or a new iterator on the transaction
// over the key's prefix that seeks to it and steps on.
func (g *generator) afterTxnWrite(t *genTxn, w op) {
	x := g.r.IntN(4)
	if w.kind == opTxnDeleteRange && x == 2 {
		x = 0 // whether the range hid the transaction's write
	}
	switch x {
	case 0:
		k := w.key
		if w.kind == opTxnDeleteRange { // a key it wrote that the range hides
			k = nil
			for _, x := range t.wrote {
				if string(x) >= string(w.key) && string(x) < string(w.end) {
					k = x
				}
			}
		}
		if len(k) == 0 {
			return
		}
		g.ops = append(g.ops, op{kind: opTxnGet, id: t.id, key: k})
		t.read = append(t.read, k)
	case 1:
		if len(g.iters) >= 5 {
			return
		}
		g.nextIter++
		it := op{kind: opIterNew, id: g.nextIter, txn: t.id}
		g.iters = append(g.iters, it.id)
		g.iterTxn[it.id] = t
		p := g.txnPrefix(w.key)
		if g.r.IntN(4) == 0 {
			it.lower = p
		} else {
			it.prefix = p
		}
		t.starts = append(t.starts, p)
		g.ops = append(g.ops, it)
		seek := op{kind: opIterSeek, id: it.id, key: w.key}
		if g.r.IntN(2) == 0 {
			seek.kind, seek.key = opIterSeekLT, append(slices.Clone(w.key), 0)
		}
		g.ops = append(g.ops, seek)
		step := op{kind: []opKind{opIterNext, opIterPrev}[g.r.IntN(2)], id: it.id}
		for range g.r.IntN(4) {
			g.ops = append(g.ops, step)
		}
	}
}

// txnPrefix is the prefix of a transaction's iterator over k: mostly all
// of k but its last byte or two, so that the scan holds k and its
// neighbours, not a large part of the key space.
func (g *generator) txnPrefix(k []byte) []byte {
	n := len(k) - 1 - g.r.IntN(2)
	if g.r.IntN(4) == 0 {
		n = g.r.IntN(len(k) + 1)
	}
	return slices.Clone(k[:max(n, 0)])
}

// openTxn returns the open transaction id, or nil.
func (g *generator) openTxn(id int) *genTxn {
	for _, t := range g.txns {
		if t.id == id {
			return t
		}
	}
	return nil
}

// txnID returns the transaction an op uses: an open one, or rarely one
// that has ended, whose every use the store refuses.
func (g *generator) txnID() int {
	if len(g.ended) > 0 && g.r.IntN(25) == 0 {
		return g.ended[g.r.IntN(len(g.ended))]
	}
	return g.txns[g.r.IntN(len(g.txns))].id
}

// endTxn ends the i-th open transaction with kind, commit or discard
// (none: mostly commit).
func (g *generator) endTxn(i int, kind opKind) {
	t := g.txns[i]
	if kind == "" {
		kind = opTxnCommit
		if g.r.IntN(5) == 0 {
			kind = opTxnDiscard
		}
	}
	g.ops = append(g.ops, op{kind: kind, id: t.id})
	g.txns = slices.Delete(g.txns, i, i+1)
	g.ended = append(g.ended, t.id)
	if len(g.ended) > 4 {
		g.ended = g.ended[1:]
	}
}

// bounds returns an iterator's lower and upper bounds: each a bound key or
// nil, sometimes both the ends of a prefix (as SetPrefix sets them, so
// that the prefix filters serve them) or of a run of prefixes that differ
// in their last byte (which the filters of the first must not serve), and
// rarely reversed.
func (g *generator) bounds() (lower, upper []byte) {
	if g.r.IntN(4) == 0 {
		p := g.prefix()
		end := slices.Clone(p)
		for len(end) > 0 && end[len(end)-1] == 0xff {
			end = end[:len(end)-1]
		}
		if len(end) == 0 {
			return p, nil
		}
		step := byte(1)
		if g.r.IntN(3) == 0 {
			step += byte(1 + g.r.IntN(8))
		}
		end[len(end)-1] += min(step, 0xff-end[len(end)-1])
		return p, end
	}
	if g.r.IntN(2) == 0 {
		lower = g.boundKey()
	}
	if g.r.IntN(2) == 0 {
		upper = g.boundKey()
		if lower != nil && string(lower) > string(upper) && g.r.IntN(8) > 0 {
			lower, upper = upper, lower
		}
	}
	return lower, upper
}

// prefix returns an iterator's prefix: a whole SeparatorPrefix prefix of
// a key, or any prefix of one, sometimes followed by 0xff bytes (whose
// scan ends at the key space's end or a shorter prefix's).
func (g *generator) prefix() []byte {
	k := g.key()
	var p []byte
	if i := slices.Index(k, '/'); i >= 0 && g.r.IntN(2) == 0 {
		p = slices.Clone(k[:i+1])
	} else {
		p = slices.Clone(k[:g.r.IntN(len(k)+1)])
	}
	if g.r.IntN(8) == 0 {
		p = append(p, 0xff)
	}
	return p
}

// closeAll closes every open iterator and snapshot and ends every open
// transaction, as a reopen needs.
func (g *generator) closeAll() {
	for _, id := range g.iters {
		g.ops = append(g.ops, op{kind: opIterClose, id: id})
	}
	for _, id := range g.snaps {
		g.ops = append(g.ops, op{kind: opSnapClose, id: id})
	}
	for len(g.txns) > 0 {
		g.endTxn(0, "")
	}
	g.iters, g.snaps, g.ended = nil, nil, nil
	clear(g.iterTxn)
}
