package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/resolve"
)

func TestParseRelease(t *testing.T) {
	cases := []struct {
		file, want string
	}{
		{"v1.34.5.yaml", ""},
		{"v1.34.5-no-etcd.yaml", ""},
		{"malformed.yaml", "release ../testdata/releases/malformed.yaml: line 3: did not find expected"},
		{"unknown-component.yaml", `images.kube-proxy: unknown component "kube-proxy"`},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			_, _, err := LoadRelease(filepath.Join("..", "testdata", "releases", c.file))
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.file) {
				t.Fatalf("error %v, want one naming the file and containing %q", err, c.want)
			}
		})
	}
	for doc, want := range map[string]string{
		"":                         "empty",
		"apiVersion: x\nkind: y\n": `line 2: kind: must be Release, got "y"`,
		"apiVersion: x\nkind: Release\nkubernetesVersion: v1.34.5\nimages: {etcd: e}\n":                                      "apiVersion/kind must be",
		"apiVersion: stratum.ciq.com/v1\nkind: NodeState\nnodeName: cp-1\n":                                                  "line 2: kind: NodeState: this file is a node state, not a release",
		"apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\nimage: {etcd: e}\n":                      `line 4: unknown field "image" (did you mean "images"?)`,
		"apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\nimages: {etcd: e}\n---\nkind: Release\n": "line 5: a second YAML document starts here; the file must hold one Release only",
		"apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: 1.34\nimages: {etcd: e}\n":                        "kubernetesVersion",
		"apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\nimages: {etcd: ''}":                      "empty image",
		"apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\nimagez: {}\n":                            "unknown field",
	} {
		if _, err := ParseRelease([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRelease(%q) = %v, want %q", doc, err, want)
		}
	}
}

// planNode is a rendered manifest directory and a journal holding its
// state, with no kubelet: enough for everything that refuses before acting.
func planNode(t *testing.T, state string) (*Engine, *manifest.Store, *journal.Journal, *nodestate.NodeState) {
	t.Helper()
	return planNodeEdit(t, state, nil)
}

// planNodeEdit is planNode with the node state changed by edit first.
func planNodeEdit(t *testing.T, state string, edit func(*nodestate.NodeState)) (*Engine, *manifest.Store, *journal.Journal, *nodestate.NodeState) {
	t.Helper()
	root := t.TempDir()
	st, err := nodestate.Load(filepath.Join("..", "testdata", "states", state+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(st)
	}
	st.ConfigDir = filepath.Join(root, "config")
	store, err := manifest.Create(filepath.Join(root, "manifests"), manifest.Options{Scanner: proc.Host().Within(os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(filepath.Join(root, "state", "stratum.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	if err := j.PutNodeState(st); err != nil {
		t.Fatal(err)
	}
	seedSingleMember(t, j, st.Etcd.MemberName)
	e, err := New(Config{Journal: j, Store: store, Snapshots: filepath.Join(root, "state", "snapshots")})
	if err != nil {
		t.Fatal(err)
	}
	return e, store, j, st
}

func TestPlan(t *testing.T) {
	e, store, _, st := planNode(t, "default-vip")
	rel, _, err := LoadRelease(filepath.Join("..", "testdata", "releases", "v1.34.5-no-etcd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := e.Plan(rel)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(plan.Changed(), ","); got != "kube-apiserver,kube-controller-manager,kube-scheduler" {
		t.Fatalf("changed %s", got)
	}
	if plan.To.Images[nodestate.Etcd] != st.Images[nodestate.Etcd] || plan.To.KubernetesVersion != "v1.34.5" {
		t.Fatalf("plan state: %v %s", plan.To.Images, plan.To.KubernetesVersion)
	}
	for _, c := range plan.Changes {
		if !strings.Contains(string(c.After), rel.Images[c.Component]) || string(c.Before) != string(must(store.Read(c.Component))) {
			t.Errorf("%s: change does not go from disk to the release image", c.Component)
		}
	}
	// A release the node is already at is refused.
	same := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: st.KubernetesVersion, Images: map[string]string{nodestate.Scheduler: st.Images[nodestate.Scheduler]}}
	if _, err := e.Plan(same); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("no-op plan: %v", err)
	}
}

func TestRunRefusesWithNothingWritten(t *testing.T) {
	e, store, j, st := planNode(t, "default-vip")
	before := snapshotFiles(t, store.Dir())
	same := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: st.KubernetesVersion, Images: map[string]string{nodestate.Etcd: st.Images[nodestate.Etcd]}}
	if _, err := e.Run(t.Context(), same, nil); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("Run of a no-op: %v", err)
	}
	// An open transaction refuses a second run.
	if _, err := j.Begin(journal.Txn{Kind: journal.KindUpgrade, From: must(st.Marshal()), To: must(st.Marshal())}); err != nil {
		t.Fatal(err)
	}
	rel, _, _ := LoadRelease(filepath.Join("..", "testdata", "releases", "v1.34.5-no-etcd.yaml"))
	_, err := e.Run(t.Context(), rel, nil)
	if !errors.Is(err, journal.ErrTxnOpen) || !strings.Contains(err.Error(), "in phase planned") {
		t.Fatalf("Run with an open transaction: %v", err)
	}
	if after := snapshotFiles(t, store.Dir()); after != before {
		t.Fatal("a refused run changed the manifest dir")
	}
}

func snapshotFiles(t *testing.T, dir string) string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var b strings.Builder
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		b.WriteString(e.Name() + "\n" + string(data))
	}
	return b.String()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestPlanRefusesWhatARollbackCouldNotUndo(t *testing.T) {
	rel, _, err := LoadRelease(filepath.Join("..", "testdata", "releases", "v1.34.5-no-etcd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("stray pod with a component's name", func(t *testing.T) {
		e, store, _, _ := planNode(t, "default-vip")
		bak := filepath.Join(store.Dir(), "kube-apiserver.yaml.bak")
		if err := os.WriteFile(bak, must(store.Read(nodestate.KubeAPIServer)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := e.Plan(rel)
		if err == nil || !strings.Contains(err.Error(), "kube-apiserver.yaml.bak") || !strings.Contains(err.Error(), "instead of kube-apiserver.yaml") {
			t.Fatalf("Plan with a stray kube-apiserver pod: %v", err)
		}
		// A stray that is not one of our pods is only a warning.
		os.Remove(bak)
		os.WriteFile(filepath.Join(store.Dir(), "README"), []byte("notes"), 0o600)
		if _, err := e.Plan(rel); err != nil {
			t.Fatalf("Plan with a harmless stray: %v", err)
		}
	})
	t.Run("manifest that does not decode", func(t *testing.T) {
		e, store, _, _ := planNode(t, "default-vip")
		b := strings.Replace(string(must(store.Read(nodestate.Scheduler))), "  containers:", "  imagePullPolcy: Never\n  containers:", 1)
		os.WriteFile(store.Path(nodestate.Scheduler), []byte(b), 0o600)
		_, err := e.Plan(rel)
		if !errors.Is(err, ErrUnrestorable) || !strings.Contains(err.Error(), "kube-scheduler") {
			t.Fatalf("Plan over a manifest a restore would refuse: %v", err)
		}
	})
}

func TestEtcdDowngradeRefused(t *testing.T) {
	for _, c := range []struct {
		cur, old string
		refused  bool
	}{
		// One minor down from 3.6 on: etcd's downgrade protocol first.
		{"registry.k8s.io/etcd:3.6.16-0", "registry.k8s.io/etcd:3.5.35-0", false},
		{"registry.k8s.io/etcd:3.7.3-0", "registry.k8s.io/etcd:3.6.16-0", false},
		{"registry.k8s.io/etcd:3.7.3-0", "registry.k8s.io/etcd:3.5.35-0", true},
		{"registry.k8s.io/etcd:3.5.35-0", "registry.k8s.io/etcd:3.4.30-0", true},
		{"registry.k8s.io/etcd:3.6.16-0", "registry.k8s.io/etcd:3.6.1-0", false},
		{"registry.k8s.io/etcd:3.5.35-0", "registry.k8s.io/etcd:3.6.16-0", false},
		{"registry.k8s.io/etcd@sha256:0123", "registry.k8s.io/etcd:3.5.35-0", false},
		{"localhost:5000/etcd:v3.7.0", "localhost:5000/etcd:v3.5.9", true},
	} {
		cur := &nodestate.NodeState{Images: map[string]string{nodestate.Etcd: c.cur}}
		old := &nodestate.NodeState{Images: map[string]string{nodestate.Etcd: c.old}}
		err := checkEtcdDowngrade(cur, old)
		if (err != nil) != c.refused {
			t.Errorf("%s -> %s: %v, want refused %v", c.cur, c.old, err, c.refused)
		}
	}
}

// The release's kubernetesVersion is parsed like the node state's
// (nodestate.ParseKubernetesVersion): a leading v is required.
func TestParseReleaseVersion(t *testing.T) {
	for in, ok := range map[string]bool{
		"v1.34.5":              true,
		"v1.35.0-rc.1":         true,
		"v1.34.5+k3s1":         true,
		"v1.35.0-rc.1+build.5": true, // refused by the old regexp
		"1.34.5":               false,
		"v1.34":                false,
		"1.34":                 false,
		"v1.34.5.1":            false,
		"'v1.34.5 '":           false,
		"v01.34.5":             false, // accepted by the old regexp
		"v1.34.05":             false, // accepted by the old regexp
	} {
		doc := "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: " + in + "\nimages: {etcd: e}\n"
		_, err := ParseRelease([]byte(doc))
		if ok && err != nil {
			t.Errorf("kubernetesVersion %s: %v", in, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "kubernetesVersion: must look like v1.34.5")) {
			t.Errorf("kubernetesVersion %s: ParseRelease = %v", in, err)
		}
	}
}

// TestReleaseVersions pins the release's versions field: it goes with an
// image the release names, replaces the node's explicit version of the old
// image, and a digest-pinned etcd without one is refused.
func TestReleaseVersions(t *testing.T) {
	st, err := nodestate.Load(filepath.Join("..", "testdata", "states", "default-vip.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	digest := "registry.k8s.io/etcd@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	head := "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\n"
	r, err := ParseRelease([]byte(head + "images: {etcd: \"" + digest + "\"}\nversions: {etcd: \"3.6.16\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	to, err := r.Apply(st)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := resolve.Version(to, nodestate.Etcd); err != nil || v.String() != "3.6.16" {
		t.Errorf("etcd version after the release = %v, %v; want 3.6.16", v, err)
	}
	r, err = ParseRelease([]byte(head + "images: {etcd: \"" + digest + "\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(st); err == nil || !strings.Contains(err.Error(), "versions.etcd: required") {
		t.Errorf("a digest-pinned etcd with no version: %v, want versions.etcd: required", err)
	}
	r, err = ParseRelease([]byte(head + "images: {etcd: registry.k8s.io/etcd:3.6.16-0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if to, err = r.Apply(st); err != nil {
		t.Fatalf("a tagged etcd replacing a digest-pinned one keeps no stale version: %v", err)
	}
	if _, ok := to.Versions[nodestate.Etcd]; ok {
		t.Errorf("versions.etcd %q survived the image it described", to.Versions[nodestate.Etcd])
	}
	if _, err := ParseRelease([]byte(head + "images: {etcd: registry.k8s.io/etcd:3.6.16-0}\nversions: {kube-apiserver: v1.34.5}\n")); err == nil || !strings.Contains(err.Error(), "versions.kube-apiserver: the release names no image") {
		t.Errorf("a version without its image: %v", err)
	}
}

// TestReleaseApplyPreparesTheNextReplacement pins what run --to adds for
// the replacement after this one: --permit-port-sharing=true on a
// surgeable component whose image changes, and a 2 s stop grace on an
// etcd whose image changes (rendered as the pod's
// terminationGracePeriodSeconds); an operator's own value of either
// stands, and a component the release leaves alone gets neither.
func TestReleaseApplyPreparesTheNextReplacement(t *testing.T) {
	st, err := nodestate.Load(filepath.Join("..", "testdata", "states", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	release := func(comps ...string) *Release {
		t.Helper()
		b := "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\nimages:\n"
		for _, c := range comps {
			tag := "v1.34.5"
			if c == nodestate.Etcd {
				tag = "3.6.16-0"
			}
			b += "  " + c + ": registry.k8s.io/" + c + ":" + tag + "\n"
		}
		r, err := ParseRelease([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	grace := func(st *nodestate.NodeState) *int64 {
		t.Helper()
		pod, err := manifest.Render(st, manifest.Profile{}, nodestate.Etcd, "")
		if err != nil {
			t.Fatal(err)
		}
		return pod.Spec.TerminationGracePeriodSeconds
	}
	if g := grace(st); g != nil {
		t.Fatalf("before any upgrade etcd's pod has grace %d, want none (kubeadm's)", *g)
	}

	to, err := release(nodestate.Etcd, nodestate.KubeAPIServer).Apply(st)
	if err != nil {
		t.Fatal(err)
	}
	if g := grace(to); g == nil || *g != 2 {
		t.Errorf("etcd's image changed: its pod's grace is %v, want 2", g)
	}
	if v := to.ExtraArgs[nodestate.KubeAPIServer][manifest.PortSharingFlag]; len(v) != 1 || v[0] != "true" {
		t.Errorf("kube-apiserver's image changed: %s is %v, want true", manifest.PortSharingFlag, v)
	}
	if v, set := to.ExtraArgs[nodestate.Scheduler][manifest.PortSharingFlag]; set {
		t.Errorf("kube-scheduler's image is unchanged, yet %s is %v", manifest.PortSharingFlag, v)
	}

	to, err = release(nodestate.KubeAPIServer).Apply(st)
	if err != nil {
		t.Fatal(err)
	}
	if g := grace(to); g != nil {
		t.Errorf("etcd's image is unchanged, yet its pod's grace is %d", *g)
	}

	own := st.Clone()
	ten := int64(10)
	own.Etcd.TerminationGracePeriodSeconds = &ten
	own.SetExtraArg(nodestate.KubeAPIServer, manifest.PortSharingFlag, "false")
	to, err = release(nodestate.Etcd, nodestate.KubeAPIServer).Apply(own)
	if err != nil {
		t.Fatal(err)
	}
	if g := grace(to); g == nil || *g != 10 {
		t.Errorf("the operator's grace 10 became %v", g)
	}
	if v := to.ExtraArgs[nodestate.KubeAPIServer][manifest.PortSharingFlag]; len(v) != 1 || v[0] != "false" {
		t.Errorf("the operator's %s=false became %v", manifest.PortSharingFlag, v)
	}
}
