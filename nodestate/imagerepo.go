package nodestate

// The image a component runs: its pin in images, or kubeadm's image in
// the node's imageRepository (imageRepository in the node state).

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/versions/kubeadm"
)

// DefaultImageRepository is kubeadm's default image repository, used when
// the node state names none.
const DefaultImageRepository = "registry.k8s.io"

// repositoryRef is an image repository: a registry host (with a port) and
// a path, no tag, no digest.
var repositoryRef = regexp.MustCompile(`^[a-z0-9]+([._:-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)

// Repository is the node's image repository: imageRepository, or
// DefaultImageRepository when it is empty.
func (st *NodeState) Repository() string {
	if st.ImageRepository != "" {
		return st.ImageRepository
	}
	return DefaultImageRepository
}

// Pinned reports whether images pins component's image.
func (st *NodeState) Pinned(component string) bool { return st.Images[component] != "" }

// Image is the image component runs: its pin in images, else the one
// kubeadm would run in the node's repository (KubeadmImage). It is ""
// when there is neither (kube-vip unpinned, or kubernetesVersion no
// version or of a minor kubeadm's table lacks, for etcd).
func (st *NodeState) Image(component string) string {
	if img := st.Images[component]; img != "" {
		return img
	}
	img, err := KubeadmImage(st.Repository(), component, st.KubernetesVersion)
	if err != nil {
		return ""
	}
	return img
}

// KubeadmImage is the image kubeadm runs component from in repository at
// Kubernetes kubernetesVersion (cmd/kubeadm/app/images/images.go): a
// Kubernetes component's is <repository>/<component>:<kubernetesVersion>
// (a "+" of the version as "_", as kubeadm's tags), etcd's is
// <repository>/etcd:<the tag kubeadm pairs with the minor>. kube-vip has
// none: kubeadm does not run it.
func KubeadmImage(repository, component, kubernetesVersion string) (string, error) {
	v, err := ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return "", err
	}
	switch component {
	case KubeAPIServer, ControllerManager, Scheduler:
		return repository + "/" + component + ":" + strings.ReplaceAll(kubernetesVersion, "+", "_"), nil
	case Etcd:
		tag, err := kubeadm.EtcdTag(v)
		if err != nil {
			return "", err
		}
		return repository + "/etcd:" + tag, nil
	}
	return "", fmt.Errorf("%s: kubeadm has no image of it; pin it in images", component)
}

// validateImages checks imageRepository and that every component of the
// roster has an image: pinned, or derived from the repository.
func (st *NodeState) validateImages(roster []string, bad func(field, format string, a ...any)) {
	if st.ImageRepository != "" && !repositoryRef.MatchString(st.ImageRepository) {
		bad("imageRepository", "must be an image repository without tag or digest, like registry.k8s.io or mirror.example.com:5000/k8s, got %q", st.ImageRepository)
		return
	}
	for _, c := range roster {
		img, pinned := st.Images[c]
		switch {
		case pinned && img == "":
			bad("images."+c, "empty: pin an image reference, or leave %s out to run it from imageRepository", c)
		case pinned && !imageRef.MatchString(img):
			bad("images."+c, "not an image reference: %q", img)
		case pinned:
		case c == KubeVIP:
			bad("images."+c, "required: the node runs kube-vip, which kubeadm has no image of")
		default:
			if _, err := KubeadmImage(st.Repository(), c, st.KubernetesVersion); err != nil && c == Etcd {
				if _, verr := ParseKubernetesVersion(st.KubernetesVersion); verr == nil {
					bad("images."+c, "required: %v; pin etcd's image", err)
				}
			}
		}
	}
}

// TagVersion is the version the tag of image reference ref says for
// component (etcd's "3.6.16-0" is 3.6.16), nil when it has no tag or the
// tag is no version.
func TagVersion(component, ref string) *version.Version {
	tag := ImageTag(ref)
	if tag == "" {
		return nil
	}
	v, err := ParseComponentVersion(component, tag)
	if err != nil {
		return nil
	}
	return v
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
// not kubernetesVersion. An unpinned kube-apiserver runs at it by
// construction. st is valid.
func (st *NodeState) CheckKubernetesVersion() error {
	want, err := ParseKubernetesVersion(st.KubernetesVersion)
	if err != nil {
		return err
	}
	got, err := st.ComponentVersion(KubeAPIServer)
	if err != nil {
		return err
	}
	if !got.EqualTo(want) {
		return &KubernetesVersionError{KubernetesVersion: st.KubernetesVersion, Image: st.Image(KubeAPIServer), ImageVersion: "v" + got.String()}
	}
	return nil
}
