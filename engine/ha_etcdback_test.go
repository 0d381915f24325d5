package engine

// The last member's etcd step on three nodes: its rollback puts the old
// etcd back, through etcd's downgrade protocol once the cluster version
// moved, and the other nodes follow with rollback --last.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/haload"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// etcdNeverPulled is an etcd 3.7 image no node's image map holds: the
// kubelet stand-in never starts it (ErrImageNeverPull), as a real kubelet
// with the image missing and no registry.
const etcdNeverPulled = "registry.k8s.io/etcd:3.7.4-0"

// TestHAEtcdOldBackWhenTheLastMembersNewEtcdNeverStarts: node-1 and node-2
// run etcd 3.7; node-3's new etcd never starts, so the cluster version
// never moved. Its rollback writes the old etcd back (rolled back, not
// rollback-failed with its member down), every member answers at the end
// and node-3's serves 3.6 again; no acknowledged write is lost.
func TestHAEtcdOldBackWhenTheLastMembersNewEtcdNeverStarts(t *testing.T) {
	_, fs, l, last := lastOfThree(t)
	before := last.manifests()
	rel := haRelease(last.node.State, "", "")
	rel.Images[nodestate.Etcd] = etcdNeverPulled
	lastRollsBack(t, fs, last, rel)
	last.checkConverged(RolledBack, before)
	checkEtcdServes(t, fs[:2], "3.7.")
	l.Check(t, "the last member's new etcd never starts")
}

// TestHAEtcdDowngradeAfterThePointOfNoReturn (issue 30): node-1 and node-2
// run etcd 3.7; on node-3, the last member on 3.6, the plan's etcd step is
// announced as the point of no return, and a later component fails after
// every member ran 3.7. The rollback runs etcd's downgrade protocol through
// node-3's etcd (the cluster version back to 3.6, node-3's storage version
// with it) and puts etcd 3.6 back on node-3; the rollout halts, but lets
// through each other node's rollback --last, which downgrades its own
// member in turn, while an upgrade is still refused. Every member ends on
// 3.6, etcd ends the downgrade by itself, and no acknowledged write is
// lost.
func TestHAEtcdDowngradeAfterThePointOfNoReturn(t *testing.T) {
	_, fs, l, last := lastOfThree(t)
	lastRollsBack(t, fs, last, haRelease(last.node.State, nodestate.Scheduler, standin.ModeNeverListen))
	announced, downgraded := false, false
	last.mu.Lock()
	for _, ev := range last.events {
		announced = announced || ev.Step == "etcd-point-of-no-return"
		downgraded = downgraded || ev.Step == "etcd-downgraded"
	}
	last.mu.Unlock()
	if !announced || !downgraded {
		t.Errorf("node-3's events: point of no return announced %v, etcd downgraded %v; want both", announced, downgraded)
	}
	d := etcdDowngrade(t, fs[0])
	if d == nil || !strings.HasPrefix(d.Target, "3.6") || len(d.Behind()) != 2 {
		t.Fatalf("etcd's downgrade %+v: want one to 3.6 with node-1 and node-2 behind", d)
	}
	if by := view(t, fs[0]).EnabledBy(d.Target); by == nil || by.Node != "node-3" {
		t.Errorf("status --cluster names %+v as the enabler of etcd's downgrade, want node-3", by)
	}
	// The halt still refuses any other transaction.
	var halted *cluster.HaltedError
	if _, err := fs[0].e.Restart(t.Context(), []string{nodestate.Scheduler}); !errors.As(err, &halted) {
		t.Fatalf("node-1's restart under the halt: %v, want the halt", err)
	}
	for _, f := range fs[:2] {
		res, err := f.e.RollbackLast(t.Context())
		if err != nil || res.Outcome != Committed {
			t.Fatalf("%s rollback --last: %+v %v", f.node.State.NodeName, res, err)
		}
	}
	checkEtcdServes(t, fs[:2], "3.6.")
	deadline := time.Now().Add(30 * time.Second)
	for d = etcdDowngrade(t, fs[0]); d != nil && time.Now().Before(deadline); d = etcdDowngrade(t, fs[0]) {
		time.Sleep(500 * time.Millisecond)
	}
	if d != nil {
		t.Errorf("etcd still reports the downgrade %+v with every member on 3.6", d)
	}
	l.Check(t, "the last member's rollback downgrades etcd, the others follow with rollback --last")
	f := l.Result(t)
	t.Logf("etcd rollback downgraded (three members, 3.7 -> 3.6): writes acked %d, lost %d", f.Acked, f.Lost)
}

// TestHAEtcdDowngradeResumesAfterACrash: the same downgrade, crashed where
// it is new: node-3's rollback right after etcd downgraded its storage
// version (before etcd-downgraded is journaled), and node-1's rollback
// --last at the same point of its forwards etcd step. Each resume
// finishes its transaction (the downgrade enabled is only waited for),
// and every member ends on 3.6 with no acknowledged write lost.
func TestHAEtcdDowngradeResumesAfterACrash(t *testing.T) {
	_, fs, l, last := lastOfThree(t)
	if !stopAt(last.e, fault.AfterEtcdDowngrade, func() {
		last.e.Run(t.Context(), haRelease(last.node.State, nodestate.Scheduler, standin.ModeNeverListen), nil)
	}) {
		t.Fatal("node-3's rollback never reached after-etcd-downgrade")
	}
	if res, err := last.e.Resume(t.Context()); res.Outcome != RolledBack || !errors.Is(err, ErrRolledBack) {
		t.Fatalf("node-3 resume: %+v %v, want rolled back", res, err)
	}
	if !stopAt(fs[0].e, fault.AfterEtcdDowngrade, func() { fs[0].e.RollbackLast(t.Context()) }) {
		t.Fatal("node-1's rollback --last never reached after-etcd-downgrade")
	}
	if res, err := fs[0].e.Resume(t.Context()); err != nil || res.Outcome != Committed {
		t.Fatalf("node-1 resume: %+v %v, want committed", res, err)
	}
	if res, err := fs[1].e.RollbackLast(t.Context()); err != nil || res.Outcome != Committed {
		t.Fatalf("node-2 rollback --last: %+v %v", res, err)
	}
	checkEtcdServes(t, fs, "3.6.")
	l.Check(t, "the etcd downgrade crashed on the last member and on the first, resumed")
	f := l.Result(t)
	t.Logf("etcd rollback downgraded after crashes (three members, 3.7 -> 3.6): writes acked %d, lost %d", f.Acked, f.Lost)
}

// etcdDowngrade is the downgrade etcd reports, read through f's member.
func etcdDowngrade(t *testing.T, f *fixture) *cluster.EtcdDowngrade {
	return askCluster(t, f, (*cluster.Coordinator).EtcdDowngrade)
}

// lastOfThree is a three-node cluster under load whose first two nodes
// upgraded to etcd 3.7 (haRelease), and its last node, not yet upgraded,
// with deadlines short enough for a new etcd that never starts.
func lastOfThree(t *testing.T) (*testbed.Cluster, []*fixture, *haload.Load, *fixture) {
	t.Helper()
	c, fs := haCluster(t)
	l := haload.Start(t, c)
	for _, f := range fs[:2] {
		if res, err := f.e.Run(t.Context(), haRelease(f.node.State, "", ""), nil); err != nil {
			t.Fatalf("%s: %+v %v", f.node.State.NodeName, res, err)
		}
	}
	last := fs[2]
	last.shortDeadlines()
	return c, fs, l, last
}

// lastRollsBack runs rel on last, the last of three nodes (lastOfThree),
// and stops t unless it rolled back, its etcd on 3.6 again, halting the
// rollout.
func lastRollsBack(t *testing.T, fs []*fixture, last *fixture, rel *Release) {
	t.Helper()
	res, err := last.e.Run(t.Context(), rel, nil)
	if res.Outcome != RolledBack || !errors.Is(err, ErrRolledBack) {
		t.Fatalf("node-3: %+v %v, want rolled back", res, err)
	}
	checkEtcdServes(t, fs[2:], "3.6.")
	checkHalted(t, fs[0], "node-3", RolledBack)
}
