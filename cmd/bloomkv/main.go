// Command bloomkv inspects a bloomkv store.
//
//	bloomkv verify [-json] DIR   check every checksum, key order, filter and
//	                             the manifest against the files; changes nothing
//	bloomkv stats DIR            open the store read-only and print its
//	                             statistics; changes nothing
//	bloomkv checkpoint SRC DST   write a consistent copy of the store SRC
//	                             into DST (new or empty); SRC is opened
//	                             read-only and not changed
//
// verify exits 0 when the store is intact, 1 when it found problems and 2
// when it could not check (usage, I/O error, the store is open for writing
// elsewhere). stats opens the store with Options.ReadOnly: it replays the
// WALs into memory only. All three share the store with other readers and
// fail (exit 2) while a writer has it open.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/bloomkv/bloomkv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  bloomkv verify [-json] DIR
  bloomkv stats DIR
  bloomkv checkpoint SRC DST
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "verify":
		return verify(ctx, args[1:], stdout, stderr)
	case "stats":
		return stats(args[1:], stdout, stderr)
	case "checkpoint":
		return checkpoint(args[1:], stderr)
	}
	fmt.Fprintf(stderr, "bloomkv: unknown command %q\n%s", args[0], usage)
	return 2
}

func verify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0 // the flag package printed the usage
	}
	if err != nil || fs.NArg() != 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	rep, err := bloomkv.VerifyDir(ctx, nil, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "bloomkv verify: %v\n", err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			OK bool `json:"ok"`
			*bloomkv.VerifyReport
		}{rep.OK(), rep}); err != nil {
			fmt.Fprintf(stderr, "bloomkv verify: %v\n", err)
			return 2
		}
	} else {
		fmt.Fprint(stdout, rep)
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

func stats(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	opts := bloomkv.DefaultOptions()
	opts.ReadOnly = true // the WALs are replayed into memory; nothing is written
	db, err := bloomkv.Open(args[0], opts)
	if err != nil {
		fmt.Fprintf(stderr, "bloomkv stats: %v\n", err)
		return 2
	}
	st := db.Stats()
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	err = errors.Join(enc.Encode(st), db.Close())
	if err != nil {
		fmt.Fprintf(stderr, "bloomkv stats: %v\n", err)
		return 2
	}
	return 0
}

// checkpoint copies a store that no writer has open: a read-only open
// shares it with other readers and changes nothing in it.
func checkpoint(args []string, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	opts := bloomkv.DefaultOptions()
	opts.ReadOnly = true
	db, err := bloomkv.Open(args[0], opts)
	if err == nil {
		err = errors.Join(db.Checkpoint(args[1]), db.Close())
	}
	if err != nil {
		fmt.Fprintf(stderr, "bloomkv checkpoint: %v\n", err)
		return 2
	}
	return 0
}
