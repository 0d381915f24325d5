package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/versions"
)

// preflightRelease is v1.34.5 with etcd at etcdTag and the scheduler at
// sched.
func preflightRelease(etcdTag, sched string) *Release {
	r := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: "v1.34.5", Images: map[string]string{
		nodestate.KubeAPIServer:     "registry.k8s.io/kube-apiserver:v1.34.5",
		nodestate.ControllerManager: "registry.k8s.io/kube-controller-manager:v1.34.5",
		nodestate.Scheduler:         "registry.k8s.io/kube-scheduler:" + sched,
	}}
	if etcdTag != "" {
		r.Images[nodestate.Etcd] = "registry.k8s.io/etcd:" + etcdTag
	}
	return r
}

func checks(fs []versions.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Check)
	}
	return out
}

// journalTxns is how many transactions the journal holds.
func journalTxns(t *testing.T, j *journal.Journal) int {
	t.Helper()
	h, err := j.History(0)
	if err != nil {
		t.Fatal(err)
	}
	return len(h)
}

// etcd3521 makes a node state's etcd (pinned by digest) 3.5.21, below
// the minimum patch for 3.6, whatever the shared test data says.
func etcd3521(st *nodestate.NodeState) { st.Versions[nodestate.Etcd] = "3.5.21" }

// A release the pre-flight checks refuse: every failed check at once, in a
// PreflightError, and nothing written: not the journal, not the manifest
// directory, no snapshot. The node's etcd does not run here, so EtcdHealth
// fails too.
func TestPreflightRefusesWithNothingWritten(t *testing.T) {
	e, store, j, _ := planNodeEdit(t, "default-vip", etcd3521)
	before := snapshotFiles(t, store.Dir())
	rel := preflightRelease("3.7.3-0", "v1.34.3")

	_, err := e.Plan(rel)
	var pe *PreflightError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPreflight) {
		t.Fatalf("Plan: %v, want a PreflightError", err)
	}
	want := []string{"EtcdMinorSkip", "EtcdMinimumPatch", "KubernetesDowngrade", "EtcdHealth"}
	if got := checks(pe.Failed); !slices.Equal(got, want) {
		t.Fatalf("failed checks %q, want %q:\n%v", got, want, err)
	}
	for _, s := range []string{"etcd 3.5.21 -> 3.7.3 skips 3.6", "3.6.11 or later", "3.5.32 or a later 3.5 patch", "rollback --last", "etcd does not answer", "nothing was written"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not say %q:\n%v", s, err)
		}
	}

	_, err = e.Run(t.Context(), rel, []byte("raw"))
	if !errors.As(err, &pe) || !slices.Equal(checks(pe.Failed), want) {
		t.Fatalf("Run: %v, want the same refusal", err)
	}
	// Ignoring some of the checks refuses with the others; the ignored ones
	// are carried for the warning.
	_, err = e.RunWith(t.Context(), rel, nil, UpgradeOptions{IgnorePreflight: []string{"EtcdHealth", "KubernetesDowngrade"}})
	if !errors.As(err, &pe) || !slices.Equal(checks(pe.Failed), want[:2]) || !slices.Equal(checks(pe.Ignored), want[2:]) {
		t.Fatalf("Run ignoring two checks: %v (ignored %v)", err, pe.Ignored)
	}
	if n := journalTxns(t, j); n != 0 {
		t.Errorf("a refused run journaled %d transaction(s)", n)
	}
	if after := snapshotFiles(t, store.Dir()); after != before {
		t.Error("a refused run changed the manifest dir")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(j.Path()), "snapshots")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused run created the snapshots root: %v", err)
	}
}

// An unknown check name is refused before anything else, naming the known
// ones.
func TestPreflightUnknownCheck(t *testing.T) {
	e, _, _, _ := planNode(t, "default-vip")
	_, err := e.PlanWith(t.Context(), preflightRelease("", "v1.34.5"), UpgradeOptions{IgnorePreflight: []string{"EtcdHealth", "EtcdHeath"}})
	if err == nil || !strings.Contains(err.Error(), `unknown pre-flight check "EtcdHeath"`) || !strings.Contains(err.Error(), strings.Join(PreflightChecks(), ", ")) {
		t.Fatalf("PlanWith an unknown check: %v", err)
	}
	if err := CheckIgnore([]string{IgnoreAll, versions.CheckComponentSkew}); err != nil {
		t.Fatal(err)
	}
}

// EtcdHealth runs only when the release changes etcd; a release that
// changes nothing is nothing to do, whatever the checks would say.
func TestPreflightEtcdHealthOnlyForEtcd(t *testing.T) {
	e, _, _, st := planNode(t, "default-vip")
	plan, err := e.Plan(preflightRelease("", "v1.34.5"))
	if err != nil || len(plan.Ignored) != 0 {
		t.Fatalf("a release that leaves etcd alone: %v, ignored %v", err, plan.Ignored)
	}
	same := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: st.KubernetesVersion, Images: map[string]string{nodestate.Scheduler: st.Images[nodestate.Scheduler]}}
	if _, err := e.Plan(same); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("no-op plan: %v", err)
	}
}

// Checks let through are journaled with the transaction when it begins,
// and each is reported as an event.
func TestPreflightIgnoredJournaled(t *testing.T) {
	_, store, j, _ := planNodeEdit(t, "default-vip", func(st *nodestate.NodeState) {
		st.KubernetesVersion = "v1.34.4"
		for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
			st.Images[c] = "registry.k8s.io/" + c + ":v1.34.4"
		}
	})
	var events []Event
	e, err := New(Config{Journal: j, Store: store, Snapshots: filepath.Join(filepath.Dir(j.Path()), "snapshots"),
		Deadlines: Deadlines{Replace: 200 * time.Millisecond, Active: 200 * time.Millisecond, Stop: 200 * time.Millisecond, Soak: 50 * time.Millisecond, Release: 300 * time.Millisecond},
		Events:    func(ev Event) { events = append(events, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	// A patch downgrade of the scheduler, let through; no kubelet runs, so
	// the transaction then fails, which does not matter here.
	res, _ := e.RunWith(t.Context(), preflightRelease("", "v1.34.3"), nil, UpgradeOptions{IgnorePreflight: []string{IgnoreAll}})
	if res.Txn == "" {
		t.Fatal("no transaction began")
	}
	txn, err := j.Txn(res.Txn)
	if err != nil {
		t.Fatal(err)
	}
	if len(txn.IgnoredChecks) != 1 || txn.IgnoredChecks[0].Check != versions.CheckKubernetesDowngrade || txn.IgnoredChecks[0].Component != nodestate.Scheduler ||
		!strings.Contains(txn.IgnoredChecks[0].Message, "kube-scheduler v1.34.4 -> v1.34.3") {
		t.Fatalf("journaled ignored checks %+v", txn.IgnoredChecks)
	}
	if len(events) == 0 || events[0].Step != "preflight" || !strings.Contains(events[0].Message, "pre-flight check KubernetesDowngrade failed and is ignored") {
		t.Fatalf("first event %+v, want the ignored check", events)
	}
}

// electingEtcd is an etcd that does not answer the first look (its
// cluster is electing a leader) and answers within the wait.
type electingEtcd struct {
	Processes
	waited time.Duration
}

func (e *electingEtcd) Active(context.Context, proc.Target) bool { return false }
func (e *electingEtcd) WaitActive(_ context.Context, _ proc.Target, d time.Duration) error {
	e.waited = d
	return nil
}

// EtcdHealth on a member of a multi-member cluster waits out a leader
// election (another node's etcd step moves the leadership and stops its
// member while this run plans): refusing at the first look failed a run
// started on every node at once. A single member has no election to wait
// for and is refused at once.
func TestPreflightEtcdHealthWaitsOutAnElection(t *testing.T) {
	_, _, _, st := planNode(t, "default-vip")
	procs := &electingEtcd{}
	// One member, or a count not known (a plan outside a transaction):
	// refused at once.
	for _, members := range []int{1, 0} {
		pf := preflight{procs: procs, members: members, subject: "release v1.34.5"}
		if f := pf.etcdHealth(t.Context(), st); f == nil || procs.waited != 0 {
			t.Fatalf("%d member(s): finding %v, waited %s; want refused at once", members, f, procs.waited)
		}
	}
	// The member count is the live cluster's: the node state's single
	// initialCluster entry (kubeadm's first node) does not make it one.
	pf := preflight{procs: procs, members: 3, subject: "release v1.34.5"}
	if f := pf.etcdHealth(t.Context(), st); f != nil || procs.waited != electionWait {
		t.Fatalf("member of three: finding %v, waited %s; want healthy after waiting up to %s", f, procs.waited, electionWait)
	}
}
