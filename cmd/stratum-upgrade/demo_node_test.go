package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// statusPIDs is the pid column of every roster row of status: component
// -> its processes as status prints them.
func statusPIDs(t *testing.T, c *cliNode) map[string]string {
	t.Helper()
	roster := manifest.NamesFor(c.node.State)
	out := map[string]string{}
	for _, line := range strings.Split(c.want(cli.ExitOK, "status"), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && slices.Contains(roster, f[0]) {
			out[f[0]] = f[4]
		}
	}
	if len(out) != len(roster) {
		t.Fatalf("status has rows for %v, want every component of %v", out, roster)
	}
	return out
}

// TestRestartOnDemoNode is issue 16's first criterion as written: on the
// demo's node (testdata/demo/node.yaml: v1.34.4, etcd 3.5, kube-vip, the
// node `make demo` brings up), `stratum-upgrade restart kube-scheduler`
// replaces the scheduler, waits for kubelet to replace it and for the new
// process to answer its health endpoint, commits and exits 0; every other
// component, kube-vip included, keeps its processes.
func TestRestartOnDemoNode(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	t.Parallel()
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/demo/node.yaml"})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	if !slices.Contains(manifest.NamesFor(n.State), nodestate.KubeVIP) {
		t.Fatalf("the demo node's roster %v has no kube-vip: not the demo's node", manifest.NamesFor(n.State))
	}

	before := statusPIDs(t, c)
	out := c.want(cli.ExitOK, "restart", nodestate.Scheduler)
	contains(t, "restart output", out, "restart: kube-scheduler\n",
		"kube-scheduler: waiting for kubelet to replace kube-scheduler (at most 30s)",
		"kube-scheduler: waiting for kube-scheduler to answer https://",
		"kube-scheduler: kube-scheduler replaced and active",
		"verifying every component for 2s", "\ncommitted ")
	after := statusPIDs(t, c)
	for comp, pids := range before {
		if replaced := after[comp] != pids; replaced != (comp == nodestate.Scheduler) {
			t.Errorf("%s: processes %s before the restart, %s after; replaced %v, want %v", comp, pids, after[comp], replaced, comp == nodestate.Scheduler)
		}
	}
	contains(t, "history", c.want(cli.ExitOK, "history"), " restart ")

	// --output=json: run's JSON, one object a line: the step's events,
	// then the result, committed with exit code 0.
	out = c.want(cli.ExitOK, "restart", nodestate.Scheduler, "--output=json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var waits []string
	for _, l := range lines[:len(lines)-1] {
		var ev struct {
			Phase, Step string
			Component   *string
			WaitingFor  *string
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Phase == "" {
			t.Fatalf("restart --output=json: %q is no event (%v)", l, err)
		}
		if ev.WaitingFor != nil && ev.Component != nil && *ev.Component == nodestate.Scheduler {
			waits = append(waits, *ev.WaitingFor)
		}
	}
	joined := strings.Join(waits, "\n")
	if !strings.Contains(joined, "kubelet to replace kube-scheduler") || !strings.Contains(joined, "kube-scheduler to answer https://") {
		t.Errorf("restart --output=json: the scheduler's waits %q, want the replace and the answer", waits)
	}
	var res struct {
		Outcome  string
		ExitCode *int
		Result   struct{ Planned []string }
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("restart --output=json: last line %q: %v", lines[len(lines)-1], err)
	}
	if res.Outcome != "committed" || res.ExitCode == nil || *res.ExitCode != 0 || !slices.Equal(res.Result.Planned, []string{nodestate.Scheduler}) {
		t.Errorf("restart --output=json result: %+v, want committed, exit 0, kube-scheduler planned", res)
	}
}
