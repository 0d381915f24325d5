package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/runbin"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// cliNode is a test bed node driven through the stratum-upgrade binary.
type cliNode struct {
	t        *testing.T
	node     *testbed.Node
	stateDir string
	metrics  string
	// bootID is the node's boot id after reboot, which the commands then
	// report as theirs (the kernel's before any).
	bootID string
}

// reboot reboots the node (testbed's Node.Reboot: every process killed,
// the kubelet started again) and has the commands run from then on see
// the new boot id, as they would after a real reboot: a resume that took
// the boot for the old one would judge the processes the reboot replaced
// as crash-looping. The boot id reaches only the binary built with the
// fault points (build tag stratumfault), which the commands then run.
func (c *cliNode) reboot() {
	c.t.Helper()
	id, err := c.node.Reboot(0)
	if err != nil {
		c.t.Fatal(err)
	}
	c.bootID = id
}

// su runs the stratum-upgrade binary (this test binary under that name, on
// PATH since testscript.Main) against the node, its process scan scoped to
// the kubelet stand-in, with the test bed's deadlines, and returns the exit
// code and output.
func (c *cliNode) su(args ...string) (int, string, string) {
	c.t.Helper()
	cmd := c.command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		c.t.Fatalf("stratum-upgrade %v: %v", args, err)
	}
	c.t.Logf("stratum-upgrade %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return code, stdout.String(), stderr.String()
}

// command is the stratum-upgrade command su runs, not started.
func (c *cliNode) command(args ...string) *exec.Cmd {
	argv := append([]string{
		"--manifest-dir=" + c.node.ManifestDir,
		"--state-dir=" + c.stateDir,
		"--proc-scope=" + strconv.Itoa(c.node.KubeletPID),
	}, args...)
	if len(args) > 0 && slices.Contains([]string{"init", "render", "run", "finish", "apply", "restart", "stop", "start", "resume", "rollback"}, args[0]) {
		// The transaction flags: only the commands that drive one take
		// them; one the test gives itself wins (it comes after these).
		argv = append(argv[:3:3], "--replace-timeout=30s", "--active-timeout=30s", "--stop-timeout=15s", "--soak=2s",
			"--metrics-file="+c.metrics)
		argv = append(argv, args...)
	}
	if c.bootID == "" {
		return c.node.Command("stratum-upgrade", argv...) // inside the node's network namespace, if any
	}
	// The fault build, no fault point armed whatever this test's
	// environment says (as runbin.Command), reporting the reboot's boot id.
	cmd := c.node.Command(runbin.Stratum(c.t), argv...)
	cmd.Env = append(os.Environ(), build.FaultEnv+"=")
	return runbin.WithBootID(cmd, c.bootID)
}

func (c *cliNode) want(code int, args ...string) string {
	c.t.Helper()
	got, out, errOut := c.su(args...)
	if got != code {
		c.t.Fatalf("stratum-upgrade %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, code, out, errOut)
	}
	return out
}

func (c *cliNode) release(name, version, scheduler string) string {
	c.t.Helper()
	p := filepath.Join(c.node.Root, name)
	// kube-apiserver runs at kubernetesVersion, the control plane's version.
	doc := fmt.Sprintf("apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: %s\nimages:\n  kube-apiserver: %s\n  kube-scheduler: %s\n",
		version, testbed.ModeImage(nodestate.KubeAPIServer, version, ""), scheduler)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return p
}

func contains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

// rollsBackFor checks that out says the transaction rolls back for comp,
// a component whose new process exits within milliseconds of its start.
// As root the kernel's process events show the engine that start
// ("rolling back: kube-scheduler did not answer ..."); polling, as a user
// who is not root, it may see no process at all ("rolling back: kubelet
// did not start a new kube-scheduler ..."). Either line names comp.
func rollsBackFor(t *testing.T, what, out, comp string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)rolling back: .*` + regexp.QuoteMeta(comp)).MatchString(out) {
		t.Errorf("%s does not say it rolls back for %s:\n%s", what, comp, out)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOnTestBed drives the outcomes that need a kubelet through the real
// command on the test bed (kubelet stand-in, component stand-ins): a
// committed run and its metrics and status, a failing release that rolls
// back (exit 3), and rollback --last of the committed upgrade (exit 0).
func TestOnTestBed(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	t.Parallel()
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/default.yaml"})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	sched := filepath.Join(n.ManifestDir, "kube-scheduler.yaml")

	out := c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	contains(t, "init output", out, "written:      -") // the test bed rendered the same state

	// Committed.
	up := c.release("up.yaml", "v1.34.5", testbed.ModeImage(nodestate.Scheduler, "v1.34.5", ""))
	out = c.want(cli.ExitOK, "run", "--to="+up)
	contains(t, "run output", out,
		"kube-scheduler: waiting for kubelet to replace kube-scheduler (at most 30s)",
		"kube-scheduler: waiting for kube-scheduler to answer https://",
		"verifying every component for 2s",
		"committed: node state is now v1.34.5")
	if !strings.Contains(out, "\ncommitted ") {
		t.Errorf("no final committed line:\n%s", out)
	}
	contains(t, "manifest", readFile(t, sched), "image: registry.k8s.io/kube-scheduler:v1.34.5")
	m := readFile(t, c.metrics)
	contains(t, "metrics", m,
		`stratum_upgrade_last_result{result="committed"} 1`,
		`stratum_upgrade_step_duration_seconds{component="kube-scheduler",phase="applying"} `)

	out = c.want(cli.ExitOK, "status")
	contains(t, "status", out, "node:         "+n.State.NodeName+", Kubernetes v1.34.5", "transaction:  none open; last ")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "kube-scheduler ") {
			f := strings.Fields(line)
			if len(f) < 5 || f[2] != "rendered" || f[3] != "yes" || !strings.Contains(f[4], "/") {
				t.Errorf("status row %q: want rendered, active, a pid/ticks", line)
			}
		}
	}
	c.want(cli.ExitOK, "run", "--to="+up) // again: nothing to do
	c.want(cli.ExitOK, "resume")

	// A release whose scheduler never comes up healthy: rolled back, exit 3.
	// Its tag, v1.34.5-exit-at-start, is a pre-release of the v1.34.5 the
	// node now runs, so a downgrade to the pre-flight checks: let through.
	// --no-surge: the scheduler is replaced (and rolled back) stop-then-
	// start; a failed surge copy never touches the old one
	// (engine.TestSurgeCopyFailsRollsBack).
	bad := c.release("bad.yaml", "v1.34.5", testbed.ModeImage(nodestate.Scheduler, "v1.34.5", standin.ModeExitAtStart))
	code, out, errOut := c.su("run", "--to="+bad, "--replace-timeout=5s", "--active-timeout=5s", "--ignore-preflight-errors=KubernetesDowngrade", "--no-surge")
	if code != cli.ExitRolledBack {
		t.Fatalf("run of a failing release: exit %d, want %d\n%s%s", code, cli.ExitRolledBack, out, errOut)
	}
	contains(t, "run output", out, "restoring the manifest snapshot",
		"] rolled back (reason above)\n", "the node runs what it ran before (reason above)\n")
	rollsBackFor(t, "run output", out, nodestate.Scheduler)
	contains(t, "stderr", errOut, "stratum-upgrade: upgrade rolled back (reason above)\n")
	// The reason is printed once, in the rolling-back line.
	_, reason, _ := strings.Cut(out, "rolling back: ")
	reason, _, _ = strings.Cut(reason, "\n")
	if n := strings.Count(out+errOut, reason); reason == "" || n != 1 {
		t.Errorf("the reason %q is printed %d times, want once:\n%s%s", reason, n, out, errOut)
	}
	contains(t, "manifest", readFile(t, sched), "image: registry.k8s.io/kube-scheduler:v1.34.5\n")
	contains(t, "metrics", readFile(t, c.metrics), `stratum_upgrade_last_result{result="rolled-back"} 1`,
		`stratum_upgrade_step_duration_seconds{component="kube-scheduler",phase="rolling-back"} `)

	// rollback --last: the last COMMITTED upgrade (v1.34.4 -> v1.34.5) is undone.
	out = c.want(cli.ExitOK, "rollback", "--last")
	contains(t, "rollback --last output", out, "roll back ", "committed ")
	contains(t, "manifest", readFile(t, sched), "image: registry.k8s.io/kube-scheduler:v1.34.4\n")
	out = c.want(cli.ExitOK, "history")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], " rollback-last ") || !strings.Contains(lines[1], " committed ") ||
		!strings.Contains(lines[2], " rolled-back ") || !strings.Contains(lines[3], " committed ") {
		t.Errorf("history:\n%s", out)
	}
	contains(t, "metrics", readFile(t, c.metrics), `stratum_upgrade_last_info{command="rollback",kind="rollback-last",`)
	c.want(cli.ExitOK, "render")
}
