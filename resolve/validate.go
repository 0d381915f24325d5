package resolve

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// Validate checks every field of st, what its versions say included: the
// node state's own checks (nodestate.Validate) and, through the tags and
// kubeadm's table, that each image and version is known and agrees.
func Validate(st *nodestate.NodeState) error { return st.ValidateWith(versionRules) }

// versionRules: kubeadm's table names etcd's image when it is not pinned;
// each versions entry parses and agrees with its image's tag; etcd's
// version is known.
func versionRules(st *nodestate.NodeState, roster []string, bad nodestate.Bad) {
	if st.ImageRepository != "" && !nodestate.IsRepository(st.ImageRepository) {
		return // reported, and no image of the node can be named
	}
	for _, c := range roster {
		if _, pinned := st.Images[c]; c != nodestate.Etcd || pinned {
			continue
		}
		if _, err := KubeadmImage(st.Repository(), c, st.KubernetesVersion); err != nil {
			if _, verr := nodestate.ParseKubernetesVersion(st.KubernetesVersion); verr == nil {
				bad("images."+c, "required: %v; pin etcd's image", err)
			}
		}
	}
	for _, c := range roster {
		if Image(st, c) == "" {
			continue // reported as a missing image
		}
		tagV, explicit, err := versionsOf(st, c)
		switch {
		case err != nil:
			bad("versions."+c, "must be a version like %s, got %q", nodestate.ExampleVersion(c), st.Versions[c])
		case tagV != nil && explicit != nil && !tagV.EqualTo(explicit):
			bad("versions."+c, "%s disagrees with the tag of images.%s (%q, version %s): give one version", st.Versions[c], c, Image(st, c), tagV)
		case c == nodestate.Etcd && tagV == nil && explicit == nil:
			bad("versions.etcd", "required: the tag of images.etcd (%q) is not a version, so the version etcd runs at is unknown", Image(st, c))
		}
	}
}

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
	if n.KubernetesErr != nil {
		return n.KubernetesErr
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
