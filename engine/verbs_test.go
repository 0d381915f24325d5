package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// running reports whether any process of comp runs on f's node.
func (f *fixture) running(comp string) bool {
	f.t.Helper()
	ps, err := f.node.Scanner.PIDs(comp)
	if err != nil {
		f.t.Fatal(err)
	}
	return len(ps) > 0
}

// TestStopStart stops the scheduler and the controller-manager as one
// transaction: both manifests gone, both processes gone, the node state
// lists them as stopped, and a render of that state leaves them out, so
// the stop survives it. Stopping etcd or the API server on this
// single-member node is refused unless allowed; stopping a stopped
// component is nothing to do, and so is starting a running one. Start
// brings the scheduler back with the waits, the controller-manager still
// stopped; start with no names starts the rest.
func TestStopStart(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	ctx := t.Context()
	for _, c := range []string{nodestate.Etcd, nodestate.KubeAPIServer} {
		if _, err := f.e.Stop(ctx, []string{c}, StopOptions{}); !errors.Is(err, ErrControlPlaneDown) {
			t.Fatalf("stop %s on a single-member node: %v, want ErrControlPlaneDown", c, err)
		}
	}
	if _, err := f.e.Start(ctx, []string{nodestate.Scheduler}); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("start of a running scheduler: %v, want nothing to do", err)
	}
	before := identities(t, f.node)
	stopped := []string{nodestate.ControllerManager, nodestate.Scheduler}
	res, err := f.e.Stop(ctx, []string{nodestate.Scheduler, nodestate.ControllerManager}, StopOptions{})
	if err != nil || res.Outcome != Committed || !slices.Equal(res.Changed, stopped) {
		t.Fatalf("stop: %+v %v", res, err)
	}
	st, err := f.j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Stopped, stopped) {
		t.Fatalf("node state stopped %v, want %v", st.Stopped, stopped)
	}
	for _, c := range stopped {
		if _, err := f.node.Store.Read(c); !errors.Is(err, manifest.ErrNoManifest) {
			t.Errorf("%s's manifest after the stop: %v", c, err)
		}
		if f.running(c) {
			t.Errorf("%s runs after the stop", c)
		}
	}
	for _, c := range []string{nodestate.Etcd, nodestate.KubeAPIServer} {
		if now, err := f.node.Scanner.PIDs(c); err != nil || !slices.Equal(now, before[c]) {
			t.Errorf("the stop touched %s: %v -> %v (%v)", c, before[c], now, err)
		}
	}
	if _, err := f.node.Store.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	if _, err := f.node.Store.Read(nodestate.Scheduler); !errors.Is(err, manifest.ErrNoManifest) {
		t.Fatalf("a render of the stopped state wrote the scheduler's manifest: %v", err)
	}
	if _, err := f.e.Stop(ctx, []string{nodestate.Scheduler}, StopOptions{}); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("stop of a stopped scheduler: %v, want nothing to do", err)
	}

	res, err = f.e.Start(ctx, []string{nodestate.Scheduler})
	if err != nil || res.Outcome != Committed {
		t.Fatalf("start: %+v %v", res, err)
	}
	if st, _ = f.j.NodeState(); !slices.Equal(st.Stopped, []string{nodestate.ControllerManager}) {
		t.Fatalf("after starting the scheduler, stopped is %v", st.Stopped)
	}
	if !f.running(nodestate.Scheduler) || f.running(nodestate.ControllerManager) {
		t.Fatal("after the start: the scheduler must run and the controller-manager not")
	}
	if res, err = f.e.Start(ctx, nil); err != nil || !slices.Equal(res.Changed, []string{nodestate.ControllerManager}) {
		t.Fatalf("start of the rest: %+v %v", res, err)
	}
	txn := f.checkConverged(Committed, nil)
	if txn.Kind != journal.KindStart {
		t.Fatalf("last transaction kind %q, want start", txn.Kind)
	}
	if st, _ = f.j.NodeState(); st.Stopped != nil {
		t.Fatalf("after starting everything, stopped is %v", st.Stopped)
	}
}

// TestStopResumesAfterCrash: a stop crashed right after the scheduler's
// manifest was removed is finished by Resume, which waits for the process
// to go and commits the stopped list. A start whose component cannot come
// up rolls back: its manifest removed again and the node state unchanged.
func TestStopResumesAfterCrash(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	ctx := context.Background()
	e := f.engine(f.node.Scanner, testDeadlines)
	if !stopAt(e, fault.Step.Of(fault.AfterWrite, nodestate.Scheduler), func() { e.Stop(ctx, []string{nodestate.Scheduler}, StopOptions{}) }) {
		t.Fatal("the stop never reached after-write:kube-scheduler")
	}
	res, err := f.engine(f.node.Scanner, testDeadlines).Resume(ctx)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if f.running(nodestate.Scheduler) {
		t.Fatal("the scheduler runs after the resumed stop")
	}
	st, _ := f.j.NodeState()
	if !slices.Equal(st.Stopped, []string{nodestate.Scheduler}) {
		t.Fatalf("stopped %v after the resumed stop", st.Stopped)
	}

	// The scheduler's image now fails at start: the start rolls back.
	if err := f.node.MapImage(st.Images[nodestate.Scheduler], kubeImage(f.node, nodestate.Scheduler, map[string]string{standin.EnvMode: string(standin.ModeExitAtStart)})); err != nil {
		t.Fatal(err)
	}
	dl := testDeadlines
	dl.Replace, dl.Active = 5*time.Second, 5*time.Second
	before := f.manifests()
	if _, err := f.engine(f.node.Scanner, dl).Start(ctx, nil); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("start of a scheduler that cannot start: %v, want rolled back", err)
	}
	f.checkConverged(RolledBack, before)
	if st, _ = f.j.NodeState(); !slices.Equal(st.Stopped, []string{nodestate.Scheduler}) {
		t.Fatalf("stopped %v after the rolled-back start", st.Stopped)
	}
	if f.running(nodestate.Scheduler) {
		t.Fatal("the scheduler runs after its start rolled back")
	}
}

// TestStopSurvivesReboot: after a committed stop of the scheduler the node
// loses power; at boot kubelet starts every pod from the manifests on disk
// and resume has nothing to do: the scheduler stays stopped. A start that
// crashes right after writing the scheduler's manifest is then finished by
// resume, which commits with the scheduler running and off the list.
func TestStopSurvivesReboot(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	ctx := context.Background()
	if res, err := f.e.Stop(ctx, []string{nodestate.Scheduler}, StopOptions{}); err != nil || res.Outcome != Committed {
		t.Fatalf("stop: %+v %v", res, err)
	}
	if _, err := f.node.Reboot(0); err != nil {
		t.Fatal(err)
	}
	st, _ := f.j.NodeState()
	for _, comp := range manifest.NamesFor(st) {
		tg, err := manifest.Target(st, comp)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.node.Scanner.WaitActive(ctx, tg, 30*time.Second); err != nil {
			t.Fatalf("after the reboot: %v", err)
		}
	}
	if res, err := f.engine(f.node.Scanner, testDeadlines).Resume(ctx); err != nil || res.Outcome != Nothing {
		t.Fatalf("resume after the reboot: %+v %v, want nothing", res, err)
	}
	if f.running(nodestate.Scheduler) {
		t.Fatal("the stopped scheduler runs after the reboot")
	}

	e := f.engine(f.node.Scanner, testDeadlines)
	if !stopAt(e, fault.Step.Of(fault.AfterWrite, nodestate.Scheduler), func() { e.Start(ctx, []string{nodestate.Scheduler}) }) {
		t.Fatal("the start never reached after-write:kube-scheduler")
	}
	res, err := f.engine(f.node.Scanner, testDeadlines).Resume(ctx)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("resume of the start: %+v %v", res, err)
	}
	f.checkConverged(Committed, nil)
	if st, _ = f.j.NodeState(); st.Stopped != nil || !f.running(nodestate.Scheduler) {
		t.Fatalf("after the resumed start: stopped %v, scheduler running %v", st.Stopped, f.running(nodestate.Scheduler))
	}
}

// PlanStop refuses to stop etcd while the kube-apiserver that serves from
// it keeps running, unless the apiserver's --etcd-servers names other
// members too; stopping both is allowed (with the control-plane flag on a
// single-member node).
func TestPlanStopKeepsTheAPIServersEtcd(t *testing.T) {
	n := newMemNode(t)
	down := StopOptions{AllowControlPlaneDown: true}
	if _, err := PlanStop(n.store, n.st, []string{nodestate.Etcd}, down); !errors.Is(err, ErrStopLeavesDependent) {
		t.Fatalf("stop etcd alone: %v, want ErrStopLeavesDependent", err)
	}
	plan, err := PlanStop(n.store, n.st, []string{nodestate.KubeAPIServer, nodestate.Etcd}, down)
	if err != nil || !slices.Equal(plan.Changed(), []string{nodestate.Etcd, nodestate.KubeAPIServer}) {
		t.Fatalf("stop etcd and kube-apiserver: %v, %v", plan, err)
	}
	st := n.st.Clone()
	st.ExtraArgs = map[string]map[string]nodestate.ArgValues{nodestate.KubeAPIServer: {"etcd-servers": {"https://10.0.0.11:2379,https://10.0.0.12:2379"}}}
	if _, err := PlanStop(n.store, st, []string{nodestate.Etcd}, down); err != nil {
		t.Fatalf("stop etcd alone, the apiserver on other members too: %v", err)
	}
}
