package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/converge"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/resolve"
)

// fixture is a running node (kubelet stand-in, real etcd, component
// stand-ins) with a journal holding its state and an engine over both.
type fixture struct {
	t      *testing.T
	node   *testbed.Node
	j      *journal.Journal
	e      *Engine
	snaps  string
	events []Event
	mu     sync.Mutex
	// onEvent, if set, runs on every event (from the engine's goroutine).
	onEvent func(Event)
}

// testDeadlines fit the test bed's scaled-down kubelet (100 ms start delay).
var testDeadlines = Deadlines{Replace: 30 * time.Second, Active: 30 * time.Second, Stop: 15 * time.Second, Soak: 2 * time.Second, EtcdBackup: 20 * time.Second, Release: 300 * time.Millisecond}

// testCoordination is the rollout lock of the test bed's clusters: a lease
// the etcd minimum allows, so that a crashed node's lock frees quickly.
var testCoordination = Coordination{TTL: 2 * time.Second, Wait: 3 * time.Minute}

func newFixture(t *testing.T, opts testbed.Options) *fixture {
	t.Helper()
	return fixtureOn(t, testbed.Start(t, opts))
}

// fixtureOn is the fixture of a running node: its journal under
// <root>/state holding its state, and an engine over both.
func fixtureOn(t *testing.T, n *testbed.Node) *fixture {
	t.Helper()
	f := &fixture{t: t, node: n, snaps: filepath.Join(n.Root, "state", "snapshots")}
	j, err := journal.Open(filepath.Join(n.Root, "state", "stratum.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	if err := j.PutNodeState(n.State); err != nil {
		t.Fatal(err)
	}
	f.j = j
	f.e = f.engine(n.Scanner, testDeadlines)
	return f
}

func (f *fixture) engine(sc *proc.Scanner, dl Deadlines) *Engine {
	e, err := New(Config{Journal: f.j, Store: f.node.Store, Scanner: sc, Snapshots: f.snaps, Deadlines: dl, Coordination: testCoordination, Events: func(ev Event) {
		f.mu.Lock()
		f.events = append(f.events, ev)
		hook := f.onEvent
		f.mu.Unlock()
		f.t.Logf("event %s %s %s: %s", ev.Phase, ev.Step, ev.Component, ev.Message)
		if hook != nil {
			hook(ev)
		}
	}})
	if err != nil {
		f.t.Fatal(err)
	}
	return e
}

// release moves the node to v1.34.5: every stand-in component to its
// v1.34.5 image (fail's component in mode mode), etcd to 3.6 when etcd36.
func release(st *nodestate.NodeState, etcd36 bool, fail string, mode standin.Mode) *Release {
	r := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: "v1.34.5", Images: map[string]string{}}
	for _, comp := range manifest.NamesFor(st) {
		tag := "v1.34.5"
		if comp == nodestate.KubeVIP {
			tag = "v0.9.2"
		}
		switch comp {
		case nodestate.Etcd:
			if etcd36 {
				r.Images[comp] = "registry.k8s.io/etcd:3.6.16-0"
			}
		case fail:
			r.Images[comp] = testbed.ModeImage(comp, tag, mode)
		default:
			r.Images[comp] = testbed.ModeImage(comp, tag, standin.ModeHealthy)
		}
	}
	// The control plane's version is kube-apiserver's, a stand-in mode's
	// pre-release tag included (v1.34.5-unhealthy).
	r.KubernetesVersion = resolve.ImageTag(r.Images[nodestate.KubeAPIServer])
	return r
}

// manifests returns the bytes of every entry of the manifest directory.
func (f *fixture) manifests() map[string][]byte {
	f.t.Helper()
	return converge.Manifests(f.t, f.node.ManifestDir)
}

// checkConverged asserts converge.Check's invariants of the fixture's node
// and journal after a transaction ended.
func (f *fixture) checkConverged(want Outcome, before map[string][]byte) *journal.Txn {
	f.t.Helper()
	return checkConverged(f.t, f.node, f.j, want, before)
}

// checkConverged is converge.Check on a test bed node: the scan scoped to
// its kubelet stand-in, every component active within 20 s, all within
// 30 s.
func checkConverged(t *testing.T, n *testbed.Node, j *journal.Journal, want Outcome, before map[string][]byte) *journal.Txn {
	t.Helper()
	return converge.Check(t, converge.Node{ManifestDir: n.ManifestDir, Scanner: n.Scanner, Wait: 30 * time.Second, Active: 20 * time.Second}, j, journal.Phase(want), before)
}

func TestUpgradeCommits(t *testing.T) {
	t.Parallel() // a test bed node of its own
	for _, vip := range []bool{false, true} {
		name := "without-vip"
		if vip {
			name = "with-vip"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, testbed.Options{VIP: vip})
			rel := release(f.node.State, false, "", "")
			res, err := f.e.Run(t.Context(), rel, nil)
			if err != nil || res.Outcome != Committed {
				t.Fatalf("Run: %+v %v", res, err)
			}
			if want := len(manifest.NamesFor(f.node.State)) - 1; len(res.Changed) != want {
				t.Fatalf("changed %v, want every component but etcd", res.Changed)
			}
			f.checkConverged(Committed, nil)
			st, _ := f.j.NodeState()
			if st.KubernetesVersion != "v1.34.5" || st.Images[nodestate.Scheduler] != rel.Images[nodestate.Scheduler] {
				t.Fatalf("committed state: %s %v", st.KubernetesVersion, st.Images)
			}
			// The same release again is nothing to do.
			if _, err := f.e.Run(t.Context(), rel, nil); !errors.Is(err, ErrNothingToDo) {
				t.Fatalf("second run: %v", err)
			}
		})
	}
}

func TestFailuresRollBack(t *testing.T) {
	t.Parallel() // a test bed node of its own
	cases := []struct {
		mode     standin.Mode
		comp     string
		crashLag string
	}{
		{standin.ModeNeverListen, nodestate.Scheduler, ""},
		{standin.ModeExitAtStart, nodestate.ControllerManager, ""},
		{standin.ModeUnhealthy, nodestate.KubeAPIServer, ""},
		// Healthy long enough to pass WaitActive, then crash-loops inside
		// the soak window: only the soak catches it.
		{standin.ModeCrashAfter, nodestate.Scheduler, "800ms"},
	}
	for _, c := range cases {
		t.Run(string(c.mode)+"-"+c.comp, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testbed.Options{})
			if c.crashLag != "" {
				ref := testbed.ModeImage(c.comp, "v1.34.5", c.mode)
				if err := f.node.MapImage(ref, kubeImage(f.node, c.comp, map[string]string{standin.EnvMode: string(c.mode), standin.EnvCrashAfter: c.crashLag})); err != nil {
					t.Fatal(err)
				}
			}
			before := f.manifests()
			dl := testDeadlines
			dl.Replace, dl.Active = 10*time.Second, 5*time.Second
			f.e = f.engine(f.node.Scanner, dl)
			res, err := f.e.Run(t.Context(), release(f.node.State, false, c.comp, c.mode), nil)
			if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack {
				t.Fatalf("Run: %+v %v", res, err)
			}
			if !strings.Contains(res.Reason, c.comp) {
				t.Errorf("reason %q does not name %s", res.Reason, c.comp)
			}
			f.checkConverged(RolledBack, before)
		})
	}
}

// TestRollbackMarksAfterOldPodsAreGone: a process started after a
// rollback mark counts as started from the restored manifest, so when the
// rollback marks (and restores), no process of a component it restarts may
// run and no manifest of the upgrade may be left for kubelet to restart one
// from. CI once lost the race this closes: the soak caught a crash-looping
// kube-scheduler, the rollback marked, real kubelet restarted the crashed
// container of the upgrade's pod (its relist came before it saw the
// restored manifest), and the rollback took that restart for its
// replacement, then failed its soak when kubelet killed it.
func TestRollbackMarksAfterOldPodsAreGone(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	comp := nodestate.Scheduler
	mode := standin.ModeCrashAfter
	ref := testbed.ModeImage(comp, "v1.34.5", mode)
	if err := f.node.MapImage(ref, kubeImage(f.node, comp, map[string]string{standin.EnvMode: string(mode), standin.EnvCrashAfter: "800ms"})); err != nil {
		t.Fatal(err)
	}
	before := f.manifests()
	var (
		seen     bool
		problems []string
	)
	f.onEvent = func(ev Event) {
		if ev.Step != "restore" {
			return
		}
		seen = true
		for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
			tgt, err := manifest.Target(f.node.State, c)
			if err != nil {
				t.Error(err)
				return
			}
			if ps, err := f.node.Scanner.PIDs(tgt.Binary); err != nil || len(ps) > 0 {
				problems = append(problems, fmt.Sprintf("%s runs when the rollback restores (pids %v, err %v)", c, ps, err))
			}
			if _, err := f.node.Store.Read(c); !errors.Is(err, manifest.ErrNoManifest) {
				problems = append(problems, fmt.Sprintf("%s's manifest is in place when the rollback restores (err %v)", c, err))
			}
		}
	}
	dl := testDeadlines
	dl.Replace, dl.Active = 10*time.Second, 5*time.Second
	f.e = f.engine(f.node.Scanner, dl)
	res, err := f.e.Run(t.Context(), release(f.node.State, false, comp, mode), nil)
	if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack {
		t.Fatalf("Run: %+v %v", res, err)
	}
	if !seen {
		t.Fatal("the rollback never restored the snapshot")
	}
	for _, p := range problems {
		t.Error(p)
	}
	f.checkConverged(RolledBack, before)
}

// kubeImage is an image-map entry running comp's stand-in with env.
func kubeImage(n *testbed.Node, comp string, env map[string]string) kubeletImage {
	e := map[string]string{standin.EnvEvents: n.EventsFile}
	for k, v := range env {
		e[k] = v
	}
	return kubeletImage{Binary: n.StandinBinary(comp), Env: e}
}

func TestRollbackThatFailsIsJournaled(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	// Once the rollback starts, the old scheduler image is broken too: the
	// old scheduler cannot come back.
	old := f.node.State.Images[nodestate.Scheduler]
	f.onEvent = func(ev Event) {
		if ev.Step == "rollback" {
			if err := f.node.MapImage(old, kubeImage(f.node, nodestate.Scheduler, map[string]string{standin.EnvMode: string(standin.ModeExitAtStart)})); err != nil {
				t.Error(err)
			}
		}
	}
	dl := testDeadlines
	dl.Replace, dl.Active = 5*time.Second, 3*time.Second
	f.e = f.engine(f.node.Scanner, dl)
	res, err := f.e.Run(t.Context(), release(f.node.State, false, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if !errors.Is(err, ErrRollbackFailed) || res.Outcome != RollbackFailed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	var rf *RollbackFailedError
	if !errors.As(err, &rf) || rf.Txn == "" || rf.EtcdAside != "" {
		t.Errorf("error is not a RollbackFailedError for the txn (with etcd's data in place): %#v", err)
	}
	hist, _ := f.j.History(1)
	if hist[0].Phase != journal.PhaseRollbackFailed || len(hist[0].Detail) == 0 || !strings.Contains(string(hist[0].Detail), `"component":"kube-scheduler"`) {
		t.Fatalf("journal: %+v detail %s", hist[0], hist[0].Detail)
	}
	if open, _ := f.j.OpenTxn(); open != nil {
		t.Fatal("a failed rollback left the transaction open: resume would loop")
	}
	// The node state is still the old one.
	st, _ := f.j.NodeState()
	if st.Images[nodestate.Scheduler] != old {
		t.Fatal("node state changed by a failed upgrade")
	}
}

func TestInterruptedRunResumes(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	f.onEvent = func(ev Event) {
		if ev.Step == "wait-replaced" && ev.Component == nodestate.ControllerManager {
			cancel()
		}
	}
	_, err := f.e.Run(ctx, release(f.node.State, false, "", ""), nil)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run with a cancelled context: %v", err)
	}
	open, err := f.j.OpenTxn()
	if err != nil || open == nil || open.Phase != journal.PhaseApplying {
		t.Fatalf("open transaction after the interrupt: %+v %v", open, err)
	}
	f.onEvent = nil
	res, err := f.e.Resume(t.Context())
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Resume: %+v %v", res, err)
	}
	f.checkConverged(Committed, nil)
	// Nothing open: Resume does nothing.
	if res, err := f.e.Resume(t.Context()); err != nil || res.Outcome != Nothing {
		t.Fatalf("Resume with nothing open: %+v %v", res, err)
	}
}

// TestRebootMidUpgrade simulates a reboot in the middle of an upgrade:
// stratum-upgrade dies, every component process is killed and started again
// by kubelet, and the boot id changes. Resume must count every process as
// new and converge.
func TestRebootMidUpgrade(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	f.onEvent = func(ev Event) {
		if ev.Step == "done" && ev.Component == nodestate.KubeAPIServer {
			cancel()
		}
	}
	res, err := f.e.Run(ctx, release(f.node.State, false, "", ""), nil)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run: %v", err)
	}
	f.onEvent = nil
	// The crash came right after the next component's mark was journaled,
	// before its manifest was written: after the reboot kubelet restarts it
	// from the OLD manifest, and the old boot's mark must not take that
	// process for the replacement.
	m, err := f.node.Scanner.Mark()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.j.Append(res.Txn, journal.PhaseApplying, journal.Record{Phase: journal.PhaseApplying, Step: journal.StepMark, Component: nodestate.ControllerManager, ProcMark: &m}); err != nil {
		t.Fatal(err)
	}
	// Every process dies, as in a reboot; kubelet starts them again.
	for _, comp := range manifest.NamesFor(f.node.State) {
		tg, _ := manifest.Target(f.node.State, comp)
		ps, _ := f.node.Scanner.PIDs(tg.Binary)
		for _, p := range ps {
			killPID(p.PID)
		}
	}
	f.j.Close()
	j, err := journal.Open(filepath.Join(f.node.Root, "state", "stratum.db"), journal.Options{BootID: func() (string, error) { return "rebooted-boot-id", nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	f.j = j
	e := f.engine(f.node.Scanner.WithBootID("rebooted-boot-id"), testDeadlines)
	res, err = e.Resume(t.Context())
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Resume after reboot: %+v %v", res, err)
	}
	f.checkConverged(Committed, nil)
	recs, _ := j.Records(res.Txn)
	sawNewBoot := false
	for _, r := range recs {
		sawNewBoot = sawNewBoot || r.BootID == "rebooted-boot-id"
	}
	if !sawNewBoot {
		t.Fatal("no record was written in the new boot")
	}
}

func TestEtcdUpgradeCommitsAndRollbackRestoresData(t *testing.T) {
	t.Parallel() // a test bed node of its own
	t.Run("commit", func(t *testing.T) {
		f := newFixture(t, testbed.Options{})
		etcdclient.Put(t, f.node, "before", "1")
		res, err := f.e.Run(t.Context(), release(f.node.State, true, "", ""), nil)
		if err != nil || res.Outcome != Committed {
			t.Fatalf("Run: %+v %v", res, err)
		}
		txn := f.checkConverged(Committed, nil)
		if v := etcdclient.Version(t, f.node); !strings.HasPrefix(v, "3.6.") {
			t.Fatalf("etcd serves %s after the upgrade, want 3.6", v)
		}
		if got := etcdclient.Get(t, f.node, "before"); got != "1" {
			t.Fatalf("key written before the upgrade: %q", got)
		}
		var b etcddata.Backup
		if err := jsonUnmarshal(txn.EtcdBackup, &b); err != nil || b.Size == 0 {
			t.Fatalf("etcd backup not journaled: %s %v", txn.EtcdBackup, err)
		}
	})
	// Once etcd 3.6 runs, write to it: etcd's downgrade protocol keeps
	// that write; only when etcd refuses it is the 3.5 member's backup
	// restored, without it.
	rollback := func(t *testing.T, refuse bool) (*fixture, Result) {
		f := newFixture(t, testbed.Options{})
		etcdclient.Put(t, f.node, "before", "1")
		f.onEvent = func(ev Event) {
			if ev.Phase == string(journal.PhaseApplying) && ev.Step == "done" && ev.Component == nodestate.Etcd {
				etcdclient.Put(t, f.node, "during", "2")
			}
		}
		before := f.manifests()
		dl := testDeadlines
		dl.Replace, dl.Active = 10*time.Second, 4*time.Second
		f.e = f.engine(f.node.Scanner, dl)
		if refuse {
			f.e.etcd = refusesDowngrade{etcdData{}}
		}
		res, err := f.e.Run(t.Context(), release(f.node.State, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
		if !errors.Is(err, ErrRolledBack) {
			t.Fatalf("Run: %+v %v", res, err)
		}
		f.checkConverged(RolledBack, before)
		if v := etcdclient.Version(t, f.node); !strings.HasPrefix(v, "3.5.") {
			t.Fatalf("etcd serves %s after the rollback, want 3.5", v)
		}
		if got := etcdclient.Get(t, f.node, "before"); got != "1" {
			t.Fatalf("key written before the upgrade: %q", got)
		}
		return f, res
	}
	t.Run("rollback downgrades", func(t *testing.T) {
		f, _ := rollback(t, false)
		if got := etcdclient.Get(t, f.node, "during"); got != "2" {
			t.Fatalf("key written to etcd 3.6 reads %q after the rollback, want it kept by the downgrade", got)
		}
		if aside, _ := filepath.Glob(f.node.State.Etcd.DataDir + ".stratum-pre-rollback-*"); len(aside) != 0 {
			t.Fatalf("etcd's data was restored, and the replaced data set aside at %v", aside)
		}
	})
	t.Run("rollback restores when etcd refuses the downgrade", func(t *testing.T) {
		f, res := rollback(t, true)
		if got := etcdclient.Get(t, f.node, "during"); got != "" {
			t.Fatalf("key written during the upgrade survived the data restore: %q", got)
		}
		aside, _ := filepath.Glob(f.node.State.Etcd.DataDir + ".stratum-pre-rollback-*")
		if len(aside) != 1 {
			t.Fatalf("the replaced etcd data is not kept aside: %v", aside)
		}
		recs, err := f.j.Records(res.Txn)
		if err != nil {
			t.Fatal(err)
		}
		last := journal.Record{}
		for _, r := range recs {
			if r.Step == journal.StepEtcdData {
				last = r
			}
		}
		if last.EtcdData != journal.EtcdRestore || !strings.Contains(last.Why, "losing") {
			t.Errorf("last etcd-data decision %+v, want restore saying how many revisions the backup loses", last)
		}
	})
	t.Run("restored data restarts the control plane", func(t *testing.T) {
		f := newFixture(t, testbed.Options{})
		// Only etcd and the (failing) scheduler change: the apiserver and
		// controller-manager are never written, but after etcd's data goes
		// back their caches are ahead of it, so they must be restarted too.
		rel := release(f.node.State, true, nodestate.Scheduler, standin.ModeNeverListen)
		delete(rel.Images, nodestate.KubeAPIServer)
		delete(rel.Images, nodestate.ControllerManager)
		rel.KubernetesVersion = f.node.State.KubernetesVersion // kube-apiserver stays
		before := map[string][]proc.Process{}
		for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager} {
			tg, _ := manifest.Target(f.node.State, comp)
			before[comp], _ = f.node.Scanner.PIDs(tg.Binary)
		}
		dl := testDeadlines
		dl.Replace, dl.Active = 10*time.Second, 4*time.Second
		f.e = f.engine(f.node.Scanner, dl)
		f.e.etcd = refusesDowngrade{etcdData{}}
		if _, err := f.e.Run(t.Context(), rel, nil); !errors.Is(err, ErrRolledBack) {
			t.Fatalf("Run: %v", err)
		}
		for comp, old := range before {
			tg, _ := manifest.Target(f.node.State, comp)
			now, _ := f.node.Scanner.PIDs(tg.Binary)
			if len(now) != 1 || len(old) != 1 || now[0] == old[0] {
				t.Errorf("%s was not restarted after etcd's data was restored: %v -> %v", comp, old, now)
			}
		}
		if v := etcdclient.Version(t, f.node); !strings.HasPrefix(v, "3.5.") {
			t.Fatalf("etcd serves %s after the rollback, want 3.5", v)
		}
	})
}

// refusesDowngrade is the real etcd data with a downgrade etcd refuses
// (as it refuses one while another is under way): the rollback falls back
// to the backup.
type refusesDowngrade struct{ etcdData }

func (r refusesDowngrade) Downgrade(ctx context.Context, st *nodestate.NodeState, _ string, _ time.Duration, _ func(bool) error) (etcddata.Downgraded, error) {
	rev, err := r.Revision(ctx, st)
	if err != nil {
		return etcddata.Downgraded{}, err
	}
	return etcddata.Downgraded{Revision: rev}, fmt.Errorf("%w: the test refuses it", etcddata.ErrDowngradeRefused)
}
