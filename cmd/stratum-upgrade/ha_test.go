package main

// Issue 14 through the command: three nodes of one etcd cluster, each
// driven by its own stratum-upgrade processes.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/haload"
	"github.com/ciq/stratum-upgrade/internal/harness/runbin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// bg is a stratum-upgrade started in the background.
type bg struct {
	cmd          *exec.Cmd
	out          runbin.Output
	done         chan struct{}
	code         int
	node, action string
}

// start runs stratum-upgrade args against c's node without waiting, with
// the test bed's transaction flags.
func (c *cliNode) start(args ...string) *bg {
	c.t.Helper()
	b := c.startFlags(append(slices.Clone(args), "--replace-timeout=30s", "--active-timeout=30s", "--stop-timeout=15s", "--soak=2s")...)
	b.action = strings.Join(args, " ")
	return b
}

// wait is ended that stops t when b still runs after timeout.
func (b *bg) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	code := b.ended(t, time.Now().Add(timeout))
	if code == -2 {
		t.FailNow()
	}
	return code
}

// needHA skips the three-node tests unless make ha runs them (STRATUM_HA=1).
func needHA(t *testing.T) {
	t.Helper()
	if os.Getenv("STRATUM_HA") == "" {
		t.Skip("three-node cluster: run make ha (STRATUM_HA=1)")
	}
}

// startHANodes brings up three test bed nodes of one etcd 3.6 cluster
// (opts' Mutate is replaced), inits each through the command, and writes
// the release that moves them to v1.34.5 stand-ins and etcd 3.7.
func startHANodes(t *testing.T, opts testbed.Options) (*testbed.Cluster, []*cliNode, string) {
	t.Helper()
	opts.Mutate = func(st *nodestate.NodeState) { st.Images[nodestate.Etcd] = "registry.k8s.io/etcd:3.6.16-0" }
	c := testbed.StartCluster(t, 3, opts)
	nodes := make([]*cliNode, len(c.Nodes))
	for i, n := range c.Nodes {
		nodes[i] = &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum")}
		nodes[i].want(cli.ExitOK, "init", "--state="+n.StateFile)
	}
	rel := filepath.Join(c.Nodes[0].Root, "release.yaml")
	writeRelease(t, rel, "v1.34.5", "registry.k8s.io/etcd:3.7.3-0", func(comp string) string { return testbed.ModeImage(comp, "v1.34.5", "") })
	return c, nodes, rel
}

// writeRelease writes to path the release of version with etcd's image
// and image(c) for each Kubernetes component c.
func writeRelease(t *testing.T, path, version, etcd string, image func(string) string) {
	t.Helper()
	doc := fmt.Sprintf("apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: %s\nimages:\n  etcd: %s\n", version, etcd)
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		doc += fmt.Sprintf("  %s: %s\n", comp, image(comp))
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rolloutView is the rollout keys as node n sees them (nil when etcd does
// not answer).
func rolloutView(n *testbed.Node) *cluster.View {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	co, err := cluster.Connect(ctx, cluster.Config{Local: etcddata.Endpoint(n.State), Node: n.State.NodeName})
	if err != nil {
		return nil
	}
	defer co.Close()
	v, _ := co.View(ctx)
	return v
}

// TestHACrashMidStepResumes starts run on all three nodes at once, kills
// the stratum-upgrade of the node that goes first mid-transaction, and its
// kubelet with every pod: the other two wait (neither begins while that
// transaction is open), its resume finishes it, and then the other two
// upgrade in turn. Every node ends on etcd 3.7, committed.
func TestHACrashMidStepResumes(t *testing.T) {
	needHA(t)
	c, nodes, rel := startHANodes(t, testbed.Options{})
	l := haload.Start(t, c)
	runs := make([]*bg, len(nodes))
	for i, n := range nodes {
		runs[i] = n.start("run", "--to="+rel)
	}

	// The first node to begin, once it is applying.
	var first int
	var txn string
	deadline := time.Now().Add(60 * time.Second)
	for first = -1; first < 0; {
		if time.Now().After(deadline) {
			t.Fatal("no node began applying within 60s")
		}
		if v := rolloutView(c.Nodes[0]); v != nil {
			for _, p := range v.Nodes {
				if p.Open() && p.Phase == "applying" {
					first, txn = int(p.Node[len("node-")]-'1'), p.Txn
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Killed once etcd's step is done (its done record rides with
	// kube-apiserver's mark, journaled before kube-apiserver is stopped):
	// the reboot then replaces the new etcd's process, which resume must
	// take as the reboot's doing, not as a crash loop (CI of stop 35 failed
	// so: the resumed command did not know of the reboot).
	crashed := nodes[first]
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(runs[first].out.String(), "kube-apiserver: stopping kube-apiserver"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's run never began its kube-apiserver step:\n%s", crashed.node.State.NodeName, runs[first].out.String())
		}
	}
	if err := runs[first].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	runs[first].wait(t, 10*time.Second)
	crashed.reboot()
	t.Logf("killed %s's stratum-upgrade in transaction %s, and its kubelet with every pod", crashed.node.State.NodeName, txn)

	// Longer than the lock's lease (15 s): the others still wait.
	time.Sleep(20 * time.Second)
	for i, n := range c.Nodes {
		if i == first {
			continue
		}
		v := rolloutView(n)
		if v == nil {
			continue
		}
		for _, p := range v.Nodes {
			if p.Node != crashed.node.State.NodeName && p.Txn != "" {
				t.Fatalf("%s began %s (%s) while %s's transaction %s was open", p.Node, p.Txn, p.Phase, crashed.node.State.NodeName, txn)
			}
		}
		select {
		case <-runs[i].done:
			t.Fatalf("%s's run ended while %s's transaction was open:\n%s", n.State.NodeName, crashed.node.State.NodeName, runs[i].out.String())
		default:
		}
	}
	out := crashed.want(cli.ExitOK, "resume")
	contains(t, "resume", out, "resuming transaction "+txn)
	for i, r := range runs {
		if i != first {
			if code := r.wait(t, 3*time.Minute); code != cli.ExitOK {
				t.Fatalf("%s: run exit %d", r.node, code)
			}
		}
	}
	l.Check(t, "one node's stratum-upgrade and kubelet killed mid-transaction, then resumed")
	v := rolloutView(c.Nodes[0])
	if v == nil || len(v.Nodes) != 3 || v.Halt != nil {
		t.Fatalf("rollout %+v: want three nodes, no halt", v)
	}
	for _, p := range v.Nodes {
		if p.Outcome != "committed" {
			t.Errorf("%s: %+v, want committed", p.Node, p)
		}
	}
	for _, n := range c.Nodes {
		if ver := etcdclient.Version(t, n); !strings.HasPrefix(ver, "3.7.") {
			t.Errorf("%s's etcd serves %s, want 3.7", n.State.NodeName, ver)
		}
	}
	status := nodes[(first+1)%3].want(cli.ExitOK, "status", "--cluster")
	contains(t, "status --cluster", status, "rollout lock: free", "node-1", "node-2", "node-3")
	var rep struct {
		Holder, Halt any
		Nodes        []struct {
			Node, Outcome string
			Open          bool
		}
	}
	js := nodes[first].want(cli.ExitOK, "status", "--cluster", "--output", "json")
	if err := json.Unmarshal([]byte(js), &rep); err != nil || rep.Holder != nil || rep.Halt != nil || len(rep.Nodes) != 3 {
		t.Fatalf("status --cluster --output json: %+v %v, want three nodes, no holder, no halt:\n%s", rep, err, js)
	}
	for _, p := range rep.Nodes {
		if p.Open || p.Outcome != "committed" {
			t.Errorf("status --cluster --output json: %+v, want committed", p)
		}
	}
	out = nodes[first].want(cli.ExitOK, "clear-halt")
	contains(t, "clear-halt", out, "nothing to do: the rollout is not halted")
}

// partition is a three-node cluster, node 3 in a network namespace of its
// own (testbed Options.NetNSNode), upgrading etcd 3.6 -> 3.7 on every node:
// node 3's run began first, the other two's once its transaction was
// open, and node 3 has just been cut off the moment it wrote its etcd 3.7
// manifest.
type partition struct {
	c       *testbed.Cluster
	nodes   []*cliNode
	runs    []*bg
	rel     string
	load    *haload.Load
	name    string // node-3
	txn     string // its transaction
	cutAt   time.Time
	sawFree bool // the rollout lock seen free while node 3 was cut off
}

const cut = 2 // nodes[cut] is node-3, the namespaced one

func startPartition(t *testing.T) *partition {
	t.Helper()
	needHA(t)
	if err := testbed.NetNSSupported(); err != nil {
		t.Skipf("a node cut off needs a network namespace: %v", err)
	}
	p := &partition{}
	p.c, p.nodes, p.rel = startHANodes(t, testbed.Options{NetNSNode: cut + 1})
	p.name = p.c.Nodes[cut].State.NodeName
	p.load = haload.Start(t, p.c)

	// The namespaced node goes first: once its transaction is open, the
	// other two start theirs and wait.
	p.runs = make([]*bg, len(p.nodes))
	p.runs[cut] = p.nodes[cut].start("run", "--to="+p.rel)
	deadline := time.Now().Add(60 * time.Second)
	for p.txn == "" {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not begin within 60s:\n%s", p.name, p.runs[cut].out.String())
		}
		if v := rolloutView(p.c.Nodes[0]); v != nil {
			for _, pr := range v.Nodes {
				if pr.Node == p.name && pr.Open() {
					p.txn = pr.Txn
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, n := range p.nodes {
		if i != cut {
			p.runs[i] = n.start("run", "--to="+p.rel)
		}
	}

	// Its etcd step: the manifest names the new etcd.
	etcdManifest := filepath.Join(p.c.Nodes[cut].ManifestDir, "etcd.yaml")
	for deadline = time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(etcdManifest); err == nil && strings.Contains(string(b), "etcd:3.7.3-0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach its etcd step within 2 minutes:\n%s", p.name, p.runs[cut].out.String())
		}
	}
	if err := p.c.Nodes[cut].Cut(); err != nil {
		t.Fatal(err)
	}
	p.cutAt = time.Now()
	t.Logf("%s cut off in its etcd step of transaction %s", p.name, p.txn)
	return p
}

// watch checks, while node 3 is cut off, until stop says so: neither other
// node begins a transaction and their runs keep waiting; node 3's
// transaction stays open; once its lease (15 s) has had time to expire,
// nobody holds the rollout lock at some point.
func (p *partition) watch(t *testing.T, stop func() bool) {
	t.Helper()
	for !stop() {
		for i, n := range p.c.Nodes {
			if i == cut {
				continue
			}
			v := rolloutView(n)
			if v == nil {
				continue
			}
			for _, pr := range v.Nodes {
				if pr.Node != p.name && pr.Txn != "" {
					t.Fatalf("%s began %s (%s) while %s was cut off with transaction %s open", pr.Node, pr.Txn, pr.Phase, p.name, p.txn)
				}
				if pr.Node == p.name && (!pr.Open() || pr.Txn != p.txn) {
					t.Fatalf("%s's progress while cut off: %+v, want %s open", p.name, pr, p.txn)
				}
			}
			if time.Since(p.cutAt) > 16*time.Second && v.Holder == nil {
				p.sawFree = true
			}
			select {
			case <-p.runs[i].done:
				t.Fatalf("%s's run ended while %s was cut off:\n%s", n.State.NodeName, p.name, p.runs[i].out.String())
			default:
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// finish checks the end of the rollout: every node committed on etcd
// 3.7, no halt, no acknowledged write lost.
func (p *partition) finish(t *testing.T, scenario string) {
	t.Helper()
	p.load.Check(t, scenario)
	v := rolloutView(p.c.Nodes[0])
	if v == nil || len(v.Nodes) != 3 || v.Halt != nil {
		t.Fatalf("rollout %+v: want three nodes, no halt", v)
	}
	for _, pr := range v.Nodes {
		if pr.Outcome != "committed" {
			t.Errorf("%s: %+v, want committed", pr.Node, pr)
		}
	}
	for _, n := range p.c.Nodes {
		if ver := etcdclient.Version(t, n); !strings.HasPrefix(ver, "3.7.") {
			t.Errorf("%s's etcd serves %s, want 3.7", n.State.NodeName, ver)
		}
	}
}

// TestHAPartitionedNodeResumes cuts the node in its etcd step off from the
// other two (node 3, in a network namespace of its own) until its own run
// gives up: its new etcd member cannot answer without its peers
// (--active-timeout, 30 s here), so the transaction turns to rolling back,
// and the rollback, which must know whether the other members still run
// 3.6 before it puts etcd 3.6 back, cannot read the member list: the run
// ends interrupted (exit 6) with the transaction open. All that time, well
// past its 15 s lease, neither other node begins and their runs wait.
// When the link returns, resume on node 3 finishes the rollback (exit 3,
// etcd 3.6 again on node 3) and halts the rollout with its reason: the
// other two runs end refused (exit 5). After clear-halt, run on all three
// completes the rollout: every node on etcd 3.7, committed.
func TestHAPartitionedNodeResumes(t *testing.T) {
	p := startPartition(t)
	p.watch(t, func() bool {
		select {
		case <-p.runs[cut].done:
			return true
		default:
			return time.Since(p.cutAt) > 3*time.Minute
		}
	})
	code := p.runs[cut].wait(t, time.Second)
	t.Logf("%s's run ended %s after it was cut off", p.name, time.Since(p.cutAt).Round(time.Second))
	if code != cli.ExitInterrupted {
		t.Fatalf("%s: run exit %d, want %d (the rollback paused while cut off)", p.name, code, cli.ExitInterrupted)
	}
	contains(t, p.name+"'s run", p.runs[cut].out.String(), "rolling back: etcd did not answer healthy",
		"the rollback of "+p.txn+" is paused", "cannot read the etcd member list", "the transaction is still open")
	if !p.sawFree {
		t.Errorf("%s's lease still held the rollout lock %s after it was cut off", p.name, time.Since(p.cutAt).Round(time.Second))
	}
	// Its phase in the keys is applying, or rolling-back: seen once,
	// although the node's write of it had timed out while cut off (not
	// pinned down; perhaps the proposal reached the cluster later).
	if v := rolloutView(p.c.Nodes[0]); v == nil || v.Halt != nil || len(v.Nodes) != 1 || !v.Nodes[0].Open() || v.Nodes[0].Txn != p.txn {
		t.Fatalf("rollout while %s is cut off, its run ended: %+v; want its transaction open, no halt", p.name, v)
	}

	if err := p.c.Nodes[cut].Restore(); err != nil {
		t.Fatal(err)
	}
	// Once its member has rejoined (a linearizable read through it
	// answers), as an operator would check with etcdctl first.
	deadline := time.Now().Add(time.Minute)
	for rolloutView(p.c.Nodes[cut]) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s's etcd has not rejoined a minute after the link returned", p.name)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s's link restored after %s; its member answers", p.name, time.Since(p.cutAt).Round(time.Second))
	out := p.nodes[cut].want(cli.ExitRolledBack, "resume")
	contains(t, "resume", out, "resuming transaction "+p.txn+" in phase rolling-back", "rolled back "+p.txn)
	if ver := etcdclient.Version(t, p.c.Nodes[cut]); !strings.HasPrefix(ver, "3.6.") {
		t.Errorf("%s's etcd serves %s after the rollback, want 3.6", p.name, ver)
	}
	v := rolloutView(p.c.Nodes[0])
	if v == nil || v.Halt == nil || v.Halt.Node != p.name || v.Halt.Txn != p.txn || v.Halt.Outcome != "rolled-back" || !strings.Contains(v.Halt.Reason, "etcd did not answer healthy") {
		t.Fatalf("rollout after resume: %+v (halt %+v); want halted by %s's rolled-back %s", v, v.Halt, p.name, p.txn)
	}
	for i, r := range p.runs {
		if i != cut {
			if code := r.wait(t, time.Minute); code != cli.ExitBusy {
				t.Fatalf("%s: run exit %d, want %d (halted)", r.node, code, cli.ExitBusy)
			}
			contains(t, r.node+"'s run", r.out.String(), "waiting for node "+p.name, "the rollout is halted: transaction "+p.txn+" on node "+p.name+" ended rolled-back")
		}
	}

	// The operator has looked: clear the halt and run the release again
	// on every node at once.
	out = p.nodes[0].want(cli.ExitOK, "clear-halt")
	contains(t, "clear-halt", out, p.name)
	for i, n := range p.nodes {
		p.runs[i] = n.start("run", "--to="+p.rel)
	}
	for _, r := range p.runs {
		if code := r.wait(t, 4*time.Minute); code != cli.ExitOK {
			t.Fatalf("%s: run exit %d after clear-halt", r.node, code)
		}
	}
	p.finish(t, "the node in its etcd step cut off until its run gave up, then resumed")
}

// TestHAPartitionRiddenOut cuts the node in its etcd step off for 20 s
// only: longer than its lease, so the rollout lock is free, yet neither
// other node begins. Its own run is still waiting for its new etcd member
// to answer (--active-timeout, 30 s here) when the link returns, so the
// run goes on and commits by itself; resume then has nothing to do. The
// other two upgrade in turn.
func TestHAPartitionRiddenOut(t *testing.T) {
	p := startPartition(t)
	const cutFor = 20 * time.Second
	p.watch(t, func() bool { return time.Since(p.cutAt) > cutFor-2*time.Second })
	if !p.sawFree {
		t.Errorf("%s's lease still held the rollout lock %s after it was cut off", p.name, time.Since(p.cutAt).Round(time.Second))
	}
	select {
	case <-p.runs[cut].done:
		t.Fatalf("%s's run ended while cut off:\n%s", p.name, p.runs[cut].out.String())
	default:
	}
	time.Sleep(time.Until(p.cutAt.Add(cutFor)))
	if err := p.c.Nodes[cut].Restore(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s's link restored after %s", p.name, time.Since(p.cutAt).Round(100*time.Millisecond))
	if code := p.runs[cut].wait(t, 3*time.Minute); code != cli.ExitOK {
		t.Fatalf("%s: run exit %d, want %d: it waits for its etcd longer than it was cut off", p.name, code, cli.ExitOK)
	}
	contains(t, p.name+"'s run", p.runs[cut].out.String(), "committed "+p.txn)
	out := p.nodes[cut].want(cli.ExitOK, "resume")
	contains(t, "resume", out, "nothing to do: no open transaction")
	for i, r := range p.runs {
		if i != cut {
			if code := r.wait(t, 3*time.Minute); code != cli.ExitOK {
				t.Fatalf("%s: run exit %d", r.node, code)
			}
			contains(t, r.node+"'s run", r.out.String(), "waiting for node "+p.name)
		}
	}
	p.finish(t, "the node in its etcd step cut off for 20 s")
}
