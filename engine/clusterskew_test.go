package engine

// The cluster-wide skew checks under the rollout lock, against real etcd
// members (issue 37, defect F).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// control-plane node runs 1.34, by the API server (its mirror pod) or else
// by its record in the cluster: they would be two minors apart, and this
// cannot be ignored. A node at 1.35 (a rollback back to it; the API server
// saying so over an older record) refuses nothing. A control-plane node
// known from neither is refused too, but that can be ignored. live nil:
// no API server to ask; outcome "": cp-2 has no record.
func TestAPIServerSkewFromRecordedProgress(t *testing.T) {
	unread := LiveAPIServer{Node: "cp-2", Address: "10.0.0.12", Unread: "no kube-apiserver mirror pod on it in kube-system"}
	for _, tc := range []struct {
		name              string
		outcome, from, to string
		live              []LiveAPIServer
		liveErr           error
		refused, paused   bool
		// ignorable: refused with the checks enforced, let through
		// with them ignored; says are what that refusal says.
		ignorable bool
		says      []string
	}{
		{name: "a node committed at 1.34", outcome: "committed", from: "v1.34.4", to: "v1.34.5", refused: true,
			says: []string{"kube-apiserver on node cp-2 is v1.34.5 (its transaction t-cp-2)"}},
		{name: "a node rolled back to 1.35", outcome: "rolled-back", from: "v1.35.4", to: "v1.36.3"},
		{name: "a node with no record whose mirror pod runs 1.34", refused: true,
			live: []LiveAPIServer{{Node: "cp-2", Versions: []string{"v1.34.5"}}},
			says: []string{"kube-apiserver on node cp-2 is v1.34.5 (its mirror pod, by the API server)"}},
		{name: "a node with no record whose mirror pod runs 1.35",
			live: []LiveAPIServer{{Node: "cp-2", Versions: []string{"v1.35.4"}}, {Node: "cp-1", Unread: "this node's own, skipped"}}},
		{name: "a node recorded at 1.34 whose mirror pod runs 1.35", outcome: "committed", from: "v1.34.4", to: "v1.34.5",
			live: []LiveAPIServer{{Node: "cp-2", Versions: []string{"v1.35.4"}}}},
		{name: "a node whose mirror pod is unread, recorded at 1.34", outcome: "committed", from: "v1.34.4", to: "v1.34.5", refused: true,
			live: []LiveAPIServer{unread},
			says: []string{"kube-apiserver on node cp-2 is v1.34.5 (its transaction t-cp-2)"}},
		{name: "a node known from neither", live: []LiveAPIServer{unread}, ignorable: true,
			says: []string{"kube-apiserver version of control-plane node cp-2 is not known", "no kube-apiserver mirror pod on it in kube-system", "no record of its version", "--ignore-preflight-errors=APIServerSkew"}},
		{name: "an API server that refuses", liveErr: errors.New("nodes is forbidden"), ignorable: true,
			says: []string{"the control-plane nodes cannot be read from the API server (nodes is forbidden)", "--ignore-preflight-errors=APIServerSkew"}},
		{name: "an API server that does not answer", liveErr: fmt.Errorf("%w: connection refused", ErrAPIServerUnanswered), paused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := etcdcluster.Start(t, 3, "3.6")
			n := newMemNode(t)
			kubeAt(n.st, "v1.35.4")
			memberOfCluster(t, n, c.Members[0])
			if tc.outcome != "" {
				record(t, c, "cp-2", tc.outcome, tc.from, tc.to)
			}
			record(t, c, "cp-3", "committed", "v1.34.5", "v1.35.4")
			to := n.st.Clone()
			kubeAt(to, "v1.36.3")
			rel := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: "v1.36.3", Images: map[string]string{}}
			for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
				rel.Images[comp] = to.Images[comp]
			}
			engine := func() *Engine {
				e := n.engine(nil)
				if tc.live != nil || tc.liveErr != nil {
					e.apiServers = func(context.Context) ([]LiveAPIServer, error) { return tc.live, tc.liveErr }
				}
				return e
			}
			var pe *PreflightError
			if tc.ignorable {
				_, err := engine().RunWith(t.Context(), rel, nil, UpgradeOptions{})
				if !errors.As(err, &pe) || !slices.Contains(checks(pe.Failed), CheckAPIServerSkew) || !pe.Ignorable() {
					t.Fatalf("run to v1.36.3, checks enforced: %v; want refused by %s, ignorable", err, CheckAPIServerSkew)
				}
				for _, s := range tc.says {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("refusal does not say %q:\n%v", s, err)
					}
				}
			}
			// A refusal stands with every check let through; a pass needs
			// none let through.
			opts := UpgradeOptions{}
			if tc.refused || tc.ignorable {
				opts.IgnorePreflight = []string{IgnoreAll}
			}
			_, err := engine().RunWith(t.Context(), rel, nil, opts)
			if tc.paused {
				if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "run it again once the API server answers") || journalTxns(t, n.j) != 0 {
					t.Fatalf("run to v1.36.3: %v (%d transaction(s)); want paused, nothing journaled", err, journalTxns(t, n.j))
				}
				return
			}
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
			for _, s := range append(tc.says, "2 minors apart", "cannot be ignored", "move node cp-2 to 1.35 first") {
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
