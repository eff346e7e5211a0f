package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv"
)

func makeStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := bloomkv.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if err := db.Put(fmt.Appendf(nil, "k%04d", i), []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVerifyCommand(t *testing.T) {
	dir := makeStore(t)
	if code, out, errs := runCmd("verify", dir); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("verify of a healthy store: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ := runCmd("verify", "-json", dir)
	var rep struct {
		OK       bool
		Segments int
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || !rep.OK || rep.Segments != 1 {
		t.Fatalf("verify -json: exit %d, %v, %+v\n%s", code, err, rep, out)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	b, _ := os.ReadFile(segs[0])
	b[10] ^= 0xff
	os.WriteFile(segs[0], b, 0o644)
	if code, out, _ := runCmd("verify", dir); code != 1 || !strings.Contains(out, filepath.Base(segs[0])) {
		t.Fatalf("verify of a damaged store: exit %d\n%s", code, out)
	}
}

func TestUsageAndErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"verify"}, {"verify", t.TempDir()}, {"stats"}} {
		if code, _, _ := runCmd(args...); code != 2 {
			t.Errorf("bloomkv %v: exit %d, want 2", args, code)
		}
	}
}

func TestStatsCommand(t *testing.T) {
	dir := makeStore(t)
	code, out, errs := runCmd("stats", dir)
	var st bloomkv.Stats
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Segments != 1 {
		t.Fatalf("stats: exit %d, %v, %+v\n%s", code, err, st, errs)
	}
}
