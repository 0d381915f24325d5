package resolve

// The image a component runs and the version its tag says: the one place
// an image tag is read and kubeadm's image naming applied.

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// ImageTag is the tag of an image reference ("registry.k8s.io/etcd:3.6.16-0"
// -> "3.6.16-0"), "" when it has none (a reference pinned by digest alone
// or naming no tag). A digest after the tag is ignored.
func ImageTag(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return "" // no tag, or the colon was a registry port
	}
	return ref[i+1:]
}

// TagVersion is the version the tag of image reference ref says for
// component (etcd's "3.6.16-0" is 3.6.16), nil when it has no tag or the
// tag is no version.
func TagVersion(component, ref string) *version.Version {
	tag := ImageTag(ref)
	if tag == "" {
		return nil
	}
	v, err := nodestate.ParseComponentVersion(component, tag)
	if err != nil {
		return nil
	}
	return v
}

// Image is the image component runs on st: its pin in images, else the one
// kubeadm would run in the node's repository (KubeadmImage). It is "" when
// there is neither (kube-vip unpinned, or kubernetesVersion no version or
// of a minor kubeadm's table lacks, for etcd).
func Image(st *nodestate.NodeState, component string) string {
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
	v, err := nodestate.ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return "", err
	}
	switch component {
	case nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler:
		return repository + "/" + component + ":" + strings.ReplaceAll(kubernetesVersion, "+", "_"), nil
	case nodestate.Etcd:
		tag, err := EtcdTag(v)
		if err != nil {
			return "", err
		}
		return repository + "/etcd:" + tag, nil
	}
	return "", fmt.Errorf("%s: kubeadm has no image of it; pin it in images", component)
}

// TagMinor is the major.minor of an image's tag
// ("registry.k8s.io/etcd:3.6.16-0" -> 3, 6), false when the reference has
// no parseable tag. The tag is read as a generic version (an optional "v",
// two or more dot-separated numbers, anything after them ignored), so it
// tells the minor of a tag that is no semantic version ("3.6").
func TagMinor(image string) (int, int, bool) {
	tag := ImageTag(image)
	if tag == "" {
		return 0, 0, false
	}
	v, err := version.ParseGeneric(tag)
	if err != nil {
		return 0, 0, false
	}
	return int(v.Major()), int(v.Minor()), true
}

// Retag is the image ref with tag as its tag; ref must be tagged with a
// version and carry no digest (a digest pins the image, whatever its tag).
func Retag(ref, tag, component string) (string, error) {
	old := ImageTag(ref)
	if strings.Contains(ref, "@") || old == "" {
		return "", fmt.Errorf("its image %s is pinned by digest or untagged, so its image at another version is unknown: name it in a release file (--to FILE)", ref)
	}
	if TagVersion(component, ref) == nil {
		return "", fmt.Errorf("its image %s has a tag that is not a version, so its image at another version is unknown: name it in a release file (--to FILE)", ref)
	}
	return strings.TrimSuffix(ref, old) + tag, nil
}

// KubernetesVersionOfImage is the Kubernetes version a Kubernetes
// component's image ref says ("v1.36.3"): its tag, which must be a version
// as node states write it. ok is false when ref has no tag; err says why a
// tag is no Kubernetes version.
func KubernetesVersionOfImage(ref string) (v string, ok bool, err error) {
	tag := ImageTag(ref)
	if tag == "" {
		return "", false, nil
	}
	if _, err := nodestate.ParseKubernetesVersion(tag); err != nil {
		return tag, true, err
	}
	return tag, true, nil
}
