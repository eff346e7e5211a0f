package metamorphic

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
)

// opKind names an operation; its text is the first word of the op's line.
type opKind string

const (
	opPut         opKind = "put"
	opDelete      opKind = "delete"
	opDeleteRange opKind = "delete-range"
	opBatch       opKind = "batch" // sync=0|1, then ops separated by ';'
	opGet         opKind = "get"
	opHas         opKind = "has"
	opValueSize   opKind = "value-size"
	opSnapNew     opKind = "snap-new"
	opSnapGet     opKind = "snap-get"
	opSnapClose   opKind = "snap-close"
	opIterNew     opKind = "iter-new"
	opIterFirst   opKind = "iter-first"
	opIterLast    opKind = "iter-last"
	opIterSeek    opKind = "iter-seek"
	opIterSeekLT  opKind = "iter-seeklt"
	// The same with the key the iterator is at, the slice its Key
	// returned: the seek must not read it after moving (at no key: nil).
	opIterSeekOwn   opKind = "iter-seek-own"
	opIterSeekLTOwn opKind = "iter-seeklt-own"
	opIterNext      opKind = "iter-next"
	opIterPrev      opKind = "iter-prev"
	opIterClose     opKind = "iter-close"
	// SetBounds and SetPrefix on an open iterator (lower=, upper=,
	// prefix= as iter-new's): it keeps the versions of its moment and
	// shows the keys of the new range. The own variant is SetPrefix of
	// the first n bytes of the key the iterator is at (the slice its Key
	// returned; at no key: nil, every key).
	opIterSetBounds    opKind = "iter-set-bounds"
	opIterSetPrefix    opKind = "iter-set-prefix"
	opIterSetPrefixOwn opKind = "iter-set-prefix-own"
	opScan             opKind = "scan" // a full scan, printed as count and hash
	opFlush            opKind = "flush"
	opCompact          opKind = "compact"
	opWait             opKind = "wait-compactions"
	opSync             opKind = "sync"
	opReopen           opKind = "reopen"
	opReadOnly         opKind = "readonly-reopen" // close, open read-only, scan, reopen writable
	opCheckpoint       opKind = "checkpoint"      // checkpoint, open the copy, scan it
	opSetBudget        opKind = "set-filter-budget"
	opRebuild          opKind = "rebuild-filters"

	// Transactions, named t<n>: txn-new begins one (update=1: read-write,
	// 0: read-only); the reads and writes name it first; txn-commit and
	// txn-discard end it, and later uses of it print the store's error.
	// An iterator reads one with iter-new's txn=t<n>, and moves with the
	// iter- ops as any other.
	opTxnNew         opKind = "txn-new"
	opTxnGet         opKind = "txn-get"
	opTxnHas         opKind = "txn-has"
	opTxnPut         opKind = "txn-put"
	opTxnDelete      opKind = "txn-delete"
	opTxnDeleteRange opKind = "txn-delete-range"
	opTxnCommit      opKind = "txn-commit"
	opTxnDiscard     opKind = "txn-discard"

	// Closure transactions, each one op, its body the ops after the
	// header, separated by ';' as a batch's: update runs DB.Update
	// (with=0) or DB.UpdateWith (with=1, sync=, retries=), view DB.View;
	// abort=1 makes the closure return a sentinel error instead of nil.
	// The body holds get, has, put, delete, delete-range, range-scan and
	// interfere ops (a view's writes must fail), and the line prints each
	// one's result in the closure's last run, how many times it ran if
	// not once, and then the closure's result.
	opUpdate    opKind = "update"
	opView      opKind = "view"
	opRangeScan opKind = "range-scan" // in a body: an iterator (lower=, upper=, prefix=), First (Last with reverse=1) and n steps
	// In a body: "interfere run=N put|delete|delete-range ...", a plain
	// write through the DB (not the transaction) in the closure's N-th
	// run only, committed while that run's transaction is open, so that
	// its commit conflicts if the transaction read the key, and
	// UpdateWith retries. In the other runs it does nothing and prints
	// not-run.
	opInterfere opKind = "interfere"
	// CompareAndSet of a key: old= and new= are values or nil (absent,
	// delete); an empty value, v<seed>.0c, is not nil.
	opCAS opKind = "cas"
)

// valSpec describes a value by how to make it, so that a 64 KiB value
// takes a dozen bytes in the log: len bytes from a generator seeded with
// seed, random (incompressible) or a short repeated pattern.
type valSpec struct {
	seed   uint64
	n      int
	random bool
}

func (v valSpec) String() string {
	k := 'c'
	if v.random {
		k = 'r'
	}
	return fmt.Sprintf("v%d.%d%c", v.seed, v.n, k)
}

func parseValSpec(s string) (valSpec, error) {
	bad := fmt.Errorf("bad value %q, want v<seed>.<len>c or r", s)
	if len(s) < 4 || s[0] != 'v' {
		return valSpec{}, bad
	}
	var v valSpec
	switch s[len(s)-1] {
	case 'r':
		v.random = true
	case 'c':
	default:
		return valSpec{}, bad
	}
	seed, n, ok := strings.Cut(s[1:len(s)-1], ".")
	if !ok {
		return valSpec{}, bad
	}
	var err1, err2 error
	v.seed, err1 = strconv.ParseUint(seed, 10, 64)
	v.n, err2 = strconv.Atoi(n)
	if err1 != nil || err2 != nil || v.n < 0 {
		return valSpec{}, bad
	}
	return v, nil
}

// bytes makes the value.
func (v valSpec) bytes() []byte {
	b := make([]byte, v.n)
	r := rand.New(rand.NewPCG(v.seed, 0x6d657461))
	if v.random {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	pat := make([]byte, 1+r.IntN(8))
	for i := range pat {
		pat[i] = 'a' + byte(r.IntN(26))
	}
	for i := range b {
		b[i] = pat[i%len(pat)]
	}
	return b
}

// describe is how a value appears in the output: its length and a hash.
func describe(v []byte) string {
	h := fnv.New64a()
	h.Write(v)
	return fmt.Sprintf("%d:%016x", len(v), h.Sum64())
}

// op is one operation of a log. Which fields matter depends on kind.
type op struct {
	kind   opKind
	key    []byte  // the key; a range's start; a seek's target
	end    []byte  // a range's end
	val    valSpec // put
	id     int     // the snapshot, iterator or transaction it names
	snap   int     // iter-new: the snapshot it reads (0: the DB)
	txn    int     // iter-new: the transaction it reads (0: none)
	update bool    // txn-new: read-write
	lower  []byte  // iter-new bounds; nil: none
	upper  []byte
	prefix []byte
	sync   bool  // batch: WriteSync; update: UpdateOptions.Sync
	n      int64 // set-filter-budget; iter-set-prefix-own: the prefix's length; range-scan: its steps; interfere: its run
	batch  []op  // batch: put, delete and delete-range ops; update, view: the body; interfere: its one write

	with    bool // update: UpdateWith
	retries int  // update: UpdateOptions.Retries
	abort   bool // update, view: the closure returns errAbort
	reverse bool // range-scan: from the last key back
	// cas: the old value (nil: the key must be absent) and the new one
	// (nil: delete it).
	old, new *valSpec
}

func q(b []byte) string { return strconv.Quote(string(b)) }

func (o op) String() string {
	switch o.kind {
	case opPut:
		return fmt.Sprintf("%s %s %s", o.kind, q(o.key), o.val)
	case opDelete, opGet, opHas, opValueSize:
		return fmt.Sprintf("%s %s", o.kind, q(o.key))
	case opDeleteRange:
		return fmt.Sprintf("%s %s %s", o.kind, q(o.key), q(o.end))
	case opBatch:
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s sync=%d", o.kind, b2i(o.sync))
		for i, b := range o.batch {
			if i > 0 {
				sb.WriteString(" ;")
			}
			sb.WriteString(" " + b.String())
		}
		return sb.String()
	case opSnapNew, opSnapClose:
		return fmt.Sprintf("%s s%d", o.kind, o.id)
	case opSnapGet:
		return fmt.Sprintf("%s s%d %s", o.kind, o.id, q(o.key))
	case opIterNew, opIterSetBounds, opIterSetPrefix:
		s := fmt.Sprintf("%s i%d", o.kind, o.id)
		if o.snap != 0 {
			s += fmt.Sprintf(" snap=s%d", o.snap)
		}
		if o.txn != 0 {
			s += fmt.Sprintf(" txn=t%d", o.txn)
		}
		return s + o.boundsText()
	case opIterSeek, opIterSeekLT:
		return fmt.Sprintf("%s i%d %s", o.kind, o.id, q(o.key))
	case opIterFirst, opIterLast, opIterSeekOwn, opIterSeekLTOwn, opIterNext, opIterPrev, opIterClose:
		return fmt.Sprintf("%s i%d", o.kind, o.id)
	case opIterSetPrefixOwn:
		return fmt.Sprintf("%s i%d %d", o.kind, o.id, o.n)
	case opSetBudget:
		return fmt.Sprintf("%s %d", o.kind, o.n)
	case opTxnNew:
		return fmt.Sprintf("%s t%d update=%d", o.kind, o.id, b2i(o.update))
	case opTxnGet, opTxnHas, opTxnDelete:
		return fmt.Sprintf("%s t%d %s", o.kind, o.id, q(o.key))
	case opTxnPut:
		return fmt.Sprintf("%s t%d %s %s", o.kind, o.id, q(o.key), o.val)
	case opTxnDeleteRange:
		return fmt.Sprintf("%s t%d %s %s", o.kind, o.id, q(o.key), q(o.end))
	case opTxnCommit, opTxnDiscard:
		return fmt.Sprintf("%s t%d", o.kind, o.id)
	case opUpdate, opView:
		var sb strings.Builder
		sb.WriteString(string(o.kind))
		if o.kind == opUpdate {
			fmt.Fprintf(&sb, " with=%d sync=%d retries=%d", b2i(o.with), b2i(o.sync), o.retries)
		}
		fmt.Fprintf(&sb, " abort=%d", b2i(o.abort))
		for i, b := range o.batch {
			if i > 0 {
				sb.WriteString(" ;")
			}
			sb.WriteString(" " + b.String())
		}
		return sb.String()
	case opRangeScan:
		return string(o.kind) + o.boundsText() + fmt.Sprintf(" n=%d reverse=%d", o.n, b2i(o.reverse))
	case opInterfere:
		s := fmt.Sprintf("%s run=%d", o.kind, o.n)
		for _, w := range o.batch {
			s += " " + w.String()
		}
		return s
	case opCAS:
		return fmt.Sprintf("%s %s old=%s new=%s", o.kind, q(o.key), specOrNil(o.old), specOrNil(o.new))
	}
	return string(o.kind)
}

// boundsText is the lower=, upper= and prefix= fields of an iterator's
// op, those set, each after a space.
func (o op) boundsText() string {
	var s string
	if o.lower != nil {
		s += " lower=" + q(o.lower)
	}
	if o.upper != nil {
		s += " upper=" + q(o.upper)
	}
	if o.prefix != nil {
		s += " prefix=" + q(o.prefix)
	}
	return s
}

// parseBound sets the bound a lower=, upper= or prefix= field names, and
// reports whether name is one of those.
func (o *op) parseBound(name, v string) bool {
	switch name {
	case "lower":
		o.lower = []byte(v)
	case "upper":
		o.upper = []byte(v)
	case "prefix":
		o.prefix = []byte(v)
	default:
		return false
	}
	return true
}

func specOrNil(v *valSpec) string {
	if v == nil {
		return "nil"
	}
	return v.String()
}

func parseSpecOrNil(s string) (*valSpec, error) {
	if s == "nil" {
		return nil, nil
	}
	v, err := parseValSpec(s)
	return &v, err
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tokens splits a line into words; a quoted Go string (alone or after
// "name=") is one word, unquoted.
func tokens(line string) ([]string, error) {
	var out []string
	for {
		line = strings.TrimLeft(line, " \t")
		if line == "" {
			return out, nil
		}
		i := strings.IndexAny(line, " \t\"")
		if i < 0 {
			return append(out, line), nil
		}
		if line[i] != '"' {
			out = append(out, line[:i])
			line = line[i:]
			continue
		}
		qs, err := strconv.QuotedPrefix(line[i:])
		if err != nil {
			return nil, fmt.Errorf("bad quoted string in %q: %v", line, err)
		}
		s, _ := strconv.Unquote(qs)
		out = append(out, line[:i]+s)
		line = line[i+len(qs):]
	}
}

func parseID(s, prefix string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, prefix))
	if err != nil || !strings.HasPrefix(s, prefix) || n <= 0 {
		return 0, fmt.Errorf("bad id %q, want %s<n>", s, prefix)
	}
	return n, nil
}

// parseOp parses the text form of one op (String's output).
func parseOp(line string) (op, error) {
	w, err := tokens(line)
	if err != nil {
		return op{}, err
	}
	if len(w) == 0 {
		return op{}, fmt.Errorf("empty op")
	}
	o := op{kind: opKind(w[0])}
	args := w[1:]
	want := func(n int) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %d arguments, got %d in %q", o.kind, n, len(args), line)
		}
		return nil
	}
	switch o.kind {
	case opPut:
		if err := want(2); err != nil {
			return op{}, err
		}
		o.key = []byte(args[0])
		o.val, err = parseValSpec(args[1])
	case opDelete, opGet, opHas, opValueSize:
		err = want(1)
		if err == nil {
			o.key = []byte(args[0])
		}
	case opDeleteRange:
		err = want(2)
		if err == nil {
			o.key, o.end = []byte(args[0]), []byte(args[1])
		}
	case opBatch:
		if len(args) == 0 || (args[0] != "sync=0" && args[0] != "sync=1") {
			return op{}, fmt.Errorf("batch wants sync=0|1 first: %q", line)
		}
		o.sync = args[0] == "sync=1"
		rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(line, string(opBatch))), args[0]))
		for _, part := range splitBatch(rest) {
			b, err := parseOp(part)
			if err != nil {
				return op{}, err
			}
			if b.kind != opPut && b.kind != opDelete && b.kind != opDeleteRange {
				return op{}, fmt.Errorf("batch holds %s", b.kind)
			}
			o.batch = append(o.batch, b)
		}
	case opSnapNew, opSnapClose:
		if err = want(1); err == nil {
			o.id, err = parseID(args[0], "s")
		}
	case opSnapGet:
		if err = want(2); err == nil {
			o.id, err = parseID(args[0], "s")
			o.key = []byte(args[1])
		}
	case opIterNew, opIterSetBounds, opIterSetPrefix:
		if len(args) == 0 {
			return op{}, fmt.Errorf("%s wants an id", o.kind)
		}
		if o.id, err = parseID(args[0], "i"); err != nil {
			return op{}, err
		}
		for _, a := range args[1:] {
			name, v, _ := strings.Cut(a, "=")
			switch name {
			case "snap":
				if o.kind != opIterNew {
					err = fmt.Errorf("%s: unknown %q", o.kind, a)
					break
				}
				o.snap, err = parseID(v, "s")
			case "txn":
				if o.kind != opIterNew {
					err = fmt.Errorf("%s: unknown %q", o.kind, a)
					break
				}
				o.txn, err = parseID(v, "t")
			default:
				if !o.parseBound(name, v) {
					err = fmt.Errorf("%s: unknown %q", o.kind, a)
				}
			}
			if err != nil {
				return op{}, err
			}
		}
	case opIterSeek, opIterSeekLT:
		if err = want(2); err == nil {
			o.id, err = parseID(args[0], "i")
			o.key = []byte(args[1])
		}
	case opIterFirst, opIterLast, opIterSeekOwn, opIterSeekLTOwn, opIterNext, opIterPrev, opIterClose:
		if err = want(1); err == nil {
			o.id, err = parseID(args[0], "i")
		}
	case opIterSetPrefixOwn:
		if err = want(2); err == nil {
			if o.id, err = parseID(args[0], "i"); err == nil {
				o.n, err = strconv.ParseInt(args[1], 10, 64)
			}
		}
	case opSetBudget:
		if err = want(1); err == nil {
			o.n, err = strconv.ParseInt(args[0], 10, 64)
		}
	case opScan, opFlush, opCompact, opWait, opSync, opReopen, opReadOnly, opCheckpoint, opRebuild:
		err = want(0)
	case opTxnNew:
		if err = want(2); err == nil {
			if o.id, err = parseID(args[0], "t"); err == nil && args[1] != "update=0" && args[1] != "update=1" {
				err = fmt.Errorf("txn-new wants update=0|1: %q", line)
			}
			o.update = args[1] == "update=1"
		}
	case opTxnGet, opTxnHas, opTxnDelete:
		if err = want(2); err == nil {
			o.id, err = parseID(args[0], "t")
			o.key = []byte(args[1])
		}
	case opTxnPut:
		if err = want(3); err == nil {
			if o.id, err = parseID(args[0], "t"); err == nil {
				o.key = []byte(args[1])
				o.val, err = parseValSpec(args[2])
			}
		}
	case opTxnDeleteRange:
		if err = want(3); err == nil {
			o.id, err = parseID(args[0], "t")
			o.key, o.end = []byte(args[1]), []byte(args[2])
		}
	case opTxnCommit, opTxnDiscard:
		if err = want(1); err == nil {
			o.id, err = parseID(args[0], "t")
		}
	case opUpdate, opView:
		err = parseClosure(&o, strings.TrimPrefix(strings.TrimSpace(line), string(o.kind)))
	case opRangeScan:
		for _, a := range args {
			name, v, _ := strings.Cut(a, "=")
			switch name {
			case "n":
				o.n, err = strconv.ParseInt(v, 10, 64)
			case "reverse":
				o.reverse, err = v == "1", flagErr(v)
			default:
				if !o.parseBound(name, v) {
					err = fmt.Errorf("%s: unknown %q", o.kind, a)
				}
			}
			if err != nil {
				return op{}, err
			}
		}
	case opInterfere:
		err = parseInterfere(&o, strings.TrimPrefix(strings.TrimSpace(line), string(o.kind)))
	case opCAS:
		if err = want(3); err == nil {
			o.key = []byte(args[0])
			ov, oldOK := strings.CutPrefix(args[1], "old=")
			nv, newOK := strings.CutPrefix(args[2], "new=")
			if !oldOK || !newOK {
				return op{}, fmt.Errorf("cas wants a key, old= and new=: %q", line)
			}
			if o.old, err = parseSpecOrNil(ov); err == nil {
				o.new, err = parseSpecOrNil(nv)
			}
		}
	default:
		err = fmt.Errorf("unknown op %q", w[0])
	}
	if err != nil {
		return op{}, err
	}
	return o, nil
}

// parseClosure parses what follows update or view: the header's
// name=value fields, then the body, whose ops are separated by ';' as a
// batch's. A body op begins with its kind, never with a name=value field.
func parseClosure(o *op, rest string) error {
	for {
		rest = strings.TrimSpace(rest)
		f, after, _ := strings.Cut(rest, " ")
		name, v, ok := strings.Cut(f, "=")
		if !ok || strings.Contains(f, `"`) {
			break
		}
		var err error
		switch {
		case name == "abort":
			o.abort, err = v == "1", flagErr(v)
		case name == "with" && o.kind == opUpdate:
			o.with, err = v == "1", flagErr(v)
		case name == "sync" && o.kind == opUpdate:
			o.sync, err = v == "1", flagErr(v)
		case name == "retries" && o.kind == opUpdate:
			o.retries, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("%s: unknown %q", o.kind, f)
		}
		if err != nil {
			return err
		}
		rest = after
	}
	for _, part := range splitBatch(rest) {
		b, err := parseOp(part)
		if err != nil {
			return err
		}
		switch b.kind {
		case opGet, opHas, opPut, opDelete, opDeleteRange, opRangeScan, opInterfere:
		default:
			return fmt.Errorf("%s holds %s", o.kind, b.kind)
		}
		o.batch = append(o.batch, b)
	}
	return nil
}

// parseInterfere parses what follows interfere: run=N, then one put,
// delete or delete-range op.
func parseInterfere(o *op, rest string) error {
	f, w, _ := strings.Cut(strings.TrimSpace(rest), " ")
	v, ok := strings.CutPrefix(f, "run=")
	if !ok {
		return fmt.Errorf("interfere wants run=N first: %q", rest)
	}
	run, err := strconv.Atoi(v)
	if err != nil || run < 1 {
		return fmt.Errorf("interfere: bad run %q", v)
	}
	o.n = int64(run)
	b, err := parseOp(w)
	if err != nil {
		return err
	}
	if b.kind != opPut && b.kind != opDelete && b.kind != opDeleteRange {
		return fmt.Errorf("interfere holds %s", b.kind)
	}
	o.batch = []op{b}
	return nil
}

// flagErr refuses a flag's value other than 0 or 1.
func flagErr(v string) error {
	if v != "0" && v != "1" {
		return fmt.Errorf("bad flag %q, want 0 or 1", v)
	}
	return nil
}

// splitBatch splits a batch's ops at the ';' outside quoted strings.
func splitBatch(s string) []string {
	var parts []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		i, inQuote := 0, false
		for ; i < len(s); i++ {
			switch {
			case inQuote && s[i] == '\\':
				i++
			case s[i] == '"':
				inQuote = !inQuote
			case !inQuote && s[i] == ';':
				goto cut
			}
		}
	cut:
		parts = append(parts, strings.TrimSpace(s[:i]))
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return parts
}

// logFile is a replayable test case: the option sets to run (none: draw
// them from the seed) and the ops.
type logFile struct {
	seed    uint64
	options []optionSet
	ops     []op
}

// String is the file's text: comment lines, "seed N", one "options ..."
// line per option set, then one op per line.
func (f *logFile) String() string {
	var sb strings.Builder
	sb.WriteString("# bloomkv metamorphic log: go test ./internal/metamorphic -run 'TestMeta$' -meta-replay FILE\n")
	fmt.Fprintf(&sb, "seed %d\n", f.seed)
	for _, o := range f.options {
		fmt.Fprintf(&sb, "options %s\n", o)
	}
	for _, o := range f.ops {
		sb.WriteString(o.String())
		sb.WriteByte('\n')
	}
	return sb.String()
}

func parseLogFile(text string) (*logFile, error) {
	f := &logFile{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		var err error
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "seed "):
			f.seed, err = strconv.ParseUint(strings.TrimPrefix(line, "seed "), 10, 64)
		case strings.HasPrefix(line, "options "):
			var o optionSet
			if o, err = parseOptionSet(strings.TrimPrefix(line, "options ")); err == nil {
				f.options = append(f.options, o)
			}
		default:
			var o op
			if o, err = parseOp(line); err == nil {
				f.ops = append(f.ops, o)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
	}
	return f, nil
}
