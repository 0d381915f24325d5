package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/cli"
)

// withSnapshot gives the fixture's state directory a retained snapshot, as
// a node that ran a transaction has, and returns snapshots/.
func withSnapshot(t *testing.T, fx *corruptFixture) string {
	t.Helper()
	dir := filepath.Join(fx.state, cli.SnapshotsDir)
	txn := filepath.Join(dir, "20261206T230000Z-ab12")
	if err := os.MkdirAll(txn, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(fx.manifests, "kube-apiserver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(txn, "kube-apiserver.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEmptyJournal is defect H of issue 37: a 0-byte journal (a restore or
// a copy that lost its data) is never made a new, empty journal. resume
// --prepare and resume (the boot units), and every command that writes,
// fail with exit 1 and status's message and what to restore; the file,
// the snapshots and the manifests stay as they are. Before the fix, resume
// --prepare at the next boot initialised it and exited 0, and from then on
// status said "no node state, import one first".
func TestEmptyJournal(t *testing.T) {
	fx := newCorruptFixture(t)
	snaps := withSnapshot(t, fx)
	if err := os.WriteFile(fx.journal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	manifests, snapshots := snapshotDir(t, fx.manifests), snapshotDir(t, snaps)

	code, _, statusErr := fx.su(t, "status")
	const says = "is empty: 0 bytes, no journal was ever written to it"
	if code != cli.ExitError || !strings.Contains(statusErr, says) {
		t.Fatalf("status: exit %d, want 1 saying %q:\n%s", code, says, statusErr)
	}
	// The message after "stratum-upgrade: status: ", with its advice.
	msg := statusErr[strings.Index(statusErr, "journal "+fx.journal):]
	msg = strings.TrimSpace(msg)
	for _, w := range []string{"from a backup", "docs/operations.md", "init --state FILE", snaps} {
		if !strings.Contains(msg, w) {
			t.Errorf("status does not say %q:\n%s", w, msg)
		}
	}

	for _, args := range [][]string{
		{"resume", "--prepare"}, {"resume"}, {"run", "--to=" + fx.release}, {"apply", "--state=" + fx.stateFile},
		{"render"}, {"restart", "kube-scheduler"}, {"stop", "kube-scheduler"}, {"start", "kube-scheduler"},
		{"rollback"}, {"rollback", "--last"}, {"init", "--state=" + fx.stateFile}, {"init", "--force", "--state=" + fx.stateFile},
	} {
		what := strings.Join(args, " ")
		code, out, errOut := fx.su(t, args...)
		if code != cli.ExitError {
			t.Errorf("%s: exit %d, want %d\n%s%s", what, code, cli.ExitError, out, errOut)
		}
		if !strings.Contains(errOut, msg) {
			t.Errorf("%s: stderr does not say what status says (%s):\n%s", what, msg, errOut)
		}
		if fi, err := os.Stat(fx.journal); err != nil || fi.Size() != 0 {
			t.Fatalf("%s: the empty journal was written to (%v)", what, err)
		}
		if after := snapshotDir(t, snaps); fmt.Sprint(after) != fmt.Sprint(snapshots) {
			t.Errorf("%s: the snapshots were changed", what)
		}
		if after := snapshotDir(t, fx.manifests); fmt.Sprint(after) != fmt.Sprint(manifests) {
			t.Errorf("%s: the manifests were changed", what)
		}
	}
}

// TestLostJournal: a state directory whose snapshots show it had a journal
// but that has none is not a node that was never initialised: the boot
// units' resume --prepare and resume fail (exit 1) and say so, status
// warns; init, the runbook's re-import, still creates a new journal.
func TestLostJournal(t *testing.T) {
	fx := newCorruptFixture(t)
	snaps := withSnapshot(t, fx)
	if err := os.Remove(fx.journal); err != nil {
		t.Fatal(err)
	}
	const says = "this node's journal was lost or moved away"
	for _, args := range [][]string{{"resume", "--prepare"}, {"resume"}} {
		code, out, errOut := fx.su(t, args...)
		if code != cli.ExitError || !strings.Contains(errOut, says) || !strings.Contains(errOut, snaps) || !strings.Contains(errOut, "from a backup") {
			t.Errorf("%s: exit %d, want 1 saying %q and naming %s:\n%s%s", strings.Join(args, " "), code, says, snaps, out, errOut)
		}
		if _, err := os.Lstat(fx.journal); !os.IsNotExist(err) {
			t.Fatalf("%s created a journal (%v)", strings.Join(args, " "), err)
		}
	}
	if _, _, errOut := fx.su(t, "status"); !strings.Contains(errOut, "warning: "+"no journal at "+fx.journal) || !strings.Contains(errOut, says) {
		t.Errorf("status does not warn of the lost journal:\n%s", errOut)
	}
	if code, out, errOut := fx.su(t, "init", "--state="+fx.stateFile); code != cli.ExitOK || !strings.Contains(errOut, "warning: no journal at "+fx.journal) || !strings.Contains(errOut, "init creates a new journal") {
		t.Fatalf("init after the journal was moved aside: exit %d, want 0 with a warning\n%s%s", code, out, errOut)
	}
	if code, out, errOut := fx.su(t, "resume", "--prepare"); code != cli.ExitOK {
		t.Errorf("resume --prepare after init: exit %d\n%s%s", code, out, errOut)
	}
}
