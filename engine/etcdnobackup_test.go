package engine

// Issue 37 defect C: the etcd data decision of a rollback does not rest on
// whether a backup exists. A rollback --last takes no backup of etcd's
// data; when it moved etcd up a minor and fails after the newer etcd
// answered, only etcd's downgrade protocol moves the data back.

import (
	"errors"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// upAgainByRollbackLast leaves n after: etcd 3.5 -> 3.6 committed, an
// apply back to 3.5 (downgraded first, the scheduler moved too) committed;
// it returns the image of the scheduler a rollback --last of that apply
// puts back.
func upAgainByRollbackLast(t *testing.T, n *memNode) string {
	t.Helper()
	if res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil); err != nil || res.Outcome != Committed {
		t.Fatalf("upgrade to etcd 3.6: %+v %v", res, err)
	}
	back := release(n.st, false, "", "")
	back.Images[nodestate.Etcd] = "registry.k8s.io/etcd:3.5.35-0"
	back.Images[nodestate.Scheduler] = testbed.ModeImage(nodestate.Scheduler, "v1.34.4", standin.ModeHealthy)
	// An operator's apply back, past the pre-flight checks that refuse it.
	if res, err := n.engine(nil).RunWith(t.Context(), back, nil, UpgradeOptions{IgnorePreflight: []string{IgnoreAll}}); err != nil || res.Outcome != Committed {
		t.Fatalf("apply back to etcd 3.5: %+v %v", res, err)
	}
	if n.etcd.downgrades != 1 {
		t.Fatalf("the apply back to etcd 3.5 downgraded etcd's data %d times, want once", n.etcd.downgrades)
	}
	return release(n.st, true, "", "").Images[nodestate.Scheduler]
}

// The rollback of a rollback --last that moved etcd 3.5 -> 3.6 and failed
// after etcd 3.6 answered downgrades etcd's data: 3.5 written back on data
// 3.6 wrote would not start. Before the fix the decision was keep ("no
// backup of etcd's data was taken").
func TestRollbackLastUpRollbackDowngradesWithoutBackup(t *testing.T) {
	n := newMemNode(t)
	sched := upAgainByRollbackLast(t, n)
	n.k.SetImageMode(sched, standin.ModeNeverListen)
	res, err := n.engine(nil).RollbackLast(t.Context())
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("rollback --last: %+v %v, want rolled back on the scheduler", res, err)
	}
	if !n.hasStep(res.Txn, journal.StepEtcdAnswered) {
		t.Fatal("etcd 3.6's answer was not journaled: the test does not exercise the defect")
	}
	if d, _ := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdDowngrade {
		t.Errorf("decision %+v, want downgrade: etcd 3.6 answered on the data", d)
	}
	if !n.hasRollbackStep(res.Txn, journal.StepEtcdDowngraded) {
		t.Error("no downgrade of etcd's data was journaled before etcd 3.5 went back")
	}
	if n.etcd.restores != 0 {
		t.Errorf("etcd's data was restored %d times without a backup", n.etcd.restores)
	}
}

// When etcd 3.6 does not answer, the protocol cannot run, and there is no
// backup to fall back on: the rollback pauses (exit 6) naming why, with
// etcd 3.6 left where it is; nothing restored, etcd 3.5 not written back.
func TestRollbackLastUpRollbackPausesWhenNewEtcdSilentWithoutBackup(t *testing.T) {
	n := newMemNode(t)
	sched := upAgainByRollbackLast(t, n)
	n.k.SetImageMode(sched, standin.ModeNeverListen)
	silent := false
	n.procs = answering{Kubelet: n.k, up: func(comp string) bool { return comp != nodestate.Etcd || !silent }}
	n.onEvent = func(ev Event) {
		if ev.Component == nodestate.Scheduler {
			silent = true // etcd 3.6 answered, then stops answering
		}
	}
	res, err := n.engine(nil).RollbackLast(t.Context())
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("rollback --last: %+v %v, want the rollback paused, etcd 3.6 not answering", res, err)
	}
	if !n.hasStep(res.Txn, journal.StepEtcdAnswered) {
		t.Fatal("etcd 3.6's answer was not journaled: the test does not exercise the defect")
	}
	if d, _ := n.etcdDecision(res.Txn); d.EtcdData == journal.EtcdKeep || d.EtcdData == journal.EtcdRestore {
		t.Errorf("decision %+v: neither keep (etcd 3.5 cannot start on it) nor restore (no backup)", d)
	}
	if n.etcd.restores != 0 {
		t.Errorf("etcd's data was restored %d times without a backup", n.etcd.restores)
	}
	if b, err := n.store.Read(nodestate.Etcd); err != nil || !strings.Contains(string(b), "etcd:3.6") {
		t.Errorf("etcd's manifest (%v) is not etcd 3.6's: the paused rollback must leave it", err)
	}
}

// hasRollbackStep reports whether transaction id's rollback journaled step
// for etcd.
func (n *memNode) hasRollbackStep(id string, step journal.Step) bool {
	n.t.Helper()
	recs, err := n.j.Records(id)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, r := range recs {
		if r.Phase == journal.PhaseRollingBack && r.Step == step && r.Component == nodestate.Etcd {
			return true
		}
	}
	return false
}
