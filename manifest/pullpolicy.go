package manifest

// The image pull policy of a rendered pod. stratum-upgrade makes sure
// every image is on the node before it stops a component, so the pod it
// writes must not make kubelet pull again after the stop: every container
// runs with imagePullPolicy IfNotPresent, as kubeadm writes it. Only a
// patch can set another; PullPolicies names it.

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// patchSeen is called by applyPatches with the pod as JSON after each
// patch file it applied.
type patchSeen func(file string, pod []byte) error

// PullPolicy is a container of a rendered pod that kubelet would not run
// with imagePullPolicy IfNotPresent, and the patch file that made it so.
type PullPolicy struct {
	Container, Image string
	// Policy is the policy as kubelet reads it; Set is false when the pod
	// leaves it unset (kubelet's default: Always for an image tagged latest).
	Policy corev1.PullPolicy
	Set    bool
	// Patch is the patch file (its name in patches.files) that last
	// changed it; "" when no patch did.
	Patch string
}

func (p PullPolicy) String() string {
	what := fmt.Sprintf("sets imagePullPolicy: %s on container %s", p.Policy, p.Container)
	if !p.Set {
		what = fmt.Sprintf("leaves container %s (image %s) without imagePullPolicy, which kubelet reads as %s", p.Container, p.Image, p.Policy)
	}
	by := "the pod"
	if p.Patch != "" {
		by = "patch file " + p.Patch
	}
	return fmt.Sprintf("%s %s: kubelet would pull its image again when it starts the pod, after the old one was stopped; set imagePullPolicy: IfNotPresent (stratum-upgrade puts every image on the node before it stops anything)", by, what)
}

// NotIfNotPresent is every container and init container of pod whose pull
// policy, as kubelet reads it, is not IfNotPresent, with Patch empty.
func NotIfNotPresent(pod *corev1.Pod) []PullPolicy {
	var out []PullPolicy
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if p := kubeletpod.PullPolicy(c); p != corev1.PullIfNotPresent {
			out = append(out, PullPolicy{Container: c.Name, Image: c.Image, Policy: p, Set: c.ImagePullPolicy != ""})
		}
	}
	return out
}

// PullPolicies is NotIfNotPresent of component name's render from st and
// prof, each with the patch file that last changed that container's
// policy (or image): the patches are applied one file at a time.
func PullPolicies(st *nodestate.NodeState, prof Profile, name string) ([]PullPolicy, error) {
	last := map[string]corev1.PullPolicy{} // container: policy after the files so far
	setBy := map[string]string{}
	seen := func(file string, data []byte) error {
		var pod corev1.Pod
		if err := json.Unmarshal(data, &pod); err != nil {
			return err
		}
		for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			p := kubeletpod.PullPolicy(c)
			if was, ok := last[c.Name]; !ok || was != p {
				setBy[c.Name] = file
			}
			last[c.Name] = p
		}
		return nil
	}
	// The render sets IfNotPresent on its one container: a container first
	// seen after a file, or whose policy changed there, got it from that file.
	pod, err := render(st, prof, name, "", seen)
	if err != nil {
		return nil, err
	}
	out := NotIfNotPresent(pod)
	for i := range out {
		out[i].Patch = setBy[out[i].Container]
	}
	return out, nil
}
