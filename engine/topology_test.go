package engine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// reach points the node's engine at member m of c (plain http).
func reach(n *memNode, m *etcdcluster.Member) {
	n.etcdClient = func(*nodestate.NodeState) etcddata.ClientConfig {
		return etcddata.ClientConfig{Endpoint: m.ClientURL, DialTimeout: 2 * time.Second}
	}
}

// haltBy halts c's rollout as node's rolled-back transaction would.
func haltBy(t *testing.T, c *etcdcluster.Cluster, node string) {
	t.Helper()
	co, err := cluster.Connect(t.Context(), cluster.Config{Local: etcddata.ClientConfig{Endpoint: c.Members[1].ClientURL}, Node: node, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	h, err := co.Acquire(t.Context(), "upgrade", "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if err := h.Begin(t.Context(), cluster.Progress{Txn: "t-" + node, Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	if err := h.End(t.Context(), "rolled-back", "a test's release failed on "+node); err != nil {
		t.Fatal(err)
	}
}

// TestKubeadmInitNodeIsOneOfThree: kubeadm's first node keeps a
// single-entry --initial-cluster after two more members joined. Its
// topology comes from etcd's member list (three), not that flag (nor an
// older record of one member): a run takes the rollout lock and so is
// refused by another node's halt, writing nothing. The count read is kept;
// with every member down the run still does not take the single-member
// path: it needs the cluster for the lock and says so.
func TestKubeadmInitNodeIsOneOfThree(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	n := newMemNode(t)
	if n.st.Etcd.InitialCluster != n.st.Etcd.MemberName+"=https://"+n.st.AdvertiseAddress+":2380" {
		t.Fatalf("test data: want kubeadm's single-entry initialCluster, got %q", n.st.Etcd.InitialCluster)
	}
	reach(n, c.Members[0])
	haltBy(t, c, "cp-2")
	n.before = n.manifests()
	res, err := n.engine(nil).Run(t.Context(), release(n.st, false, "", ""), nil)
	if !errors.Is(err, cluster.ErrHalted) || res.Txn != "" {
		t.Fatalf("Run on the init node of three members: %+v %v; want refused by the halt before any transaction", res, err)
	}
	if open, _ := n.j.OpenTxn(); open != nil {
		t.Fatalf("transaction %s left open", open.ID)
	}
	if after := n.manifests(); !sameFiles(n.before, after) {
		t.Error("a refused run changed the manifest directory")
	}
	known, err := cluster.LoadMembers(filepath.Join(n.root, "state", cluster.MembersFile))
	if err != nil || known == nil || known.Count != 3 {
		t.Fatalf("kept member count: %+v %v; want 3", known, err)
	}

	for _, m := range c.Members {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	res, err = n.engine(nil).Run(t.Context(), release(n.st, false, "", ""), nil)
	if !errors.Is(err, cluster.ErrUnreachable) || res.Txn != "" {
		t.Fatalf("Run with every member down: %+v %v; want the cluster unreachable for the lock, no transaction", res, err)
	}
}

// TestTopologyUnknownRefuses: etcd does not answer and the node has no
// record of its member count: a run is refused with ErrTopologyUnknown,
// nothing begun, rather than guessed to be a single member.
func TestTopologyUnknownRefuses(t *testing.T) {
	n := newMemNode(t)
	if err := os.Remove(filepath.Join(n.root, "state", cluster.MembersFile)); err != nil {
		t.Fatal(err)
	}
	n.etcdClient = func(*nodestate.NodeState) etcddata.ClientConfig {
		return etcddata.ClientConfig{Endpoint: "http://127.0.0.1:1", DialTimeout: time.Second}
	}
	res, err := n.engine(nil).Run(t.Context(), release(n.st, false, "", ""), nil)
	if !errors.Is(err, ErrTopologyUnknown) || res.Txn != "" {
		t.Fatalf("Run: %+v %v; want ErrTopologyUnknown and no transaction", res, err)
	}
	if open, _ := n.j.OpenTxn(); open != nil {
		t.Fatalf("transaction %s left open", open.ID)
	}
}
