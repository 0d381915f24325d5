package engine

// The cluster-wide skew checks under the rollout lock, against real etcd
// members (issue 37, defect F).

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// A member on etcd 3.6 whose two peers still run 3.5 is refused the move
// to 3.7, every check let through or not: the peers are named with the
// versions their status reports, and nothing is journaled.
func TestEtcdMemberSkewRefusesAMemberTwoMinorsAhead(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.5")
	self := c.Members[0]
	if err := self.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := self.Use("3.6"); err != nil {
		t.Fatal(err)
	}
	if err := self.Start(); err != nil {
		t.Fatal(err)
	}
	n := newMemNode(t)
	n.st.Images[nodestate.Etcd] = "registry.k8s.io/etcd:3.6.16-0"
	memberOfCluster(t, n, self)
	rel := release(n.st, false, "", standin.ModeHealthy)
	rel.Images[nodestate.Etcd] = etcd37
	_, err := n.engine(nil).RunWith(t.Context(), rel, nil, UpgradeOptions{IgnorePreflight: []string{IgnoreAll}})
	var pe *PreflightError
	if !errors.As(err, &pe) || !slices.Equal(checks(pe.Failed), []string{CheckEtcdMemberSkew}) {
		t.Fatalf("run to etcd 3.7 beside two 3.5 members: %v; want refused by %s", err, CheckEtcdMemberSkew)
	}
	for _, s := range []string{"m1 (3.5.35), m2 (3.5.35) runs below 3.6", "cannot be ignored", "upgrade it to 3.6 first"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal does not say %q:\n%v", s, err)
		}
	}
	if k := journalTxns(t, n.j); k != 0 {
		t.Errorf("a refused run journaled %d transaction(s)", k)
	}
}

// record puts node's last transaction in c's cluster as committed from
// kube-apiserver from to to.
func record(t *testing.T, c *etcdcluster.Cluster, node, outcome, from, to string) {
	t.Helper()
	co, err := cluster.Connect(t.Context(), cluster.Config{Local: etcddata.ClientConfig{Endpoint: c.Members[1].ClientURL, DialTimeout: 5 * time.Second}, Node: node, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	now := time.Now().UTC()
	b, err := json.Marshal(cluster.Progress{Node: node, Txn: "t-" + node, Kind: "upgrade", Phase: outcome, Outcome: outcome, APIServerFrom: from, APIServerTo: to, Started: now, Updated: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := co.Client().Put(t.Context(), cluster.Prefix+"nodes/"+node, string(b)); err != nil {
		t.Fatal(err)
	}
}

// kubeAt sets every Kubernetes component of st to v's stand-in image.
func kubeAt(st *nodestate.NodeState, v string) {
	st.KubernetesVersion = v
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		st.Images[comp] = testbed.ModeImage(comp, v, standin.ModeHealthy)
	}
}

// A node at kube-apiserver 1.35 is refused the move to 1.36 while another
// node's record shows its kube-apiserver at 1.34: they would be two minors
// apart. A node recorded at 1.35 (a rollback back to it) refuses nothing.
func TestAPIServerSkewFromRecordedProgress(t *testing.T) {
	for _, tc := range []struct {
		name              string
		outcome, from, to string
		refused           bool
	}{
		{name: "a node committed at 1.34", outcome: "committed", from: "v1.34.4", to: "v1.34.5", refused: true},
		{name: "a node rolled back to 1.35", outcome: "rolled-back", from: "v1.35.4", to: "v1.36.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := etcdcluster.Start(t, 3, "3.6")
			n := newMemNode(t)
			kubeAt(n.st, "v1.35.4")
			memberOfCluster(t, n, c.Members[0])
			record(t, c, "cp-2", tc.outcome, tc.from, tc.to)
			record(t, c, "cp-3", "committed", "v1.34.5", "v1.35.4")
			to := n.st.Clone()
			kubeAt(to, "v1.36.3")
			rel := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: "v1.36.3", Images: map[string]string{}}
			for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
				rel.Images[comp] = to.Images[comp]
			}
			_, err := n.engine(nil).RunWith(t.Context(), rel, nil, UpgradeOptions{IgnorePreflight: []string{IgnoreAll}})
			var pe *PreflightError
			refused := errors.As(err, &pe) && slices.Contains(checks(pe.Failed), CheckAPIServerSkew)
			if refused != tc.refused {
				t.Fatalf("run to v1.36.3: %v; want refused by %s: %v", err, CheckAPIServerSkew, tc.refused)
			}
			if !tc.refused {
				if k := journalTxns(t, n.j); k != 1 {
					t.Fatalf("the run journaled %d transaction(s), want 1 (%v)", k, err)
				}
				return
			}
			if got := checks(pe.Failed); !slices.Equal(got, []string{CheckAPIServerSkew}) {
				t.Fatalf("failed %q; want only cp-2's %s:\n%v", got, CheckAPIServerSkew, err)
			}
			for _, s := range []string{"kube-apiserver on node cp-2 is v1.34.5", "2 minors apart", "cannot be ignored", "move node cp-2 to 1.35 first"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("refusal does not say %q:\n%v", s, err)
				}
			}
			if k := journalTxns(t, n.j); k != 0 {
				t.Errorf("a refused run journaled %d transaction(s)", k)
			}
		})
	}
}
