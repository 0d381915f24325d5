package kubeadmcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/adopt"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestComposeIsKubeadms: node 3 is the joined fixture byte for byte (what
// kubeadm join wrote for cp-3 of three), node 1's etcd is kubeadm init's
// single member, node 2's kubeadm join's with the two members it joined.
func TestComposeIsKubeadms(t *testing.T) {
	repo, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range []string{"v1.36.3", "v1.37.2"} {
		k3, err := Compose(version, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range Files {
			want, err := os.ReadFile(filepath.Join(repo, "testdata/kubeadm", version, "joined/manifests", f))
			if err != nil {
				t.Fatal(err)
			}
			if k3.Manifests[f] != string(want) {
				t.Errorf("%s node 3 %s is not the joined fixture:\n%s", version, f, k3.Manifests[f])
			}
		}
		k1, err := Compose(version, 1)
		if err != nil {
			t.Fatal(err)
		}
		etcd1 := k1.Manifests["etcd.yaml"]
		for _, want := range []string{"- --initial-cluster=cp-1=https://10.0.0.11:2380\n", "- --name=cp-1\n"} {
			if !strings.Contains(etcd1, want) {
				t.Errorf("%s node 1's etcd lacks %q:\n%s", version, want, etcd1)
			}
		}
		if !strings.Contains(k1.Manifests["kube-apiserver.yaml"], "- --advertise-address=10.0.0.11\n") || strings.Contains(k1.Config, "cp-3") {
			t.Errorf("%s node 1 is not cp-1 at 10.0.0.11:\n%s\n%s", version, k1.Manifests["kube-apiserver.yaml"], k1.Config)
		}
		k2, err := Compose(version, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"- --initial-cluster=cp-1=https://10.0.0.11:2380,cp-2=https://10.0.0.12:2380\n",
			"- --initial-cluster-state=existing\n", "- --name=cp-2\n", "- --listen-peer-urls=https://10.0.0.12:2380\n"} {
			if !strings.Contains(k2.Manifests["etcd.yaml"], want) {
				t.Errorf("%s node 2's etcd lacks %q:\n%s", version, want, k2.Manifests["etcd.yaml"])
			}
		}
	}
	if _, err := Compose("v1.36.3", 4); err == nil {
		t.Error("Compose(node 4) = nil error, want the fixtures' range refused")
	}
}

// TestMovedManifestsAdoptWithoutRestart: every node's moved manifests are
// adopted keeping every pod (adopt.Check, on a PKI of the test bed's), the
// state says what each node was made as, and nothing of kubeadm's address
// space or ports is left.
func TestMovedManifestsAdoptWithoutRestart(t *testing.T) {
	cas, err := testbed.NewCAs()
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	places := []Address{
		{IP: "127.0.0.11", Ports: nodestate.Ports{EtcdClient: 12001, EtcdPeer: 12002, EtcdMetrics: 12003, APIServer: 12004}},
		{IP: "127.0.0.12", Ports: nodestate.Ports{EtcdClient: 12011, EtcdPeer: 12012, EtcdMetrics: 12013, APIServer: 12014}},
		{IP: "127.0.0.13", Ports: nodestate.Ports{EtcdClient: 12021, EtcdPeer: 12022, EtcdMetrics: 12023, APIServer: 12024}},
	}
	for i := 1; i <= Nodes; i++ {
		root := filepath.Join(base, NodeName(i))
		st := &nodestate.NodeState{NodeName: NodeName(i), AdvertiseAddress: places[i-1].IP, PKIDir: root + "/etc/kubernetes/pki",
			KubeconfigDir: root + "/etc/kubernetes", Ports: places[i-1].Ports}
		if err := cas.IssueNode(st.PKIDir, st.NodeName, st.AdvertiseAddress); err != nil {
			t.Fatal(err)
		}
		if err := testbed.WriteKubeconfigs(st); err != nil {
			t.Fatal(err)
		}
		k, err := Compose("v1.36.3", i)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Move(k, Placement{Node: i, Root: root, Nodes: places})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "etc/kubernetes/manifests")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, s := range m.Manifests {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cfg := filepath.Join(root, "kubeadm.yaml")
		if err := os.WriteFile(cfg, []byte(m.Config), 0o600); err != nil {
			t.Fatal(err)
		}
		src, err := adopt.ReadKubeadm(dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := adopt.Check(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range plan.Components {
			if v.Restarts {
				t.Errorf("node %d: adopting restarts %s: %v", i, v.Name, v.Why)
			}
		}
		if len(plan.Notes) > 0 {
			t.Errorf("node %d: kubeadm's configuration disagrees with its manifests: %v", i, plan.Notes)
		}
		got := plan.State
		members := strings.Count(got.Etcd.InitialCluster, "=")
		wantState := "existing"
		if i == 1 {
			wantState = "new"
		}
		if got.NodeName != NodeName(i) || got.AdvertiseAddress != places[i-1].IP || members != i || got.Etcd.InitialClusterState != wantState ||
			got.Ports.EtcdClient != places[i-1].Ports.EtcdClient || got.Ports.APIServer != places[i-1].Ports.APIServer || got.PKIDir != root+"/etc/kubernetes/pki" {
			t.Errorf("node %d's adopted state: %s at %s, initial cluster %q (%s), ports %+v, PKI %s", i, got.NodeName, got.AdvertiseAddress,
				got.Etcd.InitialCluster, got.Etcd.InitialClusterState, got.Ports, got.PKIDir)
		}
		if i == 3 && !strings.Contains(got.Etcd.InitialCluster, "cp-2=https://127.0.0.12:12012") {
			t.Errorf("node 3's initial cluster %q: want cp-2 at its own peer port", got.Etcd.InitialCluster)
		}
	}
}

// TestMoveRefusesWhatIsNotKubeadms: a manifest without kubeadm's default
// listener, or a node outside the placement, is an error.
func TestMoveRefusesWhatIsNotKubeadms(t *testing.T) {
	k, err := Compose("v1.36.3", 1)
	if err != nil {
		t.Fatal(err)
	}
	places := []Address{{IP: "127.0.0.11", Ports: nodestate.Ports{EtcdClient: 12001, EtcdPeer: 12002, EtcdMetrics: 12003, APIServer: 12004}}}
	if _, err := Move(k, Placement{Node: 2, Root: "/r", Nodes: places}); err == nil {
		t.Error("Move(node 2 of 1) = nil error")
	}
	k.Manifests["kube-scheduler.yaml"] = strings.Replace(k.Manifests["kube-scheduler.yaml"], "--bind-address=127.0.0.1", "--bind-address=0.0.0.0", 1)
	if _, err := Move(k, Placement{Node: 1, Root: "/r", Nodes: places}); err == nil || !strings.Contains(err.Error(), "kube-scheduler") {
		t.Errorf("Move of a scheduler on 0.0.0.0 = %v, want refused", err)
	}
}
