package engine

// Issue 37 defects D and E on the kubelet model: a downgrade etcd did not
// answer is never taken for a refusal (no backup is restored over
// acknowledged writes), and a downgrade this transaction enabled is
// cancelled on every path that does not go on to swap etcd's binary, the
// cancel read back.

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// Defect D: the rollback's downgrade times out. A single member pauses
// (exit 6) with nothing restored; resume asks etcd again and downgrades.
// Before the fix etcddata took every error for a refusal and the engine
// restored the backup, losing every write since.
func TestEtcdDowngradeUnansweredPausesTheRollback(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	n.etcd.refuse = fmt.Errorf("%w: downgrade validate: context deadline exceeded", etcddata.ErrDowngradeUnanswered)
	res, err := n.engine(nil).Run(t.Context(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) {
		t.Fatalf("Run: %+v %v: want the rollback paused (exit 6)", res, err)
	}
	if n.etcd.restores != 0 {
		t.Errorf("etcd's data was restored %d times because a downgrade call timed out", n.etcd.restores)
	}
	if d, _ := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdDowngrade {
		t.Errorf("last decision %+v, want downgrade (a timeout decides nothing)", d)
	}
	n.etcd.refuse = nil
	res, err = n.engine(nil).Resume(t.Context())
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("resume: %+v %v: want rolled back", res, err)
	}
	if n.etcd.restores != 0 || n.etcd.downgrades != 1 {
		t.Errorf("%d restores, %d downgrades: want the resume to downgrade, nothing restored", n.etcd.restores, n.etcd.downgrades)
	}
}

// upgradedTo36 commits etcd 3.5 -> 3.6 on n.
func upgradedTo36(t *testing.T, n *memNode) {
	t.Helper()
	if res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil); err != nil || res.Outcome != Committed {
		t.Fatalf("upgrade to etcd 3.6: %+v %v", res, err)
	}
}

// enableRecords is the why of every etcd-downgrade-enable record of id.
func (n *memNode) enableRecords(id string) []string {
	n.t.Helper()
	recs, err := n.j.Records(id)
	if err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if r.Step == journal.StepEtcdDowngradeEnable {
			out = append(out, r.Why+" "+r.EtcdTarget)
		}
	}
	return out
}

// Defect E: the rollback --last's downgrade was enabled, then the step
// failed before etcd's manifest was written (its write failed): the
// rollback cancels the downgrade and journals it. Before the fix nothing
// cancelled it.
func TestEtcdDowngradeCancelledWhenTheWriteFails(t *testing.T) {
	n := newMemNode(t)
	upgradedTo36(t, n)
	failed := false
	res, err := n.engineWith(etcdWriteFails{modelStore{n.store, n.k}, &failed}, nil).RollbackLast(t.Context())
	if !failed || !errors.Is(err, ErrRolledBack) {
		t.Fatalf("rollback --last (write failed: %v): %+v %v, want rolled back", failed, res, err)
	}
	if n.etcd.cancels != 1 || n.etcd.enabled != "" {
		t.Errorf("%d cancels, etcd downgrades to %q: want the enabled downgrade cancelled", n.etcd.cancels, n.etcd.enabled)
	}
	if got := n.enableRecords(res.Txn); len(got) != 2 || got[0] != "enabling 3.5" || got[1] != "cancelled 3.5" {
		t.Errorf("etcd-downgrade-enable records %v, want enabling then cancelled", got)
	}
}

// A crash right after the enable (the journal says this transaction
// enabled it), then the operator's rollback: the rollback cancels it.
// Before the fix the resume saw "already enabled" and never cancelled.
func TestEtcdDowngradeCancelledByTheRollbackAfterACrash(t *testing.T) {
	n := newMemNode(t)
	upgradedTo36(t, n)
	fired := false
	_, died := survive(func() error {
		_, err := n.engine(crashAt(fault.AfterEtcdDowngrade, &fired)).RollbackLast(t.Context())
		return err
	})
	if !died {
		t.Fatal("the rollback --last did not reach after-etcd-downgrade")
	}
	n.crash(false)
	res, err := n.engine(nil).Rollback(t.Context(), "operator")
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("rollback: %+v %v, want rolled back", res, err)
	}
	if n.etcd.cancels != 1 || n.etcd.enabled != "" {
		t.Errorf("%d cancels, etcd downgrades to %q: want the downgrade this transaction enabled cancelled", n.etcd.cancels, n.etcd.enabled)
	}
}

// The rollback of a rollback --last that swapped etcd to 3.5 and failed at
// a later component puts etcd 3.6 back and cancels the downgrade it
// enabled; a cancel etcd does not carry out pauses it (exit 6), and
// resume cancels again.
func TestEtcdDowngradeCancelledByTheRollbackOfARollbackLast(t *testing.T) {
	n := newMemNode(t)
	old := n.st.Images[nodestate.Scheduler]
	upgradedTo36(t, n)
	n.k.SetImageMode(old, standin.ModeNeverListen)
	n.etcd.cancelFails = fmt.Errorf("%w: etcd still downgrades to 3.5", etcddata.ErrDowngradeStillEnabled)
	res, err := n.engine(nil).RollbackLast(t.Context())
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), "still enabled") {
		t.Fatalf("rollback --last: %+v %v: want the rollback paused, the downgrade still enabled", res, err)
	}
	if n.etcd.downgrades != 1 || n.etcd.enabled != "3.5" {
		t.Fatalf("%d downgrades, enabled %q: the test does not exercise a downgrade enabled and swapped", n.etcd.downgrades, n.etcd.enabled)
	}
	n.etcd.cancelFails = nil
	res, err = n.engine(nil).Resume(t.Context())
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("resume: %+v %v, want rolled back", res, err)
	}
	if n.etcd.enabled != "" || n.etcd.cancels != 2 {
		t.Errorf("%d cancels, etcd downgrades to %q: want it cancelled by the resume", n.etcd.cancels, n.etcd.enabled)
	}
	if b, err := n.store.Read(nodestate.Etcd); err != nil || !strings.Contains(string(b), "etcd:3.6") {
		t.Errorf("etcd's manifest (%v) is not etcd 3.6's after the rollback", err)
	}
}

// gateBefore's guard: an error after the enable (the leader move, on a
// member of several) cancels the downgrade this transaction enabled, and
// says so; with none enabled it adds nothing.
func TestEtcdGateFailureCancelsTheDowngrade(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	txn, err := n.j.Begin(journal.Txn{Kind: journal.KindRollbackLast, From: must(n.st.Marshal()), To: must(n.st.Marshal())})
	if err != nil {
		t.Fatal(err)
	}
	txn.Phase = journal.PhaseSnapshotted // as the step's transaction is
	r := &run{txn: &txn, from: n.st, to: n.st}
	moveFailed := errors.New("etcd: moving the leadership off cp-1: context deadline exceeded")
	if got := e.cancelDowngradeOnFail(t.Context(), r, journal.PhaseApplying, moveFailed); got != moveFailed || n.etcd.cancels != 0 {
		t.Errorf("with no downgrade enabled: %v, %d cancels; want the error as it was, no cancel", got, n.etcd.cancels)
	}
	if err := e.enablingHook(t.Context(), r, journal.PhaseApplying, "3.5")(false); err != nil {
		t.Fatal(err)
	}
	n.etcd.enabled = "3.5"
	got := e.cancelDowngradeOnFail(t.Context(), r, journal.PhaseApplying, moveFailed)
	if !errors.Is(got, moveFailed) || !strings.Contains(got.Error(), "was cancelled") || n.etcd.cancels != 1 || n.etcd.enabled != "" {
		t.Errorf("after the enable: %v, %d cancels, enabled %q; want it cancelled and said", got, n.etcd.cancels, n.etcd.enabled)
	}
	if r.enabledDowngrade() != "" {
		t.Error("the cancel was not journaled")
	}
}

// The last member of several: a downgrade etcd did not answer pauses the
// rollback (exit 6), never rollback-failed; the resume downgrades.
func TestEtcdClusterDowngradeUnansweredPauses(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.6.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"}}
	n, engine := newMemNodeMulti(t, f)
	n.etcd.refuse = fmt.Errorf("%w: etcdserver: leader changed", etcddata.ErrDowngradeUnanswered)
	res, err := n.runUncoordinated(engine(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen))
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) || errors.Is(err, ErrRollbackFailed) {
		t.Fatalf("Run: %+v %v: want the rollback paused, not failed", res, err)
	}
	n.etcd.refuse = nil
	if res, err = n.resumeUncoordinated(engine()); !errors.Is(err, ErrRolledBack) || n.etcd.downgrades != 1 {
		t.Fatalf("resume: %+v %v, %d downgrades: want rolled back through the downgrade", res, err, n.etcd.downgrades)
	}
}
