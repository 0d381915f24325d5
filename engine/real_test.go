package engine

// The real control plane under the engine: kube-apiserver,
// kube-controller-manager and kube-scheduler built from k8s.io/kubernetes
// (internal/harness/kubebuild) and real etcd, started by the kubelet
// stand-in from the manifests this project renders. Each test skips when
// the binaries are not built, unless STRATUM_REAL is set (make test-real),
// which builds them first and never skips.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// realEtcd is the etcd each Kubernetes version runs with in these tests:
// the one kubeadm of that minor pins (3.6 for 1.36, 3.7 for 1.37).
var realEtcd = map[string]string{"v1.36.3": "registry.k8s.io/etcd:3.6.16-0", "v1.37.2": "registry.k8s.io/etcd:3.7.3-0"}

// realDeadlines leave the real apiserver its start (several seconds).
var realDeadlines = Deadlines{Replace: 60 * time.Second, Active: 90 * time.Second, Stop: 30 * time.Second, Soak: 3 * time.Second, EtcdBackup: 30 * time.Second, Release: 300 * time.Millisecond}

// needReal skips t unless STRATUM_REAL is set (make test-real), even when
// the binaries are built: these tests take minutes, and make test-real is
// where they run, once.
func needReal(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("real control plane: minutes")
	}
	if os.Getenv("STRATUM_REAL") == "" {
		t.Skip(realSkip)
	}
}

// realSkip is why a test of the real control plane skips.
const realSkip = "needs the real control plane: make test-real runs it (STRATUM_REAL=1 builds what is missing first, minutes)"

// realFixture is a node running the real control plane at Kubernetes
// version kube, etcd image etcdImage, profile state file stateFile, with
// extra edits.
func realFixture(t *testing.T, stateFile, kube, etcdImage string, edit func(*nodestate.NodeState)) *fixture {
	t.Helper()
	f := newFixture(t, testbed.Options{
		StateFile: stateFile,
		Real:      true,
		Mutate: func(st *nodestate.NodeState) {
			setKube(st, kube)
			st.Images[nodestate.Etcd] = etcdImage
			if edit != nil {
				edit(st)
			}
		},
		ActiveTimeout: 3 * time.Minute,
	})
	f.e = f.engine(f.node.Scanner, realDeadlines)
	t.Cleanup(func() {
		if t.Failed() {
			logContainerTails(t, f.node)
		}
	})
	return f
}

// logContainerTails logs the last lines of every container log of n: why a
// real binary exited is only in its own output.
func logContainerTails(t *testing.T, n *testbed.Node) {
	logs, _ := filepath.Glob(filepath.Join(n.KubeletDir, "logs", "*", "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("%s ends:\n%s", l, strings.Join(lines[max(len(lines)-12, 0):], "\n"))
	}
}

func setKube(st *nodestate.NodeState, v string) {
	st.KubernetesVersion = v
	for _, c := range kubebuild.Components {
		st.Images[c] = testbed.Repos[c] + ":" + v
	}
}

// realRelease moves every Kubernetes component to kube and, unless
// etcdImage is "", etcd to etcdImage.
func realRelease(kube, etcdImage string) *Release {
	r := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: kube, Images: map[string]string{}}
	for _, c := range kubebuild.Components {
		r.Images[c] = testbed.Repos[c] + ":" + kube
	}
	if etcdImage != "" {
		r.Images[nodestate.Etcd] = etcdImage
	}
	return r
}

// apiserver is the node's real API server as the admin user; an error
// fails the test.
type apiserver struct {
	t   *testing.T
	api *testbed.API
}

func adminOf(t *testing.T, n *testbed.Node) *apiserver {
	t.Helper()
	api, err := n.API()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	return &apiserver{t: t, api: api}
}

// version is the API server's /version gitVersion.
func (a *apiserver) version() string {
	a.t.Helper()
	v, err := a.api.Version(a.t.Context())
	if err != nil {
		a.t.Fatal(err)
	}
	return v
}

// putConfigMap creates ConfigMap default/name holding data=value.
func (a *apiserver) putConfigMap(name, value string) {
	a.t.Helper()
	if err := a.api.CreateConfigMap(a.t.Context(), "default", name, map[string]string{"data": value}); err != nil {
		a.t.Fatal(err)
	}
}

// configMap is ConfigMap default/name's data value.
func (a *apiserver) configMap(name string) string {
	a.t.Helper()
	d, err := a.api.ConfigMap(a.t.Context(), "default", name)
	if err != nil {
		a.t.Fatal(err)
	}
	return d["data"]
}

// TestRealRenderedManifestsStart starts every rendered manifest, default
// and cis profile, of every Kubernetes version built and the etcd it runs
// with, on the real binaries: each answers its health endpoint (the
// fixture waits for every component to be active) and the API server
// serves its version and stores an object. The cis profile's admission
// configuration (EventRateLimit, PodSecurity) is read by the real apiserver.
func TestRealRenderedManifestsStart(t *testing.T) {
	needReal(t)
	for _, kube := range kubebuild.Versions {
		for _, state := range []string{"real", "cis"} {
			t.Run(kube+"/"+state, func(t *testing.T) {
				f := realFixture(t, "testdata/states/"+state+".yaml", kube, realEtcd[kube], nil)
				api := adminOf(t, f.node)
				if got := api.version(); got != kube {
					t.Fatalf("apiserver /version %q, want %s", got, kube)
				}
				api.putConfigMap("started", kube)
				if got := api.configMap("started"); got != kube {
					t.Fatalf("configmap read back %q, want %q", got, kube)
				}
			})
		}
	}
}

// TestRealUpgradeCommits upgrades Kubernetes 1.36 -> 1.37 with etcd 3.6 ->
// 3.7 on the real binaries: it commits, the new apiserver answers, and an
// object written through the old one reads back through the new one.
func TestRealUpgradeCommits(t *testing.T) {
	from, to := kubebuild.Versions[0], kubebuild.Versions[len(kubebuild.Versions)-1]
	needReal(t)
	f := realFixture(t, "testdata/states/real.yaml", from, realEtcd[from], nil)
	api := adminOf(t, f.node)
	api.putConfigMap("before-upgrade", from)
	res, err := f.e.Run(t.Context(), realRelease(to, realEtcd[to]), nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	f.checkConverged(Committed, nil)
	if got := api.version(); got != to {
		t.Fatalf("apiserver /version after the upgrade %q, want %s", got, to)
	}
	if got := api.configMap("before-upgrade"); got != from {
		t.Fatalf("object written before the upgrade reads %q, want %q", got, from)
	}
	if v := etcdclient.Version(t, f.node); !strings.HasPrefix(v, "3.7.") {
		t.Fatalf("etcd after the upgrade reports %s, want 3.7.x", v)
	}
}

// TestRealEtcdChain upgrades etcd 3.5 -> 3.6 -> 3.7 one minor at a time on
// one data dir, back to back, under the real API server, and keeps a key
// written to etcd and an object written through the API server at 3.5.
//
// It also pins an etcd hazard the tests found: etcd 3.7 cannot replay WAL
// entries that 3.5 wrote (it panics, "unmarshal should never fail"), and
// 3.6 drops them from the WAL only at its next raft snapshot, every
// --snapshot-count (10000) entries. Straight after 3.5 -> 3.6 the move to
// 3.7 therefore forces a snapshot first (restart with --snapshot-count=1,
// journaled as etcd-snapshot forcing then covered), then commits.
func TestRealEtcdChain(t *testing.T) {
	kube := kubebuild.Versions[0]
	needReal(t)
	f := realFixture(t, "testdata/states/real.yaml", kube, "registry.k8s.io/etcd:3.5.35-0", nil)
	api := adminOf(t, f.node)
	etcdclient.Put(t, f.node, "chain", "3.5")
	api.putConfigMap("chain", "3.5")
	check := func(want string) {
		t.Helper()
		if v := etcdclient.Version(t, f.node); v != want {
			t.Fatalf("etcd reports %s, want %s", v, want)
		}
		if got := etcdclient.Get(t, f.node, "chain"); got != "3.5" {
			t.Fatalf("key written at 3.5 reads %q at %s", got, want)
		}
		if got := api.configMap("chain"); got != "3.5" {
			t.Fatalf("object written at 3.5 reads %q at %s", got, want)
		}
	}
	move := func(img string) (Result, error) {
		t.Helper()
		rel := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: kube, Images: map[string]string{nodestate.Etcd: img}}
		return f.e.Run(t.Context(), rel, nil)
	}
	stages := func(id string) []string {
		t.Helper()
		recs, err := f.j.Records(id)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			if r.Step == journal.StepEtcdSnapshot {
				out = append(out, r.Why)
			}
		}
		return out
	}
	t0 := time.Now()
	res, err := move("registry.k8s.io/etcd:3.6.16-0")
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run to 3.6: %+v %v", res, err)
	}
	t.Logf("3.5 -> 3.6 committed in %s, etcd-snapshot records %v", time.Since(t0).Round(time.Millisecond), stages(res.Txn))
	check("3.6.16")

	// 3.5's entries are still in the WAL: the move to 3.7 forces a
	// snapshot first, journaled, and commits.
	if scan, err := etcddata.ScanWAL(f.node.State.Etcd.DataDir); err != nil || len(scan.Hazards("3.7")) == 0 {
		t.Fatalf("after 3.5 -> 3.6 the WAL holds no hazard for 3.7 (%+v, %v): the test no longer reaches the remediation", scan, err)
	}
	plan, err := f.e.Plan(&Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: kube, Images: map[string]string{nodestate.Etcd: "registry.k8s.io/etcd:3.7.3-0"}})
	if err != nil || !strings.Contains(plan.EtcdSnapshotForced(), "--snapshot-count=1") {
		t.Fatalf("the plan of the move to 3.7 does not say a snapshot is forced first (%v)", err)
	}
	t0 = time.Now()
	res, err = move("registry.k8s.io/etcd:3.7.3-0")
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run to 3.7 straight after 3.6: %+v %v", res, err)
	}
	if got := stages(res.Txn); !slices.Equal(got, []string{journal.EtcdSnapshotForcing, journal.EtcdSnapshotCovered}) {
		t.Fatalf("etcd-snapshot records %v, want forcing then covered", got)
	}
	t.Logf("3.6 -> 3.7 with the forced snapshot committed in %s", time.Since(t0).Round(time.Millisecond))
	check("3.7.3")
	if b := f.manifests()[manifest.FileName(nodestate.Etcd)]; bytes.Contains(b, []byte("--snapshot-count=1\n")) {
		t.Fatal("etcd's manifest after the commit still forces snapshots")
	}
}

// TestRealRejectedFlagRollsBack runs into what the flag tables cannot see:
// a feature gate value. The node's kube-apiserver turns off HostnameOverride,
// which 1.36 accepts and 1.37 refuses ("cannot set feature gate
// HostnameOverride to false, feature is locked to true"), so the new
// apiserver exits at start; the upgrade rolls back and the old apiserver
// serves again, with the object written before.
func TestRealRejectedFlagRollsBack(t *testing.T) {
	from, to := kubebuild.Versions[0], kubebuild.Versions[len(kubebuild.Versions)-1]
	needReal(t)
	f := realFixture(t, "testdata/states/real.yaml", from, realEtcd[from], func(st *nodestate.NodeState) {
		st.ExtraArgs[nodestate.KubeAPIServer]["feature-gates"] = nodestate.ArgValues{"HostnameOverride=false"}
	})
	api := adminOf(t, f.node)
	api.putConfigMap("before-rollback", from)
	before := f.manifests()
	dl := realDeadlines
	dl.Active = 20 * time.Second
	f.e = f.engine(f.node.Scanner, dl)
	res, err := f.e.Run(t.Context(), realRelease(to, ""), nil)
	if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack {
		t.Fatalf("Run: %+v %v", res, err)
	}
	if !strings.Contains(res.Reason, nodestate.KubeAPIServer) {
		t.Errorf("reason %q does not name kube-apiserver", res.Reason)
	}
	f.checkConverged(RolledBack, before)
	if got := api.version(); got != from {
		t.Fatalf("apiserver /version after the rollback %q, want %s", got, from)
	}
	if got := api.configMap("before-rollback"); got != from {
		t.Fatalf("object reads %q after the rollback, want %q", got, from)
	}
	logs, _ := filepath.Glob(filepath.Join(f.node.KubeletDir, "logs", "kube-system_kube-apiserver-*", "*.log"))
	found := false
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil && bytes.Contains(b, []byte("HostnameOverride to false")) {
			found = true
		}
	}
	if !found {
		t.Errorf("no apiserver log says why %s refused to start (looked in %v)", to, logs)
	}
}
