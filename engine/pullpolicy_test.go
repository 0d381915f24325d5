package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// A node state whose patch makes kubelet pull an image again after the
// stop (imagePullPolicy: Always) is refused by StaticPodKubelet before
// anything is written, naming the patch file that set it and not the
// harmless patch before it (defect K of issue 37).
func TestPullPolicyPatchRefused(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	to := n.st.Clone()
	to.Patches = &nodestate.Patches{Files: []nodestate.PatchFile{
		{Name: "kube-scheduler0+strategic.yaml", Content: "metadata:\n  labels:\n    site: lab\n"},
		{Name: "kube-scheduler1+strategic.yaml", Content: "spec:\n  containers:\n  - name: kube-scheduler\n    imagePullPolicy: Always\n"},
		{Name: "kube-apiserver+merge.yaml", Content: "metadata:\n  labels:\n    site: lab\n"},
	}}
	before := n.manifests()
	_, err := e.Apply(t.Context(), to, UpgradeOptions{})
	var pe *PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("Apply with an imagePullPolicy: Always patch: %v, want a pre-flight refusal", err)
	}
	var found bool
	for _, f := range pe.Failed {
		if f.Check != CheckStaticPodKubelet {
			continue
		}
		if f.Component != nodestate.Scheduler || !strings.Contains(f.Message, "patch file kube-scheduler1+strategic.yaml sets imagePullPolicy: Always on container kube-scheduler") {
			t.Errorf("finding %+v: want kube-scheduler's, naming kube-scheduler1+strategic.yaml", f)
		}
		found = true
	}
	if !found {
		t.Fatalf("no StaticPodKubelet finding: %v", err)
	}
	if hist, _ := n.j.History(0); len(hist) != 0 || !mapsEqualBytes(before, n.manifests()) {
		t.Fatal("the refusal wrote something")
	}

	// The same patch with IfNotPresent is no finding, and the node state
	// applies.
	to.Patches.Files[1].Content = "spec:\n  containers:\n  - name: kube-scheduler\n    imagePullPolicy: IfNotPresent\n"
	if res, err := e.Apply(t.Context(), to, UpgradeOptions{}); err != nil || res.Outcome != Committed {
		t.Fatalf("Apply with IfNotPresent: %+v %v", res, err)
	}
}

// A patch that adds a container with an image tagged latest and no pull
// policy is refused too: kubelet reads it as Always.
func TestPullPolicyDefaultAlwaysRefused(t *testing.T) {
	n := newMemNode(t)
	to := n.st.Clone()
	to.Patches = &nodestate.Patches{Files: []nodestate.PatchFile{
		{Name: "kube-scheduler+json.json", Content: `[{"op": "add", "path": "/spec/containers/-", "value": {"name": "sidecar", "image": "registry.example/sidecar:latest"}}]`},
	}}
	_, err := n.engine(nil).Apply(t.Context(), to, UpgradeOptions{})
	if err == nil || !strings.Contains(err.Error(), "patch file kube-scheduler+json.json leaves container sidecar (image registry.example/sidecar:latest) without imagePullPolicy, which kubelet reads as Always") {
		t.Fatalf("Apply: %v", err)
	}
}
