package testbed

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/proc"
)

// TestNodePodCgroups: as root, every pod of the node runs in a static
// pod's cgroup under the node's parent, the parent goes at Stop, and a
// parent a killed test binary left behind goes at the next node's start.
func TestNodePodCgroups(t *testing.T) {
	if os.Geteuid() != 0 || kubeletsim.UnifiedMount() == "" {
		t.Skip("pod cgroups need root and a cgroup v2 hierarchy")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(kubeletsim.UnifiedMount(), "stratum-testbed-"+strconv.Itoa(dead.Process.Pid)+"-1")
	if err := os.MkdirAll(filepath.Join(stale, "kubepods", "besteffort"), 0o755); err != nil {
		t.Skipf("cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() { _ = removeTree(stale, true) })

	n, err := StartNode(t.Context(), Options{Root: t.TempDir(), StateFile: "testdata/states/default.yaml"})
	if n == nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = n.Stop()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.CgroupParent == "" {
		t.Fatal("no cgroup parent as root on a cgroup v2 hierarchy")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the parent of a dead test process is still there: %v", err)
	}
	ps, err := n.Scanner.PIDs("etcd")
	if err != nil || len(ps) != 1 {
		t.Fatalf("etcd: %v, %v", ps, err)
	}
	if pl := proc.Host().Place(ps[0].PID); pl != proc.StaticPod {
		t.Errorf("the node's etcd is %v, want in a static pod's cgroup", pl)
	}
	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.CgroupParent); !os.IsNotExist(err) {
		t.Errorf("cgroup parent %s still there after Stop: %v", n.CgroupParent, err)
	}
}
