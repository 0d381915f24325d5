package main

import (
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// TestRollbackLastUndoesStop is issue 26's done-when check as a new user
// would try it, on the demo's single-member node behind a VIP: init, stop
// --all --allow-control-plane-down (commits), rollback --last. The undo
// commits, leaves no open transaction, every component runs again, and a
// later start --all is not refused as busy: it has nothing to start.
func TestRollbackLastUndoesStop(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/default-vip.yaml"})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	c.want(cli.ExitOK, "stop", "--all", "--allow-control-plane-down", "--soak=1s")

	out := c.want(cli.ExitOK, "rollback", "--last")
	contains(t, "rollback --last of the stop", out, "\ncommitted ")
	status := c.want(cli.ExitOK, "status")
	contains(t, "status after rollback --last", status, "transaction:  none open; last ")
	if strings.Contains(status, "stopped") {
		t.Errorf("status after rollback --last of the stop still shows a stopped component:\n%s", status)
	}
	for comp, pids := range statusPIDs(t, c) {
		if !strings.Contains(pids, "/") {
			t.Errorf("%s after rollback --last of the stop: processes %q, want running", comp, pids)
		}
	}
	out = c.want(cli.ExitOK, "start", "--all")
	contains(t, "start --all after the undo", out, "nothing to do")
}

// historyLen is the number of transactions history lists.
func historyLen(t *testing.T, c *cliNode) int {
	t.Helper()
	out := strings.TrimSpace(c.want(cli.ExitOK, "history"))
	if strings.Contains(out, "no transactions") {
		return 0
	}
	return len(strings.Split(out, "\n")) - 1 // the header
}

// TestRollbackLastEveryVerb: rollback --last undoes a start (by stopping
// what it started); a second rollback --last is refused, naming what to
// run instead, with nothing journaled; after a start and a restart it
// passes over the restart and undoes the start.
func TestRollbackLastEveryVerb(t *testing.T) {
	n, c := startCLINode(t)
	sched := filepath.Join(n.ManifestDir, "kube-scheduler.yaml")
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	c.want(cli.ExitOK, "stop", nodestate.Scheduler)
	c.want(cli.ExitOK, "start", nodestate.Scheduler)

	// --dry-run says what --last would do, and does none of it.
	before := historyLen(t, c)
	onDisk := readFile(t, sched)
	out := c.want(cli.ExitOK, "rollback", "--last", "--dry-run")
	contains(t, "rollback --last --dry-run of the start", out, "rollback --last --dry-run: would roll back ", "(start): stop kube-scheduler, as one transaction", "+++ /dev/null")
	if readFile(t, sched) != onDisk || historyLen(t, c) != before {
		t.Fatal("rollback --last --dry-run changed the manifest or journaled a transaction")
	}

	out = c.want(cli.ExitOK, "rollback", "--last")
	contains(t, "rollback --last of the start", out, "(start): stop kube-scheduler", "kube-scheduler: waiting for kube-scheduler to exit", "\ncommitted ")
	if _, err := os.Stat(sched); !os.IsNotExist(err) {
		t.Errorf("the scheduler's manifest after rollback --last of its start: %v, want none", err)
	}
	contains(t, "status after rollback --last of the start", c.want(cli.ExitOK, "status"), "stopped:      kube-scheduler")

	before = historyLen(t, c)
	for _, args := range [][]string{{"rollback", "--last", "--dry-run"}, {"rollback", "--last"}} {
		code, _, errOut := c.su(args...)
		if code != cli.ExitError {
			t.Errorf("%s of a rollback --last: exit %d, want %d", strings.Join(args, " "), code, cli.ExitError)
		}
		contains(t, strings.Join(args, " ")+" of a rollback --last", errOut, "rollback --last refused: ", "is itself a rollback --last", "run --to RELEASE", "apply --state FILE")
	}
	if got := historyLen(t, c); got != before {
		t.Errorf("the refused rollback --last journaled a transaction: %d in the history, want %d", got, before)
	}

	// A restart changes nothing: rollback --last passes over it and
	// undoes the start before it.
	c.want(cli.ExitOK, "start", "--all")
	c.want(cli.ExitOK, "restart", nodestate.Scheduler)
	out = c.want(cli.ExitOK, "rollback", "--last")
	contains(t, "rollback --last after a start and a restart", out, "(start): stop kube-scheduler", "\ncommitted ")
	contains(t, "status at the end", c.want(cli.ExitOK, "status"), "transaction:  none open; last ", "stopped:      kube-scheduler")
}

// TestRollbackNeverDemandsDownComponent: a restart of a component that was
// not running (its image exits at start) fails, and its rollback restores
// the manifest without demanding that the component come back: rolled
// back (exit 3), not rollback-failed (exit 4, before the fix). So does a
// stop of another component, whose verify fails on the scheduler.
func TestRollbackNeverDemandsDownComponent(t *testing.T) {
	c := downSchedulerNode(t)
	code, out, errOut := c.su("restart", nodestate.Scheduler, "--replace-timeout=5s", "--active-timeout=5s")
	if code != cli.ExitRolledBack {
		t.Fatalf("restart of a scheduler that was not running: exit %d, want %d\n%s%s", code, cli.ExitRolledBack, out, errOut)
	}
	contains(t, "restart output", out, "kube-scheduler did not answer before the transaction either: its manifest is restored, the rollback does not wait for it")
	status := c.want(cli.ExitOK, "status")
	contains(t, "status after the rollback", status, "transaction:  none open; last ", " restart rolled-back")

	// A stop of another component fails its verify (the scheduler does
	// not answer); the rollback starts the controller-manager again and
	// does not demand the scheduler either.
	code, out, errOut = c.su("stop", nodestate.ControllerManager, "--replace-timeout=5s", "--active-timeout=5s")
	if code != cli.ExitRolledBack {
		t.Fatalf("stop on a node whose scheduler was not running: exit %d, want %d\n%s%s", code, cli.ExitRolledBack, out, errOut)
	}
	contains(t, "stop output", out, "verify: kube-scheduler", "kube-controller-manager: waiting for kube-controller-manager to answer")
	status = c.want(cli.ExitOK, "status")
	contains(t, "status after the stop's rollback", status, " stop rolled-back")
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == nodestate.ControllerManager && (f[2] != "rendered" || f[3] != "yes") {
			t.Errorf("the controller-manager after the stop's rollback: %q, want rendered and active", line)
		}
	}
}

// downSchedulerNode is a test bed node whose kube-scheduler never runs
// (its image exits at start: kubelet restarts it in a crash loop) and
// whose other components answer, initialised.
func downSchedulerNode(t *testing.T) *cliNode {
	t.Helper()
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	n := testbed.Start(t, testbed.Options{NoManifests: true, Mutate: func(st *nodestate.NodeState) {
		st.Images[nodestate.Scheduler] = testbed.ModeImage(nodestate.Scheduler, "v1.34.4", standin.ModeExitAtStart)
	}})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	for _, comp := range manifest.NamesFor(n.State) {
		if comp == nodestate.Scheduler {
			continue
		}
		tg, err := manifest.Target(n.State, comp)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Scanner.WaitActive(t.Context(), tg, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestMovedStateDir is issue 32's "a state directory can move": the state
// directory copied to another path (a restore from backup) is not a
// damaged journal there: status and history read it, and rollback --last
// undoes the last commit from the snapshot the copy holds.
func TestMovedStateDir(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/default-vip.yaml"})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	c.want(cli.ExitOK, "stop", "kube-scheduler", "--soak=1s")

	moved := filepath.Join(n.Root, "restored", "stratum")
	if err := os.CopyFS(moved, os.DirFS(c.stateDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(c.stateDir); err != nil {
		t.Fatal(err)
	}
	c.stateDir = moved
	status := c.want(cli.ExitOK, "status")
	contains(t, "status of the moved state directory", status, "transaction:  none open; last ")
	if got := historyLen(t, c); got != 1 {
		t.Errorf("history of the moved state directory: %d transactions, want 1 (the stop)", got)
	}
	out := c.want(cli.ExitOK, "rollback", "--last")
	contains(t, "rollback --last in the moved state directory", out, "\ncommitted ")
	if strings.Contains(c.want(cli.ExitOK, "status"), "stopped") {
		t.Errorf("kube-scheduler is still stopped after rollback --last from the moved state directory")
	}
}
