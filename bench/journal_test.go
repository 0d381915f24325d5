package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// helperEnv makes the test binary a helper instead of running tests: the
// journal step loop that BenchmarkJournal runs under strace.
const helperEnv = "STRATUM_BENCH_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "journal-steps" {
		n, _ := strconv.Atoi(os.Getenv("STRATUM_BENCH_STEPS"))
		if err := journalSteps(os.Getenv("STRATUM_BENCH_DIR"), n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// stepRecords are the records of one engine step boundary: "step i done"
// (with the identity of the processes now running) and "step i+1 marked",
// which the engine writes in one Append.
func stepRecords(i int) []journal.Record {
	return []journal.Record{
		{Phase: journal.PhaseApplying, Step: journal.StepDone, Component: "kube-apiserver", Processes: []proc.Process{{PID: 12345, StartTicks: 987654}}},
		{Phase: journal.PhaseApplying, Step: journal.StepMark, Component: "kube-controller-manager", ProcMark: &proc.Mark{Ticks: uint64(123456 + i), BootID: "6d1a7e0c-4a4e-4f5b-9a55-0d7b0e7f1c2a"}},
	}
}

// openJournal opens a fresh journal in dir holding the default node state
// and an open upgrade transaction, as the engine has it during apply.
func openJournal(dir string) (*journal.Journal, string, error) {
	j, err := journal.Open(filepath.Join(dir, "stratum.db"), journal.Options{})
	if err != nil {
		return nil, "", err
	}
	repo, err := build.RepoRoot()
	if err != nil {
		return nil, "", err
	}
	st, err := nodestate.Load(filepath.Join(repo, "testdata/states/default.yaml"))
	if err != nil {
		return nil, "", err
	}
	if err := j.PutNodeState(st); err != nil {
		return nil, "", err
	}
	y, _ := st.Marshal()
	txn, err := j.Begin(journal.Txn{Kind: journal.KindUpgrade, From: y, To: y, Changed: []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}})
	if err != nil {
		return nil, "", err
	}
	return j, txn.ID, nil
}

// journalSteps writes n step boundaries to a fresh journal in dir.
func journalSteps(dir string, n int) error {
	j, id, err := openJournal(dir)
	if err != nil {
		return err
	}
	defer j.Close()
	for i := range n {
		if _, err := j.Append(id, journal.PhaseApplying, stepRecords(i)...); err != nil {
			return err
		}
	}
	return nil
}

// straceSyncs runs journalSteps(n) in a child test binary under strace -f
// -c and returns how many fsync-family calls it made, and how many times
// it truncated a file (bbolt grows its file with ftruncate, then fsyncs).
func straceSyncs(strace string, n int) (syncs, grows int, err error) {
	dir, err := os.MkdirTemp("", "stratum-bench-journal-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "strace.out")
	cmd := exec.Command(strace, "-f", "-qq", "-c", "-e", "trace=fsync,fdatasync,sync_file_range,msync,sync,syncfs,ftruncate", "-o", out, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=journal-steps", "STRATUM_BENCH_STEPS="+strconv.Itoa(n), "STRATUM_BENCH_DIR="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("strace journal helper: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return 0, 0, err
	}
	calls, err := straceCalls(string(b))
	if err != nil {
		return 0, 0, err
	}
	for name, n := range calls {
		if name != "ftruncate" {
			syncs += n
		}
	}
	return syncs, calls["ftruncate"], nil
}

var straceRow = regexp.MustCompile(`^\s*[0-9.]+\s+[0-9.]+\s+[0-9]+\s+([0-9]+)\s+(?:[0-9]+\s+)?(\w+)\s*$`)

// straceCalls is the calls column of an strace -c table, by syscall.
func straceCalls(table string) (map[string]int, error) {
	calls := map[string]int{}
	total := false
	for _, line := range strings.Split(table, "\n") {
		m := straceRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if m[2] == "total" {
			total = true
			continue
		}
		calls[m[2]] += n
	}
	if !total {
		return nil, fmt.Errorf("no strace summary in %q", table)
	}
	return calls, nil
}

// BenchmarkJournal measures what one engine step costs the journal: the
// Append that carries "step i done" and "step i+1 marked". It reports the
// median time of that Append against the median time of a raw 4 KiB write
// plus fsync of a file in the same directory, the bbolt commits per step
// (Journal.Commits) and, when strace is installed, the fsync and fdatasync
// calls per step counted by strace -f -c on a child doing 20 and then 220
// steps (the difference over 200 steps, so that opening the journal and
// beginning the transaction do not count), and the file growths among them:
// bbolt grows its file by doubling it (ftruncate, then one more fdatasync),
// so a journal that grows gets one extra fsync per doubling, amortised.
func BenchmarkJournal(b *testing.B) {
	dir := b.TempDir()
	j, id, err := openJournal(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	const n = 200
	c0 := j.Commits()
	var step []time.Duration
	for i := range n {
		t := time.Now()
		if _, err := j.Append(id, journal.PhaseApplying, stepRecords(i)...); err != nil {
			b.Fatal(err)
		}
		step = append(step, time.Since(t))
	}
	commits := float64(j.Commits()-c0) / n
	f, err := os.OpenFile(filepath.Join(dir, "raw"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var raw []time.Duration
	for i := range n {
		buf[0] = byte(i)
		t := time.Now()
		if _, err := f.WriteAt(buf, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		raw = append(raw, time.Since(t))
	}
	b.ReportMetric(commits, "commits/step")
	b.ReportMetric(ms(median(step)), "step-ms")
	b.ReportMetric(ms(median(raw)), "raw-fsync-ms")
	b.ReportMetric(float64(median(step))/float64(median(raw)), "step/raw")
	if strace, err := exec.LookPath("strace"); err == nil {
		lo, loGrow, err := straceSyncs(strace, 20)
		if err != nil {
			b.Fatal(err)
		}
		hi, hiGrow, err := straceSyncs(strace, 220)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(hi-lo)/200, "fsyncs/step")
		b.ReportMetric(float64(hiGrow-loGrow)/200, "grows/step")
	} else {
		b.Logf("strace is not installed: fsyncs per step not counted")
	}
}

// TestStraceCalls checks the strace -c parser on the table strace prints.
func TestStraceCalls(t *testing.T) {
	table := `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 98.76    0.012345          27       446           fdatasync
  1.24    0.000155          51         3           fsync
------ ----------- ----------- --------- --------- ----------------
100.00    0.012500          27       449           total
`
	calls, err := straceCalls(table)
	if err != nil || calls["fdatasync"] != 446 || calls["fsync"] != 3 || len(calls) != 2 {
		t.Fatalf("straceCalls = %v, %v; want fdatasync 446, fsync 3", calls, err)
	}
	withErrors := " 10.00    0.000100          10        10         2 ftruncate\n100.00 0.000100 10 10 2 total\n"
	if calls, err := straceCalls(withErrors); err != nil || calls["ftruncate"] != 10 {
		t.Fatalf("straceCalls with errors column = %v, %v; want ftruncate 10", calls, err)
	}
	if _, err := straceCalls("strace: exec failed"); err == nil {
		t.Fatal("straceCalls accepted a table without a summary")
	}
}
