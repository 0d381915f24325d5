package engine

// A rollback's decision about etcd (issue 26): on a single member whether
// its data is restored, journaled before the rollback stops etcd and
// followed by every resume; on a member of a multi-member cluster whether
// the old etcd may go back, from the cluster version etcd reports and from
// whether this member's new etcd ever ran, a member whose version is
// unknown pausing the rollback. All on the kubelet model; the cluster's
// answers come through the engine's etcdVersions seam.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// etcdDecision is the transaction's etcd-data record, if any, and whether
// it was journaled before the rollback's first stop of etcd (before the
// rollback journaled etcd's mark, if it got that far).
func (n *memNode) etcdDecision(id string) (journal.Record, bool) {
	n.t.Helper()
	recs, err := n.j.Records(id)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, r := range recs {
		switch {
		case r.Step == journal.StepEtcdData:
			return r, true
		case r.Phase == journal.PhaseRollingBack && r.Step == journal.StepMark && r.Component == nodestate.Etcd:
			return journal.Record{}, false
		}
	}
	return journal.Record{}, false
}

// Item 3, first defect: the upgrade's etcd stop times out (kubelet stuck),
// the rollback keeps the data, its own stop times out too (exit 6);
// kubelet is fixed and kills the old etcd; resume sees no etcd process
// and must still keep the data: the old etcd served every write.
func TestEtcdDataKeptWhenTheRollbacksStopTimedOutToo(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	etcdPath := n.store.Path(nodestate.Etcd)
	n.k.Hold(etcdPath)
	n.etcdNeverReplaced = true
	res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil)
	if !errors.Is(err, ErrStillOpen) || !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run: %+v %v: want the rollback paused on etcd's stop", res, err)
	}
	if d, before := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdKeep || !before {
		t.Errorf("decision %+v (before the rollback's stop: %v), want keep, journaled before it", d, before)
	}
	n.k.Release(etcdPath) // kubelet acts on the removal: the old etcd exits
	if ps, _ := n.k.PIDs("etcd"); len(ps) != 0 {
		t.Fatalf("the old etcd still runs: %v", ps)
	}
	n.resume(RolledBack)
	n.expectConverged(RolledBack)
}

// markCrash is the model whose first Mark after the last look of a stop
// (Arm) crashes the engine once armed: a crash right after the rollback
// stopped its components, before it journaled their marks.
type markCrash struct {
	Processes
	armed *bool
	ready *bool
}

func (m markCrash) Arm(t proc.Target) ([]proc.Process, error) {
	*m.ready = *m.armed
	return m.Processes.Arm(t)
}

func (m markCrash) Mark() (proc.Mark, error) {
	if *m.ready {
		*m.armed, *m.ready = false, false
		panic(crashed{"rollback-after-stop"})
	}
	return m.Processes.Mark()
}

// Item 3, second defect: the same after a crash right after the
// rollback's stop (the old etcd gone), before its marks are journaled.
func TestEtcdDataKeptAfterACrashRightAfterTheRollbacksStop(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	etcdPath := n.store.Path(nodestate.Etcd)
	n.k.Hold(etcdPath)
	n.etcdNeverReplaced = true
	armed, ready := false, false
	n.procs = markCrash{n.k, &armed, &ready}
	n.onEvent = func(ev Event) {
		if ev.Step == "stop" && ev.Component == nodestate.Etcd && ev.Phase == string(journal.PhaseRollingBack) {
			n.k.Release(etcdPath)
			armed = true
		}
	}
	if _, died := survive(func() error {
		_, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil)
		return err
	}); !died {
		t.Fatal("the rollback never stopped etcd")
	}
	n.procs, n.onEvent = nil, nil
	n.crash(false)
	if ps, _ := n.k.PIDs("etcd"); len(ps) != 0 {
		t.Fatalf("the old etcd still runs: %v", ps)
	}
	n.resume(RolledBack)
	n.expectConverged(RolledBack)
}

// fakeVersions is what the other two members of a three-member cluster
// answer: each one's etcd version ("" when it did not answer) and health,
// and the cluster version they report.
type fakeVersions struct {
	clusterVersion string
	others         map[string]string // cp-2, cp-3: etcd version
	unhealthy      map[string]string // why a member is unhealthy
	err            error             // when set, what every read returns
	reads          int
}

func (f *fakeVersions) read(_ context.Context, st *nodestate.NodeState) (*cluster.Versions, error) {
	f.reads++
	if f.err != nil {
		return nil, f.err
	}
	h := &cluster.Health{Self: 1, Leader: 2}
	v := &cluster.Versions{Health: h}
	names := []string{st.Etcd.MemberName, "cp-2", "cp-3"}
	for i, name := range names {
		id := uint64(i + 1)
		mh := cluster.MemberHealth{ID: id, Name: name, Started: true, Healthy: true}
		mv := cluster.MemberVersion{ID: id, Name: name}
		if i > 0 {
			mh.Version, mv.Server = f.others[name], f.others[name]
		}
		if mv.Server == "" && i > 0 {
			mh.Healthy, mh.Err = false, "no status from https://"+name+":2379: context deadline exceeded"
			mv.Err = "Get https://" + name + ":2379/version: context deadline exceeded"
		} else if i > 0 {
			mv.Cluster = f.clusterVersion
		}
		if why, ok := f.unhealthy[name]; ok {
			mh.Healthy, mh.Err = false, why
		}
		h.Members = append(h.Members, mh)
		v.Members = append(v.Members, mv)
	}
	return v, nil
}

// multiKeepsData is what converged says of a rollback that kept etcd's
// data after a newer etcd ran: right on a multi-member cluster, where the
// other members hold the data.
const multiKeepsData = "never restored etcd's data"

// newMemNodeMulti is a model node of a three-member cluster (cp-1 of
// testdata/states/default.yaml, etcd 3.5), driven without the rollout
// lock (the model has no etcd to take it in): the cluster's answers come
// from f.
func newMemNodeMulti(t *testing.T, f *fakeVersions) (*memNode, func() *Engine) {
	t.Helper()
	n := newMemNode(t)
	n.st.Etcd.InitialCluster = "cp-1=https://10.0.0.11:2380,cp-2=https://10.0.0.12:2380,cp-3=https://10.0.0.13:2380"
	n.st.Etcd.InitialClusterState = "existing"
	if _, err := n.store.WriteAll(n.st); err != nil {
		t.Fatal(err)
	}
	if err := n.j.PutNodeState(n.st); err != nil {
		t.Fatal(err)
	}
	return n, func() *Engine {
		e := n.engine(nil)
		e.etcdVersions = f.read
		// The topology a coordinated transaction reads from etcd's
		// member list (drive is called here without it).
		e.top = topology{members: 3, source: "the test's cluster"}
		return e
	}
}

// runUncoordinated begins and drives the upgrade to rel as Run does, but
// for the rollout lock.
func (n *memNode) runUncoordinated(e *Engine, rel *Release) (Result, error) {
	n.t.Helper()
	n.before = n.manifests()
	p, err := e.Plan(rel)
	if err != nil {
		n.t.Fatal(err)
	}
	from, _ := p.From.Marshal()
	to, _ := p.To.Marshal()
	txn, err := n.j.Begin(journal.Txn{Kind: journal.KindUpgrade, From: from, To: to, Changed: p.Changed(), Targets: p.Targets()})
	if err != nil {
		n.t.Fatal(err)
	}
	return e.drive(n.t.Context(), &txn)
}

// resumeUncoordinated drives the open transaction as Resume does, but for
// the rollout lock.
func (n *memNode) resumeUncoordinated(e *Engine) (Result, error) {
	n.t.Helper()
	open, err := n.j.OpenTxn()
	if err != nil || open == nil {
		n.t.Fatalf("open transaction: %v %v", open, err)
	}
	return e.drive(n.t.Context(), open)
}

// etcdNeverStarts makes the model never start the new etcd pod (its image
// missing, a flag it refuses): kubelet acts on the step's removal of the
// old manifest, then on nothing, until the rollback stops etcd.
func (n *memNode) etcdNeverStarts() func(Event) {
	etcdPath := n.store.Path(nodestate.Etcd)
	return func(ev Event) {
		switch {
		case ev.Step == "write" && ev.Component == nodestate.Etcd && ev.Phase == string(journal.PhaseApplying):
			n.k.Hold(etcdPath)
		case ev.Step == "stop" && ev.Component == nodestate.Etcd && ev.Phase == string(journal.PhaseRollingBack):
			n.k.Release(etcdPath)
		}
	}
}

// The point of no return ignores this member (defect): the last member's
// new etcd never ran, so the cluster version never moved and the old etcd
// goes back, although every other member runs the new minor.
func TestEtcdOldBackWhenTheLastMembersNewEtcdNeverRan(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"}}
	n, engine := newMemNodeMulti(t, f)
	n.etcdNeverReplaced = true
	n.onEvent = n.etcdNeverStarts()
	res, err := n.runUncoordinated(engine(), release(n.st, true, "", ""))
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back, the old etcd written back", res, err)
	}
	if d, before := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdKeep || !before || !strings.Contains(d.Why, "never ran") {
		t.Errorf("decision %+v (before the stop: %v), want keep because the new etcd never ran", d, before)
	}
	n.expectConverged(RolledBack)
}

// The old etcd went back without knowing the cluster version (review
// finding): no etcd process runs and no replacement is journaled, which
// is also what a reboot leaves after the new etcd ran unseen (stratum
// killed after the write, the cluster version moved). With etcd's
// versions unread the rollback must pause (exit 6) with etcd's manifest
// untouched, and write the old etcd back once the cluster version reads
// as not moved.
func TestEtcdRollbackPausesWhenNoEtcdRunsAndVersionsAreUnread(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"},
		err: errors.New("dial tcp 10.0.0.2:2379: connection refused")}
	n, engine := newMemNodeMulti(t, f)
	n.etcdNeverReplaced = true
	n.onEvent = n.etcdNeverStarts()
	res, err := n.runUncoordinated(engine(), release(n.st, true, "", ""))
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Run: %+v %v: want the rollback paused, waiting for etcd's member list", res, err)
	}
	if d, _ := n.etcdDecision(res.Txn); d.Step != "" {
		t.Errorf("a decision was journaled although the cluster version is unknown: %+v", d)
	}
	f.err = nil
	res, err = n.resumeUncoordinated(engine())
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("resume: %+v %v: want rolled back, the old etcd written back", res, err)
	}
	if d, _ := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdKeep || !strings.Contains(d.Why, "cluster version is 3.5.0") {
		t.Errorf("decision %+v, want keep because the cluster version did not move", d)
	}
	n.expectConverged(RolledBack)
}

// etcdWriteFails is the model's store whose write of etcd's manifest fails
// with EIO, once: the step fails after its stop removed the manifest.
type etcdWriteFails struct {
	modelStore
	failed *bool
}

func (s etcdWriteFails) Put(name string, b []byte) (bool, error) {
	if name == nodestate.Etcd && !*s.failed {
		*s.failed = true
		return false, &fs.PathError{Op: "write", Path: s.Path(name), Err: syscall.EIO}
	}
	return s.modelStore.Put(name, b)
}

func (s etcdWriteFails) PutMode(name string, b []byte, perm fs.FileMode) (bool, error) {
	if name == nodestate.Etcd && !*s.failed {
		*s.failed = true
		return false, &fs.PathError{Op: "write", Path: s.Path(name), Err: syscall.EIO}
	}
	return s.modelStore.PutMode(name, b, perm)
}

// The same defect when the step failed after its stop removed etcd's
// manifest: the rollback must put the old one back, not pause on every
// resume with the manifest missing.
func TestEtcdOldBackWhenTheStepFailedAfterTheStop(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"}}
	n, _ := newMemNodeMulti(t, f)
	failed := false
	e := n.engineWith(etcdWriteFails{modelStore{n.store, n.k}, &failed}, nil)
	e.etcdVersions = f.read
	n.etcdNeverReplaced = true
	res, err := n.runUncoordinated(e, release(n.st, true, "", ""))
	if !failed {
		t.Fatal("etcd's write never failed")
	}
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back, the old etcd written back", res, err)
	}
	n.expectConverged(RolledBack)
}

// Item 2, unknown is unknown: this member's new etcd ran and a later
// component failed; one member does not answer. The rollback pauses
// (exit 6) saying whom it waits for, with nothing stopped or restored;
// once the member answers on the old minor, resume writes the old etcd
// back.
func TestEtcdRollbackPausesOnAMemberThatDoesNotAnswer(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": ""}}
	n, engine := newMemNodeMulti(t, f)
	res, err := n.runUncoordinated(engine(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen))
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), "cp-3") {
		t.Fatalf("Run: %+v %v: want the rollback paused, waiting for cp-3", res, err)
	}
	if d, _ := n.etcdDecision(res.Txn); d.Step != "" {
		t.Errorf("a decision was journaled although cp-3's version is unknown: %+v", d)
	}
	if _, err := n.store.Read(nodestate.Etcd); err != nil {
		t.Errorf("etcd's manifest: %v; the paused rollback must not have stopped etcd", err)
	}
	f.others["cp-3"] = "3.5.35"
	res, err = n.resumeUncoordinated(engine())
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("resume: %+v %v: want rolled back", res, err)
	}
	n.expectConverged(RolledBack, multiKeepsData)
}

// Item 2: a member with a NOSPACE alarm that runs the new minor is not
// "old": the cluster version moved, and the old etcd cannot start on the
// data as it is. Issue 30: this member's new etcd answers, so etcd's
// downgrade protocol sets the cluster back through it, journaled before
// the old etcd is written back; nothing is restored.
func TestEtcdRollbackDowngradesWhenTheClusterVersionMoved(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.6.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"},
		unhealthy: map[string]string{"cp-3": "alarm NOSPACE is raised"}}
	n, engine := newMemNodeMulti(t, f)
	res, err := n.runUncoordinated(engine(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen))
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back through etcd's downgrade", res, err)
	}
	if d, before := n.etcdDecision(res.Txn); d.EtcdData != journal.EtcdDowngrade || !before || !strings.Contains(d.Why, "cluster version is 3.6.0") {
		t.Errorf("decision %+v (before the rollback's stop: %v), want downgrade from the cluster version, journaled before it", d, before)
	}
	if !etcdDowngraded(n.j, res.Txn) {
		t.Error("no etcd-downgraded record: the old etcd went back before etcd's downgrade was done")
	}
	if n.etcd.downgrades != 1 || n.etcd.restores != 0 {
		t.Errorf("downgrades %d, restores %d: want one downgrade and no restore on a multi-member cluster", n.etcd.downgrades, n.etcd.restores)
	}
	n.expectConverged(RolledBack, multiKeepsData)
}

// The cluster version moved but this member's new etcd does not answer:
// the downgrade cannot run through it, so the rollback refuses
// (rollback-failed) with etcd untouched and nothing restored.
func TestEtcdRollbackRefusedWhenTheClusterVersionMovedAndEtcdIsSilent(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.6.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"}}
	n, engine := newMemNodeMulti(t, f)
	n.k.SetImageMode(etcd36, standin.ModeNeverListen)
	res, err := n.runUncoordinated(engine(), release(n.st, true, "", ""))
	if !errors.Is(err, ErrRollbackFailed) || !strings.Contains(res.Reason, "does not answer, so etcd's downgrade protocol cannot run") {
		t.Fatalf("Run: %+v %v: want rollback-failed, this member's etcd silent", res, err)
	}
	got, err := n.store.Read(nodestate.Etcd)
	if err != nil || !strings.Contains(string(got), "etcd:3.6.16") {
		t.Errorf("etcd's manifest (%v) is not the new one: the old etcd was written back", err)
	}
	if n.etcd.restores != 0 || n.etcd.downgrades != 0 {
		t.Errorf("restores %d, downgrades %d on a multi-member cluster whose etcd does not answer", n.etcd.restores, n.etcd.downgrades)
	}
}

// etcd refuses the downgrade on a member of several: there is no backup
// to fall back on, so the rollback ends rollback-failed with the new etcd
// left running and nothing restored.
func TestEtcdRollbackFailsWhenEtcdRefusesTheClusterDowngrade(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.6.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"}}
	n, engine := newMemNodeMulti(t, f)
	n.etcd.refuse = fmt.Errorf("%w: the test refuses it", etcddata.ErrDowngradeRefused)
	res, err := n.runUncoordinated(engine(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen))
	if !errors.Is(err, ErrRollbackFailed) || !strings.Contains(res.Reason, "the test refuses it") {
		t.Fatalf("Run: %+v %v: want rollback-failed naming etcd's refusal", res, err)
	}
	if got, err := n.store.Read(nodestate.Etcd); err != nil || !strings.Contains(string(got), "etcd:3.6.16") {
		t.Errorf("etcd's manifest (%v) is not the new one: the old etcd was written back", err)
	}
	if n.etcd.restores != 0 {
		t.Errorf("etcd's data was restored %d times on a multi-member cluster", n.etcd.restores)
	}
}

// The decision is journaled before the rollback stops etcd, and a resume
// follows it: the rollback decided to put the old etcd back (cp-3 on the
// old minor), stopped everything and crashed; by the resume every other
// member reads the new minor (what a member that answered late, or was
// taken for old, shows). The resume must finish the rollback, not refuse
// it with the control plane's manifests gone.
func TestEtcdRollbackResumeFollowsTheJournaledDecision(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.5.35"}}
	n, engine := newMemNodeMulti(t, f)
	armed, ready := false, false
	n.procs = markCrash{n.k, &armed, &ready}
	n.onEvent = func(ev Event) {
		if ev.Step == "stop" && ev.Phase == string(journal.PhaseRollingBack) {
			armed = true
		}
	}
	if _, died := survive(func() error {
		_, err := n.runUncoordinated(engine(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen))
		return err
	}); !died {
		t.Fatal("the rollback never stopped the components")
	}
	n.procs, n.onEvent = nil, nil
	n.crash(false)
	if _, err := n.store.Read(nodestate.Etcd); err == nil {
		t.Fatal("etcd's manifest is on disk: the crash came before the rollback's stop")
	}
	f.others["cp-3"] = "3.6.16"
	reads := f.reads
	res, err := n.resumeUncoordinated(engine())
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("resume: %+v %v: want rolled back by the journaled decision", res, err)
	}
	if f.reads != reads {
		t.Errorf("the resume asked the cluster again (%d reads) instead of following the journal", f.reads-reads)
	}
	n.expectConverged(RolledBack, multiKeepsData)
}

// Only a newer etcd minor can move the cluster version past the old etcd:
// a transaction that does not move etcd up (the same minor, or back down,
// as a rollback of a rollback --last would) keeps the data without asking
// the cluster.
func TestEtcdMemberDecisionOnlyForANewerMinor(t *testing.T) {
	f := &fakeVersions{clusterVersion: "3.6.0", others: map[string]string{"cp-2": "3.6.16", "cp-3": "3.6.16"}}
	n, engine := newMemNodeMulti(t, f)
	e := engine()
	for _, c := range []struct{ from, to string }{{"3.6.16-0", "3.5.35-0"}, {"3.6.16-0", "3.6.17-0"}} {
		from, to := n.st.Clone(), n.st.Clone()
		from.Images[nodestate.Etcd] = "registry.k8s.io/etcd:" + c.from
		to.Images[nodestate.Etcd] = "registry.k8s.io/etcd:" + c.to
		data, why, err := e.memberEtcdDecision(t.Context(), &run{txn: &journal.Txn{ID: "t"}, from: from, to: to})
		if err != nil || data != journal.EtcdKeep || !strings.Contains(why, "does not move etcd to a newer minor") {
			t.Errorf("etcd %s -> %s: %q %v, want the data kept", c.from, c.to, why, err)
		}
	}
	if f.reads != 0 {
		t.Errorf("the cluster was asked %d times", f.reads)
	}
}
