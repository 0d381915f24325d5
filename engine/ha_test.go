package engine

// Three control-plane nodes on the test bed whose etcd static pods form one
// real three-member cluster (testbed.StartCluster), each with its own
// kubelet stand-in, journal and engine: the rollout through the cluster's
// own etcd (docs/ha.md). make ha runs these and prints their figures.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/haload"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

const (
	etcd36 = "registry.k8s.io/etcd:3.6.16-0"
	etcd37 = "registry.k8s.io/etcd:3.7.3-0"
)

// needHA skips the three-node tests unless make ha runs them
// (STRATUM_HA=1): three nodes of real etcd for a minute each, which make
// test leaves to that target.
func needHA(t *testing.T) {
	t.Helper()
	if os.Getenv("STRATUM_HA") == "" {
		t.Skip("three-node cluster: run make ha (STRATUM_HA=1)")
	}
}

// haCluster is three nodes, each a fixture, on etcd 3.6.
func haCluster(t *testing.T) (*testbed.Cluster, []*fixture) {
	t.Helper()
	needHA(t)
	c := testbed.StartCluster(t, 3, testbed.Options{Mutate: func(st *nodestate.NodeState) { st.Images[nodestate.Etcd] = etcd36 }})
	fs := make([]*fixture, len(c.Nodes))
	for i, n := range c.Nodes {
		fs[i] = fixtureOn(t, n)
	}
	return c, fs
}

// haRelease moves a node to v1.34.5 stand-ins and etcd 3.7; fail's
// component (if any) in mode.
func haRelease(st *nodestate.NodeState, fail string, mode standin.Mode) *Release {
	r := release(st, false, fail, mode)
	r.Images[nodestate.Etcd] = etcd37
	return r
}

// span is when a node's transaction began and ended, from its events.
type span struct {
	node       string
	begin, end time.Time
	waited     bool
}

func (f *fixture) span() span {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := span{node: f.node.State.NodeName}
	for _, ev := range f.events {
		switch ev.Step {
		case "begin":
			s.begin = ev.Time
		case "commit", "rolled-back", "rollback-failed":
			s.end = ev.Time
		case "cluster-lock":
			s.waited = true
		}
	}
	return s
}

// checkOneAtATime fails t when two nodes' transactions overlapped.
func checkOneAtATime(t *testing.T, spans []span) {
	t.Helper()
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin.Before(spans[j].begin) })
	for i := 1; i < len(spans); i++ {
		if spans[i].begin.Before(spans[i-1].end) {
			t.Errorf("%s began at %s, before %s's transaction ended at %s", spans[i].node, spans[i].begin.Format(time.StampMilli), spans[i-1].node, spans[i-1].end.Format(time.StampMilli))
		}
	}
}

// view is the rollout as f's node sees it in etcd.
func view(t *testing.T, f *fixture) *cluster.View {
	return askCluster(t, f, (*cluster.Coordinator).View)
}

// askCluster connects to the cluster through f's member and returns what
// ask reads there, within 10 s.
func askCluster[T any](t *testing.T, f *fixture, ask func(*cluster.Coordinator, context.Context) (T, error)) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	co, err := cluster.Connect(ctx, cluster.Config{Local: etcddata.Endpoint(f.node.State), Node: f.node.State.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	v, err := ask(co, ctx)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// shortDeadlines gives f's engine deadlines short enough for a component
// that never starts: 10 s to be replaced, 4 s to answer.
func (f *fixture) shortDeadlines() {
	dl := testDeadlines
	dl.Replace, dl.Active = 10*time.Second, 4*time.Second
	f.e = f.engine(f.node.Scanner, dl)
}

// checkEtcdServes fails t unless the etcd of each of fs serves a version
// that begins with want ("3.6.").
func checkEtcdServes(t *testing.T, fs []*fixture, want string) {
	t.Helper()
	for _, f := range fs {
		if v := etcdclient.Version(t, f.node); !strings.HasPrefix(v, want) {
			t.Errorf("%s's etcd serves %q, want %s", f.node.State.NodeName, v, want)
		}
	}
}

// checkHalted stops t unless the rollout, as f's node sees it, is halted
// by node, and with outcome unless it is "".
func checkHalted(t *testing.T, f *fixture, node string, outcome Outcome) {
	t.Helper()
	if v := view(t, f); v.Halt == nil || v.Halt.Node != node || (outcome != "" && v.Halt.Outcome != string(outcome)) {
		t.Fatalf("rollout %+v: want halted by %s %s", v, node, outcome)
	}
}

// TestHARolloutSerializes starts the release on all three nodes at once:
// they take turns, every node commits, etcd moves from 3.6 to 3.7 on every
// member, and a client sees every acknowledged write and a live API server
// throughout.
func TestHARolloutSerializes(t *testing.T) {
	c, fs := haCluster(t)
	l := haload.Start(t, c)
	var wg sync.WaitGroup
	results := make([]error, len(fs))
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.e.Run(t.Context(), haRelease(f.node.State, "", ""), nil)
			if err == nil && res.Outcome != Committed {
				err = fmt.Errorf("outcome %s", res.Outcome)
			}
			results[i] = err
		}()
	}
	wg.Wait()
	for i, err := range results {
		if err != nil {
			t.Fatalf("node-%d: %v", i+1, err)
		}
	}
	l.Check(t, "three nodes run at once")
	spans := make([]span, len(fs))
	waited := 0
	for i, f := range fs {
		spans[i] = f.span()
		if spans[i].waited {
			waited++
		}
		f.checkConverged(Committed, nil)
		if v := etcdclient.Version(t, f.node); !strings.HasPrefix(v, "3.7.") {
			t.Errorf("%s's etcd serves %s, want 3.7", f.node.State.NodeName, v)
		}
	}
	checkOneAtATime(t, spans)
	if waited < 2 {
		t.Errorf("%d nodes waited for the rollout lock, want 2 of 3 (all began at once)", waited)
	}
	v := view(t, fs[0])
	if v.Halt != nil || len(v.Nodes) != 3 {
		t.Fatalf("rollout view %+v: want three nodes, no halt", v)
	}
	for _, p := range v.Nodes {
		if p.Outcome != string(Committed) || p.Open() {
			t.Errorf("%s's progress %+v, want committed", p.Node, p)
		}
	}
	t.Logf("HA figures: three nodes run at once: %s", spanSummary(spans))
}

func spanSummary(spans []span) string {
	var parts []string
	first := slices.MinFunc(spans, func(a, b span) int { return a.begin.Compare(b.begin) }).begin
	for _, s := range spans {
		parts = append(parts, fmt.Sprintf("%s %.1f-%.1f s", s.node, s.begin.Sub(first).Seconds(), s.end.Sub(first).Seconds()))
	}
	return strings.Join(parts, ", ")
}

// TestHARollbackHaltsTheRollout: the release fails on the second node; it
// rolls back and the rollout halts, so the third node refuses, naming it;
// the cluster stays consistent (every member serves), and once an operator
// clears the halt the third node upgrades.
func TestHARollbackHaltsTheRollout(t *testing.T) {
	c, fs := haCluster(t)
	l := haload.Start(t, c)
	if res, err := fs[0].e.Run(t.Context(), haRelease(fs[0].node.State, "", ""), nil); err != nil {
		t.Fatalf("node-1: %+v %v", res, err)
	}
	fs[1].shortDeadlines()
	before := fs[1].manifests()
	res, err := fs[1].e.Run(t.Context(), haRelease(fs[1].node.State, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if res.Outcome != RolledBack {
		t.Fatalf("node-2: %+v %v, want rolled back", res, err)
	}
	fs[1].checkConverged(RolledBack, before)
	// node-3 still runs 3.6: the cluster version did not move, and node-2's
	// etcd went back to 3.6 with its manifest.
	if v := etcdclient.Version(t, fs[1].node); !strings.HasPrefix(v, "3.6.") {
		t.Errorf("node-2's etcd serves %s after its rollback, want 3.6", v)
	}

	_, err = fs[2].e.Run(t.Context(), haRelease(fs[2].node.State, "", ""), nil)
	var halted *cluster.HaltedError
	if !errors.As(err, &halted) || halted.Halt.Node != fs[1].node.State.NodeName || !strings.Contains(err.Error(), nodestate.Scheduler) {
		t.Fatalf("node-3: %v, want the halt of node-2 naming the scheduler", err)
	}
	if open, _ := fs[2].j.OpenTxn(); open != nil {
		t.Fatalf("node-3 began %s under a halt", open.ID)
	}
	for _, f := range fs {
		if v := etcdclient.Version(t, f.node); v == "" {
			t.Errorf("%s's etcd does not answer", f.node.State.NodeName)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	co, err := cluster.Connect(ctx, cluster.Config{Local: etcddata.Endpoint(fs[2].node.State), Node: fs[2].node.State.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if h, err := co.ClearHalt(ctx); err != nil || h == nil {
		t.Fatalf("clear-halt: %+v %v", h, err)
	}
	if res, err := fs[2].e.Run(t.Context(), haRelease(fs[2].node.State, "", ""), nil); err != nil {
		t.Fatalf("node-3 after the halt was cleared: %+v %v", res, err)
	}
	l.Check(t, "a release fails on the second node")
}

// TestHAGateRefusesWithoutQuorumMargin: with node-3's whole node down, the
// cluster would lose quorum were node-1's etcd member stopped too. First
// the pre-flight under the lock refuses: node-3's etcd version cannot be
// read (EtcdMemberSkew), nothing is written and nothing halts. Let through
// (the operator knows node-3's version), the gate refuses before etcd is
// touched (the same etcd process still runs), the transaction rolls back
// naming node-3, and the rollout halts.
func TestHAGateRefusesWithoutQuorumMargin(t *testing.T) {
	c, fs := haCluster(t)
	if err := c.Nodes[2].Stop(); err != nil {
		t.Fatal(err)
	}
	tgt, err := fs[0].node.Target(nodestate.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	before, err := fs[0].node.Scanner.PIDs(tgt.Binary)
	if err != nil || len(before) != 1 {
		t.Fatalf("node-1's etcd: %v %v", before, err)
	}
	res, err := fs[0].e.Run(t.Context(), haRelease(fs[0].node.State, "", ""), nil)
	var pe *PreflightError
	if !errors.As(err, &pe) || !slices.Equal(checks(pe.Failed), []string{CheckEtcdMemberSkew}) || !strings.Contains(err.Error(), "node-3") || res.Txn != "" {
		t.Fatalf("node-1: %+v %v, want refused by %s naming node-3, no transaction", res, err, CheckEtcdMemberSkew)
	}
	if v := view(t, fs[1]); v.Halt != nil {
		t.Fatalf("rollout %+v: a refused pre-flight halted it", v)
	}
	res, err = fs[0].e.RunWith(t.Context(), haRelease(fs[0].node.State, "", ""), nil, UpgradeOptions{IgnorePreflight: []string{CheckEtcdMemberSkew}})
	if res.Outcome != RolledBack || !strings.Contains(res.Reason, "node-3") || !errors.Is(err, ErrRolledBack) {
		t.Fatalf("node-1: %+v %v, want rolled back by the gate naming node-3", res, err)
	}
	after, err := fs[0].node.Scanner.PIDs(tgt.Binary)
	if err != nil || len(after) != 1 || after[0] != before[0] {
		t.Fatalf("node-1's etcd %v -> %v: the gate let it be stopped", before, after)
	}
	checkHalted(t, fs[1], "node-1", "")
}

// TestHAResumeRecordsALostEnd: node-1's transaction rolls back, but the
// write of its end to the cluster is lost (the link dropped just after its
// journal ended it): the cluster still shows it open and no halt, so every
// other node would wait for it. resume on node-1, with nothing open in its
// journal, records the end and the halt; a second resume has nothing to do.
func TestHAResumeRecordsALostEnd(t *testing.T) {
	_, fs := haCluster(t)
	fs[0].shortDeadlines()
	res, err := fs[0].e.Run(t.Context(), release(fs[0].node.State, false, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if res.Outcome != RolledBack {
		t.Fatalf("node-1: %+v %v, want rolled back", res, err)
	}
	node := fs[0].node.State.NodeName

	// The end as if its write had failed: the progress back to open, no halt.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	co, err := cluster.Connect(ctx, cluster.Config{Local: etcddata.Endpoint(fs[1].node.State), Node: fs[1].node.State.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	p, err := co.Node(ctx, node)
	if err != nil || p == nil || p.Txn != res.Txn || p.Outcome != string(RolledBack) {
		t.Fatalf("node-1's progress %+v %v: want %s rolled back", p, err, res.Txn)
	}
	p.Outcome, p.Phase = "", "rolling-back"
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := co.Client().Put(ctx, cluster.Prefix+"nodes/"+node, string(b)); err != nil {
		t.Fatal(err)
	}
	if h, err := co.ClearHalt(ctx); err != nil || h == nil {
		t.Fatalf("removing the halt: %+v %v", h, err)
	}
	if v := view(t, fs[1]); v.Halt != nil || !slices.ContainsFunc(v.Nodes, func(p cluster.Progress) bool { return p.Node == node && p.Open() }) {
		t.Fatalf("set-up: %+v, want node-1 open and no halt", v)
	}

	res2, err := fs[0].e.Resume(t.Context())
	if err != nil || res2.Outcome != Nothing || res2.Txn != res.Txn {
		t.Fatalf("resume: %+v %v, want nothing to resume and the end of %s recorded", res2, err, res.Txn)
	}
	v := view(t, fs[1])
	if v.Halt == nil || v.Halt.Node != node || v.Halt.Txn != res.Txn {
		t.Fatalf("halt after resume: %+v, want node-1's %s", v.Halt, res.Txn)
	}
	for _, p := range v.Nodes {
		if p.Node == node && (p.Open() || p.Outcome != string(RolledBack)) {
			t.Fatalf("node-1's progress after resume: %+v, want rolled back", p)
		}
	}
	if v.Holder != nil {
		t.Fatalf("the lock is still held after resume: %+v", v.Holder)
	}
	if res3, err := fs[0].e.Resume(t.Context()); err != nil || res3.Outcome != Nothing || res3.Txn != "" {
		t.Fatalf("second resume: %+v %v, want nothing at all", res3, err)
	}
}
