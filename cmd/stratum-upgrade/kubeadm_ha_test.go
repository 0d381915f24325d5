package main

// Issue 26's kubeadm-shaped cluster (make ha): three nodes running what the
// real kubeadm writes for a stacked three-node control plane, adopted with
// init --from-kubeadm, each with the real kube-apiserver, upgraded to the
// next release by their own stratum-upgrade processes.

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/haload"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeadmcluster"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// The release kubeadm made the cluster with, and the next one it is
// upgraded to (etcd 3.6 -> 3.7 with it: the last member to move is etcd's
// point of no return).
const (
	kubeadmFrom = "v1.36.3"
	kubeadmTo   = "v1.37.2"
)

// kubeadmRunFlags are the transaction flags of the kubeadm-shaped tests:
// the real kube-apiserver takes longer than the stand-in to answer on a
// busy machine. The pre-flight check that etcd 3.6 is at least 3.6.11
// before 3.7 goes by the image tag, kubeadm's 3.6.8, which the test bed
// runs with its etcd 3.6.16 (it has no 3.6.8): let through, as an
// operator who checked the running version would.
var kubeadmRunFlags = []string{"--replace-timeout=60s", "--active-timeout=90s", "--stop-timeout=30s", "--soak=2s",
	"--ignore-preflight-errors=EtcdMinimumPatch"}

// kubeadmHA is a running kubeadm-shaped cluster, adopted.
type kubeadmHA struct {
	c       *kubeadmcluster.Cluster
	nodes   []*cliNode
	rel     string // the next release
	members *haload.Members
	load    *haload.Load
}

// startKubeadmHA brings up the kubeadm-shaped cluster (skipping t without
// make ha, or when the real kube-apiserver is not built), adopts every
// node with `init --from-kubeadm --kubeadm-config ... --yes` (no component
// restarted), writes the next release, and starts the member probe and the
// client.
func startKubeadmHA(t *testing.T) *kubeadmHA {
	t.Helper()
	needHA(t)
	k := &kubeadmHA{c: kubeadmcluster.Start(t, kubeadmFrom)}
	for i, n := range k.c.Nodes {
		c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
		out := c.want(cli.ExitOK, "init", "--from-kubeadm", "--kubeadm-config="+k.c.Configs[i], "--yes")
		if strings.Contains(out, "WOULD RESTART") {
			t.Fatalf("%s: adopting kubeadm's manifests would restart a component:\n%s", n.State.NodeName, out)
		}
		k.nodes = append(k.nodes, c)
	}
	etcd, err := kubeadmcluster.EtcdImage(kubeadmTo)
	if err != nil {
		t.Fatal(err)
	}
	k.rel = filepath.Join(k.c.Nodes[0].Root, "next.yaml")
	writeRelease(t, k.rel, kubeadmTo, etcd, func(comp string) string { return testbed.Repos[comp] + ":" + kubeadmTo })
	k.members = haload.StartMembers(t, k.c.Cluster)
	k.load = haload.Start(t, k.c.Cluster)
	return k
}

// run starts `run --to` the next release on node i (0-based) with
// kubeadmRunFlags, then extra flags.
func (k *kubeadmHA) run(i int, extra ...string) *bg {
	return k.nodes[i].startFlags(append(append([]string{"run", "--to=" + k.rel}, kubeadmRunFlags...), extra...)...)
}

// startFlags is start with args as given: no transaction flags added.
func (c *cliNode) startFlags(args ...string) *bg {
	c.t.Helper()
	argv := append([]string{"--manifest-dir=" + c.node.ManifestDir, "--state-dir=" + c.stateDir, "--proc-scope=" + strconv.Itoa(c.node.KubeletPID)}, args...)
	b := &bg{cmd: c.node.Command("stratum-upgrade", argv...), done: make(chan struct{}), node: c.node.State.NodeName, action: strings.Join(args[:2], " ")}
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
	if err := b.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		err := b.cmd.Wait()
		b.code = b.cmd.ProcessState.ExitCode()
		if err != nil && b.code == 0 {
			b.code = -1
		}
		close(b.done)
	}()
	c.t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// ended waits for b until deadline without failing t: its exit code, or
// -2 (and b killed) when it still runs then.
func (b *bg) ended(t *testing.T, deadline time.Time) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(time.Until(deadline)):
		b.cmd.Process.Kill()
		<-b.done
		t.Errorf("%s: stratum-upgrade %s still ran at the deadline: killed\n%s", b.node, b.action, b.out.String())
		return -2
	}
	t.Logf("%s: stratum-upgrade %s: exit %d\n%s", b.node, b.action, b.code, b.out.String())
	return b.code
}

// finish stops the member probe and the client and logs the figure line
// of scenario; it fails t when more than one member was ever down, when
// no member was seen down (the probe did not watch), when an
// acknowledged write is gone, or when the API servers answered less than
// 99.9%.
func (k *kubeadmHA) finish(t *testing.T, scenario string) {
	t.Helper()
	m := k.members.Stop()
	f := k.load.Result(t)
	t.Logf("%s: max members down at once %d, writes acked %d/%d, %d lost, API %.2f%%", scenario, m.MaxDown, f.Acked, f.Writes, f.Lost, f.API())
	t.Logf("member probe: %s", m)
	switch {
	case m.MaxDown > 1:
		t.Errorf("%d etcd members of 3 were down at once (%s at %s): quorum lost", m.MaxDown, strings.Join(m.Worst, ", "), m.WorstAt.Format("15:04:05.000"))
	case m.MaxDown == 0:
		t.Errorf("the member probe never saw a member down in %d samples, though etcd was replaced", m.Samples)
	}
	// A member is down for seconds while its etcd is replaced; a probe
	// that stalled longer than a second could miss two such overlapping.
	if m.MaxGap > time.Second {
		t.Errorf("the member probe did not sample for %s (machine overloaded?): it may have missed members down", m.MaxGap)
	}
	if f.Lost > 0 {
		t.Errorf("%d of %d acknowledged writes are gone", f.Lost, f.Acked)
	}
	if f.API() < 99.9 {
		t.Errorf("API server health checks answered %.3f%%, want >= 99.9%%", f.API())
	}
}

// memberVersions is each member's etcd version as it answers its status
// ("" for a member that does not answer within 5 s), by node.
func (k *kubeadmHA) memberVersions(t *testing.T) map[string]string {
	t.Helper()
	tlsCfg, err := k.c.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: k.c.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	out := map[string]string{}
	for i, ep := range k.c.Endpoints() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err == nil {
			out[k.c.Nodes[i].State.NodeName] = st.Version
		} else {
			out[k.c.Nodes[i].State.NodeName] = ""
		}
	}
	return out
}

// apiVersion is the gitVersion node n's kube-apiserver reports.
func apiVersion(t *testing.T, n *testbed.Node) string {
	t.Helper()
	hc, err := n.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "https://" + n.State.AdvertiseAddress + ":" + strconv.Itoa(n.State.Ports.APIServer) + "/version"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Errorf("%s's kube-apiserver: %v", n.State.NodeName, err)
		return ""
	}
	defer resp.Body.Close()
	var v struct{ GitVersion string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Errorf("%s's kube-apiserver /version: %v", n.State.NodeName, err)
	}
	return v.GitVersion
}

// TestHAKubeadmRolloutAtOnce is issue 26's kubeadm-shaped cluster: the
// manifests the real kubeadm writes for a stacked three-node cluster (the
// init node keeping its single-entry --initial-cluster), adopted with
// init --from-kubeadm, the real kube-apiserver on each; `run --to` the
// next release (v1.37.2, etcd 3.7) started on all three at once. No more
// than one etcd member is ever down (the probe asks every member every
// 100 ms), every node commits, every member runs etcd 3.7 and every
// kube-apiserver v1.37.2, no acknowledged write is lost and the API
// servers answer throughout.
func TestHAKubeadmRolloutAtOnce(t *testing.T) {
	k := startKubeadmHA(t)
	runs := make([]*bg, len(k.nodes))
	for i := range k.nodes {
		runs[i] = k.run(i)
	}
	deadline := time.Now().Add(10 * time.Minute)
	codes := make([]int, len(runs))
	for i, r := range runs {
		codes[i] = r.ended(t, deadline)
	}
	k.finish(t, "kubeadm-shaped cluster")
	for i, code := range codes {
		if code != cli.ExitOK {
			t.Errorf("%s: run exit %d, want %d", runs[i].node, code, cli.ExitOK)
		}
	}
	for n, v := range k.memberVersions(t) {
		if !strings.HasPrefix(v, "3.7.") {
			t.Errorf("%s's etcd member answers %q, want 3.7", n, v)
		}
	}
	for _, n := range k.c.Nodes {
		if v := apiVersion(t, n); v != kubeadmTo {
			t.Errorf("%s's kube-apiserver is %q, want %s", n.State.NodeName, v, kubeadmTo)
		}
	}
	// Every node, the init node too, took the rollout lock and recorded
	// its transaction, and they took turns.
	v := rolloutView(k.c.Nodes[0])
	if v == nil {
		t.Fatal("the rollout keys cannot be read")
	}
	if v.Halt != nil {
		t.Errorf("the rollout is halted: %+v", *v.Halt)
	}
	spans := map[string]cluster.Progress{}
	for _, p := range v.Nodes {
		spans[p.Node] = p
		if p.Outcome != "committed" {
			t.Errorf("%s: %+v, want committed", p.Node, p)
		}
	}
	for _, n := range k.c.Nodes {
		if _, ok := spans[n.State.NodeName]; !ok {
			t.Errorf("%s has no transaction in the rollout's keys: it began none, or began one without the rollout lock (as a single-member node does)", n.State.NodeName)
		}
	}
	ps := slices.SortedFunc(maps.Values(spans), func(a, b cluster.Progress) int { return a.Started.Compare(b.Started) })
	for i := 1; i < len(ps); i++ {
		if ps[i].Started.Before(ps[i-1].Updated) {
			t.Errorf("%s began at %s, before %s's transaction ended at %s", ps[i].Node, ps[i].Started.Format(time.StampMilli), ps[i-1].Node, ps[i-1].Updated.Format(time.StampMilli))
		}
	}
}

// TestHAKubeadmLastEtcdFailsToStart: on the same cluster, cp-1 and then
// cp-2 upgrade; on cp-3, the last member still on etcd 3.6, the release's
// etcd image is missing (kubelet cannot pull it: ErrImageNeverPull): its
// new etcd never ran, so the cluster version never moved and the old etcd
// is written back.
// The run ends rolled back (exit 3) and halts the rollout; cp-3's member
// answers on etcd 3.6 again, every member answers, no more than one was
// ever down, and no acknowledged write is lost.
func TestHAKubeadmLastEtcdFailsToStart(t *testing.T) {
	k := startKubeadmHA(t)
	last := k.c.Nodes[2]
	etcd, err := kubeadmcluster.EtcdImage(kubeadmTo)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubeadmcluster.UnmapImage(last, etcd); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	var codes []int
	for i := range k.nodes[:2] {
		code := k.run(i).ended(t, deadline)
		codes = append(codes, code)
		if code != cli.ExitOK {
			break
		}
	}
	var lastRun *bg
	if len(codes) == 2 && codes[1] == cli.ExitOK {
		// kubelet never starts the new etcd: a shorter wait for it. The
		// active timeout stays: after the rollback kube-apiserver,
		// which never changed, answers its /livez (which checks etcd)
		// only once its etcd client has reconnected, seen to take more
		// than 20 s.
		lastRun = k.run(2, "--replace-timeout=20s")
		codes = append(codes, lastRun.ended(t, deadline))
	}
	// The old etcd back: the member answers again once it rejoined.
	var versions map[string]string
	for until := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		versions = k.memberVersions(t)
		if versions[last.State.NodeName] != "" || time.Now().After(until) {
			break
		}
	}
	k.finish(t, "kubeadm-shaped cluster, the last member's new etcd fails to start")
	if len(codes) < 3 {
		t.Fatalf("the first two nodes did not upgrade: exits %v", codes)
	}
	if codes[2] != cli.ExitRolledBack {
		t.Errorf("%s: run exit %d, want %d (rolled back: its new etcd never ran)", lastRun.node, codes[2], cli.ExitRolledBack)
	}
	for i, n := range k.c.Nodes {
		want := "3.7."
		if i == 2 {
			want = "3.6."
		}
		if v := versions[n.State.NodeName]; !strings.HasPrefix(v, want) {
			t.Errorf("%s's etcd member answers %q, want %s*", n.State.NodeName, v, want)
		}
	}
	if b := readFile(t, filepath.Join(last.ManifestDir, "etcd.yaml")); !strings.Contains(b, "image: registry.k8s.io/etcd:3.6.") {
		t.Errorf("%s's etcd manifest is not the old etcd's:\n%s", last.State.NodeName, b)
	}
	if v := rolloutView(k.c.Nodes[0]); v == nil || v.Halt == nil || v.Halt.Node != last.State.NodeName || v.Halt.Outcome != "rolled-back" {
		t.Errorf("rollout %+v: want halted by %s, rolled back", v, last.State.NodeName)
	}
}
