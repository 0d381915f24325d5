package main

// Issue 14 through the command: three nodes of one etcd cluster, each
// driven by its own stratum-upgrade processes.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/haload"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// bg is a stratum-upgrade started in the background.
type bg struct {
	cmd          *exec.Cmd
	out          bytes.Buffer
	done         chan struct{}
	code         int
	node, action string
}

// start runs stratum-upgrade args against c's node without waiting.
func (c *cliNode) start(args ...string) *bg {
	c.t.Helper()
	argv := append([]string{
		"--manifest-dir=" + c.node.ManifestDir, "--state-dir=" + c.stateDir, "--proc-scope=" + strconv.Itoa(c.node.KubeletPID),
	}, args...)
	argv = append(argv, "--replace-timeout=30s", "--active-timeout=30s", "--stop-timeout=15s", "--soak=2s")
	b := &bg{cmd: exec.Command("stratum-upgrade", argv...), done: make(chan struct{}), node: c.node.State.NodeName, action: strings.Join(args, " ")}
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

func (b *bg) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(timeout):
		t.Fatalf("%s: stratum-upgrade %s still runs after %s:\n%s", b.node, b.action, timeout, b.out.String())
	}
	t.Logf("%s: stratum-upgrade %s: exit %d\n%s", b.node, b.action, b.code, b.out.String())
	return b.code
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
	if os.Getenv("STRATUM_HA") == "" {
		t.Skip("three-node cluster: run make ha (STRATUM_HA=1)")
	}
	c := testbed.StartCluster(t, 3, testbed.Options{Mutate: func(st *nodestate.NodeState) { st.Images[nodestate.Etcd] = "registry.k8s.io/etcd:3.6.16-0" }})
	nodes := make([]*cliNode, len(c.Nodes))
	for i, n := range c.Nodes {
		nodes[i] = &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum")}
		nodes[i].want(cli.ExitOK, "init", "--state="+n.StateFile)
	}
	rel := filepath.Join(c.Nodes[0].Root, "release.yaml")
	doc := "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\nimages:\n  etcd: registry.k8s.io/etcd:3.7.3-0\n"
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		doc += fmt.Sprintf("  %s: %s\n", comp, testbed.ModeImage(comp, "v1.34.5", ""))
	}
	if err := os.WriteFile(rel, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
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
	crashed := nodes[first]
	if err := runs[first].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	runs[first].wait(t, 10*time.Second)
	if _, err := crashed.node.Reboot(0); err != nil {
		t.Fatal(err)
	}
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
	out = nodes[first].want(cli.ExitOK, "clear-halt")
	contains(t, "clear-halt", out, "nothing to do: the rollout is not halted")
}
