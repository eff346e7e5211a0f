package datastore

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv"
	ds "github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
)

var (
	modelSeeds = flag.Int("model.seeds", 0, "seeds per configuration of TestModel (default 4, 2 under the race detector)")
	modelOps   = flag.Int("model.ops", 1500, "operations per seed of TestModel (a fifth with -short)")
)

// TestModel runs random puts, deletes, batches (committed and dropped),
// reads, syncs, reopens and queries against the Datastore and against
// go-datastore's MapDatastore, and requires the same answers. Queries draw
// prefixes (with the "/a" vs "/ab" trap and 0xff bytes), filters
// (go-datastore's and a custom one that keeps every entry it sees, to
// catch results that alias iterator memory), orders, offsets, limits,
// KeysOnly and ReturnsSizes, and are read in the three ways Results
// offers, sometimes closed early.
func TestModel(t *testing.T) {
	ops, seeds := *modelOps, *modelSeeds
	if testing.Short() {
		ops /= 5
	}
	if seeds <= 0 {
		// Under the race detector the tiny configuration's compactions
		// take most of a minute per seed.
		seeds = 4
		if raceEnabled {
			seeds = 2
		}
	}
	for _, c := range configs {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("%s/seed=%d", c.name, seed), func(t *testing.T) {
				m := &model{
					t:    t,
					ctx:  t.Context(),
					rng:  rand.New(rand.NewPCG(seed, 0x6b76)),
					dir:  t.TempDir(),
					opts: c.opts,
					want: ds.NewMapDatastore(),
				}
				m.got = open(t, m.dir, m.opts())
				defer func() { m.got.Close() }()
				for m.op = 0; m.op < ops && !t.Failed(); m.op++ {
					m.step()
				}
				m.checkAll()
				t.Logf("%d ops: %d queries, %d results compared, %d reopens, %d flushes, %d compactions",
					ops, m.queries, m.results, m.reopens, m.flushes, m.compactions)
			})
		}
	}
}

type model struct {
	t                         *testing.T
	ctx                       context.Context
	rng                       *rand.Rand
	dir                       string
	opts                      func() *bloomkv.Options
	got                       *Datastore
	want                      *ds.MapDatastore
	op                        int
	queries, results, reopens int
	flushes, compactions      uint64 // of the sessions closed so far
}

// segments make the key space: small, so keys are overwritten and deleted
// often; "a" and "ab" share bytes so that prefix "/a" must not match
// "/ab"; 0xff bytes exercise the end of a prefix range.
var segments = []string{"a", "b", "ab", "ba", "0", "\xff", "\xff\xff"}

func (m *model) key() ds.Key {
	n := 1 + m.rng.IntN(3)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = segments[m.rng.IntN(len(segments))]
	}
	return ds.RawKey("/" + strings.Join(parts, "/"))
}

// value is often short and from two letters, so that orders and filters
// by value meet ties; sometimes empty; sometimes larger than a tiny
// block.
func (m *model) value() []byte {
	switch r := m.rng.IntN(10); {
	case r == 0:
		return []byte{}
	case r < 6:
		v := make([]byte, 1+m.rng.IntN(3))
		for i := range v {
			v[i] = "xy"[m.rng.IntN(2)]
		}
		return v
	case r < 9:
		v := make([]byte, 10+m.rng.IntN(60))
		for i := range v {
			v[i] = byte(m.rng.UintN(256))
		}
		return v
	default:
		return bytes.Repeat([]byte{byte(m.rng.UintN(256))}, 300+m.rng.IntN(2000))
	}
}

func (m *model) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("op %d: "+format, append([]any{m.op}, args...)...)
}

func (m *model) step() {
	switch r := m.rng.IntN(1000); {
	case r < 330:
		k, v := m.key(), m.value()
		m.must(m.got.Put(m.ctx, k, v))
		m.must(m.want.Put(m.ctx, k, v))
	case r < 480:
		k := m.key()
		m.must(m.got.Delete(m.ctx, k))
		m.must(m.want.Delete(m.ctx, k))
	case r < 580:
		m.batch()
	case r < 680:
		m.read(m.key())
	case r < 990:
		m.query()
	case r < 996:
		m.must(m.got.Sync(m.ctx, m.key()))
	default:
		m.reopen()
	}
}

func (m *model) must(err error) {
	m.t.Helper()
	if err != nil {
		m.fatalf("%v", err)
	}
}

// batch fills a batch of puts and deletes; one in five is dropped without
// Commit and must change nothing.
func (m *model) batch() {
	gb, err := m.got.Batch(m.ctx)
	m.must(err)
	wb, _ := m.want.Batch(m.ctx)
	commit := m.rng.IntN(5) > 0
	for range 1 + m.rng.IntN(30) {
		k := m.key()
		if m.rng.IntN(3) == 0 {
			m.must(gb.Delete(m.ctx, k))
			m.must(wb.Delete(m.ctx, k))
		} else {
			v := m.value()
			m.must(gb.Put(m.ctx, k, v))
			m.must(wb.Put(m.ctx, k, v))
		}
	}
	if commit {
		m.must(gb.Commit(m.ctx))
		m.must(wb.Commit(m.ctx))
	}
}

// read compares Get, Has and GetSize of one key.
func (m *model) read(k ds.Key) {
	m.t.Helper()
	wv, werr := m.want.Get(m.ctx, k)
	gv, gerr := m.got.Get(m.ctx, k)
	if gerr != werr || !bytes.Equal(gv, wv) {
		m.fatalf("Get(%q) = %q, %v; want %q, %v", k, gv, gerr, wv, werr)
	}
	if werr != nil && gv != nil {
		m.fatalf("Get(%q) of an absent key returned a non-nil value", k)
	}
	wh, _ := m.want.Has(m.ctx, k)
	gh, err := m.got.Has(m.ctx, k)
	if err != nil || gh != wh {
		m.fatalf("Has(%q) = %v, %v; want %v", k, gh, err, wh)
	}
	ws, werr := m.want.GetSize(m.ctx, k)
	gs, gerr := m.got.GetSize(m.ctx, k)
	if gs != ws || gerr != werr {
		m.fatalf("GetSize(%q) = %d, %v; want %d, %v", k, gs, gerr, ws, werr)
	}
}

func (m *model) reopen() {
	st := m.got.DB().Stats()
	m.flushes += st.Flushes
	m.compactions += st.Compactions
	m.must(m.got.Close())
	m.got = open(m.t, m.dir, m.opts())
	m.reopens++
}

// keepFilter is a filter go-datastore does not know: it passes what fn
// passes and keeps every entry it is shown, which must stay intact after
// the query has moved on.
type keepFilter struct {
	fn   func(dsq.Entry) bool
	kept *[]dsq.Entry
}

func (keepFilter) String() string { return "KEEP" }

func (f keepFilter) Filter(e dsq.Entry) bool {
	*f.kept = append(*f.kept, e)
	return f.fn(e)
}

var prefixes = []string{"", "/", "/a", "/a/", "/ab", "/a/b", "/b/a/", "\xff", "/\xff", "/\xff\xff", "/zz", "a", "/a/./b/..", "/../a"}

var ops = []dsq.Op{dsq.Equal, dsq.NotEqual, dsq.LessThan, dsq.LessThanOrEqual, dsq.GreaterThan, dsq.GreaterThanOrEqual}

func (m *model) filter(kept *[]dsq.Entry) dsq.Filter {
	switch m.rng.IntN(5) {
	case 0:
		return dsq.FilterKeyCompare{Op: ops[m.rng.IntN(len(ops))], Key: m.key().String()}
	case 1:
		return &dsq.FilterKeyPrefix{Prefix: prefixes[m.rng.IntN(len(prefixes))]}
	case 2:
		return dsq.FilterValueCompare{Op: ops[m.rng.IntN(len(ops))], Value: m.value()}
	case 3:
		return keepFilter{fn: func(e dsq.Entry) bool { return len(e.Value)%2 == 0 }, kept: kept}
	default:
		return keepFilter{fn: func(dsq.Entry) bool { return true }, kept: kept}
	}
}

var orders = [][]dsq.Order{
	nil,
	{dsq.OrderByKey{}},
	{&dsq.OrderByKey{}},
	{dsq.OrderByKeyDescending{}},
	{&dsq.OrderByKeyDescending{}, dsq.OrderByValue{}},
	{dsq.OrderByValue{}},
	{dsq.OrderByValueDescending{}, dsq.OrderByKeyDescending{}},
	{dsq.OrderByFunction(func(a, b dsq.Entry) int { return a.Size - b.Size })},
}

func (m *model) query() {
	m.queries++
	var kept []dsq.Entry
	q := dsq.Query{
		Prefix:       prefixes[m.rng.IntN(len(prefixes))],
		Orders:       orders[m.rng.IntN(len(orders))],
		KeysOnly:     m.rng.IntN(3) == 0,
		ReturnsSizes: m.rng.IntN(3) == 0,
	}
	for range m.rng.IntN(3) * m.rng.IntN(2) {
		q.Filters = append(q.Filters, m.filter(&kept))
	}
	if m.rng.IntN(3) == 0 {
		q.Offset = m.rng.IntN(40)
	}
	if m.rng.IntN(3) == 0 {
		q.Limit = 1 + m.rng.IntN(40)
	}

	// The model's order for no order is undefined (map order), and so
	// would be its offset and limit: ask it for ascending keys, which is
	// what the Datastore documents.
	wq := q
	if len(wq.Orders) == 0 {
		wq.Orders = []dsq.Order{dsq.OrderByKey{}}
	}
	var wantKept []dsq.Entry
	for i, f := range wq.Filters {
		if kf, ok := f.(keepFilter); ok {
			wq.Filters = slices.Clone(wq.Filters)
			wq.Filters[i] = keepFilter{fn: kf.fn, kept: &wantKept}
		}
	}
	wr, err := m.want.Query(m.ctx, wq)
	m.must(err)
	want, err := wr.Rest()
	m.must(err)

	gr, err := m.got.Query(m.ctx, q)
	m.must(err)
	if rq := gr.Query(); rq.String() != q.String() {
		m.fatalf("Results.Query() = %s, want %s", rq, q)
	}
	stopAt := -1 // read everything
	if m.rng.IntN(8) == 0 {
		stopAt = m.rng.IntN(5)
	}
	var got []dsq.Entry
	switch m.rng.IntN(3) {
	case 0:
		if stopAt < 0 {
			got, err = gr.Rest()
			m.must(err)
			break
		}
		fallthrough
	case 1:
		for len(got) != stopAt {
			r, ok := gr.NextSync()
			if !ok {
				break
			}
			m.must(r.Error)
			got = append(got, r.Entry)
		}
	default:
		if stopAt == 0 {
			break
		}
		for r := range gr.Next() {
			m.must(r.Error)
			got = append(got, r.Entry)
			if len(got) == stopAt {
				break
			}
		}
	}
	m.must(gr.Close())
	if stopAt >= 0 && stopAt < len(want) {
		want = want[:stopAt]
	}

	// A write after the query must not show through the entries it
	// returned or a filter kept.
	k, v := m.key(), m.value()
	m.must(m.got.Put(m.ctx, k, v))
	m.must(m.want.Put(m.ctx, k, v))

	if len(got) != len(want) {
		m.fatalf("query %s: %d results, want %d\n got: %v\nwant: %v", q, len(got), len(want), keysOf(got), keysOf(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Key != w.Key {
			m.fatalf("query %s: result %d is %q, want %q\n got: %v\nwant: %v", q, i, g.Key, w.Key, keysOf(got), keysOf(want))
		}
		if q.KeysOnly && g.Value != nil {
			m.fatalf("query %s: result %d (%q) has a value with KeysOnly", q, i, g.Key)
		}
		if !bytes.Equal(g.Value, w.Value) {
			m.fatalf("query %s: result %d (%q) value %q, want %q", q, i, g.Key, g.Value, w.Value)
		}
		if g.Size != w.Size {
			m.fatalf("query %s: result %d (%q) size %d, want %d", q, i, g.Key, g.Size, w.Size)
		}
	}
	m.results += len(got)
	for _, e := range kept {
		if q.KeysOnly {
			continue
		}
		if wv, ok := m.lookup(wantKept, e.Key); !ok || !bytes.Equal(e.Value, wv) {
			m.fatalf("query %s: entry %q kept by a filter changed to %q (want %q)", q, e.Key, e.Value, wv)
		}
	}
}

// lookup finds key among the entries the model's filter saw.
func (m *model) lookup(entries []dsq.Entry, key string) ([]byte, bool) {
	for _, e := range entries {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

func keysOf(es []dsq.Entry) []string {
	ks := make([]string, len(es))
	for i, e := range es {
		ks[i] = e.Key
	}
	return ks
}

// checkAll compares every key of the key space, then reopens the store
// and compares the full contents again.
func (m *model) checkAll() {
	m.t.Helper()
	var walk func(prefix string, depth int)
	walk = func(prefix string, depth int) {
		for _, s := range segments {
			k := prefix + "/" + s
			m.read(ds.RawKey(k))
			if depth < 3 {
				walk(k, depth+1)
			}
		}
	}
	walk("", 1)
	m.reopen()
	want, err := dsq.NaiveQueryApply(dsq.Query{Orders: []dsq.Order{dsq.OrderByKey{}}}, must(m.want.Query(m.ctx, dsq.Query{}))).Rest()
	m.must(err)
	r, err := m.got.Query(m.ctx, dsq.Query{})
	m.must(err)
	got, err := r.Rest()
	m.must(err)
	if len(got) != len(want) {
		m.fatalf("after reopen: %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Key != want[i].Key || !bytes.Equal(got[i].Value, want[i].Value) {
			m.fatalf("after reopen: entry %d is %q=%q, want %q=%q", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
