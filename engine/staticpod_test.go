package engine

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

func ruleCase(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "kubeletpod", "testdata", "kubelet-rules", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStaticPodFindings: a manifest the target's kubelet refuses, one
// whose field it drops, and one it cannot read are each a StaticPodKubelet
// failure naming the component; a pod it runs as written is none. The
// check refuses the plan like any other, and can be let through.
func TestStaticPodFindings(t *testing.T) {
	plan := &Plan{Changes: []Change{
		{Component: nodestate.Etcd, After: ruleCase(t, "accepted.yaml")},
		{Component: nodestate.KubeAPIServer, After: ruleCase(t, "secret-volume.yaml")},
		{Component: nodestate.ControllerManager, After: ruleCase(t, "unknown-spec-field.yaml")},
		{Component: nodestate.Scheduler, After: []byte("kind: [")},
	}}
	fs := staticPodFindings(plan, "", "v1.37.2")
	var comps []string
	for _, f := range fs {
		comps = append(comps, f.Component)
		if f.Check != CheckStaticPodKubelet || !strings.HasPrefix(f.Message, f.Component+"'s rendered manifest") {
			t.Errorf("finding %+v", f)
		}
	}
	if want := []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}; !slices.Equal(comps, want) {
		t.Fatalf("findings for %v, want %v: %v", comps, want, fs)
	}
	for i, s := range []string{"references secrets: kubelet 1.37 refuses", "does not know the field spec.hostNetwrk and drops it", "cannot be checked against kubelet v1.37.2"} {
		if !strings.Contains(fs[i].Message, s) {
			t.Errorf("finding %d says %q, want %q", i, fs[i].Message, s)
		}
	}
	_, err := preflight{subject: "release v1.37.2"}.settle(fs)
	var pe *PreflightError
	if !errors.As(err, &pe) || len(pe.Failed) != 3 || !strings.Contains(err.Error(), "[ERROR StaticPodKubelet] kube-apiserver's rendered manifest") {
		t.Fatalf("settle: %v, want a refusal by StaticPodKubelet", err)
	}
	if ignored, err := (preflight{ignore: []string{CheckStaticPodKubelet}}).settle(fs); err != nil || len(ignored) != 3 {
		t.Fatalf("ignoring %s: %v %v", CheckStaticPodKubelet, ignored, err)
	}
	if !slices.Contains(PreflightChecks(), CheckStaticPodKubelet) {
		t.Errorf("PreflightChecks %v lacks %s", PreflightChecks(), CheckStaticPodKubelet)
	}
}

// TestRendersPassKubeletRules: what stratum renders for every test state,
// at every supported minor, is a pod every supported kubelet runs as
// written, so the check refuses only what an operator's input put there.
func TestRendersPassKubeletRules(t *testing.T) {
	states, err := filepath.Glob(filepath.Join("..", "testdata", "states", "*.yaml"))
	if err != nil || len(states) == 0 {
		t.Fatalf("no test states: %v", err)
	}
	for _, p := range states {
		st, err := nodestate.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Profile.Name == nodestate.ProfileCIS {
			st = cisState(t, st, t.TempDir()) // its profile files, where it can read them
		}
		prof, err := manifest.LoadProfile(st)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, comp := range manifest.NamesFor(st) {
			b, err := manifest.RenderBytes(st, prof, comp, "")
			if err != nil {
				t.Fatalf("%s %s: %v", p, comp, err)
			}
			for _, minor := range versions.KubernetesMinors {
				ps, err := kubeletpod.Check(b, "v"+minor+".0")
				if err != nil || len(ps) > 0 {
					t.Errorf("%s %s under kubelet %s: %v %v", filepath.Base(p), comp, minor, ps, err)
				}
			}
		}
	}
}
