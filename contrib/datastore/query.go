package datastore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/bloomkv/bloomkv"
	ds "github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
)

// query runs q: natively when its order is by key (or none), by collecting
// and sorting otherwise. go-datastore applies a query's parts in this
// order: prefix, filters, orders, offset, limit.
func (d *Datastore) query(ctx context.Context, q dsq.Query) (dsq.Results, error) {
	var opts bloomkv.IterOptions
	// ds.NewKey cleans the prefix as NaiveQueryApply does ("/a/./" is
	// "/a", "" and "/.." are "/"); the trailing slash makes "/a" select
	// "/a/b" but not "/ab" or "/a" itself.
	if p := ds.NewKey(q.Prefix).String(); p != "/" {
		opts.Prefix = []byte(p + "/")
	}
	it, err := d.db.NewIterator(&opts)
	if err != nil {
		return nil, fmt.Errorf("bloomkv datastore: query: %w", err)
	}
	s := &stream{ctx: ctx, it: it, keysOnly: q.KeysOnly, filters: q.Filters, limit: -1}
	s.aliasSafe = make([]bool, len(q.Filters))
	for i, f := range q.Filters {
		s.aliasSafe[i] = aliasSafe(f)
	}

	desc, native := keyOrder(q.Orders)
	if native {
		s.desc = desc
		s.offset = max(q.Offset, 0)
		if q.Limit > 0 {
			s.limit = q.Limit
		}
		return dsq.ResultsFromIterator(q, dsq.Iterator{Next: s.next, Close: s.close}), nil
	}

	// Any other order needs every matching entry before the first result.
	// Offset and limit come after the sort, so they cannot shorten the
	// scan.
	var entries []dsq.Entry
	for {
		r, ok := s.next()
		if !ok {
			break
		}
		if r.Error != nil {
			s.close()
			return nil, r.Error
		}
		entries = append(entries, r.Entry)
	}
	dsq.Sort(q.Orders, entries)
	entries = entries[min(max(q.Offset, 0), len(entries)):]
	if q.Limit > 0 && q.Limit < len(entries) {
		entries = entries[:q.Limit]
	}
	return dsq.ResultsWithEntries(q, entries), nil
}

// keyOrder reports whether orders can be served by iterating in key order,
// and in which direction. Keys are unique, so orders after a key order
// never decide anything; no order at all gets ascending keys.
func keyOrder(orders []dsq.Order) (desc, native bool) {
	if len(orders) == 0 {
		return false, true
	}
	switch orders[0].(type) {
	case dsq.OrderByKey, *dsq.OrderByKey:
		return false, true
	case dsq.OrderByKeyDescending, *dsq.OrderByKeyDescending:
		return true, true
	}
	return false, false
}

// aliasSafe reports whether f is one of go-datastore's own filters, which
// look at the entry and keep nothing of it: those can be shown a value
// that still aliases the iterator, and an entry they reject is never
// copied. Any other filter could keep the entry, so it gets a copy.
func aliasSafe(f dsq.Filter) bool {
	switch f.(type) {
	case dsq.FilterKeyCompare, *dsq.FilterKeyCompare,
		dsq.FilterKeyPrefix, *dsq.FilterKeyPrefix,
		dsq.FilterValueCompare, *dsq.FilterValueCompare:
		return true
	}
	return false
}

// stream produces a query's results from a bloomkv iterator: filters,
// offset and limit applied as it goes. It is driven by one goroutine at a
// time (dsq.ResultsFromIterator calls next and close either from the
// consumer or from its own collector goroutine, never both at once).
type stream struct {
	ctx       context.Context
	it        *bloomkv.Iterator
	desc      bool
	keysOnly  bool
	filters   []dsq.Filter
	aliasSafe []bool // per filter
	offset    int    // results still to skip
	limit     int    // results still to return; -1: no limit
	started   bool
	done      bool
}

// next returns the next result, false at the end. An error is returned
// once, as a result, and ends the stream.
func (s *stream) next() (dsq.Result, bool) {
	if s.done {
		return dsq.Result{}, false
	}
	for {
		if err := s.ctx.Err(); err != nil {
			s.close()
			return dsq.Result{Error: err}, true
		}
		if !s.move() {
			if err := s.close(); err != nil {
				return dsq.Result{Error: fmt.Errorf("bloomkv datastore: query: %w", err)}, true
			}
			return dsq.Result{}, false
		}
		if s.offset > 0 && len(s.filters) == 0 {
			// Skipped without building an entry: no key or value copy.
			s.offset--
			continue
		}
		e, ok := s.entry()
		if !ok {
			continue
		}
		if s.offset > 0 {
			s.offset--
			continue
		}
		if s.limit > 0 {
			s.limit--
			if s.limit == 0 {
				// The entry owns its memory: release the iterator's
				// files now rather than when the consumer comes back.
				s.close()
			}
		}
		return dsq.Result{Entry: e}, true
	}
}

// move steps the iterator in the query's direction.
func (s *stream) move() bool {
	if !s.started {
		s.started = true
		if s.desc {
			return s.it.Last()
		}
		return s.it.First()
	}
	if s.desc {
		return s.it.Prev()
	}
	return s.it.Next()
}

// entry builds the entry at the iterator and runs the filters on it; ok
// is false if one rejects it. The entry returned owns its key and value.
func (s *stream) entry() (dsq.Entry, bool) {
	v := s.it.Value()
	// string(...) copies the key. Size costs nothing: the value is in
	// memory already, only the copy is saved by KeysOnly.
	e := dsq.Entry{Key: string(s.it.Key()), Size: len(v)}
	owned := s.keysOnly
	if !s.keysOnly {
		e.Value = v // still the iterator's: copied below before it leaves
	}
	for i, f := range s.filters {
		if !owned && !s.aliasSafe[i] {
			e.Value, owned = bytes.Clone(e.Value), true
		}
		if !f.Filter(e) {
			return dsq.Entry{}, false
		}
	}
	if !owned {
		e.Value = bytes.Clone(e.Value)
	}
	return e, true
}

// close releases the iterator and returns its error. Later calls return
// nil: dsq may close a Results more than once.
func (s *stream) close() error {
	if s.done {
		return nil
	}
	s.done = true
	return s.it.Close()
}
