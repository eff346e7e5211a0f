package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomkv/bloomkv"
	"github.com/bloomkv/bloomkv/internal/base"
)

// makeStore makes a closed store with one segment.
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

// jsonReport is what verify -json prints.
type jsonReport struct {
	OK       bool `json:"ok"`
	Segments int  `json:"segments"`
	Problems []struct {
		File    string `json:"file"`
		Offset  int64  `json:"offset"`
		Message string `json:"message"`
	} `json:"problems"`
	Notes []struct {
		File string `json:"file"`
	} `json:"notes"`
}

func verifyJSON(t *testing.T, dir string) (int, jsonReport) {
	t.Helper()
	code, out, errs := runCmd("verify", "-json", dir)
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("verify -json: exit %d, %v\n%s%s", code, err, out, errs)
	}
	return code, rep
}

func TestVerifyCommand(t *testing.T) {
	dir := makeStore(t)
	if code, out, errs := runCmd("verify", dir); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("verify of a healthy store: exit %d\n%s%s", code, out, errs)
	}
	if code, rep := verifyJSON(t, dir); code != 0 || !rep.OK || rep.Segments != 1 || len(rep.Problems) != 0 {
		t.Fatalf("verify -json of a healthy store: exit %d, %+v", code, rep)
	}
	// The flag after DIR works too.
	if code, out, errs := runCmd("verify", dir, "-json"); code != 0 || !json.Valid([]byte(out)) || !strings.Contains(out, `"ok": true`) {
		t.Fatalf("verify DIR -json: exit %d\n%s%s", code, out, errs)
	}

	// A stray file is a note: still exit 0.
	if err := os.WriteFile(filepath.Join(dir, "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, rep := verifyJSON(t, dir); code != 0 || !rep.OK || len(rep.Notes) != 1 || rep.Notes[0].File != "stray" {
		t.Fatalf("verify -json with a stray file: exit %d, %+v", code, rep)
	}

	segs, _ := filepath.Glob(filepath.Join(dir, "*"+base.SegmentExt))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 0xff
	if err := os.WriteFile(segs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(segs[0])
	if code, out, _ := runCmd("verify", dir); code != exitCorrupt || !strings.Contains(out, name) {
		t.Fatalf("verify of a damaged store: exit %d\n%s", code, out)
	}
	code, rep := verifyJSON(t, dir)
	if code != exitCorrupt || rep.OK || len(rep.Problems) != 1 || rep.Problems[0].File != name || rep.Problems[0].Offset != 0 {
		t.Fatalf("verify -json of a damaged store: exit %d, %+v", code, rep)
	}
}

// treeHash hashes the names and contents of dir's files.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", e.Name(), len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestCheckpointCommand(t *testing.T) {
	src := makeStore(t)
	before := treeHash(t, src)
	dst := filepath.Join(t.TempDir(), "copy")
	if code, _, errs := runCmd("checkpoint", src, dst); code != 0 {
		t.Fatalf("checkpoint: exit %d\n%s", code, errs)
	}
	if treeHash(t, src) != before {
		t.Fatal("checkpoint changed the source")
	}
	if code, out, _ := runCmd("verify", dst); code != 0 {
		t.Fatalf("verify of the copy: exit %d\n%s", code, out)
	}
	if code, _, _ := runCmd("checkpoint", src, dst); code != exitOpen {
		t.Fatalf("checkpoint into a non-empty directory: exit %d, want 3", code)
	}
}
