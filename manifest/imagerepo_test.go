package manifest

import (
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestRenderFromImageRepository: a component the node state does not pin
// is rendered with kubeadm's image in the node's repository, etcd's at the
// version kubeadm pairs with the minor; a pin is rendered as it is.
func TestRenderFromImageRepository(t *testing.T) {
	st := loadState(t, "default")
	st.Images = map[string]string{nodestate.Scheduler: st.Images[nodestate.Scheduler]}
	st.Versions = nil
	st.ImageRepository = "mirror.example.com/k8s"
	st.KubernetesVersion = "v1.36.3"
	want := map[string]string{
		nodestate.Etcd:              "mirror.example.com/k8s/etcd:3.6.8-0",
		nodestate.KubeAPIServer:     "mirror.example.com/k8s/kube-apiserver:v1.36.3",
		nodestate.ControllerManager: "mirror.example.com/k8s/kube-controller-manager:v1.36.3",
		nodestate.Scheduler:         st.Images[nodestate.Scheduler],
	}
	for comp, img := range want {
		pod, err := Render(st, Profile{}, comp, "")
		if err != nil {
			t.Fatalf("render %s: %v", comp, err)
		}
		if got := pod.Spec.Containers[0].Image; got != img {
			t.Errorf("%s: image %q, want %q", comp, got, img)
		}
	}
}
