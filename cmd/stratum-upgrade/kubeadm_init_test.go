package main

import (
	"bytes"
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/converge"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// haltFrom ends a transaction of node n rolled back: the rollout halts.
func haltFrom(t *testing.T, n *testbed.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	co, err := cluster.Connect(ctx, cluster.Config{Local: etcddata.Endpoint(n.State), Node: n.State.NodeName, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	h, err := co.Acquire(ctx, "upgrade", "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if err := h.Begin(ctx, cluster.Progress{Txn: "t-" + n.State.NodeName, Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	if err := h.End(ctx, "rolled-back", "a release failed on "+n.State.NodeName); err != nil {
		t.Fatal(err)
	}
}

// TestHAKubeadmInitNode: node-1 is kubeadm's init node, whose etcd
// manifest keeps its single-entry --initial-cluster after the other two
// members joined, and so does the node state adopted from it. Through the
// command, it is one of three: status --cluster shows the rollout, run is
// refused by another node's halt (exit 5), and clear-halt clears it. (They
// refused, or ran as a single member, when the node state decided.)
func TestHAKubeadmInitNode(t *testing.T) {
	if os.Getenv("STRATUM_HA") == "" {
		t.Skip("three-node cluster: run make ha (STRATUM_HA=1)")
	}
	c := testbed.StartCluster(t, 3, testbed.Options{})
	n := c.Nodes[0]
	st := n.State.Clone()
	st.Etcd.InitialCluster = st.Etcd.MemberName + "=https://" + net.JoinHostPort(st.AdvertiseAddress, strconv.Itoa(st.Ports.EtcdPeer))
	state := filepath.Join(n.Root, "kubeadm-init.yaml")
	if err := st.Save(state); err != nil {
		t.Fatal(err)
	}
	node := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "metrics.prom")}
	node.want(cli.ExitOK, "init", "--state="+state)
	haltFrom(t, c.Nodes[1])

	if out := node.want(cli.ExitOK, "status", "--cluster"); !strings.Contains(out, "HALTED: transaction t-node-2 on node-2") {
		t.Errorf("status --cluster on the init node does not show node-2's halt:\n%s", out)
	}
	rel := node.release("up.yaml", "v1.34.5", testbed.ModeImage(nodestate.Scheduler, "v1.34.5", ""))
	before := converge.Manifests(t, n.ManifestDir)
	if code, _, errOut := node.su("run", "--to="+rel); code != cli.ExitBusy || !strings.Contains(errOut, "the rollout is halted") {
		t.Errorf("run on the init node with the rollout halted: exit %d, want %d, refused by the halt:\n%s", code, cli.ExitBusy, errOut)
	}
	if after := converge.Manifests(t, n.ManifestDir); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Error("a run refused by the halt changed the manifests")
	}
	if out := node.want(cli.ExitOK, "clear-halt"); !strings.Contains(out, "cleared the halt of transaction t-node-2") {
		t.Errorf("clear-halt on the init node:\n%s", out)
	}
}
