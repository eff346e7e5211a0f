package bloomkv

import (
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
