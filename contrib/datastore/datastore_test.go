package datastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bloomkv/bloomkv"
	"github.com/bloomkv/bloomkv/vfs"
	"github.com/bloomkv/bloomkv/vfs/powerfs"
	ds "github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
)

func mustGet(t *testing.T, d ds.Datastore, k ds.Key) []byte {
	t.Helper()
	v, err := d.Get(t.Context(), k)
	if err != nil {
		t.Fatalf("Get(%s): %v", k, err)
	}
	return v
}

func queryAll(t *testing.T, d ds.Datastore, q dsq.Query) []dsq.Entry {
	t.Helper()
	r, err := d.Query(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	es, err := r.Rest()
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestReopen checks that puts, batches and deletes survive Close and New,
// both from segments (tiny memtables) and from the WAL alone (defaults).
func TestReopen(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			d := open(t, dir, c.opts())
			want := map[string]string{}
			for i := range 1000 {
				k := fmt.Sprintf("/k/%04d", i)
				want[k] = strings.Repeat(fmt.Sprint(i), 1+i%7)
				if err := d.Put(ctx, ds.NewKey(k), []byte(want[k])); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := d.Batch(ctx)
			for i := range 1000 {
				k := fmt.Sprintf("/k/%04d", i)
				switch i % 3 {
				case 0:
					b.Delete(ctx, ds.NewKey(k))
					delete(want, k)
				case 1:
					want[k] = "batched"
					b.Put(ctx, ds.NewKey(k), []byte(want[k]))
				}
			}
			if err := b.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}

			d = open(t, dir, c.opts())
			defer d.Close()
			got := queryAll(t, d, dsq.Query{})
			if len(got) != len(want) {
				t.Fatalf("after reopen: %d entries, want %d", len(got), len(want))
			}
			for _, e := range got {
				if string(e.Value) != want[e.Key] {
					t.Fatalf("after reopen: %s = %q, want %q", e.Key, e.Value, want[e.Key])
				}
			}
			if _, err := d.Get(ctx, ds.NewKey("/k/0000")); err != ds.ErrNotFound {
				t.Fatalf("deleted key after reopen: %v, want ds.ErrNotFound", err)
			}
		})
	}
}

// TestSync checks what Sync does: without Options.Sync it makes the
// writes before it survive a power cut (simulated by powerfs.FS, which
// drops everything not fsynced) with one WAL fsync and no flush; with
// Options.Sync there is nothing to do.
func TestSync(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	p := powerfs.New(vfs.Default, &powerfs.Options{SkipRealSync: true})
	o := bloomkv.DefaultOptions()
	o.FS = p
	d := open(t, dir, o)
	if err := d.Put(ctx, ds.NewKey("/a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx, ds.NewKey("/a")); err != nil {
		t.Fatal(err)
	}
	if st := d.DB().Stats(); st.Flushes != 0 {
		t.Fatalf("Sync flushed (%d flushes): one WAL fsync is enough", st.Flushes)
	}
	if err := d.Put(ctx, ds.NewKey("/b"), []byte("2")); err != nil { // never synced
		t.Fatal(err)
	}
	p.Cut()
	d.Close()
	if _, err := p.Restore(powerfs.WritebackNone, 1); err != nil {
		t.Fatal(err)
	}
	d = open(t, dir, o)
	defer d.Close()
	if v, err := d.Get(ctx, ds.NewKey("/a")); err != nil || string(v) != "1" {
		t.Fatalf("synced write after a power cut: %q, %v", v, err)
	}
	if _, err := d.Get(ctx, ds.NewKey("/b")); !errors.Is(err, ds.ErrNotFound) {
		t.Fatalf("unsynced write survived a cut that kept no unsynced byte: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.Sync(cctx, ds.NewKey("")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync with a canceled context: %v", err)
	}

	o = bloomkv.DefaultOptions()
	o.Sync = true
	s := open(t, t.TempDir(), o)
	defer s.Close()
	if err := s.Put(ctx, ds.NewKey("/a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx, ds.NewKey("/a")); err != nil {
		t.Fatal(err)
	}
	if st := s.DB().Stats(); st.Flushes != 0 {
		t.Fatalf("Sync with Options.Sync flushed (%d flushes): writes were durable already", st.Flushes)
	}
}

// TestPrefixBoundaries checks go-datastore's prefix rule at the edges of
// a bounded iterator: "/a" is not under "/a", "/ab" is not under "/a",
// and a prefix of 0xff bytes, which has no upper bound, still ends.
func TestPrefixBoundaries(t *testing.T) {
	ctx := t.Context()
	d := open(t, t.TempDir(), nil)
	defer d.Close()
	for _, k := range []string{"/a", "/a/b", "/a/b/c", "/ab", "/ab/c", "/a0", "/a.", "/\xff", "/\xff/x", "/\xff\xff", "/\xff\xff/y", "/\xff\xff/\xff"} {
		if err := d.Put(ctx, ds.RawKey(k), []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"/a", []string{"/a/b", "/a/b/c"}},
		{"a/", []string{"/a/b", "/a/b/c"}},
		{"/a/b/..", []string{"/a/b", "/a/b/c"}},
		{"/ab", []string{"/ab/c"}},
		{"/\xff", []string{"/\xff/x"}},
		{"/\xff\xff", []string{"/\xff\xff/y", "/\xff\xff/\xff"}},
		{"/a/b/c", nil},
	} {
		for _, order := range []dsq.Order{dsq.OrderByKey{}, dsq.OrderByKeyDescending{}} {
			var got []string
			for _, e := range queryAll(t, d, dsq.Query{Prefix: c.prefix, Orders: []dsq.Order{order}}) {
				got = append(got, e.Key)
			}
			want := append([]string(nil), c.want...)
			if _, desc := order.(dsq.OrderByKeyDescending); desc {
				for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
					want[i], want[j] = want[j], want[i]
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("prefix %q %v: %q, want %q", c.prefix, order, got, want)
			}
		}
	}
}

// TestResultsOwnMemory keeps every entry of a query over many blocks and
// segments, then overwrites and compacts everything: the kept entries
// must not change.
func TestResultsOwnMemory(t *testing.T) {
	ctx := t.Context()
	d := open(t, t.TempDir(), tinyOptions())
	defer d.Close()
	val := func(i, gen int) []byte { return bytes.Repeat([]byte{byte(i), byte(gen)}, 20+i%50) }
	for i := range 500 {
		d.Put(ctx, ds.NewKey(fmt.Sprintf("/k/%03d", i)), val(i, 1))
	}
	for _, q := range []dsq.Query{{}, {Orders: []dsq.Order{dsq.OrderByKeyDescending{}}}, {Orders: []dsq.Order{dsq.OrderByValue{}}}} {
		kept := queryAll(t, d, q)
		for i := range 500 {
			d.Put(ctx, ds.NewKey(fmt.Sprintf("/k/%03d", i)), val(i, 2))
		}
		if err := d.DB().Compact(); err != nil {
			t.Fatal(err)
		}
		if len(kept) != 500 {
			t.Fatalf("%s: %d entries, want 500", q, len(kept))
		}
		for _, e := range kept {
			var i int
			fmt.Sscanf(e.Key, "/k/%d", &i)
			if !bytes.Equal(e.Value, val(i, 1)) && !bytes.Equal(e.Value, val(i, 2)) || e.Size != len(e.Value) {
				t.Fatalf("%s: entry %s changed after later writes: %x", q, e.Key, e.Value)
			}
		}
	}
}

// TestQueryContext checks that a query stops with the context's error at
// the next entry once its context is done, and that its iterator is
// released (the DB closes cleanly afterwards).
func TestQueryContext(t *testing.T) {
	d := open(t, t.TempDir(), nil)
	for i := range 100 {
		d.Put(t.Context(), ds.NewKey(fmt.Sprint(i)), []byte("v"))
	}
	for _, q := range []dsq.Query{{}, {Orders: []dsq.Order{dsq.OrderByKeyDescending{}}, KeysOnly: true}} {
		ctx, cancel := context.WithCancel(t.Context())
		r, err := d.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if res, ok := r.NextSync(); !ok || res.Error != nil {
			t.Fatalf("first result: %v, %v", res, ok)
		}
		cancel()
		res, ok := r.NextSync()
		if !ok || !errors.Is(res.Error, context.Canceled) {
			t.Fatalf("after cancel: %v, %v; want context.Canceled", res, ok)
		}
		if _, ok := r.NextSync(); ok {
			t.Fatal("results went on after the context's error")
		}
		r.Close()
	}
	// A sorted query reads everything in Query: a done context fails it.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.Query(ctx, dsq.Query{Orders: []dsq.Order{dsq.OrderByValue{}}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("sorted query with a canceled context: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestQueryAfterClose checks that a query open when the Datastore closes
// ends with an error rather than a panic or a hang.
func TestQueryAfterClose(t *testing.T) {
	d := open(t, t.TempDir(), nil)
	for i := range 10 {
		d.Put(t.Context(), ds.NewKey(fmt.Sprint(i)), []byte("v"))
	}
	r, err := d.Query(t.Context(), dsq.Query{})
	if err != nil {
		t.Fatal(err)
	}
	r.NextSync()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Rest(); !errors.Is(err, bloomkv.ErrClosed) {
		t.Fatalf("query after Close: %v, want bloomkv.ErrClosed", err)
	}
	r.Close()
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := d.Put(t.Context(), ds.NewKey("/x"), nil); !errors.Is(err, bloomkv.ErrClosed) {
		t.Fatalf("Put after Close: %v, want bloomkv.ErrClosed", err)
	}
}

// TestBatchChunks makes the chunk limit small: a large batch is written
// as several bloomkv batches, in order, and still applies completely.
func TestBatchChunks(t *testing.T) {
	defer func(old int) { maxChunk = old }(maxChunk)
	maxChunk = 1 << 10
	ctx := t.Context()
	d := open(t, t.TempDir(), nil)
	defer d.Close()
	b, _ := d.Batch(ctx)
	for i := range 200 {
		b.Put(ctx, ds.NewKey(fmt.Sprint(i)), bytes.Repeat([]byte("v"), 100))
	}
	b.Delete(ctx, ds.NewKey("7")) // after its put, in a later chunk: must win
	before := d.DB().Stats().Writes
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if w := d.DB().Stats().Writes - before; w < 10 {
		t.Fatalf("a 20 KiB batch with 1 KiB chunks took %d writes", w)
	}
	if n := len(queryAll(t, d, dsq.Query{KeysOnly: true})); n != 199 {
		t.Fatalf("%d keys after the batch, want 199", n)
	}
	// The batch is empty and reusable after Commit.
	b.Put(ctx, ds.NewKey("/again"), []byte("1"))
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(queryAll(t, d, dsq.Query{KeysOnly: true})); n != 200 {
		t.Fatalf("%d keys after reusing the batch, want 200", n)
	}
}

// TestLimits checks that bloomkv's size limits are reported by the call
// that breaks them.
func TestLimits(t *testing.T) {
	ctx := t.Context()
	d := open(t, t.TempDir(), nil)
	defer d.Close()
	long := ds.RawKey("/" + strings.Repeat("k", bloomkv.MaxKeySize))
	if err := d.Put(ctx, long, nil); !errors.Is(err, bloomkv.ErrKeyTooLarge) {
		t.Fatalf("Put of a long key: %v", err)
	}
	b, _ := d.Batch(ctx)
	if err := b.Put(ctx, long, nil); !errors.Is(err, bloomkv.ErrKeyTooLarge) {
		t.Fatalf("batch Put of a long key: %v", err)
	}
	if err := b.Delete(ctx, long); !errors.Is(err, bloomkv.ErrKeyTooLarge) {
		t.Fatalf("batch Delete of a long key: %v", err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatalf("Commit of a batch whose bad puts were refused: %v", err)
	}
}

// TestDiskUsageAndCheck checks that DiskUsage counts the files and grows
// with data, and that Check passes a sound store and reports a damaged
// segment as bloomkv.ErrCorrupt.
func TestDiskUsageAndCheck(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := open(t, dir, nil)
	defer d.Close()
	empty, err := d.DiskUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		d.Put(ctx, ds.NewKey(fmt.Sprint(i)), bytes.Repeat([]byte{byte(i)}, 200))
	}
	if err := d.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	full, err := d.DiskUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fi, _ := e.Info()
		sum += fi.Size()
	}
	if full <= empty || full != uint64(sum) {
		t.Fatalf("DiskUsage %d (empty store %d), files add up to %d", full, empty, sum)
	}
	if err := d.Check(ctx); err != nil {
		t.Fatalf("Check of a sound store: %v", err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no segment after Flush")
	}
	f, err := os.OpenFile(segs[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("damage"), 100)
	f.Close()
	if err := d.Check(ctx); !errors.Is(err, bloomkv.ErrCorrupt) {
		t.Fatalf("Check of a damaged segment: %v, want bloomkv.ErrCorrupt", err)
	}
}

// TestConcurrent runs writers, batches, readers and queries at once, for
// the race detector, and checks each writer's own keys at the end.
func TestConcurrent(t *testing.T) {
	ctx := t.Context()
	d := open(t, t.TempDir(), tinyOptions())
	defer d.Close()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				k := ds.NewKey(fmt.Sprintf("/w%d/%03d", w, i))
				if i%10 == 0 {
					b, _ := d.Batch(ctx)
					b.Put(ctx, k, []byte("b"))
					if err := b.Commit(ctx); err != nil {
						t.Error(err)
					}
				} else if err := d.Put(ctx, k, []byte("p")); err != nil {
					t.Error(err)
				}
				if _, err := d.Has(ctx, k); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for q := range 2 {
		wg.Go(func() {
			for range 20 {
				r, err := d.Query(ctx, dsq.Query{Prefix: fmt.Sprintf("/w%d", q), Orders: []dsq.Order{dsq.OrderByKeyDescending{}}, Limit: 50})
				if err != nil {
					t.Error(err)
					return
				}
				es, err := r.Rest()
				if err != nil {
					t.Error(err)
				}
				for i := 1; i < len(es); i++ {
					if es[i-1].Key <= es[i].Key {
						t.Errorf("descending query out of order: %s then %s", es[i-1].Key, es[i].Key)
					}
				}
			}
		})
	}
	wg.Wait()
	for w := range 4 {
		if n := len(queryAll(t, d, dsq.Query{Prefix: fmt.Sprintf("/w%d", w), KeysOnly: true})); n != 200 {
			t.Errorf("writer %d: %d keys, want 200", w, n)
		}
	}
}

// TestGetCopies checks that values returned by Get are the caller's.
func TestGetCopies(t *testing.T) {
	ctx := t.Context()
	d := open(t, t.TempDir(), nil)
	defer d.Close()
	k := ds.NewKey("/k")
	d.Put(ctx, k, []byte("value"))
	v := mustGet(t, d, k)
	v[0] = 'X'
	if got := mustGet(t, d, k); string(got) != "value" {
		t.Fatalf("changing a Get result changed the store: %q", got)
	}
}

// BenchmarkLargeValue: Get, Has and GetSize of a 256 KiB value in a
// flushed segment. Has and GetSize find the value without copying it.
func BenchmarkLargeValue(b *testing.B) {
	ctx := context.Background()
	d, err := New(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	v := make([]byte, 256<<10)
	for i := range v {
		v[i] = byte(i * 7919 >> 3) // little to compress
	}
	k := ds.NewKey("/big")
	if err := d.Put(ctx, k, v); err != nil {
		b.Fatal(err)
	}
	if err := d.DB().Flush(); err != nil {
		b.Fatal(err)
	}
	ops := []struct {
		name string
		fn   func() error
	}{
		{"Get", func() error { _, err := d.Get(ctx, k); return err }},
		{"Has", func() error { _, err := d.Has(ctx, k); return err }},
		{"GetSize", func() error { _, err := d.GetSize(ctx, k); return err }},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if err := op.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
