// Package resolve turns a node state into a resolved node: per component
// the image it runs, its version and minor. It is the one place an image
// tag is read for a version and kubeadm's table is consulted, so a command
// resolves its node once and passes the result down.
//
// It sits below versions, manifest and engine and above nodestate, which
// imports nothing of this module but durable.
package resolve

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// Component is one component of a resolved node.
type Component struct {
	// Image is the image it runs: its pin, or kubeadm's in the node's
	// repository; "" when there is neither.
	Image string
	// Pinned is whether images pins it.
	Pinned bool
	// Version is the version it runs at; nil with Err nil for kube-vip
	// whose tag is no version.
	Version *version.Version
	// Err is why Version is unknown.
	Err error
}

// Minor is the component's "major.minor", "" when its version is unknown.
func (c Component) Minor() string {
	if c.Version == nil {
		return ""
	}
	return fmt.Sprintf("%d.%d", c.Version.Major(), c.Version.Minor())
}

// Node is a node state resolved: what each component of nodestate.Components
// runs, and kubeadm's etcd pairing for the node's Kubernetes version.
type Node struct {
	State *nodestate.NodeState
	// Kubernetes is kubernetesVersion parsed; nil, with KubernetesErr
	// saying why, when it is no version.
	Kubernetes    *version.Version
	KubernetesErr error
	// PairedEtcdTag is the etcd image tag kubeadm pairs with Kubernetes
	// ("3.6.8-0"); "" with PairedErr set when the table lacks the minor.
	PairedEtcdTag string
	PairedErr     error
	Components    map[string]Component
}

// Resolve resolves st. It never fails: what cannot be resolved is recorded
// per component (Component.Err), so each caller reports only what it needs.
func Resolve(st *nodestate.NodeState) *Node {
	n := &Node{State: st, Components: make(map[string]Component, len(nodestate.Components))}
	n.Kubernetes, n.KubernetesErr = nodestate.ParseKubernetesVersion(st.KubernetesVersion)
	if n.KubernetesErr == nil {
		n.PairedEtcdTag, n.PairedErr = EtcdTag(n.Kubernetes)
	} else {
		n.Kubernetes, n.PairedErr = nil, n.KubernetesErr
	}
	for _, c := range nodestate.Components {
		v, err := componentVersion(st, c)
		n.Components[c] = Component{Image: Image(st, c), Pinned: st.Pinned(c), Version: v, Err: err}
	}
	return n
}

// Image is component's image ("" when it has none).
func (n *Node) Image(component string) string { return n.Components[component].Image }

// Version is component's version, or why it is unknown.
func (n *Node) Version(component string) (*version.Version, error) {
	c, ok := n.Components[component]
	if !ok {
		return nil, fmt.Errorf("%s: not a component", component)
	}
	return c.Version, c.Err
}

// Version is component's version on st: Resolve(st).Version(component)
// for a caller that needs one component once.
func Version(st *nodestate.NodeState, component string) (*version.Version, error) {
	return componentVersion(st, component)
}

// componentVersion is the version component runs at, from (in this order)
// its image tag when that is a version, the versions field, and for the
// Kubernetes components the node's kubernetesVersion. Validate checks that
// a tag and a versions entry agree. It is nil, with no error, for kube-vip
// without a version tag (nothing about kube-vip is rendered per version),
// and an error for etcd whose version is known from nowhere.
func componentVersion(st *nodestate.NodeState, component string) (*version.Version, error) {
	tagV, explicit, err := versionsOf(st, component)
	switch {
	case err != nil:
		return nil, err
	case tagV != nil:
		return tagV, nil
	case explicit != nil:
		return explicit, nil
	case component == nodestate.KubeVIP:
		return nil, nil
	case component == nodestate.Etcd:
		return nil, fmt.Errorf("etcd: the version of image %q is unknown: its tag is not a version; set versions.etcd (for example \"3.6.16\")", Image(st, nodestate.Etcd))
	}
	v, err := nodestate.ParseKubernetesVersion(st.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", component, err)
	}
	return v, nil
}

// versionsOf is the version the image tag says (nil when the tag is not a
// version) and the one the versions field says (nil when unset).
func versionsOf(st *nodestate.NodeState, component string) (tagV, explicit *version.Version, err error) {
	tagV = TagVersion(component, Image(st, component)) // "latest" is no version
	if s, ok := st.Versions[component]; ok {
		explicit, err = nodestate.ParseComponentVersion(component, s)
		if err != nil {
			return nil, nil, fmt.Errorf("versions.%s: %w", component, err)
		}
	}
	return tagV, explicit, nil
}
