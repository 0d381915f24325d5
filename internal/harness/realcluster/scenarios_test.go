package realcluster

// Issue 38's scenarios, one after the other on the cluster kubeadm made
// and stratum-upgrade adopted, each under the writers and probes of
// load.go and ending with its figure line:
//
//   rollback         v1.36.3 -> v1.37.2 on cp-1 and cp-2; cp-3's new
//                    kube-scheduler refuses a flag its release sets, so
//                    cp-3 rolls back with etcd's downgrade; cp-2 and cp-1
//                    rollback --last; every member back on v1.36.3.
//   upgrade          v1.36.3 -> v1.37.2 started on the three nodes at
//                    once: they take turns through the lock, each commits.
//   node-dies        v1.36.3 -> v1.37.2 on the three at once; cp-2 crashes
//                    (its run, kubelet, containerd and every container
//                    SIGKILLed) in its etcd step, boots, and resume ends
//                    its transaction; the others wait their turn.
//   kubelet-restart  restart kube-apiserver on cp-1, its kubelet restarted
//                    in the middle of the step (k/k#140257).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

// runTimeout bounds one stratum-upgrade command of a scenario (a node
// waits for the others' turns through the lock first).
const runTimeout = 20 * time.Minute

// EnvScenarios picks the scenarios: "all" (rollback, upgrade,
// kubelet-restart, node-dies, about 40 minutes) or names separated by
// commas, run in that order. Unset: upgrade and kubelet-restart, the ones
// make check runs (CI's time allows no more: each node's upgrade takes
// 1.5-2.5 minutes on the real kubelet, docs/real-cluster.md).
const EnvScenarios = "STRATUM_REAL_CLUSTER_SCENARIOS"

// scenarioOrder is every scenario, in the order they run.
// kubelet-restart is last: a node whose last committed transaction is a
// restart has nothing for rollback --last to undo (it says so), so the
// way back to Version cannot follow it.
var scenarioOrder = []string{"rollback", "upgrade", "node-dies", "kubelet-restart"}

// pickScenarios is EnvScenarios' choice.
func pickScenarios(t *testing.T) map[string]bool {
	v := os.Getenv(EnvScenarios)
	switch v {
	case "":
		return map[string]bool{"upgrade": true, "kubelet-restart": true}
	case "all":
		v = strings.Join(scenarioOrder, ",")
	}
	out := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		if !slices.Contains(scenarioOrder, s) {
			t.Fatalf("%s=%q: no scenario %q (known: all, %s)", EnvScenarios, v, s, strings.Join(scenarioOrder, ", "))
		}
		out[s] = true
	}
	return out
}

// release is a release file of To for node n; scheduler, when set,
// replaces kube-scheduler's image.
func release(t *testing.T, c *Cluster, name, scheduler string) string {
	t.Helper()
	if scheduler == "" {
		scheduler = "registry.k8s.io/kube-scheduler:" + To
	}
	text := fmt.Sprintf(`apiVersion: stratum.ciq.com/v1
kind: Release
kubernetesVersion: %s
images:
  etcd: %s
  kube-apiserver: registry.k8s.io/kube-apiserver:%s
  kube-controller-manager: registry.k8s.io/kube-controller-manager:%s
  kube-scheduler: %s
`, To, EtcdImageTo, To, To, scheduler)
	p := filepath.Join(c.Dir, name+".yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// scenarioRun runs setup (nil: none), then one scenario between its load's
// start and stop (setup is not measured), logs
// its figure line and checks the targets every scenario has (at most one
// member down, nothing acknowledged lost) and, when minAny > 0, the API's
// availability through any node.
func scenarioRun(t *testing.T, c *Cluster, name string, minAny float64, lines *[]string, setup, body func(t *testing.T)) bool {
	return t.Run(name, func(t *testing.T) {
		if setup != nil {
			setup(t)
		}
		l, err := c.StartLoad(name)
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		stopped := false
		defer func() {
			if !stopped {
				_, _ = l.Stop(context.Background())
			}
		}()
		body(t)
		took := time.Since(began)
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		f, err := l.Stop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		line := f.Line(name, took)
		*lines = append(*lines, line)
		t.Log(line)
		if f.MaxDown > 1 {
			t.Errorf("%d etcd members down at once (%v), want at most 1", f.MaxDown, f.DownAt)
		}
		if len(f.Lost) > 0 {
			t.Errorf("%d acknowledged writes lost: %v", len(f.Lost), f.Lost[:min(len(f.Lost), 10)])
		}
		if minAny > 0 && f.AnyNode < minAny {
			t.Errorf("API answered by some node in %.2f%% of the probes, want at least %.2f%%", 100*f.AnyNode, 100*minAny)
		}
	})
}

// scenarios runs the scenarios EnvScenarios picks, in order, on c adopted
// at Version, and returns their figure lines. A scenario that needs the
// cluster at Version when it is at To is preceded by rollback --last on
// every node (not a scenario: no figure line).
func scenarios(t *testing.T, c *Cluster) []string {
	want := pickScenarios(t)
	rel := release(t, c, "release-"+To, "")
	refusing := release(t, c, "release-"+To+"-refusing-scheduler", RefusingScheduler)
	var lines []string
	cp1, cp2, cp3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	at := Version
	back := func(t *testing.T) {
		if at == Version {
			return
		}
		t.Logf("every node back to %s first (rollback --last)", Version)
		c.everyNode(t, cli.ExitOK, "rollback", "--last")
		c.checkVersions(t, Version, EtcdImage)
		at = Version
	}

	if want["rollback"] && !scenarioRun(t, c, "rollback", 0.999, &lines, back, func(t *testing.T) {
		a, b := stratum(t, cp1, "run", "--to", rel), stratum(t, cp2, "run", "--to", rel)
		a.ok(t, runTimeout, cli.ExitOK)
		b.ok(t, runTimeout, cli.ExitOK)
		// kube-scheduler exits at once, every time kubelet starts it: a
		// shorter wait for it to answer than the default 3 minutes. The
		// wait for kubelet to replace it keeps its default: etcd's step
		// needs it (kubelet's mirror-pod call holds the new etcd up to
		// 70 s here, real-cluster.md), and inside a PID namespace, where
		// exec events cannot be subscribed to (cn_proc serves the initial
		// one only), the scan polls and may miss a process that lives a
		// few milliseconds: that wait may be the one that gives up.
		stratum(t, cp3, "run", "--to", refusing, "--active-timeout", "60s").ok(t, runTimeout, cli.ExitRolledBack)
		a, b = stratum(t, cp2, "rollback", "--last"), stratum(t, cp1, "rollback", "--last")
		a.ok(t, runTimeout, cli.ExitOK)
		b.ok(t, runTimeout, cli.ExitOK)
		stratum(t, cp1, "clear-halt").ok(t, time.Minute, cli.ExitOK)
		c.checkVersions(t, Version, EtcdImage)
	}) {
		return lines
	}

	if want["upgrade"] && !scenarioRun(t, c, "upgrade", 0.999, &lines, back, func(t *testing.T) {
		c.everyNode(t, cli.ExitOK, "run", "--to", rel)
		at = To
		c.checkVersions(t, To, EtcdImageTo)
		c.checkRecorded(t)
	}) {
		return lines
	}

	if want["node-dies"] && !scenarioRun(t, c, "node-dies", 0.999, &lines, back, func(t *testing.T) {
		var runs []*stratumRun
		for _, n := range c.Nodes {
			runs = append(runs, stratum(t, n, "run", "--to", rel))
		}
		runs[1].await(t, runTimeout, "etcd's step", inStep("etcd"))
		runs[1].kill(t)
		if err := cp2.Crash(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s crashed in its etcd step", cp2.Name)
		time.Sleep(5 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cp2.Boot(ctx); err != nil {
			t.Fatal(err)
		}
		stratum(t, cp2, "resume").ok(t, runTimeout, cli.ExitOK)
		for _, r := range []*stratumRun{runs[0], runs[2]} {
			r.ok(t, runTimeout, cli.ExitOK)
		}
		at = To
		c.checkVersions(t, To, EtcdImageTo)
	}) {
		return lines
	}

	if want["kubelet-restart"] && !scenarioRun(t, c, "kubelet-restart", 0, &lines, nil, func(t *testing.T) {
		r := stratum(t, cp1, "restart", "kube-apiserver")
		r.await(t, runTimeout, "kube-apiserver's step", inStep("kube-apiserver"))
		if err := cp1.RestartKubelet(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: kubelet restarted in the kube-apiserver step", cp1.Name)
		// It commits, or rolls back cleanly: either way every
		// component answers again.
		if code := r.wait(t, runTimeout); code != cli.ExitOK && code != cli.ExitRolledBack {
			t.Fatalf("%s: restart kube-apiserver: exit %d, want committed or rolled back:\n%s", cp1.Name, code, tail(r.log, 40))
		}
		c.checkVersions(t, at, map[string]string{Version: EtcdImage, To: EtcdImageTo}[at])
		stratum(t, cp1, "status").ok(t, time.Minute, cli.ExitOK)
	}) {
		return lines
	}

	return lines
}

// everyNode runs stratum-upgrade args on every node at the same moment
// (they take turns through the rollout lock) and wants exit code from
// each.
func (c *Cluster) everyNode(t *testing.T, code int, args ...string) {
	t.Helper()
	var runs []*stratumRun
	for _, n := range c.Nodes {
		runs = append(runs, stratum(t, n, args...))
	}
	for _, r := range runs {
		r.ok(t, runTimeout, code)
	}
}

var imageLine = regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`)

// checkVersions checks that every node's manifests name the control plane
// of version and etcd's image etcd, and that every etcd member serves that
// etcd, with no downgrade left in progress.
func (c *Cluster) checkVersions(t *testing.T, version, etcd string) {
	t.Helper()
	for _, n := range c.Nodes {
		for _, comp := range StaticComponents {
			b, err := os.ReadFile(n.HostPath("/etc/kubernetes/manifests/" + comp + ".yaml"))
			if err != nil {
				t.Errorf("%s: %v", n.Name, err)
				continue
			}
			want := "registry.k8s.io/" + comp + ":" + version
			if comp == "etcd" {
				want = etcd
			}
			if m := imageLine.FindSubmatch(b); m == nil || string(m[1]) != want {
				t.Errorf("%s: %s's manifest runs %q, want %s", n.Name, comp, m, want)
			}
		}
	}
	wantEtcd := strings.TrimSuffix(strings.TrimPrefix(etcd, "registry.k8s.io/etcd:"), "-0")
	var got map[string]string
	if err := waitFor(context.Background(), "every etcd member to serve "+wantEtcd, 2*time.Minute, func() (bool, error) {
		got = c.etcdVersions()
		for _, n := range c.Nodes {
			if got[n.Name] != wantEtcd {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("%v: %v", err, got)
	}
}

// etcdVersions is each member's server and cluster version (GET /version).
func (c *Cluster) etcdVersions() map[string]string {
	tlsCfg, err := c.etcdTLS()
	if err != nil {
		return nil
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	out := map[string]string{}
	for _, n := range c.Nodes {
		resp, err := hc.Get("https://" + n.Address + ":2379/version")
		if err != nil {
			continue
		}
		var v struct {
			Server  string `json:"etcdserver"`
			Cluster string `json:"etcdcluster"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		out[n.Name] = v.Server
		out["cluster@"+n.Name] = v.Cluster
	}
	return out
}

// checkRecorded checks what an upgrade leaves in the API server and what
// kubeadm makes of it: each Node's TransactionCommitted Event,
// kubeadm-config's ClusterConfiguration at To, and the real kubeadm of To
// planning nothing (the control plane is not behind).
func (c *Cluster) checkRecorded(t *testing.T) {
	t.Helper()
	hc, host, err := c.adminClient(0)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, v any) {
		resp, err := hc.Get(host + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.Nodes {
		var events struct {
			Items []struct {
				Reason string `json:"reason"`
			} `json:"items"`
		}
		get("/api/v1/events?fieldSelector=involvedObject.kind%3DNode,involvedObject.name%3D"+n.Name, &events)
		var reasons []string
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason)
		}
		if !slices.Contains(reasons, "TransactionCommitted") {
			t.Errorf("Node %s's Events: %v, want TransactionCommitted among them", n.Name, reasons)
		}
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	get("/api/v1/namespaces/kube-system/configmaps/kubeadm-config", &cm)
	if !strings.Contains(cm.Data["ClusterConfiguration"], "kubernetesVersion: "+To) {
		t.Errorf("kubeadm-config's ClusterConfiguration does not name %s:\n%s", To, cm.Data["ClusterConfiguration"])
	}
	kubeadm, err := kubebuild.Kubeadm(context.Background(), To)
	if err != nil {
		t.Fatal(err)
	}
	// CoreDNS is not installed (its add-on phase is skipped), which
	// kubeadm's CoreDNS checks refuse. The version given is what an
	// operator offline gives: kubeadm then does not ask dl.k8s.io (10 s
	// each of two times here) for the latest release.
	out, err := c.Nodes[0].Command(kubeadm, "upgrade", "plan", To, "--v=1", "--ignore-preflight-errors=CoreDNSUnsupportedPlugins,CoreDNSMigration").CombinedOutput()
	t.Logf("kubeadm %s upgrade plan on %s:\n%s", To, c.Nodes[0].Name, lastLines(string(out), 15))
	if err != nil || !strings.Contains(string(out), "up-to-date") {
		t.Errorf("kubeadm %s upgrade plan: %v; want it up-to-date:\n%s", To, err, out)
	}
}
