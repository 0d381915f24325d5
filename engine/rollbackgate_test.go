package engine

// A rollback's stop of a healthy etcd member passes the quorum gate and
// moves the leader off it, as every other etcd stop does (issue 26 item 4,
// review finding); a member that does not run, or does not answer, has no
// quorum to keep and is not gated.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// memberOfCluster makes n's node the member m of c, with kubeadm's
// single-entry --initial-cluster, reached at m.
func memberOfCluster(t *testing.T, n *memNode, m *etcdcluster.Member) {
	t.Helper()
	n.st.Etcd.MemberName = m.Name
	n.st.Etcd.InitialCluster = n.st.Etcd.MemberName + "=https://" + n.st.AdvertiseAddress + ":2380"
	if _, err := n.store.WriteAll(n.st); err != nil {
		t.Fatal(err)
	}
	if err := n.j.PutNodeState(n.st); err != nil {
		t.Fatal(err)
	}
	// The single-member count newMemNode keeps is not this node's: a
	// command that cannot read the member list must not fall back to it.
	if err := os.Remove(filepath.Join(n.root, "state", cluster.MembersFile)); err != nil {
		t.Fatal(err)
	}
	reach(n, m)
}

// TestRollbackStopOfEtcdPassesTheGate: the upgrade's etcd step is done
// (3.5 -> 3.6; the other members, by the etcdVersions seam, still run
// 3.5, so the old etcd may go back), the scheduler fails, and meanwhile
// another member went down. The rollback's stop of this healthy member
// would leave one of three: it pauses (exit 6) naming the member it waits
// for, with the new etcd left running and its manifest untouched. Once the
// member is back, resume rolls back.
func TestRollbackStopOfEtcdPassesTheGate(t *testing.T) { rollbackGatePauses(t, false) }

// TestRollbackGateCountsAnAlarmedMemberAsAVote: the upgrade's etcd step is
// done; then a real NOSPACE alarm is raised on m1 (its backend quota
// filled), which every member's status lists, and m2 dies. This member
// still answers and votes, so the rollback's stop would leave one of
// three: the gate pauses the rollback (exit 6) naming m2, where it used to
// take the listed alarm for "this member does not answer" and skip. Once
// the alarm is cleared and m2 is back, resume rolls back.
func TestRollbackGateCountsAnAlarmedMemberAsAVote(t *testing.T) { rollbackGatePauses(t, true) }

// rollbackGatePauses is the two tests above: the upgrade's etcd step is
// done, the scheduler fails, and meanwhile m2 dies (and, with alarm, a real
// NOSPACE alarm is raised on m1); the rollback pauses naming m2, etcd left
// as the upgrade left it; once m2 is back (and the alarm cleared), resume
// rolls back.
func rollbackGatePauses(t *testing.T, alarm bool) {
	c := etcdcluster.Start(t, 3, "3.6")
	n := newMemNode(t)
	memberOfCluster(t, n, c.Members[0])
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.5.35", "cp-3": "3.5.35"}}
	engine := func() *Engine {
		e := n.engine(nil)
		e.etcdVersions = f.read
		return e
	}
	alarmed, down := c.Members[1], c.Members[2]
	n.onEvent = func(ev Event) {
		if ev.Step == "write" && ev.Component == nodestate.Scheduler && ev.Phase == string(journal.PhaseApplying) {
			if alarm {
				c.RaiseNoSpace(t, alarmed)
			}
			if err := down.Kill(); err != nil {
				t.Error(err)
			}
		}
	}
	n.before = n.manifests()
	res, err := engine().Run(t.Context(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), down.Name) {
		t.Fatalf("Run with %s down (NOSPACE on %s: %v): %+v %v; want the rollback paused by the quorum gate naming %s", down.Name, alarmed.Name, alarm, res, err, down.Name)
	}
	if open, _ := n.j.OpenTxn(); open == nil || open.Phase != journal.PhaseRollingBack {
		t.Fatalf("open transaction after the refused gate: %+v; want still rolling back", open)
	}
	etcdNow, err := n.store.Read(nodestate.Etcd)
	if err != nil || bytes.Equal(etcdNow, n.before["etcd.yaml"]) {
		t.Fatalf("etcd's manifest after the refused gate (%v): want the new etcd's, left running", err)
	}
	n.onEvent = nil
	if alarm {
		c.ClearNoSpace(t, alarmed)
	}
	if err := down.Start(); err != nil {
		t.Fatal(err)
	}
	if res, err := engine().Resume(t.Context()); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("resume with every member back (and the alarm cleared): %+v %v; want rolled back", res, err)
	}
	n.expectConverged(RolledBack, multiKeepsData)
}

// TestRollbackStopOfAnUnansweringMemberIsNotGated: this member's etcd
// runs but does not answer (its member is down) when the rollback stops
// it: no vote of the quorum rests on it, so the gate, which refuses while
// any member is unhealthy, is skipped and the old etcd goes back.
func TestRollbackStopOfAnUnansweringMemberIsNotGated(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	n := newMemNode(t)
	memberOfCluster(t, n, c.Members[0])
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.5.35", "cp-3": "3.5.35"}}
	e := n.engine(nil)
	e.etcdVersions = f.read
	self := c.Members[0]
	n.onEvent = func(ev Event) {
		switch {
		case ev.Step == "write" && ev.Component == nodestate.Scheduler && ev.Phase == string(journal.PhaseApplying):
			if err := self.Kill(); err != nil {
				t.Error(err)
			}
		case ev.Step == "restore" && ev.Phase == string(journal.PhaseRollingBack):
			// The old etcd written back answers again.
			if err := self.Start(); err != nil {
				t.Error(err)
			}
		}
	}
	n.before = n.manifests()
	res, err := e.Run(t.Context(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run with this member not answering: %+v %v; want rolled back, the gate skipped", res, err)
	}
	n.expectConverged(RolledBack, multiKeepsData)
}

// TestStartOfEtcdIsNotGated: a member with no etcd process running has
// nothing to stop, so a start of etcd is not gated: with another member
// down, where the gate refuses any stop, `start etcd` still commits.
func TestStartOfEtcdIsNotGated(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	n := newMemNode(t)
	memberOfCluster(t, n, c.Members[0])
	both := []string{nodestate.KubeAPIServer, nodestate.Etcd}
	if res, err := n.engine(nil).Stop(t.Context(), both, StopOptions{}); err != nil || res.Outcome != Committed {
		t.Fatalf("stop of etcd with every member healthy: %+v %v; want committed", res, err)
	}
	if err := c.Members[2].Kill(); err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy(t)
	n.events = nil
	res, err := n.engine(nil).Start(t.Context(), both)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("start of etcd with %s down: %+v %v; want committed, the gate not run", c.Members[2].Name, res, err)
	}
	for _, ev := range n.events {
		if strings.Contains(ev, "etcd-gate") {
			t.Errorf("the start ran the gate: %s", ev)
		}
	}
}
