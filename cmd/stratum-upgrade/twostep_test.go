package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// kubeReleaseFile writes a release moving the three Kubernetes components
// to their healthy stand-ins at version.
func (c *cliNode) kubeReleaseFile(name, version string) string {
	c.t.Helper()
	doc := fmt.Sprintf("apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: %s\nimages:\n", version)
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		doc += fmt.Sprintf("  %s: %s\n", comp, testbed.ModeImage(comp, version, ""))
	}
	p := filepath.Join(c.node.Root, name)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// A two-step minor upgrade through the command: plan and run --two-step
// take the binary step, status and a second run say what finishes it,
// finish takes the finishing step, and the move back a minor is then
// refused whatever is ignored (exit 1, EmulationFinished).
func TestTwoStepThroughTheCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	t.Parallel()
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/default.yaml"})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	up := c.kubeReleaseFile("up.yaml", testbed.NextMinorTag)

	out := c.want(cli.ExitOK, "plan", "--to="+up, "--two-step")
	contains(t, "plan --two-step", out, "two-step: the binary step: 1.35 binaries emulating 1.34", "--emulated-version=kube=1.34")
	c.want(cli.ExitOK, "run", "--to="+up, "--two-step")
	out = c.want(cli.ExitOK, "status")
	contains(t, "status", out, "two-step:     1.35 binaries emulating 1.34: `")
	_, out, errOut := c.su("run", "--to="+up)
	contains(t, "run of the same release", out+errOut, "nothing to do", "the node runs 1.35 binaries emulating 1.34: `stratum-upgrade finish", "takes the two-step upgrade's finishing step")
	out = c.want(cli.ExitOK, "finish", "--dry-run")
	contains(t, "finish --dry-run", out, "two-step: the finishing step: the 1.35 binaries stop emulating 1.34")
	out = c.want(cli.ExitOK, "finish")
	contains(t, "finish", out, "finish the two-step upgrade to 1.35 (was emulating 1.34)")
	if out = c.want(cli.ExitOK, "status"); strings.Contains(out, "two-step:") {
		t.Errorf("status after finish still says two-step:\n%s", out)
	}
	c.want(cli.ExitOK, "finish") // nothing to do

	back := c.kubeReleaseFile("back.yaml", "v1.34.4")
	code, out, errOut := c.su("run", "--to="+back, "--ignore-preflight-errors=all")
	if code != cli.ExitError {
		t.Fatalf("run back to 1.34 after finish: exit %d, want %d\n%s%s", code, cli.ExitError, out, errOut)
	}
	contains(t, "the refusal", out+errOut, "[ERROR EmulationFinished] kube-apiserver v1.35.4 -> v1.34.4 goes back to 1.34 after the two-step upgrade's finishing step")
	_, out, errOut = c.su("plan", "--to="+back, "--ignore-preflight-errors=all")
	contains(t, "plan of the move back", out+errOut, "[ERROR EmulationFinished]")
}
