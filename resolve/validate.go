package resolve

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// Validate checks every field of st, what its versions say included: the
// node state's own checks (nodestate.Validate) and, through the tags and
// kubeadm's table, that each image and version is known and agrees.
func Validate(st *nodestate.NodeState) error { return st.Validate() }

// KubernetesVersionError is a node state whose kubernetesVersion is not the
// version kube-apiserver runs at: the control plane's version is
// kube-apiserver's.
type KubernetesVersionError struct {
	// KubernetesVersion is the node state's kubernetesVersion.
	KubernetesVersion string
	// Image is kube-apiserver's image, and ImageVersion its version.
	Image, ImageVersion string
}

func (e *KubernetesVersionError) Error() string {
	return fmt.Sprintf("kubernetesVersion %s disagrees with kube-apiserver's image %s (version %s): the control plane's version is kube-apiserver's", e.KubernetesVersion, e.Image, e.ImageVersion)
}

// CheckKubernetesVersion returns a *KubernetesVersionError when
// kube-apiserver's version (its image tag, or versions.kube-apiserver) is
// not n's kubernetesVersion. An unpinned kube-apiserver runs at it by
// construction. n's state is valid.
func CheckKubernetesVersion(n *Node) error {
	if n.Kubernetes == nil {
		_, err := nodestate.ParseKubernetesVersion(n.State.KubernetesVersion)
		return err
	}
	got, err := n.Version(nodestate.KubeAPIServer)
	if err != nil {
		return err
	}
	if !got.EqualTo(n.Kubernetes) {
		return &KubernetesVersionError{KubernetesVersion: n.State.KubernetesVersion, Image: n.Image(nodestate.KubeAPIServer), ImageVersion: "v" + got.String()}
	}
	return nil
}
