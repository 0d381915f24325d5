package engine

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestCheckStateChange pins which fields a transaction refuses to change
// (each with a *StateChangeError naming it) and that every other field,
// and a VIP added, passes.
func TestCheckStateChange(t *testing.T) {
	base, err := nodestate.Load(repoFile(t, "testdata/states/default-vip.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*nodestate.NodeState)
		field  string // "" when the change is allowed
	}{
		{"nothing", func(*nodestate.NodeState) {}, ""},
		{"profile", func(s *nodestate.NodeState) { s.Profile.Name = nodestate.ProfileCIS }, ""},
		{"extra args", func(s *nodestate.NodeState) {
			s.ExtraArgs = map[string]map[string]nodestate.ArgValues{nodestate.KubeAPIServer: {"event-ttl": {"2h"}}}
		}, ""},
		{"pki dir", func(s *nodestate.NodeState) { s.PKIDir = "/srv/pki" }, ""},
		{"image", func(s *nodestate.NodeState) { s.Images[nodestate.Scheduler] = "registry.k8s.io/kube-scheduler:v1.34.5" }, ""},
		{"scheduler port", func(s *nodestate.NodeState) { s.Ports.Scheduler = 10359 }, ""},
		{"node name", func(s *nodestate.NodeState) { s.NodeName = "cp-9" }, "nodeName"},
		{"advertise address", func(s *nodestate.NodeState) { s.AdvertiseAddress = "10.0.0.99" }, "advertiseAddress"},
		{"member name", func(s *nodestate.NodeState) { s.Etcd.MemberName = "cp-9" }, "etcd.memberName"},
		{"initial cluster", func(s *nodestate.NodeState) { s.Etcd.InitialCluster += ",cp-9=https://10.0.0.19:2380" }, "etcd.initialCluster"},
		{"data dir", func(s *nodestate.NodeState) { s.Etcd.DataDir = "/srv/etcd" }, "etcd.dataDir"},
		{"peer port", func(s *nodestate.NodeState) { s.Ports.EtcdPeer = 2390 }, "ports.etcdPeer"},
		{"config dir", func(s *nodestate.NodeState) { s.ConfigDir = "/srv/stratum" }, "configDir"},
		{"vip removed", func(s *nodestate.NodeState) { s.VIP = nil }, "vip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := base.Clone()
			tc.mutate(to)
			err := CheckStateChange(base, to)
			var sce *StateChangeError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.field != "" && !errors.As(err, &sce):
				t.Fatalf("err %v, want a *StateChangeError for %s", err, tc.field)
			case tc.field != "" && (sce.Field != tc.field || !errors.Is(err, ErrUnsupportedChange)):
				t.Fatalf("refused field %q (%v), want %q", sce.Field, err, tc.field)
			}
		})
	}
	// A VIP added is a component added: allowed.
	noVIP := base.Clone()
	noVIP.VIP = nil
	delete(noVIP.Images, nodestate.KubeVIP)
	if err := CheckStateChange(noVIP, base); err != nil {
		t.Fatalf("a VIP added: %v", err)
	}
}

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

// cisState is st switched to the cis profile, its two files copied from
// testdata/profiles into dir.
func cisState(t *testing.T, st *nodestate.NodeState, dir string) *nodestate.NodeState {
	t.Helper()
	to := st.Clone()
	to.Profile = nodestate.Profile{Name: nodestate.ProfileCIS, AuditLogDir: filepath.Join(dir, "audit")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"audit-policy.yaml", &to.Profile.AuditPolicyFile}, {"admission.yaml", &to.Profile.AdmissionConfigFile}} {
		b, err := os.ReadFile(repoFile(t, "testdata/profiles/"+f.name))
		if err != nil {
			t.Fatal(err)
		}
		*f.dst = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := to.Validate(); err != nil {
		t.Fatal(err)
	}
	return to
}

// TestApplyProfileSwitch applies the cis profile to a running default
// node as one transaction: the plan names the components whose render the
// profile changes, the transaction replaces exactly those, one at a time,
// and its commit makes the cis state the journal's node state; the same
// state again is nothing to do. A second apply while a transaction is open
// is refused with nothing written.
func TestApplyProfileSwitch(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	st := f.node.State
	if _, err := f.e.Apply(t.Context(), st, UpgradeOptions{}); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("apply of the current state: %v, want nothing to do", err)
	}
	to := cisState(t, st, filepath.Join(f.node.Root, "etc/stratum/profiles"))
	plan, err := f.e.PlanState(t.Context(), to, UpgradeOptions{})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	changed := plan.Changed()
	if !slices.Contains(changed, nodestate.KubeAPIServer) || slices.Contains(changed, nodestate.Etcd) {
		t.Fatalf("plan changes %v: want kube-apiserver, not etcd", changed)
	}
	if !slices.Equal(plan.Released(), changed) || len(plan.EditedByHand()) != 0 {
		t.Fatalf("plan: released %v, edited %v, want every change released", plan.Released(), plan.EditedByHand())
	}
	before := identities(t, f.node)

	res, err := f.e.Apply(t.Context(), to, UpgradeOptions{})
	if err != nil || res.Outcome != Committed {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if !slices.Equal(res.Changed, changed) {
		t.Fatalf("apply changed %v, the plan said %v", res.Changed, changed)
	}
	txn := f.checkConverged(Committed, nil)
	if txn.Kind != journal.KindUpgrade || len(txn.Release) != 0 {
		t.Fatalf("transaction kind %q with release %q: want an upgrade with no release", txn.Kind, txn.Release)
	}
	got, err := f.j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	if got.Profile != to.Profile {
		t.Fatalf("committed profile %+v, want %+v", got.Profile, to.Profile)
	}
	after := identities(t, f.node)
	for _, comp := range manifest.NamesFor(st) {
		if replaced := !slices.Equal(before[comp], after[comp]); replaced != slices.Contains(changed, comp) {
			t.Errorf("%s: replaced %v, want %v", comp, replaced, slices.Contains(changed, comp))
		}
	}
	if len(plan.Derived) == 0 {
		t.Fatal("the cis plan has no derived files: the admission configuration is missing")
	}
	for _, d := range plan.Derived {
		if b, err := os.ReadFile(d.Path); err != nil || !bytes.Equal(b, d.Data) {
			t.Errorf("derived file %s: %v; the transaction did not write what it planned", d.Path, err)
		}
	}
	if _, err := f.e.Apply(t.Context(), to, UpgradeOptions{}); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("the same state again: %v, want nothing to do", err)
	}
	// A transaction left open (as a crash leaves it) refuses the next
	// apply, which writes nothing.
	if _, err := f.j.Begin(journal.Txn{Kind: journal.KindUpgrade}); err != nil {
		t.Fatal(err)
	}
	disk := f.manifests()
	if _, err := f.e.Apply(t.Context(), st, UpgradeOptions{}); !errors.Is(err, journal.ErrTxnOpen) {
		t.Fatalf("apply while a transaction is open: %v, want journal.ErrTxnOpen", err)
	}
	if now := f.manifests(); !maps.EqualFunc(disk, now, bytes.Equal) {
		t.Fatal("the refused apply changed the manifest directory")
	}
}

// TestApplyRollsBack applies a state whose kube-apiserver change is fine
// and whose kube-scheduler cannot start (a bind address the node does not
// have): kube-apiserver is replaced, the scheduler's wait fails, and the
// transaction rolls back to the manifests it began with, the journal's
// node state unchanged.
func TestApplyRollsBack(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	st := f.node.State
	to := st.Clone()
	to.ExtraArgs = map[string]map[string]nodestate.ArgValues{
		nodestate.KubeAPIServer: {"event-ttl": {"2h"}},
		nodestate.Scheduler:     {"bind-address": {"192.0.2.10"}},
	}
	before := f.manifests()
	dl := testDeadlines
	dl.Replace, dl.Active = 10*time.Second, 5*time.Second
	res, err := f.engine(f.node.Scanner, dl).Apply(t.Context(), to, UpgradeOptions{})
	if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack {
		t.Fatalf("apply: %+v %v, want rolled back", res, err)
	}
	f.checkConverged(RolledBack, before)
	got, err := f.j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	if got.ExtraArgs != nil {
		t.Fatalf("the node state after the rollback has extra args %v: it must be the one before", got.ExtraArgs)
	}
	var sawAPIServer bool
	for _, ev := range f.events {
		sawAPIServer = sawAPIServer || ev.Step == "done" && ev.Component == nodestate.KubeAPIServer && ev.Phase == string(journal.PhaseApplying)
	}
	if !sawAPIServer {
		t.Fatal("kube-apiserver's step never finished before the rollback: the test does not roll back a change that was made")
	}
}

// TestApplyProfileSwitchRollsBack switches a running default node to the
// cis profile in a state whose kube-scheduler cannot start (a bind address
// the node does not have): the components the profile changes before the
// scheduler are replaced, the scheduler's wait fails, and the transaction
// rolls back to the manifests it began with; the journal's node state
// keeps the default profile, and the same cis switch without the bad
// address still plans its changes.
func TestApplyProfileSwitchRollsBack(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	st := f.node.State
	to := cisState(t, st, filepath.Join(f.node.Root, "etc/stratum/profiles"))
	good := to.Clone()
	to.ExtraArgs = map[string]map[string]nodestate.ArgValues{nodestate.Scheduler: {"bind-address": {"192.0.2.10"}}}
	before := f.manifests()
	dl := testDeadlines
	dl.Replace, dl.Active = 10*time.Second, 5*time.Second
	res, err := f.engine(f.node.Scanner, dl).Apply(t.Context(), to, UpgradeOptions{})
	if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack {
		t.Fatalf("apply of the failing cis state: %+v %v, want rolled back", res, err)
	}
	f.checkConverged(RolledBack, before)
	got, err := f.j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	if got.Profile != st.Profile {
		t.Fatalf("the node state after the rollback has profile %+v, want the default %+v", got.Profile, st.Profile)
	}
	var sawAPIServer bool
	for _, ev := range f.events {
		sawAPIServer = sawAPIServer || ev.Step == "done" && ev.Component == nodestate.KubeAPIServer && ev.Phase == string(journal.PhaseApplying)
	}
	if !sawAPIServer {
		t.Fatal("kube-apiserver's cis step never finished before the rollback: nothing of the switch was undone")
	}
	plan, err := f.e.PlanState(t.Context(), good, UpgradeOptions{})
	if err != nil || !slices.Contains(plan.Changed(), nodestate.KubeAPIServer) {
		t.Fatalf("the cis switch after the rollback: plan %v, %v; want kube-apiserver to change again", plan, err)
	}
}
