package bloomkv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestConcurrentCompactions floods a store with several background
// compactions allowed and checks the invariant that lets merges run side by
// side: the live segments stay ordered by sequence number, each one's
// versions all newer than the next one's; and every key reads back.
func TestConcurrentCompactions(t *testing.T) {
	o := smallOptions()
	o.CompactionFanIn = 2
	o.CompactionConcurrency = 3
	db := mustOpen(t, t.TempDir(), o)
	defer db.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	model := map[string]string{}
	checkOrder := func() {
		t.Helper()
		db.mu.Lock()
		defer db.mu.Unlock()
		for i := 1; i < len(db.segments); i++ {
			newer, older := db.segments[i-1].meta, db.segments[i].meta
			if older.MaxSeq >= newer.MinSeq {
				t.Fatalf("segment %d (seqs %d..%d) is not older than segment %d (seqs %d..%d)",
					older.FileNum, older.MinSeq, older.MaxSeq, newer.FileNum, newer.MinSeq, newer.MaxSeq)
			}
		}
	}
	for i := range 30000 {
		k := fmt.Sprintf("k%05d", rng.IntN(8000))
		if rng.IntN(5) == 0 {
			mustDo(t, db.Delete([]byte(k)))
			delete(model, k)
		} else {
			v := fmt.Sprintf("v%d", i)
			mustDo(t, db.Put([]byte(k), []byte(v)))
			model[k] = v
		}
		if i%1000 == 0 {
			checkOrder()
		}
	}
	mustDo(t, db.WaitForCompactions(context.Background()))
	checkOrder()
	for k := range 8000 {
		key := fmt.Sprintf("k%05d", k)
		v, err := db.Get([]byte(key))
		want, ok := model[key]
		if ok && (err != nil || string(v) != want) || !ok && !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%s) = %q, %v; want %q (present %v)", key, v, err, want, ok)
		}
	}
	if st := db.Stats(); st.Compactions < 10 {
		t.Fatalf("only %d compactions ran", st.Compactions)
	}
}

func TestWaitForCompactionsContext(t *testing.T) {
	db := mustOpen(t, t.TempDir(), smallOptions())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	db.mu.Lock()
	db.compacting++ // as if a merge ran forever
	db.mu.Unlock()
	if err := db.WaitForCompactions(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForCompactions with a canceled context = %v", err)
	}
	db.mu.Lock()
	db.compacting--
	db.mu.Unlock()
	mustDo(t, db.WaitForCompactions(context.Background()))
	mustDo(t, db.Close())
	if err := db.WaitForCompactions(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitForCompactions after Close = %v", err)
	}
}
