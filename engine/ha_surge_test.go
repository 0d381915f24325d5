package engine

// Surge on the three-node test bed (issue 41): an HA node's API-serving
// components surge as a single node's do, so its API server never leaves
// the load balancer, while its etcd step and the quorum gate around it
// are the non-surge rollout's.

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/haload"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// surgeable3 are the components a surge replaces.
var surgeable3 = []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}

// haSurgeCluster is haCluster whose nodes' three API-serving components
// already run with --permit-port-sharing=true, as after an upgrade.
func haSurgeCluster(t *testing.T) (*testbed.Cluster, []*fixture) {
	t.Helper()
	needHA(t)
	if os.Geteuid() != 0 {
		t.Skip("surge needs pod cgroups: the kubelet stand-in makes them as root")
	}
	c := testbed.StartCluster(t, 3, testbed.Options{Mutate: func(st *nodestate.NodeState) {
		st.Images[nodestate.Etcd] = etcd36
		for _, comp := range surgeable3 {
			withPortSharing(st, comp)
		}
	}})
	fs := make([]*fixture, len(c.Nodes))
	for i, n := range c.Nodes {
		if n.CgroupParent == "" {
			t.Skip("the kubelet stand-in makes no pod cgroups here (no writable cgroup v2)")
		}
		fs[i] = fixtureOn(t, n)
	}
	return c, fs
}

// apiAddr is the host:port of kube-apiserver on st's node.
func apiAddr(t *testing.T, st *nodestate.NodeState) string {
	t.Helper()
	tg, err := manifest.Target(st, nodestate.KubeAPIServer)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(strings.TrimPrefix(tg.Health, "https://"), "http://")
	return addr[:strings.IndexByte(addr, '/')]
}

// eventAt is the index of f's first event of step for comp, -1 if none.
func (f *fixture) eventAt(step, comp string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, ev := range f.events {
		if ev.Step == step && ev.Component == comp {
			return i
		}
	}
	return -1
}

// TestHASurgeRollout starts the release on all three port-sharing nodes at
// once: they take turns through the rollout lock and all commit; on every
// node the three API-serving components surge (nothing stops them) and no
// surge file is left, while etcd is gated and then stopped as without a
// surge. No node's kube-apiserver port refuses a connection at any time,
// and never more than one etcd member is down.
func TestHASurgeRollout(t *testing.T) {
	c, fs := haSurgeCluster(t)
	l, members := haload.Start(t, c), haload.StartMembers(t, c)
	stops := make([]func() (int64, int64), len(fs))
	for i, f := range fs {
		stops[i] = refusals(t, apiAddr(t, f.node.State))
	}
	var wg sync.WaitGroup
	results := make([]error, len(fs))
	for i, f := range fs {
		wg.Go(func() {
			res, err := f.e.Run(t.Context(), haRelease(f.node.State, "", ""), nil)
			if err == nil && res.Outcome != Committed {
				err = fmt.Errorf("outcome %s", res.Outcome)
			}
			results[i] = err
		})
	}
	wg.Wait()
	var ports []string
	for i, f := range fs {
		refused, tries := stops[i]()
		name := f.node.State.NodeName
		ports = append(ports, fmt.Sprintf("%s %d of %d", name, refused, tries))
		if refused != 0 {
			t.Errorf("%s's kube-apiserver port refused %d of %d connections during the rollout, want 0", name, refused, tries)
		}
	}
	m, load := members.Stop(), l.Result(t)
	for i, err := range results {
		if err != nil {
			t.Fatalf("node-%d: %v", i+1, err)
		}
	}
	spans := make([]span, len(fs))
	for i, f := range fs {
		spans[i] = f.span()
		name := f.node.State.NodeName
		for _, comp := range surgeable3 {
			for _, step := range []string{"surge-write", "wait-surge-active", "surge-remove"} {
				if !f.sawEvent(step, comp) {
					t.Errorf("%s: no %s event for %s: it did not surge", name, step, comp)
				}
			}
			if f.sawEvent("stop", comp) {
				t.Errorf("%s: %s was stopped: a surge stops nothing", name, comp)
			}
		}
		gate, stop := f.eventAt("etcd-gate", nodestate.Etcd), f.eventAt("stop", nodestate.Etcd)
		if gate < 0 || stop < gate {
			t.Errorf("%s: etcd's gate at event %d, its stop at %d: want it gated, then stopped", name, gate, stop)
		}
		if f.sawEvent("surge-write", nodestate.Etcd) {
			t.Errorf("%s: etcd surged: it has one data directory", name)
		}
		surges, err := f.node.Store.SurgeFiles()
		if err != nil || len(surges) != 0 {
			t.Errorf("%s: surge files after the commit: %v %v, want none", name, surges, err)
		}
		f.checkConverged(Committed, nil)
	}
	checkEtcdServes(t, fs, "3.7.")
	checkOneAtATime(t, spans)
	t.Logf("HA figures: surge rollout, three nodes at once: max members down at once %d, writes acked %d/%d, %d lost, API %.2f%%; kube-apiserver ports refused %s; %s",
		m.MaxDown, load.Acked, load.Writes, load.Lost, load.API(), strings.Join(ports, ", "), spanSummary(spans))
	t.Logf("member probe: %s", m)
	switch {
	case m.MaxDown > 1:
		t.Errorf("%d etcd members of 3 were down at once (%s): quorum lost", m.MaxDown, strings.Join(m.Worst, ", "))
	case m.MaxDown == 0:
		t.Errorf("the member probe never saw a member down in %d samples: etcd was not stopped", m.Samples)
	}
	if load.Lost > 0 {
		t.Errorf("%d of %d acknowledged writes are gone", load.Lost, load.Acked)
	}
	if load.API() < 99.9 {
		t.Errorf("API server requests answered %.3f%%, want >= 99.9%%", load.API())
	}
}
