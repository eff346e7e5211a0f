package datastore

import (
	"flag"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv"
	ds "github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	dstest "github.com/ipfs/go-datastore/test"
)

// configs are the store options every conformance and model test runs
// over: the defaults, where everything stays in the memtable; tiny
// memtables and blocks, where the suite's writes go through many flushes
// and background compactions, so queries merge memtables and segments and
// cross block boundaries in both directions; and small ones read with
// pread instead of mapped (DisableMmap), the other path segment reads
// take.
var configs = []struct {
	name string
	opts func() *bloomkv.Options
	// flushes: the suite must have flushed (it ran on segments too).
	flushes bool
}{
	{"default", func() *bloomkv.Options { return nil }, false},
	{"tiny", tinyOptions, true},
	{"pread", preadOptions, true},
}

func tinyOptions() *bloomkv.Options {
	o := bloomkv.DefaultOptions()
	o.MemtableSize = 4 << 10
	o.BlockSize = 256
	return o
}

func preadOptions() *bloomkv.Options {
	o := bloomkv.DefaultOptions()
	o.MemtableSize = 8 << 10
	o.BlockSize = 256
	o.DisableMmap = true
	return o
}

func open(t testing.TB, dir string, opts *bloomkv.Options) *Datastore {
	t.Helper()
	d, err := New(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSuite runs go-datastore's own conformance suite, the subtests of
// dstest.SubtestAll: put/get, not-founds, prefixes, orders, limits,
// filters, sizes, sync and, since the Datastore is Batching, the batch
// subtests. SubtestCombinations, the slowest, runs in
// TestSuiteCombinations instead.
func TestSuite(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			d := open(t, t.TempDir(), c.opts())
			defer d.Close()
			runSuite(t, d, false)
			if c.flushes && d.DB().Stats().Flushes == 0 {
				t.Errorf("the %s configuration never flushed: the suite ran on the memtable only", c.name)
			}
		})
	}
}

var suiteTiny = flag.Bool("suite.tiny", false, "run TestSuiteCombinations over tiny memtables too (minutes)")

// TestSuiteCombinations runs the suite's test of every combination of
// prefix, filter, order, offset and limit (2,000-odd queries), over the
// default options; -suite.tiny adds the small memtables, where its thousands of
// flushes and compactions take minutes. dstest leaves it out under the
// race detector, and so does this test; TestModel covers the same ground
// there.
func TestSuiteCombinations(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("short or race")
	}
	for _, c := range configs {
		if c.flushes && !*suiteTiny {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			d := open(t, t.TempDir(), c.opts())
			defer d.Close()
			dstest.SubtestCombinations(t, d)
		})
	}
}

// runSuite is dstest.SubtestAll, with SubtestCombinations only if asked.
func runSuite(t *testing.T, d ds.Batching, combinations bool) {
	combo := reflect.ValueOf(dstest.SubtestCombinations).Pointer()
	for _, f := range dstest.BasicSubtests {
		if reflect.ValueOf(f).Pointer() == combo && !combinations {
			continue
		}
		t.Run(funcName(f), func(t *testing.T) {
			f(t, d)
			clearAll(t, d)
		})
	}
	for _, f := range dstest.BatchSubtests {
		t.Run(funcName(f), func(t *testing.T) {
			f(t, d)
			clearAll(t, d)
		})
	}
}

func funcName(f any) string {
	name := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
	return name[strings.LastIndexByte(name, '.')+1:]
}

// clearAll deletes every key, as dstest does between subtests.
func clearAll(t *testing.T, d ds.Datastore) {
	for _, e := range queryAll(t, d, dsq.Query{KeysOnly: true}) {
		if err := d.Delete(t.Context(), ds.RawKey(e.Key)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSuiteWrapped runs the suite over a Datastore from Wrap, and checks
// that closing it leaves the DB to its owner.
func TestSuiteWrapped(t *testing.T) {
	dir := t.TempDir()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := Wrap(db, dir, nil)
	runSuite(t, d, false)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Put([]byte("/still"), []byte("open")); err != nil {
		t.Fatalf("Close of a wrapped Datastore closed the DB: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
