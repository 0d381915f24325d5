package engine

// The etcd quorum gates on the three-node test bed (issue 37): an alarm
// raised on one member while another is down, and a member lost while a
// downgrade step waits. In both, no etcd stop leaves fewer than two of
// three members answering.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/haload"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// TestHAAlarmRaisedDuringARollback: node-1's release fails after its etcd
// step (3.6 -> 3.7). As its rollback reaches the gate before stopping
// etcd, a NOSPACE alarm is raised on node-2's member (every member's
// status lists it) and node-3's etcd goes down. node-1's member still
// answers and votes, so stopping it would leave one of three: the rollback
// pauses naming node-3, etcd 3.7 left running. With node-3 back and the
// alarm disarmed, resume rolls back.
func TestHAAlarmRaisedDuringARollback(t *testing.T) {
	c, fs := haCluster(t)
	l, members := haload.Start(t, c), haload.StartMembers(t, c)
	n1 := fs[0]
	n1.shortDeadlines()
	cli := etcdclient.New(t, n1.node)
	alarmed := memberIDOf(t, cli, fs[1].node.State.Etcd.MemberName)
	var back func()
	raised := false
	n1.onEvent = func(ev Event) {
		if ev.Step != "etcd-gate" || ev.Phase != string(journal.PhaseRollingBack) || raised {
			return
		}
		raised = true
		alarm(t, cli, etcdserverpb.AlarmRequest_ACTIVATE, alarmed)
		back = etcdDown(t, c.Nodes[2])
	}
	res, err := n1.e.Run(t.Context(), haRelease(n1.node.State, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if !raised || !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), "node-3") {
		t.Fatalf("node-1 with NOSPACE on node-2 and node-3's etcd down (raised %v): %+v %v; want the rollback paused by the gate naming node-3", raised, res, err)
	}
	if v := etcdclient.Version(t, n1.node); !strings.HasPrefix(v, "3.7.") {
		t.Fatalf("node-1's etcd serves %s after the paused gate, want 3.7 left running", v)
	}
	n1.onEvent = nil
	back()
	alarm(t, cli, etcdserverpb.AlarmRequest_DEACTIVATE, alarmed)
	if res, err := n1.e.Resume(t.Context()); res.Outcome != RolledBack || !errors.Is(err, ErrRolledBack) {
		t.Fatalf("node-1 resume with node-3 back and the alarm disarmed: %+v %v; want rolled back", res, err)
	}
	if v := etcdclient.Version(t, n1.node); !strings.HasPrefix(v, "3.6.") {
		t.Errorf("node-1's etcd serves %s after its rollback, want 3.6", v)
	}
	gateFigures(t, l, members, "an alarm raised on one member and another member down during a rollback")
}

// TestHAMemberLostDuringTheDowngradeWait: every node runs etcd 3.7;
// node-1's rollback --last moves its etcd down to 3.6, so its step runs
// etcd's downgrade protocol after the quorum gate passed. node-3's etcd
// goes down once the cluster version moved to 3.6, while the step waits for
// the storage version. The gate checks the quorum again before the stop:
// node-1's step is refused naming node-3, its etcd never stopped.
func TestHAMemberLostDuringTheDowngradeWait(t *testing.T) {
	c, fs := haCluster(t)
	l, members := haload.Start(t, c), haload.StartMembers(t, c)
	for _, f := range fs {
		if res, err := f.e.Run(t.Context(), haRelease(f.node.State, "", ""), nil); err != nil {
			t.Fatalf("%s: %+v %v", f.node.State.NodeName, res, err)
		}
	}
	n1 := fs[0]
	before := etcdProcess(t, n1.node)
	tlsCfg, err := n1.node.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: time.Second}
	var once sync.Once
	var back func()
	done := make(chan struct{})
	// down takes node-3's etcd down once, and returns when it is gone
	// (also to a second caller while the first waits).
	down := func(when string) {
		once.Do(func() {
			t.Logf("taking node-3's etcd down %s", when)
			back = etcdDown(t, c.Nodes[2])
		})
	}
	var poll sync.WaitGroup
	n1.onEvent = func(ev Event) {
		switch ev.Step {
		case "etcd-downgrade":
			poll.Go(func() {
				for {
					if strings.HasPrefix(clusterVersion(t.Context(), hc, n1.node.EtcdEndpoint()), "3.6.") {
						down("once the cluster version moved to 3.6, during the storage version wait")
						return
					}
					select {
					case <-done:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			})
		case "etcd-downgraded":
			down("as the storage version wait ended (before the poll saw the move)")
		}
	}
	res, err := n1.e.RollbackLast(t.Context())
	close(done)
	poll.Wait()
	n1.onEvent = nil
	if back == nil {
		t.Fatalf("node-3's etcd was never taken down (rollback --last: %+v %v)", res, err)
	}
	back()
	if res.Outcome == Committed || !strings.Contains(res.Reason, "node-3") {
		t.Fatalf("node-1 rollback --last with node-3's etcd down during the downgrade: %+v %v; want its etcd step refused naming node-3", res, err)
	}
	if after := etcdProcess(t, n1.node); after != before {
		t.Fatalf("node-1's etcd %+v -> %+v: the step stopped it on a quorum checked before node-3 froze", before, after)
	}
	gateFigures(t, l, members, "a member lost during a downgrade step's wait")
}

// clusterVersion is the cluster version etcd at url reports on /version,
// "" when it does not answer.
func clusterVersion(ctx context.Context, hc *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/version", nil)
	if err != nil {
		return ""
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Cluster string `json:"etcdcluster"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return ""
	}
	return v.Cluster
}

// gateFigures stops the member probe and the load and logs scenario's
// figures line; it fails t when two members were ever down at once, when
// none was (the probe did not watch), or when an acknowledged write is
// gone.
func gateFigures(t *testing.T, l *haload.Load, members *haload.Members, scenario string) {
	t.Helper()
	m := members.Stop()
	f := l.Result(t)
	t.Logf("HA figures: %s: max members down at once %d, writes acked %d/%d, %d lost, API %.2f%%", scenario, m.MaxDown, f.Acked, f.Writes, f.Lost, f.API())
	t.Logf("member probe: %s", m)
	switch {
	case m.MaxDown > 1:
		t.Errorf("%d etcd members of 3 were down at once (%s at %s): quorum lost", m.MaxDown, strings.Join(m.Worst, ", "), m.WorstAt.Format("15:04:05.000"))
	case m.MaxDown == 0:
		t.Errorf("the member probe never saw a member down in %d samples", m.Samples)
	}
	if f.Lost > 0 {
		t.Errorf("%d of %d acknowledged writes are gone", f.Lost, f.Acked)
	}
}

// etcdDown takes n's etcd member down as a crash for good does: its
// manifest moved aside, so kubelet stops it and does not start it again
// (a killed etcd kubelet restarts at once; a frozen one still takes
// connections and stalls a client's requests). It returns when the
// process is gone; the func it returns puts the manifest back and waits
// until the member answers. Call both from the test's goroutine (an
// engine event hook runs on it); etcdDown may run on another, and then
// only t.Error reports.
func etcdDown(t *testing.T, n *testbed.Node) (back func()) {
	tgt, err := n.Target(nodestate.Etcd)
	if err != nil {
		t.Error(err)
		return func() {}
	}
	path, aside := filepath.Join(n.ManifestDir, "etcd.yaml"), filepath.Join(t.TempDir(), "etcd.yaml")
	if err := os.Rename(path, aside); err != nil {
		t.Error(err)
		return func() {}
	}
	back = func() {
		if err := os.Rename(aside, path); err != nil {
			t.Fatal(err)
		}
		waitFor(t, n.State.NodeName+"'s etcd to answer again", func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			return n.Scanner.Active(ctx, tgt)
		})
	}
	waitFor(t, n.State.NodeName+"'s etcd to exit", func() bool {
		ps, err := n.Scanner.PIDs(tgt.Binary)
		return err == nil && len(ps) == 0
	})
	return back
}

// waitFor polls ok every 50 ms for a minute; t.Error says what it waited
// for when it never held.
func waitFor(t *testing.T, what string, ok func() bool) {
	for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("waited a minute for %s", what)
			return
		}
	}
}

// etcdProcess is n's one etcd process.
func etcdProcess(t *testing.T, n *testbed.Node) proc.Process {
	t.Helper()
	tgt, err := n.Target(nodestate.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := n.Scanner.PIDs(tgt.Binary)
	if err != nil || len(pids) != 1 {
		t.Fatalf("%s's etcd: %v %v, want one process", n.State.NodeName, pids, err)
	}
	return pids[0]
}

// memberIDOf is the id of the member named name.
func memberIDOf(t *testing.T, cli *clientv3.Client, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Members {
		if m.Name == name {
			return m.ID
		}
	}
	t.Fatalf("no etcd member %s", name)
	return 0
}

// alarm activates or deactivates NOSPACE on member through etcd's
// maintenance API: the alarm etcd raises itself when a member's backend
// quota is full, in the same replicated alarm store (engine's and cluster's
// tests fill a real quota; here one node's etcd cannot be given its own).
func alarm(t *testing.T, cli *clientv3.Client, action etcdserverpb.AlarmRequest_AlarmAction, member uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	mc := etcdserverpb.NewMaintenanceClient(cli.ActiveConnection())
	if _, err := mc.Alarm(ctx, &etcdserverpb.AlarmRequest{Action: action, MemberID: member, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
		t.Fatalf("NOSPACE %s on %x: %v", action, member, err)
	}
}
