package engine

// Issue 30 item 1: a rollback keeps etcd's data whenever its format
// allows: when the new etcd never wrote to it (it never answered, which
// the journal records) or when the transaction kept etcd within a minor.
// On the kubelet model; a multi-member cluster's answers come through the
// engine's etcdVersions seam.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// hasStep reports whether transaction id journaled step for etcd.
func (n *memNode) hasStep(id string, step journal.Step) bool {
	n.t.Helper()
	recs, err := n.j.Records(id)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, r := range recs {
		if r.Step == step && r.Component == nodestate.Etcd {
			return true
		}
	}
	return false
}

// The known defect: the last member's new etcd starts and exits at once
// (a flag it refuses, data it cannot read): the upgrade journals its
// replacement, and the rollback took that for a run that may have moved
// the cluster version, so with every other member on the new minor it
// ended rollback-failed. The new etcd never answered, so it never wrote:
// the old etcd goes back.
func TestEtcdOldBackWhenTheLastMembersNewEtcdExitsAtOnce(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"}}
	n, engine := newMemNodeMulti(t, f)
	n.k.SetImageMode(etcd36, standin.ModeExitAtStart)
	res, err := n.runUncoordinated(engine(), release(n.st, true, "", ""))
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back, the old etcd written back", res, err)
	}
	if !n.hasStep(res.Txn, journal.StepReplaced) {
		t.Fatal("no replacement of etcd was journaled: the test does not exercise the defect")
	}
	if n.hasStep(res.Txn, journal.StepEtcdAnswered) {
		t.Error("an answer of the new etcd was journaled, although it never answered")
	}
	if d, before := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdKeep || !before || !strings.Contains(d.Why, "never answered") {
		t.Errorf("decision %+v (before the stop: %v), want keep because the new etcd never answered", d, before)
	}
	n.expectConverged(RolledBack, multiKeepsData)
}

// A single member whose new etcd exits at once keeps its data: the old
// etcd's writes since the backup are not thrown away.
func TestEtcdDataKeptWhenTheNewEtcdNeverAnswered(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	n.k.SetImageMode(etcd36, standin.ModeExitAtStart)
	res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil)
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back", res, err)
	}
	if n.etcd.restores != 0 {
		t.Errorf("etcd's data was restored %d times, although the new etcd never answered", n.etcd.restores)
	}
	if d, _ := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdKeep || !strings.Contains(d.Why, "never answered") {
		t.Errorf("decision %+v, want keep because the new etcd never answered", d)
	}
	n.expectConverged(RolledBack)
}

// The most common failure: the new etcd's image is missing, kubelet never
// starts it. Nothing runs on the data after the old etcd stopped: kept.
func TestEtcdDataKeptWhenTheNewEtcdNeverStarted(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	n.etcdNeverReplaced = true
	n.onEvent = n.etcdNeverStarts()
	res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil)
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back", res, err)
	}
	if d, _ := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdKeep || !strings.Contains(d.Why, "never ran") {
		t.Errorf("decision %+v, want keep because the new etcd never ran", d)
	}
	n.expectConverged(RolledBack)
}

// A patch-level change of etcd (3.5.35 -> 3.5.36) does not change the
// data's format: the rollback keeps the data although the new etcd ran,
// answered and served writes.
func TestEtcdDataKeptWithinAMinor(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	rel := release(n.st, false, nodestate.Scheduler, standin.ModeNeverListen)
	rel.Images[nodestate.Etcd] = "registry.k8s.io/etcd:3.5.36-0"
	res, err := n.engine(nil).Run(t.Context(), rel, nil)
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back on the scheduler", res, err)
	}
	if !n.hasStep(res.Txn, journal.StepEtcdAnswered) {
		t.Fatal("the new etcd's answer was not journaled")
	}
	if n.etcd.restores != 0 {
		t.Errorf("etcd's data was restored %d times after a change within its minor", n.etcd.restores)
	}
	if d, _ := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdKeep || !strings.Contains(d.Why, "within minor 3.5") {
		t.Errorf("decision %+v, want keep because etcd stayed within its minor", d)
	}
	n.expectConverged(RolledBack)
}

// A newer minor that answered wrote to the data: the rollback does not
// keep it (the answer is journaled, and the decision says so).
func TestEtcdDataNotKeptWhenTheNewerMinorAnswered(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	res, err := n.engine(nil).Run(t.Context(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back on the scheduler", res, err)
	}
	if !n.hasStep(res.Txn, journal.StepEtcdAnswered) {
		t.Fatal("the new etcd's answer was not journaled")
	}
	if d, _ := n.etcdDecision(res.Txn); d.EtcdData == journal.EtcdKeep || !strings.Contains(d.Why, "answered") {
		t.Errorf("decision %+v, want the data not kept because etcd 3.6 answered on it", d)
	}
	n.expectConverged(RolledBack)
}

// A rollback --last that moves etcd down a minor downgrades etcd's data
// first; when that fails, the step fails with etcd's manifest never
// rewritten and the transaction rolls back. A downgrade the step enabled
// itself is cancelled (the cluster version goes back up); one it found
// enabled, or never got to enable, is left alone.
func TestRollbackLastEtcdDownFailsCleanly(t *testing.T) {
	for _, c := range []struct {
		name        string
		afterEnable bool
		cancels     int
		says        string
	}{
		{name: "refused by validate", cancels: 0, says: "stays as it was"},
		{name: "storage version never moved", afterEnable: true, cancels: 1, says: "was cancelled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newMemNode(t)
			if res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil); err != nil || res.Outcome != Committed {
				t.Fatalf("upgrade to etcd 3.6: %+v %v", res, err)
			}
			upgraded, err := n.store.Read(nodestate.Etcd)
			if err != nil {
				t.Fatal(err)
			}
			refusal := fmt.Errorf("%w: the test refuses it", etcddata.ErrDowngradeRefused)
			if c.afterEnable {
				n.etcd.refuseAfterEnable = refusal
			} else {
				n.etcd.refuse = refusal
			}
			res, err := n.engine(nil).RollbackLast(t.Context())
			if !errors.Is(err, ErrRolledBack) || !strings.Contains(res.Reason, c.says) {
				t.Fatalf("rollback --last: %+v %v, want rolled back saying %q", res, err, c.says)
			}
			if got, err := n.store.Read(nodestate.Etcd); err != nil || !bytes.Equal(got, upgraded) {
				t.Errorf("etcd's manifest changed (%v): the failed downgrade must leave etcd 3.6 as it ran", err)
			}
			if n.etcd.cancels != c.cancels {
				t.Errorf("%d downgrade cancels, want %d", n.etcd.cancels, c.cancels)
			}
		})
	}
}
