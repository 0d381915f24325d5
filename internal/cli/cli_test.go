package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
)

func TestExitCode(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("context: %w", err) }
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"nothing to do", wrap(engine.ErrNothingToDo), ExitOK},
		{"generic", errors.New("disk on fire"), ExitError},
		{"usage", usagef("--to is required"), ExitUsage},
		{"usage wrapping a journal error", usage(wrap(journal.ErrLocked)), ExitUsage},
		{"rolled back", wrap(engine.ErrRolledBack), ExitRolledBack},
		{"rollback failed", wrap(engine.ErrRollbackFailed), ExitRollbackFailed},
		{"locked", wrap(journal.ErrLocked), ExitBusy},
		{"txn open", wrap(journal.ErrTxnOpen), ExitBusy},
		{"interrupted", wrap(engine.ErrInterrupted), ExitInterrupted},
		{"interrupted rollback", fmt.Errorf("%w: rollback left open", engine.ErrInterrupted), ExitInterrupted},
		{"explicit code", &codeError{code: 42, err: errors.New("x")}, 42},
		{"ran wrapper is transparent", &ranError{wrap(engine.ErrRolledBack)}, ExitRolledBack},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExitCode(tc.err); got != tc.want {
				t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

// TestExitCodesDistinct: every outcome a script tells apart has its own code.
func TestExitCodesDistinct(t *testing.T) {
	seen := map[int]string{}
	for name, c := range map[string]int{
		"ok": ExitOK, "error": ExitError, "usage": ExitUsage, "rolled-back": ExitRolledBack,
		"rollback-failed": ExitRollbackFailed, "busy": ExitBusy, "interrupted": ExitInterrupted,
	} {
		if other, dup := seen[c]; dup {
			t.Errorf("exit code %d used by %s and %s", c, name, other)
		}
		seen[c] = name
		if !strings.Contains(exitCodesHelp, fmt.Sprintf("  %d  ", c)) {
			t.Errorf("exit code %d (%s) is not in the --help text", c, name)
		}
	}
}

func TestEventLine(t *testing.T) {
	start := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	g := &globals{dl: engine.Deadlines{Replace: 3 * time.Minute, Active: time.Minute, Stop: 90 * time.Second, Soak: 10 * time.Second, EtcdBackup: 2 * time.Minute}}
	r := &reporter{g: g, start: start}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	tests := []struct {
		ev   engine.Event
		want string
	}{
		{engine.Event{Time: at(12300 * time.Millisecond), Step: "wait-replaced", Component: "etcd", Waiting: "kubelet to replace etcd", Message: "waiting for kubelet to replace etcd"},
			"[  12.3s] etcd: waiting for kubelet to replace etcd (at most 3m0s)"},
		{engine.Event{Time: at(13 * time.Second), Step: "wait-active", Component: "etcd", Waiting: "etcd to answer http://127.0.0.1:2381/health", Message: "waiting for the new etcd to answer"},
			"[  13.0s] etcd: waiting for etcd to answer http://127.0.0.1:2381/health (at most 1m0s)"},
		{engine.Event{Time: at(0), Step: "begin", Message: "upgrade to v1.34.5: kube-scheduler change"},
			"[   0.0s] upgrade to v1.34.5: kube-scheduler change"},
		{engine.Event{Time: at(100 * time.Second), Step: "etcd-stop", Component: "etcd", Waiting: "etcd to exit", Message: "stopping etcd to restore its data"},
			"[ 100.0s] etcd: stopping etcd to restore its data (at most 1m30s)"},
		{engine.Event{Time: at(0), Step: "image-pull", Component: "kube-apiserver", Waiting: "the pull of registry.k8s.io/kube-apiserver:v1.34.5", Message: "pulling image registry.k8s.io/kube-apiserver:v1.34.5 for kube-apiserver"},
			"[   0.0s] kube-apiserver: pulling image registry.k8s.io/kube-apiserver:v1.34.5 for kube-apiserver (at most 10m0s)"},
	}
	for _, tc := range tests {
		if got := r.line(tc.ev); got != tc.want {
			t.Errorf("line:\n got %q\nwant %q", got, tc.want)
		}
	}
}

// TestMainUsage runs Main in-process for the cheap cases.
func TestMainUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"nonsense"}, ExitUsage, `unknown command "nonsense"`},
		{[]string{"run", "--state-dir", t.TempDir()}, ExitUsage, "--to VERSION|RELEASE is required"},
		{[]string{"--output", "xml", "version"}, ExitUsage, `--output "xml"`},
		{[]string{"version"}, ExitOK, ""},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		if code := Main(tc.args, &stdout, &stderr); code != tc.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, tc.code, stderr.String())
		}
		if !strings.Contains(stderr.String(), tc.out) {
			t.Errorf("%v: stderr %q does not contain %q", tc.args, stderr.String(), tc.out)
		}
	}
}

// Two stratum-upgrade processes with different state dirs (so different
// journals) must still not both write one manifest directory.
func TestManifestDirLockAcrossStateDirs(t *testing.T) {
	mdir := t.TempDir()
	release, err := manifest.LockDir(mdir, time.Second) // the other process
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	sdir := t.TempDir()
	j, err := journal.Open(sdir+"/"+JournalFile, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	code := Main([]string{"render", "--manifest-dir", mdir, "--state-dir", sdir, "--lock-timeout", "200ms"}, &out, &errb)
	if code != ExitBusy || !strings.Contains(errb.String(), "another --state-dir") {
		t.Fatalf("render with the manifest dir locked: exit %d, %s", code, errb.String())
	}
	if entries, _ := os.ReadDir(mdir); len(entries) != 0 {
		t.Fatalf("a refused render wrote %v", entries)
	}
}

// TestMainRecoversPanic: a panic in a command (forced through panicSeam,
// which nothing in the product sets) is exit 1 and one "internal error"
// line without a goroutine dump; the stack goes to the file it names.
func TestMainRecoversPanic(t *testing.T) {
	panicSeam = func() { panic("forced by the test") }
	t.Cleanup(func() { panicSeam = nil })
	var stdout, stderr bytes.Buffer
	code := Main([]string{"version"}, &stdout, &stderr)
	if code != ExitError {
		t.Errorf("exit code %d, want %d", code, ExitError)
	}
	msg := stderr.String()
	for _, w := range []string{"internal error: forced by the test", "please report it", "wrote nothing more", "`stratum-upgrade status`"} {
		if !strings.Contains(msg, w) {
			t.Errorf("stderr does not say %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "goroutine") || strings.Count(msg, "\n") != 1 {
		t.Errorf("stderr is not one line without a stack:\n%s", msg)
	}
	_, after, ok := strings.Cut(msg, "saved in ")
	if !ok {
		t.Fatalf("stderr names no stack file:\n%s", msg)
	}
	file, _, _ := strings.Cut(after, ")")
	t.Cleanup(func() { _ = os.Remove(file) })
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "panic: forced by the test") || !strings.Contains(string(b), "goroutine") {
		t.Errorf("stack file %s:\n%s", file, b)
	}
}
