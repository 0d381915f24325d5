package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// TestRunByVersion upgrades a test bed node by version: run --to v1.34.5
// moves kube-apiserver, kube-controller-manager and kube-scheduler, keeps
// etcd 3.6.16 (newer than the 3.6.5 kubeadm 1.34 pairs), and commits; the
// same version again is nothing to do, and a lower one is refused.
func TestRunByVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	t.Parallel()
	b, err := os.ReadFile("../../testdata/states/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state.yaml")
	if err := os.WriteFile(state, []byte(strings.Replace(string(b), "registry.k8s.io/etcd:3.5.35-0", "registry.k8s.io/etcd:3.6.16-0", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := testbed.Start(t, testbed.Options{StateFile: state})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)

	out := c.want(cli.ExitOK, "plan", "--to", "v1.34.5")
	contains(t, "plan --to v1.34.5", out, "upgrade v1.34.4 -> v1.34.5 changes 3 manifest(s): kube-apiserver, kube-controller-manager, kube-scheduler")
	out = c.want(cli.ExitOK, "run", "--to", "v1.34.5")
	contains(t, "run --to v1.34.5", out, "committed: node state is now v1.34.5")
	for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		contains(t, comp+" manifest", readFile(t, filepath.Join(n.ManifestDir, comp+".yaml")), "image: registry.k8s.io/"+comp+":v1.34.5\n")
	}
	contains(t, "etcd manifest", readFile(t, filepath.Join(n.ManifestDir, "etcd.yaml")), "image: registry.k8s.io/etcd:3.6.16-0\n")
	contains(t, "state", c.want(cli.ExitOK, "state"), "kubernetesVersion: v1.34.5\n", "  kube-apiserver: registry.k8s.io/kube-apiserver:v1.34.5\n")

	contains(t, "run --to v1.34.5 again", c.want(cli.ExitOK, "run", "--to", "v1.34.5"), "nothing to do")
	code, _, errOut := c.su("run", "--to", "v1.34.4")
	if code != cli.ExitError || !strings.Contains(errOut, "upgrade to v1.34.4: older than the node's v1.34.5") {
		t.Errorf("run --to v1.34.4: exit %d, want %d, refused as a downgrade:\n%s", code, cli.ExitError, errOut)
	}
}
