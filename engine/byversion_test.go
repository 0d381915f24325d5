package engine

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// byVersionNode is a node state at v1.36.3 with the given images section.
func byVersionNode(t *testing.T, version, images string) *nodestate.NodeState {
	t.Helper()
	st, err := nodestate.Parse([]byte("apiVersion: stratum.ciq.com/v1\nkind: NodeState\nnodeName: cp-1\nadvertiseAddress: 10.0.0.11\nkubernetesVersion: " + version + "\n" + images))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

const kubeadmPins = `images:
  etcd: mirror.example.com:5000/k8s/etcd:3.6.8-0
  kube-apiserver: mirror.example.com:5000/k8s/kube-apiserver:v1.36.3
  kube-controller-manager: mirror.example.com:5000/k8s/kube-controller-manager:v1.36.3
  kube-scheduler: mirror.example.com:5000/k8s/kube-scheduler:v1.36.3
`

func TestReleaseForVersion(t *testing.T) {
	for _, c := range []struct {
		name, version, images, to string
		want                      map[string]string // the release's images
		after                     map[string]string // the images of the node state it makes
	}{
		{name: "pinned like kubeadm: every component, in its repository", version: "v1.36.3", images: kubeadmPins, to: "v1.37.2",
			want: map[string]string{
				"etcd":                    "mirror.example.com:5000/k8s/etcd:3.7.0-0",
				"kube-apiserver":          "mirror.example.com:5000/k8s/kube-apiserver:v1.37.2",
				"kube-controller-manager": "mirror.example.com:5000/k8s/kube-controller-manager:v1.37.2",
				"kube-scheduler":          "mirror.example.com:5000/k8s/kube-scheduler:v1.37.2",
			}},
		{name: "a patch: etcd stays at the minor's pairing", version: "v1.36.1", images: strings.ReplaceAll(kubeadmPins, "v1.36.3", "v1.36.1"), to: "v1.36.3",
			want: map[string]string{
				"kube-apiserver":          "mirror.example.com:5000/k8s/kube-apiserver:v1.36.3",
				"kube-controller-manager": "mirror.example.com:5000/k8s/kube-controller-manager:v1.36.3",
				"kube-scheduler":          "mirror.example.com:5000/k8s/kube-scheduler:v1.36.3",
			}},
		{name: "etcd newer than the pairing is kept", version: "v1.36.3", images: strings.Replace(kubeadmPins, "etcd:3.6.8-0", "etcd:3.7.3-0", 1), to: "v1.37.2",
			want: map[string]string{
				"kube-apiserver":          "mirror.example.com:5000/k8s/kube-apiserver:v1.37.2",
				"kube-controller-manager": "mirror.example.com:5000/k8s/kube-controller-manager:v1.37.2",
				"kube-scheduler":          "mirror.example.com:5000/k8s/kube-scheduler:v1.37.2",
			}},
		{name: "unpinned: the version moves everything", version: "v1.35.4", images: "imageRepository: mirror.example.com/k8s\n", to: "v1.36.3",
			want: map[string]string{},
			after: map[string]string{
				"etcd":           "mirror.example.com/k8s/etcd:3.6.8-0",
				"kube-apiserver": "mirror.example.com/k8s/kube-apiserver:v1.36.3",
				"kube-scheduler": "mirror.example.com/k8s/kube-scheduler:v1.36.3",
			}},
		{name: "a pinned etcd newer than the pairing stays pinned", version: "v1.36.3", images: "images:\n  etcd: registry.k8s.io/etcd:3.7.3-0\n", to: "v1.37.2",
			want: map[string]string{}, after: map[string]string{"etcd": "registry.k8s.io/etcd:3.7.3-0", "kube-apiserver": "registry.k8s.io/kube-apiserver:v1.37.2"}},
		{name: "the same version, unpinned: nothing to pin", version: "v1.37.2", images: "", to: "v1.37.2",
			want: map[string]string{}},
		{name: "a mixed node: the pinned scheduler moves too", version: "v1.36.3", images: "images:\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.36.3\n", to: "v1.37.2",
			want: map[string]string{"kube-scheduler": "registry.k8s.io/kube-scheduler:v1.37.2"},
			after: map[string]string{
				"etcd":           "registry.k8s.io/etcd:3.7.0-0",
				"kube-apiserver": "registry.k8s.io/kube-apiserver:v1.37.2",
				"kube-scheduler": "registry.k8s.io/kube-scheduler:v1.37.2",
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := byVersionNode(t, c.version, c.images)
			rel, err := ReleaseForVersion(st, c.to)
			if err != nil {
				t.Fatal(err)
			}
			if rel.KubernetesVersion != c.to || !maps.Equal(rel.Images, c.want) {
				t.Errorf("release %s %v, want %s %v", rel.KubernetesVersion, rel.Images, c.to, c.want)
			}
			to, err := rel.Apply(st)
			if err != nil {
				t.Fatal(err)
			}
			if err := resolve.CheckKubernetesVersion(resolve.Resolve(to)); err != nil {
				t.Errorf("the upgraded node state: %v", err)
			}
			for comp, img := range c.after {
				if got := resolve.Image(to, comp); got != img {
					t.Errorf("after: %s runs %s, want %s", comp, got, img)
				}
			}
			// Parsed back, the release is the same.
			raw, err := rel.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseRelease(raw)
			if err != nil || back.KubernetesVersion != rel.KubernetesVersion || !maps.Equal(back.Images, rel.Images) && len(rel.Images) > 0 {
				t.Errorf("ParseRelease(Marshal) = %+v, %v; want %+v", back, err, rel)
			}
		})
	}
}

func TestReleaseForVersionRefusals(t *testing.T) {
	for _, c := range []struct {
		name, images, to, want string
	}{
		{"not a version", kubeadmPins, "1.37.2", "upgrade to 1.37.2: not a Kubernetes version"},
		{"a downgrade", kubeadmPins, "v1.36.1", "upgrade to v1.36.1: older than the node's v1.36.3: an upgrade by version never goes down"},
		{"a digest pin", strings.Replace(kubeadmPins, "kube-scheduler:v1.36.3", "kube-scheduler@sha256:"+strings.Repeat("ab", 32), 1), "v1.37.2",
			"upgrade to v1.37.2: kube-scheduler: its image mirror.example.com:5000/k8s/kube-scheduler@sha256:abab"},
		{"a tag that is no version", strings.Replace(kubeadmPins, "kube-apiserver:v1.36.3", "kube-apiserver:latest", 1) + "versions:\n  kube-apiserver: v1.36.3\n", "v1.37.2",
			"kube-apiserver: its image mirror.example.com:5000/k8s/kube-apiserver:latest has a tag that is not a version"},
		// Refused with the supported range, not sent to a release file
		// that would then fail as unsupported (issue 39, item 4).
		{"an unsupported minor", kubeadmPins, "v1.38.0", "upgrade to v1.38.0: Kubernetes 1.38 is not supported: stratum-upgrade renders Kubernetes 1.34, 1.35, 1.36, 1.37"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReleaseForVersion(byVersionNode(t, "v1.36.3", c.images), c.to)
			var be *ByVersionError
			if !errors.As(err, &be) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want a ByVersionError with %q", err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "release file") && strings.Contains(c.want, "not supported") {
				t.Errorf("an unsupported minor sends the operator to a release file: %v", err)
			}
		})
	}
}
