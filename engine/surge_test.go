package engine

// Surge replacement on the test bed: the kubelet stand-in (pod cgroups,
// kubelet's NodePorts admission) runs the component stand-ins, which share
// a port only with --permit-port-sharing.

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// portSharingNode is a test bed node whose three API-serving components
// already run with --permit-port-sharing=true, as after an upgrade.
func portSharingNode(t *testing.T) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("surge needs pod cgroups: the kubelet stand-in makes them as root")
	}
	f := newFixture(t, testbed.Options{Mutate: func(st *nodestate.NodeState) {
		for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
			withPortSharing(st, comp)
		}
	}})
	if f.node.CgroupParent == "" {
		t.Skip("the kubelet stand-in makes no pod cgroups here (no writable cgroup v2)")
	}
	return f
}

// refusals counts, until stop, the connections to addr refused every
// 20 ms: a gap in which nothing listens on the component's port.
func refusals(t *testing.T, addr string) (stop func() (refused, tries int64)) {
	t.Helper()
	var refused, tries atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			c, err := net.DialTimeout("tcp", addr, time.Second)
			tries.Add(1)
			if err != nil {
				refused.Add(1)
				continue
			}
			c.Close()
		}
	}()
	return func() (int64, int64) {
		cancel()
		<-done
		return refused.Load(), tries.Load()
	}
}

// The three API-serving components surge: each new instance starts beside
// the old one on the same port, the canonical manifest follows, the surge
// copy goes; kube-apiserver's port never refuses a connection, and the node
// ends exactly as the render says, with no surge file left.
func TestSurgeUpgradeOnTestBed(t *testing.T) {
	t.Parallel()
	f := portSharingNode(t)
	tg, err := manifest.Target(f.node.State, nodestate.KubeAPIServer)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(strings.TrimPrefix(tg.Health, "https://"), "http://")
	addr = addr[:strings.IndexByte(addr, '/')]
	rel := release(f.node.State, false, "", "")
	plan, err := PlanUpgrade(t.Context(), f.node.Store, f.node.Scanner, f.node.State, rel, UpgradeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		if r := plan.Replacements[comp]; !r.Surge {
			t.Errorf("the plan does not say %s surges: %+v", comp, r)
		}
	}
	stop := refusals(t, addr)
	res, err := f.e.Run(t.Context(), rel, nil)
	refused, tries := stop()
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		for _, step := range []string{"surge-write", "wait-surge-active", "surge-remove"} {
			if !f.sawEvent(step, comp) {
				t.Errorf("no %s event for %s: it did not surge", step, comp)
			}
		}
		if f.sawEvent("stop", comp) {
			t.Errorf("%s was stopped: a surge stops nothing", comp)
		}
	}
	if refused != 0 {
		t.Errorf("kube-apiserver's port refused %d of %d connections during the upgrade, want 0", refused, tries)
	}
	t.Logf("kube-apiserver's port: %d of %d connections refused during the upgrade", refused, tries)
	surges, err := f.node.Store.SurgeFiles()
	if err != nil || len(surges) != 0 {
		t.Errorf("surge files after the commit: %v %v, want none", surges, err)
	}
	f.checkConverged(Committed, nil)
}

// --no-surge replaces every component stop-then-start and says why.
func TestNoSurgeStopsThenStarts(t *testing.T) {
	t.Parallel()
	f := portSharingNode(t)
	e, err := New(Config{Journal: f.j, Store: f.node.Store, Scanner: f.node.Scanner, Snapshots: f.snaps, Deadlines: testDeadlines, NoSurge: true, Events: func(ev Event) {
		f.mu.Lock()
		f.events = append(f.events, ev)
		f.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Run(t.Context(), release(f.node.State, false, "", ""), nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		if f.sawEvent("surge-write", comp) || !f.sawEvent("stop", comp) {
			t.Errorf("%s surged under --no-surge", comp)
		}
		if !f.sawEventText("no-surge", comp, "--no-surge") {
			t.Errorf("no line says why %s did not surge", comp)
		}
	}
}

// A surge copy that never answers fails the step before the old instance
// was touched: the rollback removes the copy, and the old kube-scheduler,
// never stopped, still runs the same process.
func TestSurgeCopyFailsRollsBack(t *testing.T) {
	t.Parallel()
	f := portSharingNode(t)
	tg, err := manifest.Target(f.node.State, nodestate.Scheduler)
	if err != nil {
		t.Fatal(err)
	}
	before, err := f.node.Scanner.Of(tg)
	if err != nil || len(before) == 0 {
		t.Fatalf("scheduler before: %v %v", before, err)
	}
	snap := f.manifests()
	dl := testDeadlines
	dl.Active = 3 * time.Second
	e := f.engine(f.node.Scanner, dl)
	res, err := e.Run(t.Context(), release(f.node.State, false, nodestate.Scheduler, standin.ModeUnhealthy), nil)
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v, want rolled back", res, err)
	}
	if !f.sawEvent("surge-write", nodestate.Scheduler) {
		t.Fatal("the scheduler did not surge: the test does not exercise a failed surge copy")
	}
	surges, err := f.node.Store.SurgeFiles()
	if err != nil || len(surges) != 0 {
		t.Errorf("surge files after the rollback: %v %v, want none", surges, err)
	}
	f.checkConverged(RolledBack, snap)
	after, err := f.node.Scanner.Of(tg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after, before) {
		t.Errorf("the scheduler's processes went from %v to %v: the old instance was touched", before, after)
	}
}

// sawEvent reports whether an event of step for comp was emitted.
func (f *fixture) sawEvent(step, comp string) bool { return f.sawEventText(step, comp, "") }

// sawEventText is sawEvent of an event whose message contains text.
func (f *fixture) sawEventText(step, comp, text string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range f.events {
		if ev.Step == step && ev.Component == comp && strings.Contains(ev.Message, text) {
			return true
		}
	}
	return false
}
