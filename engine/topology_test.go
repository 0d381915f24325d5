package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
	"github.com/ciq/stratum-upgrade/journal"
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

// TestResumedEtcdStepPassesTheGate: a crash after etcd's step was marked
// and before its member was stopped, then a reboot (kubelet runs the old
// etcd again) while another member went down. The resumed step passes the
// quorum gate as a fresh one does: it refuses, etcd is not stopped (nor
// written), and the transaction stays open (exit 6) rather than rolling
// back, which would restart the member just the same. Once the member is
// back, resume commits.
func TestResumedEtcdStepPassesTheGate(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	n := memberNode(t, c)
	n.upgradeCrashedAt(fault.BeforeWrite.Of(nodestate.Etcd))
	n.crash(true)
	if err := c.Members[2].Kill(); err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy(t)
	etcdBefore, err := n.store.Read(nodestate.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.engine(nil).Resume(t.Context())
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), c.Members[2].Name) {
		t.Fatalf("resume with %s down: %+v %v; want interrupted by the quorum gate naming it, still open", c.Members[2].Name, res, err)
	}
	if open, _ := n.j.OpenTxn(); open == nil || open.Phase != journal.PhaseApplying {
		t.Fatalf("open transaction after the refused gate: %+v; want still applying", open)
	}
	if b, err := n.store.Read(nodestate.Etcd); err != nil || !bytes.Equal(b, etcdBefore) {
		t.Fatalf("etcd's manifest changed or removed after the refused gate (%v)", err)
	}
	if err := c.Members[2].Start(); err != nil {
		t.Fatal(err)
	}
	n.resume(Committed)
	n.expectConverged(Committed)
}

// TestStopOfEtcdPassesTheGate: a stop of a member of three, with another
// member down, would leave the cluster without quorum: the gate refuses it
// before etcd's manifest is touched, and the stop rolls back.
func TestStopOfEtcdPassesTheGate(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	n := memberNode(t, c)
	if err := c.Members[2].Kill(); err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy(t)
	etcdBefore, err := n.store.Read(nodestate.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.engine(nil).Stop(t.Context(), []string{nodestate.KubeAPIServer, nodestate.Etcd}, StopOptions{})
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(res.Reason, c.Members[2].Name) {
		t.Fatalf("stop of etcd with %s down: %+v %v; want rolled back by the quorum gate naming it", c.Members[2].Name, res, err)
	}
	if b, err := n.store.Read(nodestate.Etcd); err != nil || !bytes.Equal(b, etcdBefore) {
		t.Fatalf("etcd's manifest changed or removed by a refused stop (%v)", err)
	}
}

// TestTopologyFromTheJournaledBackup: a single member crashed in its own
// etcd step (etcd stopped, its manifest gone) on a node with no member
// count kept: the member count the etcd backup journaled with the
// transaction (read from the live cluster when it was taken) says single,
// and resume finishes it as a single member.
func TestTopologyFromTheJournaledBackup(t *testing.T) {
	n := newMemNode(t)
	n.upgradeCrashedAt(fault.AfterStop.Of(nodestate.Etcd))
	n.crash(false)
	if err := os.Remove(filepath.Join(n.root, "state", cluster.MembersFile)); err != nil {
		t.Fatal(err)
	}
	n.resume(Committed)
	n.expectConverged(Committed)
}

// unknownTopology leaves n with no member count kept and an etcd that
// does not answer: its topology is unknown.
func unknownTopology(t *testing.T, n *memNode) {
	t.Helper()
	if err := os.Remove(filepath.Join(n.root, "state", cluster.MembersFile)); err != nil {
		t.Fatal(err)
	}
	n.etcdClient = func(*nodestate.NodeState) etcddata.ClientConfig {
		return etcddata.ClientConfig{Endpoint: "http://127.0.0.1:1", DialTimeout: time.Second}
	}
}

// TestTopologyUnknownRefuses: etcd does not answer and the node has no
// record of its member count. A run, a stop of kube-apiserver and a
// rollback --last of a start of it are each refused with
// ErrTopologyUnknown, nothing begun: the node is not guessed to be a
// single member, nor is the stop refused as that of "the only
// control-plane node" (the node may be one of several).
func TestTopologyUnknownRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(*memNode) (Result, error)
	}{
		{"run", func(n *memNode) (Result, error) {
			return n.engine(nil).Run(n.t.Context(), release(n.st, false, "", ""), nil)
		}},
		{"stop kube-apiserver", func(n *memNode) (Result, error) {
			return n.engine(nil).Stop(n.t.Context(), []string{nodestate.KubeAPIServer}, StopOptions{})
		}},
		{"rollback --last of a start", func(n *memNode) (Result, error) { return n.engine(nil).RollbackLast(n.t.Context()) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newMemNode(t)
			if res, err := n.engine(nil).Stop(t.Context(), []string{nodestate.KubeAPIServer}, StopOptions{AllowControlPlaneDown: true}); err != nil || res.Outcome != Committed {
				t.Fatalf("stop kube-apiserver on the single member: %+v %v", res, err)
			}
			if res, err := n.engine(nil).Start(t.Context(), []string{nodestate.KubeAPIServer}); err != nil || res.Outcome != Committed {
				t.Fatalf("start kube-apiserver: %+v %v", res, err)
			}
			unknownTopology(t, n)
			res, err := c.do(n)
			if !errors.Is(err, ErrTopologyUnknown) || errors.Is(err, ErrControlPlaneDown) || res.Txn != "" {
				t.Fatalf("%s with the topology unknown: %+v %v; want ErrTopologyUnknown, no transaction", c.name, res, err)
			}
			if open, _ := n.j.OpenTxn(); open != nil {
				t.Fatalf("transaction %s left open", open.ID)
			}
		})
	}
}

// memberNode is a node of the memory model whose etcd is c's first
// member, its manifests written and its state journaled.
func memberNode(t *testing.T, c *etcdcluster.Cluster) *memNode {
	t.Helper()
	n := newMemNode(t)
	memberOfCluster(t, n, c.Members[0])
	return n
}
