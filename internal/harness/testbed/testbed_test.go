package testbed

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// checkNode asserts every roster component runs under the stand-in from
// its rendered manifest, with the argv[0] proc looks for.
func checkNode(t *testing.T, n *Node, want []string) {
	t.Helper()
	if got := manifest.NamesFor(n.State); !slices.Equal(got, want) {
		t.Fatalf("roster %v, want %v", got, want)
	}
	pods, err := n.Kubelet.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != len(want) {
		t.Fatalf("%d pods, want %d: %+v", len(pods), len(want), pods)
	}
	for _, name := range want {
		tg, err := n.Target(name)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := n.Scanner.PIDs(tg.Binary)
		if err != nil {
			t.Fatal(err)
		}
		key := "kube-system/" + name + "-" + n.State.NodeName
		pod := kubeletsim.Find(pods, key)
		if len(pod) != 1 || pod[0].State != kubeletsim.StateRunning || pod[0].File != n.Store.Path(name) {
			t.Fatalf("%s: pod %+v, want one running pod from %s", name, pod, n.Store.Path(name))
		}
		if len(ps) != 1 || ps[0].PID != pod[0].PID {
			t.Fatalf("%s: proc sees %+v under argv[0] %q, the stand-in reports pid %d", name, ps, tg.Binary, pod[0].PID)
		}
	}
}

func TestFullNodeFromRenderedManifests(t *testing.T) {
	n := Start(t, Options{})
	checkNode(t, n, []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"})

	// Real etcd on the generated PKI: a write and a read through TLS.
	c := etcdclient.New(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/stratum/probe", "ok"); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, n.EtcdEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimPrefix(etcdbuild.Builds[0].ModuleVersion, "v"); st.Version != want {
		t.Fatalf("etcd version %s, want %s", st.Version, want)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", n.State.Ports.EtcdMetrics))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("etcd /health: %v %v", resp, err)
	}
	resp.Body.Close()

	// Each component stand-in recorded its first healthy answer.
	ev, err := n.Events()
	if err != nil {
		t.Fatal(err)
	}
	healthy := map[string]bool{}
	for _, e := range ev {
		if e.Event == standin.EventHealthy {
			healthy[e.Component] = true
		}
	}
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if !healthy[c] {
			t.Errorf("no healthy event from %s in %+v", c, ev)
		}
	}

	// Teardown leaves nothing behind.
	pids := []int{n.KubeletPID}
	pods, _ := n.Kubelet.Pods(context.Background())
	for _, p := range pods {
		pids = append(pids, p.PID)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if left, err := n.Leftovers(); err != nil || len(left) != 0 {
		t.Fatalf("leftovers %v %v", left, err)
	}
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); len(b) > 0 && !isZombie(b) {
				t.Errorf("pid %d still alive after Stop", pid)
			}
		}
	}
}

func isZombie(stat []byte) bool {
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == 'Z'
		}
	}
	return false
}

func TestFullNodeWithVIP(t *testing.T) {
	n := Start(t, Options{StateFile: "testdata/states/default-vip.yaml"})
	checkNode(t, n, []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-vip"})
	if n.State.VIP.Address != VIPAddress {
		t.Fatalf("VIP %s, want the loopback %s", n.State.VIP.Address, VIPAddress)
	}
}

func TestCISNode(t *testing.T) {
	n := Start(t, Options{StateFile: "testdata/states/cis.yaml"})
	checkNode(t, n, []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-vip"})
}

// The engine upgrades etcd 3.5 -> 3.6 on the node's data dir: the 3.6
// binary must take over the 3.5 member's data and keep its keys.
func TestEtcd36StartsOnThe35DataDir(t *testing.T) {
	n := Start(t, Options{})
	c := etcdclient.New(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/stratum/kept", "from-3.5"); err != nil {
		t.Fatal(err)
	}
	tg, err := n.Target(nodestate.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	mark, err := n.Scanner.Mark()
	if err != nil {
		t.Fatal(err)
	}
	st := n.State.Clone()
	st.Images[nodestate.Etcd] = etcdbuild.Builds[1].Image
	if _, err := n.Store.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	if err := n.Scanner.WaitReplaced(ctx, tg, mark, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.Scanner.WaitActive(ctx, tg, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	var version string
	for ctx.Err() == nil { // the client reconnects to the new member
		if s, err := c.Status(ctx, n.EtcdEndpoint()); err == nil {
			version = s.Version
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if want := strings.TrimPrefix(etcdbuild.Builds[1].ModuleVersion, "v"); version != want {
		t.Fatalf("etcd version %q after the upgrade, want %s", version, want)
	}
	got, err := c.Get(ctx, "/stratum/kept")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "from-3.5" {
		t.Fatalf("key after upgrade: %+v", got.Kvs)
	}
}

// A component mapped to a failing behaviour keeps the node from coming up,
// and StartNode says which component it waited for.
func TestModeImageExitAtStartNeverActive(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	n, err := StartNode(ctx, Options{Root: root, ActiveTimeout: 5 * time.Second, Mutate: func(st *nodestate.NodeState) {
		st.Images[nodestate.Scheduler] = ModeImage(nodestate.Scheduler, "v1.34.4", standin.ModeExitAtStart)
	}})
	if n != nil {
		t.Cleanup(func() {
			if err := n.Stop(); err != nil {
				t.Errorf("teardown: %v", err)
			}
		})
	}
	if err == nil {
		t.Fatal("node with an exit-at-start scheduler came up")
	}
	t.Logf("StartNode: %v", err)
	pods, perr := n.Kubelet.Pods(ctx)
	if perr != nil {
		t.Fatal(perr)
	}
	sched := kubeletsim.Find(pods, "kube-system/kube-scheduler-"+n.State.NodeName)
	if len(sched) != 1 || sched[0].Restarts < 1 || sched[0].LastExit == nil || sched[0].LastExit.Code != 1 {
		t.Fatalf("scheduler pod %+v: want a crash-looping pod with exit code 1", sched)
	}
}
