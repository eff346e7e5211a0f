package bloomkv

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// The zero Options are the defaults: in particular Bloom filters are on
// (BitsPerKey 0 means 10, not "no filters"); DisableFilters turns them off.
func TestOptionsZeroValue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    *Options
		filters bool
	}{
		{"nil", nil, true},
		{"zero", &Options{}, true},
		{"DefaultOptions", DefaultOptions(), true},
		{"DisableFilters", &Options{DisableFilters: true}, false},
		{"DisableFilters with BitsPerKey", &Options{DisableFilters: true, BitsPerKey: 12}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := mustOpen(t, t.TempDir(), tc.opts)
			defer db.Close()
			if got := db.opts.MemtableSize; got != DefaultOptions().MemtableSize {
				t.Fatalf("MemtableSize %d, want the default", got)
			}
			for i := range 100 {
				mustDo(t, db.Put([]byte{byte(i)}, []byte("v")))
			}
			mustDo(t, db.Flush())
			st := db.Stats()
			if st.Segments != 1 {
				t.Fatalf("%d segments after a Flush, want 1", st.Segments)
			}
			if got := st.FilterBytes > 0; got != tc.filters {
				t.Fatalf("FilterBytes = %d after a Flush; want filters: %v", st.FilterBytes, tc.filters)
			}
			before := db.Stats()
			if _, err := db.Get([]byte("absent")); err != ErrNotFound {
				t.Fatalf("Get of an absent key: %v", err)
			}
			after := db.Stats()
			if skipped := after.FilterNegatives - before.FilterNegatives; (skipped == 1) != tc.filters {
				t.Fatalf("absent-key Get skipped %d segments by filter; want filters: %v", skipped, tc.filters)
			}
		})
	}
}

// TestOptionsEdgesAccepted: the ends of every option's documented range
// are accepted, and the values just beyond them refused, so the ranges the
// Options doc states are the ones Open enforces.
func TestOptionsEdgesAccepted(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		set  func(*Options)
	}{
		{"BitsPerKey 1", true, func(o *Options) { o.BitsPerKey = 1 }},
		{"BitsPerKey 64", true, func(o *Options) { o.BitsPerKey = 64 }},
		{"BitsPerKey 64.5", false, func(o *Options) { o.BitsPerKey = 64.5 }},
		{"MemtableSize 1", true, func(o *Options) { o.MemtableSize = 1 }},
		{"MemtableSize 1 GiB", true, func(o *Options) { o.MemtableSize = 1 << 30 }},
		{"MemtableSize 1 GiB + 1", false, func(o *Options) { o.MemtableSize = 1<<30 + 1 }},
		{"BlockSize 1", true, func(o *Options) { o.BlockSize = 1 }},
		{"BlockSize 8 MiB", true, func(o *Options) { o.BlockSize = 8 << 20 }},
		{"BlockSize 8 MiB + 1", false, func(o *Options) { o.BlockSize = 8<<20 + 1 }},
		{"LargeValueSize 1", true, func(o *Options) { o.LargeValueSize = 1 }},
		{"LargeValueSize MaxValueSize", true, func(o *Options) { o.LargeValueSize = MaxValueSize }},
		{"LargeValueSize MaxValueSize + 1", false, func(o *Options) { o.LargeValueSize = MaxValueSize + 1 }},
		{"LargeValueSize negative", false, func(o *Options) { o.LargeValueSize = -1 }},
		{"BlockCacheSize 1", true, func(o *Options) { o.BlockCacheSize = 1 }},
		{"BlockCacheSize MaxInt64", true, func(o *Options) { o.BlockCacheSize = math.MaxInt64 }},
		{"FilterBudget MaxInt64", true, func(o *Options) { o.FilterBudget = math.MaxInt64 }},
		{"CompactionFanIn 2", true, func(o *Options) { o.CompactionFanIn = 2 }},
		{"CompactionFanIn 64", true, func(o *Options) { o.CompactionFanIn = 64 }},
		{"CompactionConcurrency 64", true, func(o *Options) { o.CompactionConcurrency = 64 }},
		{"CompactionConcurrency 65", false, func(o *Options) { o.CompactionConcurrency = 65 }},
	} {
		o := DefaultOptions()
		tc.set(o)
		_, err := o.validated()
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case !tc.ok && !errors.Is(err, ErrInvalidOptions):
			t.Errorf("%s: %v, want ErrInvalidOptions", tc.name, err)
		case !tc.ok && !strings.Contains(err.Error(), strings.Fields(tc.name)[0]+" = "):
			t.Errorf("%s: %v, want it to name the option", tc.name, err)
		}
	}
}
