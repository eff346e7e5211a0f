package bloomkv

// The bank test (Badger's, after Jepsen's): accounts, concurrent random
// transfers between them in read-write transactions, and audits that read
// every account. The total never changes, and no audit sees a partial
// transfer; each transfer also writes a log record, so that the balances
// can be recomputed from the transfers that committed and a lost update
// (two transfers that read the same balance and both wrote it) is caught
// even where it happens to keep the total. TestTxnBankCrash runs it in a
// child process killed with SIGKILL, and checks the store after each
// reopen.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	bankAccounts = 20
	bankInitial  = 1000
	bankTotal    = bankAccounts * bankInitial
	bankEnv      = "BLOOMKV_TXNBANK_DIR"
)

func bankAccount(i int) []byte { return fmt.Appendf(nil, "acct/%03d", i) }

// bankLogKey is the record of transfer n of worker g.
func bankLogKey(g, n int) []byte { return fmt.Appendf(nil, "log/%d/%09d", g, n) }

func bankSetup(db *DB) error {
	return db.Update(func(txn *Txn) error {
		if _, err := txn.Get(bankAccount(0)); err == nil {
			return nil // set up already (a reopen)
		}
		for i := range bankAccounts {
			if err := txn.Put(bankAccount(i), strconv.AppendInt(nil, bankInitial, 10)); err != nil {
				return err
			}
		}
		return nil
	})
}

func bankBalance(txn *Txn, i int) (int, error) {
	v, err := txn.Get(bankAccount(i))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(v))
}

// bankTransfer moves a random amount between two random accounts, and
// logs it as transfer n of worker g. It returns how many commits
// conflicted before one succeeded.
func bankTransfer(db *DB, rng *rand.Rand, g, n int) (conflicts int, err error) {
	from, to := rng.IntN(bankAccounts), rng.IntN(bankAccounts-1)
	if to >= from {
		to++
	}
	want := 1 + rng.IntN(100)
	attempts := 0
	err = db.UpdateWith(&UpdateOptions{Retries: 10000}, func(txn *Txn) error {
		attempts++
		a, err := bankBalance(txn, from)
		if err != nil {
			return err
		}
		b, err := bankBalance(txn, to)
		if err != nil {
			return err
		}
		amount := min(want, a)
		if err := txn.Put(bankAccount(from), strconv.AppendInt(nil, int64(a-amount), 10)); err != nil {
			return err
		}
		if err := txn.Put(bankAccount(to), strconv.AppendInt(nil, int64(b+amount), 10)); err != nil {
			return err
		}
		return txn.Put(bankLogKey(g, n), fmt.Appendf(nil, "%d %d %d", from, to, amount))
	})
	return attempts - 1, err
}

// bankAudit reads every account, with an iterator (forward or backward)
// or with Gets, in a read-only transaction or a read-write one (which
// writes an audit record, so that its commit is checked), and checks the
// total.
func bankAudit(db *DB, rng *rand.Rand, g int) error {
	mode := rng.IntN(4)
	audit := func(txn *Txn) error {
		sum, n := 0, 0
		if mode%2 == 0 {
			it, err := txn.NewIterator(&IterOptions{Prefix: []byte("acct/")})
			if err != nil {
				return err
			}
			seq := it.All()
			if rng.IntN(2) == 0 {
				seq = it.Backward()
			}
			for _, v := range seq {
				x, err := strconv.Atoi(string(v))
				if err != nil {
					it.Close()
					return err
				}
				sum, n = sum+x, n+1
			}
			if err := it.Close(); err != nil {
				return err
			}
		} else {
			for i := range bankAccounts {
				x, err := bankBalance(txn, i)
				if err != nil {
					return err
				}
				sum, n = sum+x, n+1
			}
		}
		if sum != bankTotal || n != bankAccounts {
			return fmt.Errorf("audit (mode %d) saw %d accounts holding %d, want %d holding %d", mode, n, sum, bankAccounts, bankTotal)
		}
		if mode >= 2 {
			return txn.Put(fmt.Appendf(nil, "audit/%d", g), strconv.AppendInt(nil, int64(sum), 10))
		}
		return nil
	}
	if mode < 2 {
		return db.View(audit)
	}
	err := db.Update(audit)
	if errors.Is(err, ErrConflict) {
		return nil // a transfer committed meanwhile; the audit's reads were still one snapshot
	}
	return err
}

// bankCheck checks the store at rest: the total, and every balance
// against the transfers logged.
func bankCheck(db *DB) error {
	return db.View(func(txn *Txn) error {
		want := make([]int, bankAccounts)
		for i := range want {
			want[i] = bankInitial
		}
		it, err := txn.NewIterator(&IterOptions{Prefix: []byte("log/")})
		if err != nil {
			return err
		}
		for k, v := range it.All() {
			var from, to, amount int
			if _, err := fmt.Sscanf(string(v), "%d %d %d", &from, &to, &amount); err != nil {
				it.Close()
				return fmt.Errorf("%s: %q: %v", k, v, err)
			}
			want[from] -= amount
			want[to] += amount
		}
		if err := it.Close(); err != nil {
			return err
		}
		sum := 0
		for i := range bankAccounts {
			got, err := bankBalance(txn, i)
			if err != nil {
				return err
			}
			if got != want[i] || got < 0 {
				return fmt.Errorf("account %d holds %d; the logged transfers make it %d", i, got, want[i])
			}
			sum += got
		}
		if sum != bankTotal {
			return fmt.Errorf("total %d, want %d", sum, bankTotal)
		}
		return nil
	})
}

// TestTxnBank runs transfers and audits concurrently, with one and with
// four threads (GOMAXPROCS), over a store that flushes and compacts all
// the while.
func TestTxnBank(t *testing.T) {
	transfers := 400
	if testing.Short() || raceEnabled {
		transfers = 100
	}
	for _, procs := range []int{1, 4} {
		t.Run(fmt.Sprintf("cpu%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			o := smallOptions()
			o.MemtableSize = 8 << 10
			db := mustOpen(t, t.TempDir(), o)
			defer db.Close()
			mustDo(t, bankSetup(db))
			const workers, auditors = 6, 2
			var wg sync.WaitGroup
			var conflicts, audits atomic.Int64
			errs := make(chan error, workers+auditors)
			done := make(chan struct{})
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for n := range transfers {
						c, err := bankTransfer(db, rng, g, n)
						if err != nil {
							errs <- fmt.Errorf("transfer %d of worker %d: %w", n, g, err)
							return
						}
						conflicts.Add(int64(c))
					}
				}()
			}
			var awg sync.WaitGroup
			for g := range auditors {
				awg.Add(1)
				go func() {
					defer awg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 2))
					for {
						select {
						case <-done:
							return
						default:
						}
						if err := bankAudit(db, rng, g); err != nil {
							errs <- err
							return
						}
						audits.Add(1)
					}
				}()
			}
			wg.Wait()
			close(done)
			awg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			mustDo(t, bankCheck(db))
			if conflicts.Load() == 0 {
				t.Fatalf("%d transfers, no conflict: the test raced nothing", workers*transfers)
			}
			t.Logf("%d transfers, %d conflicts retried, %d audits; %d flushes", workers*transfers, conflicts.Load(), audits.Load(), db.Stats().Flushes)
		})
	}
}

// TestTxnBankChild is the process TestTxnBankCrash kills: it transfers
// from four workers, and audits, until killed.
func TestTxnBankChild(t *testing.T) {
	dir := os.Getenv(bankEnv)
	if dir == "" {
		t.Skip("helper process for TestTxnBankCrash")
	}
	o := smallOptions()
	o.MemtableSize = 8 << 10
	o.CompactionFanIn = 2
	o.Sync = os.Getenv("BLOOMKV_TXNBANK_SYNC") == "1"
	base, _ := strconv.Atoi(os.Getenv("BLOOMKV_TXNBANK_BASE"))
	say := childReporter()
	db, err := Open(dir, o)
	if err == nil {
		err = bankSetup(db)
	}
	if err == nil {
		err = bankCheck(db)
	}
	if err != nil {
		say("open error: %v", err)
		os.Exit(2)
	}
	for g := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(base), uint64(g)))
			for n := base; ; n++ {
				if _, err := bankTransfer(db, rng, g, n); err != nil {
					say("transfer error: %v", err)
					os.Exit(3)
				}
				say("ack %d %d", g, n)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(uint64(base), 99))
	for {
		if err := bankAudit(db, rng, 0); err != nil {
			say("audit error: %v", err)
			os.Exit(4)
		}
	}
}

// TestTxnBankCrash kills the bank's process with SIGKILL at random
// moments and checks after each reopen that the total holds, that every
// balance matches the transfers logged (a transfer is all there or not at
// all), and that every acknowledged transfer is there.
func TestTxnBankCrash(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("kills a process with SIGKILL; Windows has no signals")
	}
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	acked := 0
	for round := range rounds {
		base := (round + 1) * 1_000_000
		syncOn := rng.IntN(2) == 0
		delay := time.Duration(5+rng.IntN(150)) * time.Millisecond
		last := runBankChild(t, dir, base, syncOn, delay)
		db, err := Open(dir, smallOptions())
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		if err := bankCheck(db); err != nil {
			db.Close()
			t.Fatalf("round %d (sync %v, killed %v after the first ack): %v", round, syncOn, delay, err)
		}
		for g, n := range last {
			for m := base; m <= n; m++ {
				if _, err := db.Get(bankLogKey(g, m)); err != nil {
					db.Close()
					t.Fatalf("round %d: acknowledged transfer %d of worker %d: %v", round, m, g, err)
				}
			}
			acked += n - base + 1
		}
		mustDo(t, db.Close())
	}
	if acked == 0 {
		t.Fatal("no transfer was acknowledged in any round")
	}
	t.Logf("%d rounds, %d acknowledged transfers, all present and balanced", rounds, acked)
}

// runBankChild runs the bank's process from transfer number base and
// kills it delay after its first acknowledged transfer. It returns the
// last acknowledged transfer of each worker (base-1: none).
func runBankChild(t *testing.T, dir string, base int, syncOn bool, delay time.Duration) [4]int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTxnBankChild$")
	cmd.Env = append(os.Environ(), bankEnv+"="+dir, "BLOOMKV_TXNBANK_BASE="+strconv.Itoa(base))
	if syncOn {
		cmd.Env = append(cmd.Env, "BLOOMKV_TXNBANK_SYNC=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	mustDo(t, err)
	mustDo(t, cmd.Start())
	var once sync.Once
	killed := make(chan struct{})
	watchdog := time.AfterFunc(30*time.Second, func() { cmd.Process.Signal(syscall.SIGKILL) })
	defer watchdog.Stop()
	last := [4]int{base - 1, base - 1, base - 1, base - 1}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var g, n int
		if line := sc.Text(); !scanLine(line, "ack %d %d", &g, &n) || g < 0 || g >= len(last) {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			t.Fatalf("child: %s", line)
		}
		last[g] = max(last[g], n)
		once.Do(func() {
			time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL); close(killed) })
		})
	}
	if last == [4]int{base - 1, base - 1, base - 1, base - 1} {
		cmd.Wait()
		t.Fatalf("the child died, or was stuck, before its first transfer; stderr:\n%s", stderr.Bytes())
	}
	<-killed // EOF can come before the timer's goroutine closes killed
	cmd.Wait()
	return last
}
