package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestSurgeCrashStatusResume: the binary is SIGKILLed right after
// kube-apiserver's surge copy answered (a node with port sharing on, as
// after an upgrade). status names the surge copy and the plan of a surge
// says which components surge; resume removes the copy and commits, and
// leaves no surge pod.
func TestSurgeCrashStatusResume(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	if os.Geteuid() != 0 {
		t.Skip("surge needs pod cgroups: the kubelet stand-in makes them as root")
	}
	t.Parallel()
	bin, err := build.StratumUpgrade(true)
	if err != nil {
		t.Fatal(err)
	}
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/default.yaml", Mutate: func(st *nodestate.NodeState) {
		for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
			if st.ExtraArgs == nil {
				st.ExtraArgs = map[string]map[string]nodestate.ArgValues{}
			}
			if st.ExtraArgs[comp] == nil {
				st.ExtraArgs[comp] = map[string]nodestate.ArgValues{}
			}
			st.ExtraArgs[comp][manifest.PortSharingFlag] = nodestate.ArgValues{"true"}
		}
	}})
	if n.CgroupParent == "" {
		t.Skip("the kubelet stand-in makes no pod cgroups here (no writable cgroup v2)")
	}
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)

	up := c.release("up.yaml", "v1.34.5", testbed.ModeImage(nodestate.KubeAPIServer, "v1.34.5", ""))
	contains(t, "plan", c.want(cli.ExitOK, "plan", "--to="+up), "\nsurge: kube-apiserver, kube-scheduler start beside the running instance")

	point := fault.AfterSurgeActive.Of(nodestate.KubeAPIServer)
	cmd := c.command("run", "--to="+up)
	cmd.Path, cmd.Err = bin, nil // the binary with the fault points (build tag stratumfault)
	cmd.Env = append(os.Environ(), "STRATUM_FAULT="+string(point))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() >= 0 {
		t.Fatalf("run with STRATUM_FAULT=%s: %v, want killed\n%s", point, err, out)
	}
	surge := filepath.Join(n.ManifestDir, manifest.SurgeFileName(nodestate.KubeAPIServer))
	if _, err := os.Stat(surge); err != nil {
		t.Fatalf("no surge copy after the crash: %v", err)
	}
	contains(t, "status", c.want(cli.ExitOK, "status"), "\nsurge:        kube-apiserver-surge.yaml: a new instance beside the running one")

	contains(t, "resume", c.want(cli.ExitOK, "resume"), "\ncommitted ")
	if _, err := os.Stat(surge); !os.IsNotExist(err) {
		t.Errorf("the surge copy after resume: %v, want none", err)
	}
	status := c.want(cli.ExitOK, "status")
	contains(t, "status after resume", status, "transaction:  none open; last ")
	if strings.Contains(status, "\nsurge:") {
		t.Errorf("status after resume still shows a surge:\n%s", status)
	}
}
