package realcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ciq/stratum-upgrade/e2e"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/kubeapi"
	"time"
)

// EnvRealCluster runs the real cluster's tests (make real-cluster); plain
// go test skips them.
const EnvRealCluster = "STRATUM_REAL_CLUSTER"

// EnvLogs names a directory the nodes' logs are copied into before
// teardown; a failed test copies them into DefaultDir+"-logs" anyway.
const EnvLogs = "STRATUM_REAL_CLUSTER_LOGS"

func needCluster(t *testing.T) {
	t.Helper()
	if os.Getenv(EnvRealCluster) != "1" {
		t.Skip("the real kubeadm cluster: make real-cluster (" + EnvRealCluster + "=1, root)")
	}
	if err := Supported(); err != nil {
		t.Skipf("the real kubeadm cluster: %v", err)
	}
}

// start is Start with the cluster stopped at the test's end, checking that
// nothing of it is left on the machine.
func start(t *testing.T, ctx context.Context, nodes int) *Cluster {
	t.Helper()
	hostPaths := []string{"/opt/containerd", "/usr/libexec/kubernetes", "/etc/pki"}
	var missing []string
	for _, p := range append(hostPaths, NodePaths...) {
		if _, err := os.Lstat(p); err != nil {
			missing = append(missing, p)
		}
	}
	c, err := Start(ctx, Options{Nodes: nodes, Logf: t.Logf})
	if c != nil {
		t.Cleanup(func() {
			if dst := os.Getenv(EnvLogs); t.Failed() || dst != "" {
				if dst == "" {
					dst = DefaultDir + "-logs"
				}
				_ = os.RemoveAll(dst)
				if err := c.SaveLogs(dst); err != nil {
					t.Log(err)
				} else {
					t.Logf("the nodes' logs are in %s", dst)
				}
			}
			if err := c.Stop(); err != nil {
				t.Errorf("teardown: %v", err)
			}
			left := Leftovers(c.Dir)
			for _, p := range missing {
				if _, err := os.Lstat(p); err == nil {
					left = append(left, "host path "+p+" (missing before the cluster)")
				}
			}
			if len(left) > 0 {
				t.Errorf("left on the machine after teardown: %s", strings.Join(left, "; "))
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNodeUpAndDown: a node is its own network, mount and UTS namespaces
// (its address, its hostname, kubeadm's paths bound to its own
// directories) with its own containerd; its teardown leaves nothing.
func TestNodeUpAndDown(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := start(t, ctx, 1)
	n := c.Nodes[0]
	out, err := n.Command("sh", "-c", "hostname; ip -4 -o addr show dev eth0; echo node > /etc/kubernetes/who").CombinedOutput()
	if err != nil {
		t.Fatalf("in the node: %v: %s", err, out)
	}
	if !strings.Contains(string(out), n.Name+"\n") || !strings.Contains(string(out), n.Address+"/24") {
		t.Errorf("node's hostname and address: %q, want %s and %s", out, n.Name, n.Address)
	}
	if b, err := os.ReadFile(n.HostPath("/etc/kubernetes/who")); err != nil || string(b) != "node\n" {
		t.Errorf("/etc/kubernetes in the node is not its own directory: %q, %v", b, err)
	}
	if _, err := os.Stat("/etc/kubernetes/who"); err == nil {
		t.Errorf("the node's /etc/kubernetes/who is on the host's /etc/kubernetes")
	}
	if _, err := n.Ctr(ctx, "version"); err != nil {
		t.Fatal(err)
	}
	// Its own PID namespace and /proc: pid 1 is the node's init, and the
	// host's processes (this test's among them) are not there.
	out, err = n.Command("sh", "-c", "cat /proc/1/comm; ls /proc | grep -c '^[0-9]'").CombinedOutput()
	if err != nil {
		t.Fatalf("in the node: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || lines[0] != "sh" {
		t.Errorf("pid 1 in the node: %q, want the node's init (sh)", out)
	}
	if nproc, _ := strconv.Atoi(lines[len(lines)-1]); nproc < 2 || nproc > 10 {
		t.Errorf("the node's /proc lists %d processes, want its own few (init, containerd, ...)", nproc)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", os.Getpid())); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s: %d processes, %d MiB resident", n.Name, len(n.PIDs()), n.RSS()>>20)
}

// envHelper makes the test binary a child that starts a cluster and waits
// to be signalled (TestInterruptTearsDown, TestKilledRunCleanedUp).
const envHelper = "STRATUM_REAL_CLUSTER_HELPER"

func TestHelperCluster(t *testing.T) {
	if os.Getenv(envHelper) != "1" {
		t.Skip("a child of TestInterruptTearsDown and TestKilledRunCleanedUp")
	}
	c, err := Start(context.Background(), Options{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(c.Dir+".up", nil, 0o644)
	time.Sleep(time.Minute)
}

// child starts TestHelperCluster and waits until its cluster is up.
func child(t *testing.T) *exec.Cmd {
	t.Helper()
	up := DefaultDir + ".up"
	_ = os.Remove(up)
	t.Cleanup(func() { _ = os.Remove(up) })
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCluster$", "-test.v")
	cmd.Env = append(os.Environ(), envHelper+"=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(up); err == nil {
			return cmd
		}
		if i > 300 {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the child's cluster did not come up in 30 s: %s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestInterruptTearsDown: a run interrupted (SIGINT, as ^C or go test's
// timeout) tears its cluster down before it exits.
func TestInterruptTearsDown(t *testing.T) {
	needCluster(t)
	cmd := child(t)
	if len(Leftovers(DefaultDir)) == 0 {
		t.Fatal("the child's cluster is not there to interrupt")
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if left := Leftovers(DefaultDir); len(left) > 0 {
		t.Errorf("left on the machine after SIGINT: %s", strings.Join(left, "; "))
		_ = cleanStale(DefaultDir)
	}
}

// TestKilledRunCleanedUp: what a SIGKILLed run leaves (its namespaces,
// bridge, cgroups, directories) the next Start removes, and that run's
// Stop leaves nothing.
func TestKilledRunCleanedUp(t *testing.T) {
	needCluster(t)
	cmd := child(t)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(Leftovers(DefaultDir)) == 0 {
		t.Fatal("a SIGKILLed run left nothing: the cleanup is not exercised")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := start(t, ctx, 1)
	if len(c.Nodes) != 1 || netnsPIDs(NetNS(2)) != nil {
		t.Errorf("the killed run's second node is still there")
	}
}

// binaries are kubeadm's and kubelet's paths, built first when the cache
// lacks them (make real-cluster builds them before the tests).
func binaries(t *testing.T, ctx context.Context) (kubeadm, kubelet string) {
	t.Helper()
	times, err := BuildTimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range times {
		if d > 0 {
			t.Logf("built %s in %s", name, d.Round(time.Second))
		}
	}
	tools, err := Tools()
	if err != nil {
		t.Fatal(err)
	}
	return tools[1].Paths()["kubeadm"], tools[2].Paths()["kubelet"]
}

// TestRegistryPull: a node's containerd pulls kubeadm's references
// (registry.k8s.io/...) from the cluster's registry on the bridge.
func TestRegistryPull(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	imgs, err := Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := start(t, ctx, 1)
	if err := c.StartRegistry(ctx, imgs); err != nil {
		t.Fatal(err)
	}
	n := c.Nodes[0]
	began := time.Now()
	if out, err := n.Command("ctr", "-n", "k8s.io", "images", "pull", "--plain-http", "--hosts-dir", c.HostsDir, PauseImage).CombinedOutput(); err != nil {
		t.Fatalf("pull %s in %s: %v: %s", PauseImage, n.Name, err, out)
	}
	t.Logf("pulled %s in %s", PauseImage, time.Since(began).Round(time.Millisecond))
}

// TestKubeadmHA: three control-plane nodes, the first by kubeadm init
// --upload-certs, the others by kubeadm join --control-plane with the
// certificate key, pulling kubeadm's images from the registry: every API
// server ready on its own address, three Nodes Ready, every mirror pod
// running, three voting etcd members (kubeadm promoted its learners); then
// stratum-upgrade adopts each node (init --from-kubeadm --yes) without
// restarting a control-plane process, and the scenarios run
// (scenarios_test.go).
func TestKubeadmHA(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	kubeadm, kubelet := binaries(t, ctx)
	imgs, err := Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := start(t, ctx, 3)
	if err := c.StartRegistry(ctx, imgs); err != nil {
		t.Fatal(err)
	}
	if err := c.Init(ctx, kubeadm, kubelet); err != nil {
		t.Fatal(err)
	}
	// The pulls were real: cp-1's containerd has kubeadm's images.
	out, err := c.Nodes[0].Ctr(ctx, "images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{e2e.RealImage("kube-apiserver", Version), EtcdImage, PauseImage} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("containerd of %s did not pull %s: it has %s", c.Nodes[0].Name, want, out)
		}
	}
	for _, n := range c.Nodes[1:] {
		if err := c.Join(ctx, n, kubeadm, kubelet); err != nil {
			t.Fatal(err)
		}
		// kubeadm's own account of its etcd step: a learner, then promoted.
		log, _ := os.ReadFile(n.Log("kubeadm-join"))
		if !strings.Contains(string(log), "as learner") || !strings.Contains(string(log), "The learner was promoted") {
			t.Errorf("%s: kubeadm join did not add its etcd member as a learner and promote it (%s)", n.Name, n.Log("kubeadm-join"))
		}
	}
	hc, err := c.httpClient()
	if err != nil {
		t.Fatal(err)
	}
	api, err := kubeapi.Connect(c.AdminConf())
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := api.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != len(c.Nodes) {
		t.Errorf("%d Nodes registered, want %d", len(nodes.Items), len(c.Nodes))
	}
	for _, n := range c.Nodes {
		if err := Readyz(ctx, hc, n.Address+":6443"); err != nil {
			t.Errorf("%s: %v", n.Name, err)
		}
		t.Logf("node %s: %d processes, %d MiB resident", n.Name, len(n.PIDs()), n.RSS()>>20)
	}
	// kubelet registers each static pod's mirror pod once its Node is
	// there; the status follows within a sync period.
	var last error
	if err := waitFor(ctx, "every node's mirror pods running", 2*time.Minute, func() (bool, error) {
		last = c.MirrorPodsRunning(ctx)
		return last == nil, nil
	}); err != nil {
		t.Errorf("%v: %v", err, last)
	}
	// With the nodes' pod network, kubelet reports each Node Ready.
	if err := waitFor(ctx, "every Node Ready", 2*time.Minute, func() (bool, error) {
		nodes, err := api.ListNodes(ctx)
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					ready++
				}
			}
		}
		return ready == len(c.Nodes), nil
	}); err != nil {
		t.Error(err)
	}
	members, err := c.EtcdMembers(ctx, c.Nodes[2])
	if err != nil {
		t.Fatal(err)
	}
	voters := 0
	for _, m := range members {
		if !m.Learner {
			voters++
		}
	}
	if voters != len(c.Nodes) {
		t.Errorf("etcd members %+v: %d voting, want %d", members, voters, len(c.Nodes))
	}
	adopt(t, c)
	if t.Failed() {
		return
	}
	lines := scenarios(t, c)
	fmt.Println(strings.Join(lines, "\n"))
}

// componentPIDs maps each of StaticComponents running on node n to its
// PID (by /proc/<pid>/comm, among the node's processes).
func componentPIDs(n *Node) map[string]int {
	out := map[string]int{}
	for _, pid := range n.PIDs() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if err != nil {
			continue
		}
		comm := strings.TrimSpace(string(b))
		for _, c := range StaticComponents {
			if strings.HasPrefix(c, comm) { // comm is cut at 15 bytes
				out[c] = pid
			}
		}
	}
	return out
}

// adopt runs stratum-upgrade init --from-kubeadm --yes inside every node
// kubeadm made and returns how many control-plane processes changed pid
// (issue 38's adoption figure: it must be 0).
func adopt(t *testing.T, c *Cluster) int {
	t.Helper()
	bin, err := build.StratumUpgrade(false)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]map[string]int{}
	for _, n := range c.Nodes {
		before[n.Name] = componentPIDs(n)
		if len(before[n.Name]) != len(StaticComponents) {
			t.Fatalf("control-plane processes on %s before adoption: %v", n.Name, before[n.Name])
		}
	}
	for _, n := range c.Nodes {
		out, err := n.Command(bin, "init", "--from-kubeadm", "--yes").CombinedOutput()
		if err != nil {
			t.Fatalf("stratum-upgrade init --from-kubeadm --yes on %s: %v\n%s", n.Name, err, out)
		}
		if !strings.Contains(string(out), "imported node state of "+n.Name) {
			t.Errorf("stratum-upgrade init --from-kubeadm --yes on %s imported nothing:\n%s", n.Name, out)
		}
	}
	// A changed pod would be replaced by kubelet within its 11-15 s
	// backoff: look after that.
	time.Sleep(20 * time.Second)
	changed := 0
	for _, n := range c.Nodes {
		after := componentPIDs(n)
		for _, comp := range StaticComponents {
			if after[comp] != before[n.Name][comp] {
				changed++
				t.Errorf("%s on %s: pid %d before adoption, %d after", comp, n.Name, before[n.Name][comp], after[comp])
			}
		}
	}
	t.Logf("real cluster adoption: %d control-plane pid changes on %d nodes", changed, len(c.Nodes))
	return changed
}
