package testbed

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/nodestate"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClusterForms brings up three nodes whose etcds form one cluster:
// every member started under its own name and address, a write through
// node 1 read through node 3, and, with node 3 stopped, writes through the
// other two still committed (quorum 2 of 3).
func TestClusterForms(t *testing.T) {
	start := time.Now()
	var mutated []string // MutateNode's i and the node it was handed
	c := StartCluster(t, 3, Options{MutateNode: func(i int, st *nodestate.NodeState) {
		mutated = append(mutated, fmt.Sprintf("%d:%s", i, st.NodeName))
	}})
	t.Logf("three nodes active after %s", time.Since(start).Round(time.Millisecond))
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(c.Nodes))
	}
	if want := []string{"1:node-1", "2:node-2", "3:node-3"}; !slices.Equal(mutated, want) {
		t.Errorf("MutateNode saw %q, want %q", mutated, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	for i, n := range c.Nodes {
		name, addr := fmt.Sprintf("node-%d", i+1), fmt.Sprintf("127.0.0.%d", 11+i)
		if n.State.NodeName != name || n.State.Etcd.MemberName != name || n.State.AdvertiseAddress != addr {
			t.Errorf("node %d: name %q, member %q, address %q; want %s at %s", i+1, n.State.NodeName, n.State.Etcd.MemberName, n.State.AdvertiseAddress, name, addr)
		}
		if n.State.Etcd.InitialCluster != c.Nodes[0].State.Etcd.InitialCluster || n.State.Etcd.InitialClusterState != "new" {
			t.Errorf("node %d: initial cluster %q (%s), node 1 has %q", i+1, n.State.Etcd.InitialCluster, n.State.Etcd.InitialClusterState, c.Nodes[0].State.Etcd.InitialCluster)
		}
		if err := n.WaitActive(ctx, 5*time.Second); err != nil {
			t.Errorf("node %d: %v", i+1, err)
		}
	}

	// The member list through node 1: three started members, each with
	// its name and its peer URL on its own address.
	first := etcdclient.New(t, c.Nodes[0])
	ml, err := first.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, m := range ml.Members {
		got = append(got, m.Name+" "+strings.Join(m.PeerURLs, ","))
	}
	for _, n := range c.Nodes {
		want = append(want, n.State.NodeName+" "+EtcdURLAt(n.State.AdvertiseAddress, n.State.Ports.EtcdPeer))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("members %q, want %q (a member without a name has not started)", got, want)
	}

	// A write through node 1 is read through node 3, and a client of
	// every advertised endpoint with the cluster's TLS reaches each.
	if _, err := first.Put(ctx, "/stratum/ha", "from-node-1"); err != nil {
		t.Fatal(err)
	}
	if v := etcdclient.Get(t, c.Nodes[2], "/stratum/ha"); v != "from-node-1" {
		t.Fatalf("node 3 reads %q, want from-node-1", v)
	}
	tlsCfg, err := c.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	all, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	for _, ep := range c.Endpoints() {
		if _, err := all.Status(ctx, ep); err != nil {
			t.Errorf("status of %s: %v", ep, err)
		}
	}

	// Node 3 down, kubelet and pods: nodes 1 and 2 keep quorum.
	if err := c.Nodes[2].Stop(); err != nil {
		t.Fatal(err)
	}
	if left, err := c.Nodes[2].Leftovers(); err != nil || len(left) > 0 {
		t.Fatalf("node 3 left %v (%v)", left, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = all.Status(sctx, c.Endpoints()[2])
	scancel()
	if err == nil {
		t.Fatal("node 3's etcd still answers after its node stopped")
	}
	second := etcdclient.New(t, c.Nodes[1])
	for i, cli := range []*clientv3.Client{first, second} {
		if err := putRetrying(ctx, cli, fmt.Sprintf("/stratum/quorum-%d", i+1), "2-of-3"); err != nil {
			t.Fatalf("write through node %d with node 3 down: %v", i+1, err)
		}
	}
	if v := etcdclient.Get(t, c.Nodes[0], "/stratum/quorum-2"); v != "2-of-3" {
		t.Fatalf("node 1 reads %q for node 2's write, want 2-of-3", v)
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// putRetrying puts k = v, retrying for up to 15 s while the remaining
// members elect a new leader (when the stopped member led).
func putRetrying(ctx context.Context, cli *clientv3.Client, k, v string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := cli.Put(pctx, k, v)
		pcancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Bad cluster sizes and a MutateNode under StartNode are refused before
// anything starts.
func TestClusterRefusesBadInput(t *testing.T) {
	for _, n := range []int{0, -1, MaxClusterNodes + 1} {
		root := t.TempDir()
		c, err := StartClusterContext(context.Background(), n, Options{Root: root})
		if err == nil || c != nil {
			t.Errorf("%d nodes: cluster %v, error %v; want a refusal", n, c, err)
		}
		if ents, _ := os.ReadDir(root); len(ents) != 0 {
			t.Errorf("%d nodes: wrote %d entries into the root", n, len(ents))
		}
	}
	root := t.TempDir()
	n, err := StartNode(context.Background(), Options{Root: root, MutateNode: func(int, *nodestate.NodeState) {}})
	if err == nil || n != nil {
		t.Fatalf("StartNode with MutateNode: node %v, error %v", n, err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("StartNode with MutateNode wrote %d entries", len(ents))
	}
}
