package nodestate

import (
	"strings"
	"testing"
)

// unpinned is a node state that pins no image but kube-vip's.
const unpinned = `apiVersion: stratum.ciq.com/v1
kind: NodeState
nodeName: cp-1
advertiseAddress: 10.0.0.11
kubernetesVersion: v1.36.3
`

func TestImageResolution(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      map[string]string
	}{
		{"kubeadm's default repository", unpinned, map[string]string{
			Etcd:              "registry.k8s.io/etcd:3.6.8-0",
			KubeAPIServer:     "registry.k8s.io/kube-apiserver:v1.36.3",
			ControllerManager: "registry.k8s.io/kube-controller-manager:v1.36.3",
			Scheduler:         "registry.k8s.io/kube-scheduler:v1.36.3",
		}},
		{"a mirror with a port, another minor", strings.Replace(unpinned, "v1.36.3", "v1.35.4", 1) + "imageRepository: mirror.example.com:5000/k8s\n", map[string]string{
			Etcd:          "mirror.example.com:5000/k8s/etcd:3.6.6-0",
			KubeAPIServer: "mirror.example.com:5000/k8s/kube-apiserver:v1.35.4",
			Scheduler:     "mirror.example.com:5000/k8s/kube-scheduler:v1.35.4",
		}},
		{"pins win over the repository", unpinned + "imageRepository: mirror.example.com/k8s\nimages:\n  etcd: registry.k8s.io/etcd:3.6.16-0\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.35.4\n", map[string]string{
			Etcd:              "registry.k8s.io/etcd:3.6.16-0",
			KubeAPIServer:     "mirror.example.com/k8s/kube-apiserver:v1.36.3",
			ControllerManager: "mirror.example.com/k8s/kube-controller-manager:v1.36.3",
			Scheduler:         "registry.k8s.io/kube-scheduler:v1.35.4",
		}},
		{"a build version's + becomes _ in the tag", strings.Replace(unpinned, "v1.36.3", "v1.37.2+stratum.1", 1), map[string]string{
			Etcd:          "registry.k8s.io/etcd:3.7.0-0",
			KubeAPIServer: "registry.k8s.io/kube-apiserver:v1.37.2_stratum.1",
		}},
		{"kube-vip is always pinned", unpinned + "vip:\n  address: 10.0.0.100\n  interface: eth0\nimages:\n  kube-vip: ghcr.io/kube-vip/kube-vip:v0.8.9\n", map[string]string{
			KubeVIP:       "ghcr.io/kube-vip/kube-vip:v0.8.9",
			KubeAPIServer: "registry.k8s.io/kube-apiserver:v1.36.3",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := Parse([]byte(c.doc))
			if err != nil {
				t.Fatal(err)
			}
			for comp, want := range c.want {
				if got := st.Image(comp); got != want {
					t.Errorf("Image(%s) = %q, want %q", comp, got, want)
				}
			}
		})
	}
}

// TestUnpinnedVersions: a component that is not pinned runs at its
// derived image's version: etcd at the paired one.
func TestUnpinnedVersions(t *testing.T) {
	st, err := Parse([]byte(unpinned))
	if err != nil {
		t.Fatal(err)
	}
	for comp, want := range map[string]string{Etcd: "3.6.8", KubeAPIServer: "1.36.3", Scheduler: "1.36.3"} {
		v, err := st.ComponentVersion(comp)
		if err != nil || v.String() != want {
			t.Errorf("ComponentVersion(%s) = %v, %v; want %s", comp, v, err, want)
		}
	}
}

func TestImageRepositoryRefusals(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"a repository with a tag", unpinned + "imageRepository: registry.k8s.io/kube:v1\n", `imageRepository: must be an image repository without tag or digest`},
		{"a repository with a trailing slash", unpinned + "imageRepository: registry.k8s.io/\n", `imageRepository: must be an image repository`},
		{"upper case", unpinned + "imageRepository: Registry.example.com\n", `imageRepository: must be an image repository`},
		{"etcd of a minor kubeadm's table lacks", strings.Replace(unpinned, "v1.36.3", "v1.38.0", 1), "images.etcd: required: Kubernetes v1.38.0: no etcd version is paired with its minor (the table of versions/kubeadm knows 1.34, 1.35, 1.36, 1.37); pin etcd's image"},
		{"an empty pin", unpinned + "images:\n  kube-apiserver: \"\"\n", "images.kube-apiserver: empty: pin an image reference, or leave kube-apiserver out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	// A minor the table lacks is fine with etcd pinned.
	if _, err := Parse([]byte(strings.Replace(unpinned, "v1.36.3", "v1.38.0", 1) + "images:\n  etcd: registry.k8s.io/etcd:3.7.3-0\n")); err != nil {
		t.Errorf("etcd pinned on 1.38: %v", err)
	}
}
