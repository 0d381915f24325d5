package kubeapi

// The kube-apiserver version every control-plane node runs, as the API
// server reports it now: the live source of the cluster-wide skew check
// (engine's APIServerSkew), ahead of the record a node leaves in etcd.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// Where the control plane shows in the API: kubeadm's label on a
// control-plane Node, its label on the kube-apiserver static pod, and
// kubelet's annotation on a mirror pod (the static pod it runs from its
// manifest, as opposed to a pod someone created).
const (
	LabelControlPlane   = "node-role.kubernetes.io/control-plane"
	LabelComponent      = "component"
	AnnotationMirrorPod = "kubernetes.io/config.mirror"
)

// ErrUnanswered: the API server did not answer (down, restarting, failing),
// so nothing is known yet; asking again later may do.
var ErrUnanswered = errors.New("the API server did not answer")

// APIServer is one control-plane node's kube-apiserver as the API reports
// it: the versions the tags of its mirror pod's images say, or, when none
// does, Unread saying why.
type APIServer struct {
	// Node is the Node's name; Address its InternalIP ("" when it has none).
	Node, Address string
	// Versions are the versions ("v1.35.4") of the image its container
	// runs (the pod's status) and of the image kubelet runs it from (the
	// pod's spec, the manifest): the same but mid-replacement, when the
	// node runs one and is about to run the other, so both count.
	Versions []string
	// Unread is why Versions is empty: no mirror pod, no version tag.
	Unread string
}

// APIServers is every control-plane node's kube-apiserver: every Node
// with kubeadm's control-plane label or a kube-apiserver mirror pod, in
// the order the API lists them. An error wrapping ErrUnanswered is the API
// server not answering; any other error is its answer (a refusal).
func APIServers(ctx context.Context, cs API) ([]APIServer, error) {
	nodes, err := cs.ListNodes(ctx)
	if err != nil {
		return nil, answered("the Node objects", err)
	}
	pods, err := cs.ListPods(ctx, "kube-system", LabelComponent+"="+nodestate.KubeAPIServer)
	if err != nil {
		return nil, answered("the kube-apiserver pods in kube-system", err)
	}
	mirrors := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		if _, ok := p.Annotations[AnnotationMirrorPod]; ok && p.Spec.NodeName != "" {
			mirrors[p.Spec.NodeName] = append(mirrors[p.Spec.NodeName], p)
		}
	}
	var out []APIServer
	for _, n := range nodes.Items {
		_, cp := n.Labels[LabelControlPlane]
		if !cp && len(mirrors[n.Name]) == 0 {
			continue
		}
		a := APIServer{Node: n.Name, Address: internalIP(&n)}
		for _, p := range mirrors[n.Name] {
			a.Versions = appendVersions(a.Versions, &p)
		}
		switch {
		case len(mirrors[n.Name]) == 0:
			a.Unread = "no kube-apiserver mirror pod on it in kube-system"
		case len(a.Versions) == 0:
			a.Unread = fmt.Sprintf("the image of its mirror pod %s names no version", mirrors[n.Name][0].Name)
		}
		out = append(out, a)
	}
	return out, nil
}

// appendVersions appends to vs the version each kube-apiserver image of p
// says, running (status) then to run (spec), each once.
func appendVersions(vs []string, p *corev1.Pod) []string {
	var refs []string
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == nodestate.KubeAPIServer {
			refs = append(refs, c.Image)
		}
	}
	for _, c := range p.Spec.Containers {
		if c.Name == nodestate.KubeAPIServer {
			refs = append(refs, c.Image)
		}
	}
	for _, ref := range refs {
		if v := resolve.TagVersion(nodestate.KubeAPIServer, ref); v != nil && !slices.Contains(vs, "v"+v.String()) {
			vs = append(vs, "v"+v.String())
		}
	}
	return vs
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// answered wraps err reading what, with ErrUnanswered when the API server
// did not answer.
func answered(what string, err error) error {
	if transient(err) {
		return fmt.Errorf("%w: %s: %w", ErrUnanswered, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
