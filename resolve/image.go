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
