package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// restartPolicyNode is a memNode at v1.34.4 whose node state's patch gives
// kube-scheduler's container its own restartPolicy (kubelet 1.35 runs it,
// 1.34 refuses it), and the release that moves it to v1.35.4.
func restartPolicyNode(t *testing.T) (*memNode, *Release) {
	t.Helper()
	n := newMemNode(t)
	n.st.Patches = &nodestate.Patches{Files: []nodestate.PatchFile{
		{Name: "kube-scheduler+strategic.yaml", Content: "spec:\n  containers:\n  - name: kube-scheduler\n    restartPolicy: Always\n"},
	}}
	if _, err := n.store.WriteAll(n.st); err != nil {
		t.Fatal(err)
	}
	if err := n.j.PutNodeState(n.st); err != nil {
		t.Fatal(err)
	}
	rel := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: "v1.35.4", Images: map[string]string{}}
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		rel.Images[comp] = "registry.k8s.io/" + comp + ":v1.35.4"
	}
	return n, rel
}

// During a 1.34 -> 1.35 upgrade the node's kubelet is still 1.34 (it moves
// after the control plane) and reads each manifest as soon as it is
// written: a container restartPolicy that kubelet 1.35 runs but the live
// kubelet 1.34 refuses is refused by StaticPodKubelet, naming kubelet 1.34,
// once, and nothing is written.
func TestStaticPodKubeletChecksTheLiveKubelet(t *testing.T) {
	n, rel := restartPolicyNode(t)
	e := n.engine(nil)
	e.kubelet = func(context.Context) (string, error) { return "v1.34.4", nil }
	before := n.manifests()
	_, err := e.RunWith(t.Context(), rel, nil, UpgradeOptions{})
	var pe *PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("run to v1.35.4 with kubelet v1.34.4 live: %v; want refused by %s", err, CheckStaticPodKubelet)
	}
	var found []string
	for _, f := range pe.Failed {
		if f.Check == CheckStaticPodKubelet {
			found = append(found, f.Component+": "+f.Message)
		}
	}
	if len(found) != 1 || !strings.HasPrefix(found[0], nodestate.Scheduler+": ") || !strings.Contains(found[0], "kubelet 1.34 refuses a restartPolicy on a regular container") ||
		!strings.Contains(found[0], "v1.34.4") {
		t.Fatalf("StaticPodKubelet findings %q; want one for kube-scheduler naming kubelet 1.34 and the live v1.34.4", found)
	}
	if hist, _ := n.j.History(0); len(hist) != 0 || !mapsEqualBytes(before, n.manifests()) {
		t.Fatal("the refusal wrote something")
	}

	// A plan outside an Engine (the plan command's) reads the kubelet it
	// is given in UpgradeOptions, and refuses the same.
	live := UpgradeOptions{Kubelet: func(context.Context) (string, error) { return "v1.34.4", nil }}
	if _, err := PlanUpgrade(t.Context(), n.store, n.k, n.st, rel, live); !errors.As(err, &pe) || !strings.Contains(err.Error(), "kubelet 1.34 refuses a restartPolicy") {
		t.Fatalf("PlanUpgrade with kubelet v1.34.4 live: %v; want refused by %s", err, CheckStaticPodKubelet)
	}

	// The live kubelet at the target's minor already: nothing refuses.
	e = n.engine(nil)
	e.kubelet = func(context.Context) (string, error) { return "v1.35.4", nil }
	if p, err := e.PlanWith(t.Context(), rel, UpgradeOptions{}); err != nil || len(p.Ignored) != 0 {
		t.Fatalf("plan with kubelet v1.35.4 live: %v %v; want no finding", p, err)
	}
}

// A live kubelet that cannot be read (no API server, one that does not
// answer or refuses, a version that is not one) is no refusal: the check
// reads the manifests by the target's kubelet alone, as before.
func TestStaticPodKubeletUnreadLiveKubelet(t *testing.T) {
	n, rel := restartPolicyNode(t)
	for _, c := range []struct {
		name string
		read func(context.Context) (string, error)
	}{
		{"no API server", nil},
		{"unanswered", func(context.Context) (string, error) {
			return "", fmt.Errorf("%w: connection refused", ErrAPIServerUnanswered)
		}},
		{"refused", func(context.Context) (string, error) { return "", errors.New(`nodes "cp-1" is forbidden`) }},
		{"no version", func(context.Context) (string, error) { return "", nil }},
		{"not a version", func(context.Context) (string, error) { return "kubelet", nil }},
	} {
		e := n.engine(nil)
		e.kubelet = c.read
		p, err := e.PlanWith(t.Context(), rel, UpgradeOptions{})
		if err != nil || !slices.Contains(p.Changed(), nodestate.Scheduler) || len(p.Ignored) != 0 {
			t.Errorf("%s: plan to v1.35.4: %v; want kube-scheduler changed, no finding", c.name, err)
		}
	}
}

// A problem both kubelets have (a Secret volume, refused by 1.34's and
// 1.35's) is reported once, naming both; one only the target's has is
// reported as before.
func TestStaticPodFindingsBothKubelets(t *testing.T) {
	plan := &Plan{Changes: []Change{
		{Component: nodestate.KubeAPIServer, After: ruleCase(t, "secret-volume.yaml")},
		{Component: nodestate.Scheduler, After: ruleCase(t, "restart-policy-never.yaml")},
		{Component: nodestate.Etcd, After: ruleCase(t, "accepted.yaml")},
	}}
	fs := staticPodFindings(plan, "v1.34.4", "v1.35.4")
	if len(fs) != 2 {
		t.Fatalf("findings %v; want one for kube-apiserver, one for kube-scheduler", fs)
	}
	for i, want := range [][]string{
		{"references secrets: kubelet 1.34 refuses", "v1.34.4", "1.35"},
		{"kubelet 1.34 refuses a restartPolicy on a regular container", "v1.34.4"},
	} {
		for _, s := range want {
			if !strings.Contains(fs[i].Message, s) {
				t.Errorf("finding %d says %q, want %q", i, fs[i].Message, s)
			}
		}
	}
	// The target's kubelet alone, as when the live one is unknown.
	if fs := staticPodFindings(plan, "", "v1.35.4"); len(fs) != 1 || fs[0].Component != nodestate.KubeAPIServer {
		t.Fatalf("target alone: %v; want kube-apiserver's Secret only", fs)
	}
}
