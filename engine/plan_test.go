package engine

import (
	"os"
	"slices"
	"testing"
)

// TestPlanEditedByHand: a manifest that is not the render of the node
// state is EditedByHand; a change the release does not make (the same
// image) is not Released, one it makes is.
func TestPlanEditedByHand(t *testing.T) {
	e, store, _, st := planNode(t, "default-vip")
	path := store.Path("kube-scheduler")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, "# edited by hand\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	rel := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: st.KubernetesVersion,
		Images: map[string]string{"kube-scheduler": st.Images["kube-scheduler"]}}
	plan, err := e.Plan(rel)
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.Changed(); !slices.Equal(got, []string{"kube-scheduler"}) {
		t.Fatalf("changed %v, want kube-scheduler", got)
	}
	if !plan.Changes[0].EditedByHand || plan.Changes[0].Released || len(plan.Released()) != 0 {
		t.Errorf("same release over a hand edit: %+v, want edited by hand and not released", plan.Changes[0])
	}

	// kube-apiserver, and so kubernetesVersion, stays.
	rel.Images["kube-scheduler"] = "registry.k8s.io/kube-scheduler:v1.34.5"
	rel.Images["kube-controller-manager"] = "registry.k8s.io/kube-controller-manager:v1.34.5"
	if plan, err = e.Plan(rel); err != nil {
		t.Fatal(err)
	}
	if got := plan.EditedByHand(); !slices.Equal(got, []string{"kube-scheduler"}) {
		t.Errorf("edited by hand %v, want kube-scheduler", got)
	}
	if got := plan.Released(); !slices.Equal(got, []string{"kube-controller-manager", "kube-scheduler"}) {
		t.Errorf("released %v, want kube-controller-manager, kube-scheduler", got)
	}
}
