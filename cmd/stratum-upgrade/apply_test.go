package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/converge"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// startCLINode brings up a default test bed node driven through the
// binary; short mode skips the test.
func startCLINode(t *testing.T) (*testbed.Node, *cliNode) {
	t.Helper()
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	// Each test is a node of its own, its scans scoped to its kubelet
	// stand-in: they run in parallel.
	t.Parallel()
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/default.yaml"})
	return n, &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
}

// TestApplyOnTestBed drives apply --state through the real command on the
// test bed: plan --state shows the one changed manifest, apply commits it
// with the waits and makes the file the journal's node state (status and
// plan --state agree), a state whose scheduler cannot start rolls back
// (exit 3) leaving the committed state, and rollback --last undoes the
// committed apply.
func TestApplyOnTestBed(t *testing.T) {
	n, c := startCLINode(t)
	sched := filepath.Join(n.ManifestDir, "kube-scheduler.yaml")
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)

	next := n.State.Clone()
	next.ExtraArgs = map[string]map[string]nodestate.ArgValues{nodestate.Scheduler: {"v": {"3"}}}
	nextFile := filepath.Join(n.Root, "node-next.yaml")
	if err := next.Save(nextFile); err != nil {
		t.Fatal(err)
	}
	out := c.want(cli.ExitOK, "plan", "--state="+nextFile)
	contains(t, "plan output", out, "node state "+nextFile+" changes 1 manifest(s): kube-scheduler\n", "+    - --v=3\n")

	out = c.want(cli.ExitOK, "apply", "--state="+nextFile)
	contains(t, "apply output", out,
		"apply node state v1.34.4: kube-scheduler change",
		"kube-scheduler: waiting for kubelet to replace kube-scheduler (at most 30s)",
		"verifying every component for 2s")
	if !strings.Contains(out, "\ncommitted ") {
		t.Errorf("no final committed line:\n%s", out)
	}
	contains(t, "manifest", readFile(t, sched), "- --v=3\n")
	out = c.want(cli.ExitOK, "plan", "--state="+nextFile)
	contains(t, "plan after the apply", out, "nothing to do")
	code, _, errOut := c.su("status", "--cluster")
	if code != cli.ExitError {
		t.Errorf("status --cluster on a single member: exit %d, want %d", code, cli.ExitError)
	}
	contains(t, "status --cluster on a single member", errOut, "single member: there is no cluster rollout")
	out = c.want(cli.ExitOK, "status")
	contains(t, "status", out, "transaction:  none open; last ")

	// A state whose scheduler cannot listen: rolled back, exit 3, the
	// manifest and the journal's node state as the commit left them.
	bad := next.Clone()
	bad.ExtraArgs[nodestate.Scheduler]["bind-address"] = nodestate.ArgValues{"192.0.2.10"}
	badFile := filepath.Join(n.Root, "node-bad.yaml")
	if err := bad.Save(badFile); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = c.su("apply", "--state="+badFile, "--replace-timeout=5s", "--active-timeout=5s")
	if code != cli.ExitRolledBack {
		t.Fatalf("apply of a failing state: exit %d, want %d\n%s%s", code, cli.ExitRolledBack, out, errOut)
	}
	contains(t, "apply output", out, "the node runs what it ran before")
	rollsBackFor(t, "apply output", out, nodestate.Scheduler) // the stand-in refuses the address
	contains(t, "manifest", readFile(t, sched), "- --v=3\n")
	out = c.want(cli.ExitOK, "plan", "--state="+nextFile)
	contains(t, "plan after the rollback", out, "nothing to do")

	// rollback --last undoes the committed apply: the scheduler without
	// the extra arg, the node state of the start.
	c.want(cli.ExitOK, "rollback", "--last")
	if strings.Contains(readFile(t, sched), "--v=3") {
		t.Errorf("rollback --last left the applied extra arg:\n%s", readFile(t, sched))
	}
	out = c.want(cli.ExitOK, "plan", "--state="+n.StateFile)
	contains(t, "plan of the first state after rollback --last", out, "nothing to do")
}

// schedulerPID is the pid column of status's kube-scheduler row.
func schedulerPID(t *testing.T, c *cliNode) string {
	t.Helper()
	for _, line := range strings.Split(c.want(cli.ExitOK, "status"), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[0] == nodestate.Scheduler {
			return f[4]
		}
	}
	t.Fatal("status has no kube-scheduler row")
	return ""
}

// TestRestartOnTestBed drives restart through the real command: bad usage
// and a component the node does not run are refused with nothing begun; a
// named restart replaces the scheduler (a new pid) as a journaled
// transaction of kind restart; restart --changed has nothing to do until
// the scheduler's kubeconfig, a file it reads only at start, is rotated,
// and then restarts exactly the scheduler.
func TestRestartOnTestBed(t *testing.T) {
	n, c := startCLINode(t)
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)

	_, _, errOut := c.su("restart")
	contains(t, "restart without components", errOut, "name the components to restart")
	c.want(cli.ExitUsage, "restart", "kube-proxy")
	c.want(cli.ExitUsage, "restart", "--all", "--changed")
	_, _, errOut = c.su("restart", "kube-vip")
	contains(t, "restart kube-vip", errOut, `not a component of this node: "kube-vip"`)
	out := c.want(cli.ExitOK, "history")
	contains(t, "history after the refusals", out, "no transactions")

	pid := schedulerPID(t, c)
	out = c.want(cli.ExitOK, "restart", nodestate.Scheduler)
	contains(t, "restart output", out, "restart: kube-scheduler\n",
		"kube-scheduler: waiting for kubelet to replace kube-scheduler (at most 30s)", "\ncommitted ")
	if now := schedulerPID(t, c); now == pid {
		t.Errorf("kube-scheduler runs as %s before and after the restart", pid)
	}
	contains(t, "history", c.want(cli.ExitOK, "history"), " restart ")

	out = c.want(cli.ExitOK, "restart", "--changed")
	contains(t, "restart --changed before a rotation", out, "nothing to do")
	conf := filepath.Join(n.State.KubeconfigDir, "scheduler.conf")
	if err := os.WriteFile(conf, append([]byte(readFile(t, conf)), "# rotated\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	pid = schedulerPID(t, c)
	out = c.want(cli.ExitOK, "restart", "--changed")
	contains(t, "restart --changed after a rotation", out, ": kube-scheduler change\n", "\ncommitted ")
	if strings.Contains(out, "kube-apiserver:") || strings.Contains(out, "etcd:") {
		t.Errorf("restart --changed touched another component than the scheduler:\n%s", out)
	}
	if now := schedulerPID(t, c); now == pid {
		t.Errorf("kube-scheduler runs as %s before and after restart --changed", pid)
	}
}

// TestStopStartOnTestBed drives stop and start through the real command:
// the API server on this single-member node is refused with the flag to
// give; the scheduler's stop removes its manifest and waits for it to
// exit, status shows it stopped, render keeps it stopped, a second stop is
// nothing to do; start brings it back and status shows it rendered.
func TestStopStartOnTestBed(t *testing.T) {
	n, c := startCLINode(t)
	sched := filepath.Join(n.ManifestDir, "kube-scheduler.yaml")
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)

	code, _, errOut := c.su("stop", nodestate.KubeAPIServer)
	if code != cli.ExitError {
		t.Fatalf("stop kube-apiserver: exit %d, want %d", code, cli.ExitError)
	}
	contains(t, "stop kube-apiserver", errOut, "the only control-plane node", "--allow-control-plane-down")
	c.want(cli.ExitUsage, "stop")

	out := c.want(cli.ExitOK, "stop", nodestate.Scheduler)
	contains(t, "stop output", out, "stop: kube-scheduler\n", "kube-scheduler: waiting for kube-scheduler to exit (at most 15s)", "\ncommitted ")
	if _, err := os.Stat(sched); !os.IsNotExist(err) {
		t.Fatalf("the scheduler's manifest after the stop: %v", err)
	}
	status := c.want(cli.ExitOK, "status")
	contains(t, "status after the stop", status, "stopped:      kube-scheduler (no manifest until `")
	var row []string
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == nodestate.Scheduler {
			row = f
		}
	}
	if len(row) < 4 || row[1] != "no" || row[2] != "stopped" || row[3] != "no" {
		t.Errorf("status row of the stopped scheduler: %v, want not in the roster, stopped, not active", row)
	}
	c.want(cli.ExitOK, "render")
	if _, err := os.Stat(sched); !os.IsNotExist(err) {
		t.Fatalf("render wrote the stopped scheduler's manifest: %v", err)
	}
	contains(t, "second stop", c.want(cli.ExitOK, "stop", nodestate.Scheduler), "nothing to do: kube-scheduler is stopped already")

	out = c.want(cli.ExitOK, "start", "--all")
	contains(t, "start output", out, "start: kube-scheduler\n", "kube-scheduler: waiting for kubelet to start kube-scheduler (at most 30s)",
		"kube-scheduler: waiting for kube-scheduler to answer https://", "kube-scheduler started and active", "\ncommitted ")
	contains(t, "manifest after the start", readFile(t, sched), "image: ")
	if pid := schedulerPID(t, c); !strings.Contains(pid, "/") {
		t.Errorf("the scheduler's processes after the start: %q", pid)
	}
}

// TestRenderLiveOnTestBed: on a running node, render of a hand-edited
// manifest and init --force of a new state go through a transaction (one
// component at a time with the waits), not a write of everything at once;
// --dry-run says so, shows the diff and writes nothing.
func TestRenderLiveOnTestBed(t *testing.T) {
	n, c := startCLINode(t)
	sched := filepath.Join(n.ManifestDir, "kube-scheduler.yaml")
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)

	next, edited := schedulerEdit(t, n.State)
	mark := markBeforeWrite(t, n)
	if err := os.WriteFile(sched, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	// kubelet replaces the scheduler from the edited manifest: wait until
	// the new one runs and answers, as on a node edited long ago. (Only
	// WaitActive saw the old scheduler still answering, and render then
	// looked in the gap between the two: seen in CI.)
	tgt, err := manifest.Target(next, nodestate.Scheduler)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Scanner.WaitReplaced(t.Context(), tgt, mark, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.Scanner.WaitActive(t.Context(), tgt, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	out := c.want(cli.ExitOK, "render", "--dry-run")
	contains(t, "render --dry-run", out, "render --dry-run: would write kube-scheduler as one transaction, one component at a time with the waits (kube-scheduler running)", "-    - --v=3\n")
	if readFile(t, sched) != string(edited) {
		t.Fatal("render --dry-run wrote the scheduler's manifest")
	}
	out = c.want(cli.ExitOK, "render")
	contains(t, "render", out, "render: the manifests of running components change (kube-scheduler): one transaction",
		"kube-scheduler: waiting for kubelet to replace kube-scheduler", "\ncommitted ")
	if got := readFile(t, sched); strings.Contains(got, "--v=3") || !strings.Contains(got, "image: ") {
		t.Fatalf("after render the scheduler's manifest is not the render:\n%s", got)
	}

	// init --force of a new state on the live node: a transaction too.
	nextFile := filepath.Join(n.Root, "node-next.yaml")
	if err := next.Save(nextFile); err != nil {
		t.Fatal(err)
	}
	out = c.want(cli.ExitOK, "init", "--force", "--state="+nextFile, "--dry-run")
	contains(t, "init --dry-run", out, "is valid", "would write kube-scheduler as one transaction")
	out = c.want(cli.ExitOK, "init", "--force", "--state="+nextFile)
	contains(t, "init --force", out, "init: the manifests of running components change (kube-scheduler)", "\ncommitted ")
	contains(t, "manifest after init --force", readFile(t, sched), "- --v=3\n")
	contains(t, "render --dry-run after", c.want(cli.ExitOK, "render", "--dry-run"), "nothing would change")
}

// journalState is the node state the journal in c's state directory holds,
// read once the command that wrote it has exited.
func journalState(t *testing.T, c *cliNode) *nodestate.NodeState {
	t.Helper()
	return converge.JournalState(t, filepath.Join(c.stateDir, "stratum.db"))
}

// manifests is every file of dir by name, with its bytes.
func manifests(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		m[e.Name()] = readFile(t, filepath.Join(dir, e.Name()))
	}
	return m
}

// TestInitForceRollsBack (issue 16 item 4): init --force of a new state on
// a live node goes as apply --state does. A field apply refuses is refused
// (exit 1), nothing imported or written. A state whose scheduler cannot
// start rolls back (exit 3): the journal keeps the old node state, the
// manifests are as before (the old render, and a manifest kubelet sees as
// the same pod as the render put back as it was) and every component runs;
// init says nothing was imported. The same init --force of a state that
// starts commits and makes it the journal's node state.
func TestInitForceRollsBack(t *testing.T) {
	n, c := startCLINode(t)
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	// The controller manager's manifest differs from the render only in
	// bytes kubelet ignores (a comment): init writes it at once, outside
	// the transaction, and must put it back when the transaction does not
	// commit.
	kcm := filepath.Join(n.ManifestDir, "kube-controller-manager.yaml")
	commented := "# edited by hand: kubelet sees the same pod\n" + readFile(t, kcm)
	if err := os.WriteFile(kcm, []byte(commented), 0o600); err != nil {
		t.Fatal(err)
	}
	before := manifests(t, n.ManifestDir)

	// A field no transaction can change: refused, nothing imported.
	moved := n.State.Clone()
	moved.Etcd.DataDir += "-moved"
	movedFile := filepath.Join(n.Root, "node-moved.yaml")
	if err := moved.Save(movedFile); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := c.su("init", "--force", "--state="+movedFile)
	if code != cli.ExitError {
		t.Fatalf("init --force of a moved etcd.dataDir: exit %d, want %d\n%s%s", code, cli.ExitError, out, errOut)
	}
	contains(t, "init --force of a moved etcd.dataDir", errOut, "etcd.dataDir: ", "nothing is imported", "init --force --all-at-once --state "+movedFile)
	if st := journalState(t, c); st.Etcd.DataDir != n.State.Etcd.DataDir {
		t.Errorf("the refused init --force imported etcd.dataDir %s", st.Etcd.DataDir)
	}
	if after := manifests(t, n.ManifestDir); !maps.Equal(after, before) {
		t.Error("the refused init --force changed the manifests")
	}

	bad := n.State.Clone()
	bad.ExtraArgs = map[string]map[string]nodestate.ArgValues{nodestate.Scheduler: {"bind-address": {"192.0.2.10"}}}
	badFile := filepath.Join(n.Root, "node-bad.yaml")
	if err := bad.Save(badFile); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = c.su("init", "--force", "--state="+badFile, "--active-timeout=5s")
	if code != cli.ExitRolledBack {
		t.Fatalf("init --force of a failing state: exit %d, want %d\n%s%s", code, cli.ExitRolledBack, out, errOut)
	}
	contains(t, "init --force output", out, "init: the manifests of running components change (kube-scheduler)",
		"the node runs what it ran before")
	rollsBackFor(t, "init --force output", out, nodestate.Scheduler)
	contains(t, "init --force error", errOut, "nothing is imported: the journal keeps the node state of "+n.State.NodeName,
		"run `stratum-upgrade init --force --state "+badFile)
	if st := journalState(t, c); len(st.ExtraArgs[nodestate.Scheduler]["bind-address"]) != 0 {
		t.Errorf("after the rollback the journal holds the new node state: %v", st.ExtraArgs)
	}
	// The old render: byte for byte but for the scheduler's restarted-at
	// stamp, which the rollback renews (a new pod for kubelet).
	after := manifests(t, n.ManifestDir)
	if !slices.Equal(slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before))) {
		t.Errorf("after the rollback the manifest directory holds %v, want %v", slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
	}
	for _, comp := range manifest.NamesFor(n.State) {
		b := after[comp+".yaml"]
		if comp == nodestate.ControllerManager {
			if b != commented {
				t.Errorf("after the rollback the controller manager's manifest is not put back as it was:\n%s", b)
			}
			continue
		}
		if !manifest.MatchesRender(n.State, comp, []byte(b)) {
			t.Errorf("after the rollback %s's manifest is not the old node state's render:\n%s", comp, b)
		}
		if comp != nodestate.Scheduler && b != before[comp+".yaml"] {
			t.Errorf("the rollback changed %s's manifest, which the transaction did not write", comp)
		}
	}
	if err := n.WaitActive(t.Context(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	contains(t, "render --dry-run after the rollback", c.want(cli.ExitOK, "render", "--dry-run"),
		"render --dry-run: would write kube-controller-manager at once\n", "kube-controller-manager: kubelet sees the same pod in the render")

	// A state that starts: committed, and the journal's node state.
	next := n.State.Clone()
	next.ExtraArgs = map[string]map[string]nodestate.ArgValues{nodestate.Scheduler: {"v": {"3"}}}
	nextFile := filepath.Join(n.Root, "node-next.yaml")
	if err := next.Save(nextFile); err != nil {
		t.Fatal(err)
	}
	out = c.want(cli.ExitOK, "init", "--force", "--state="+nextFile)
	contains(t, "init --force", out, "\ncommitted ")
	if st := journalState(t, c); st.ExtraArgs[nodestate.Scheduler]["v"].Last() != "3" {
		t.Errorf("after the commit the journal does not hold the new node state: %v", st.ExtraArgs)
	}
	contains(t, "manifest after the commit", readFile(t, filepath.Join(n.ManifestDir, "kube-scheduler.yaml")), "- --v=3\n")
}

// schedulerEdit is the hand edit the live render tests make: st with
// --v=3 on kube-scheduler, and the scheduler's manifest as it renders.
func schedulerEdit(t *testing.T, st *nodestate.NodeState) (*nodestate.NodeState, []byte) {
	t.Helper()
	next := st.Clone()
	next.ExtraArgs = map[string]map[string]nodestate.ArgValues{nodestate.Scheduler: {"v": {"3"}}}
	prof, err := manifest.LoadProfile(next)
	if err != nil {
		t.Fatal(err)
	}
	edited, err := manifest.RenderBytes(next, prof, nodestate.Scheduler, "")
	if err != nil {
		t.Fatal(err)
	}
	return next, edited
}

// markBeforeWrite takes a mark on n for a write the test is about to make
// and waits until the clock is past its tick, as the engine does: a kubelet
// that starts the new process within the mark's own 10 ms tick would
// otherwise have it count as started before the write (seen under load:
// "still running ..., started before the write").
func markBeforeWrite(t *testing.T, n *testbed.Node) proc.Mark {
	t.Helper()
	m, err := n.Scanner.Mark()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Scanner.PastMark(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	return m
}
