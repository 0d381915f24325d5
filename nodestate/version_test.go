package nodestate

import (
	"strings"
	"testing"
)

func TestImageTag(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/etcd:3.6.16-0":             "3.6.16-0",
		"registry.k8s.io/kube-apiserver:v1.36.3":    "v1.36.3",
		"registry.k8s.io/etcd@sha256:0123":          "",
		"registry.k8s.io/etcd:3.6.16-0@sha256:0123": "3.6.16-0",
		"localhost:5000/etcd":                       "",
		"localhost:5000/etcd:3.7.3-0":               "3.7.3-0",
		"etcd":                                      "",
	} {
		if got := ImageTag(ref); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestComponentVersion pins where a component's version comes from: the
// image tag, else the versions field, else (Kubernetes components) the
// node's kubernetesVersion; etcd's must be known; a tag and a versions
// entry must agree.
func TestComponentVersion(t *testing.T) {
	digest := "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name      string
		images    map[string]string
		versions  map[string]string
		component string
		want      string // version, or "error: substring" of the validation error
	}{
		{"etcd tag", nil, nil, Etcd, "3.5.35"},
		{"etcd tag without revision", map[string]string{Etcd: "registry.k8s.io/etcd:3.7.3"}, nil, Etcd, "3.7.3"},
		{"etcd tag with v", map[string]string{Etcd: "registry.k8s.io/etcd:v3.6.16"}, nil, Etcd, "3.6.16"},
		{"etcd digest and versions", map[string]string{Etcd: "registry.k8s.io/etcd" + digest}, map[string]string{Etcd: "3.6.16"}, Etcd, "3.6.16"},
		{"etcd tag and digest", map[string]string{Etcd: "registry.k8s.io/etcd:3.6.16-0" + digest}, nil, Etcd, "3.6.16"},
		{"etcd tag agrees", nil, map[string]string{Etcd: "3.5.35"}, Etcd, "3.5.35"},
		{"etcd tag disagrees", nil, map[string]string{Etcd: "3.6.16"}, Etcd, "error: versions.etcd: 3.6.16 disagrees with the tag of images.etcd"},
		{"etcd digest alone", map[string]string{Etcd: "registry.k8s.io/etcd" + digest}, nil, Etcd, "error: versions.etcd: required"},
		{"etcd latest", map[string]string{Etcd: "registry.k8s.io/etcd:latest"}, nil, Etcd, "error: versions.etcd: required"},
		{"etcd bad versions", nil, map[string]string{Etcd: "three"}, Etcd, "error: versions.etcd: must be a version like 3.6.16"},
		{"apiserver tag", nil, nil, KubeAPIServer, "1.34.4"},
		{"scheduler digest falls back", map[string]string{Scheduler: "registry.k8s.io/kube-scheduler" + digest}, nil, Scheduler, "1.34.4"},
		{"scheduler digest and versions", map[string]string{Scheduler: "registry.k8s.io/kube-scheduler" + digest}, map[string]string{Scheduler: "v1.34.3"}, Scheduler, "1.34.3"},
		{"apiserver disagrees", nil, map[string]string{KubeAPIServer: "v1.35.0"}, KubeAPIServer, "error: versions.kube-apiserver: v1.35.0 disagrees"},
		{"unknown component", nil, map[string]string{"kube-proxy": "v1.34.4"}, KubeAPIServer, "error: versions.kube-proxy: not a component this node runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Parse([]byte(valid))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.images {
				st.Images[k] = v
			}
			st.Versions = tc.versions
			verr := st.Validate()
			if want, ok := strings.CutPrefix(tc.want, "error: "); ok {
				if verr == nil || !strings.Contains(verr.Error(), want) {
					t.Fatalf("Validate() = %v, want an error containing %q", verr, want)
				}
				return
			}
			if verr != nil {
				t.Fatalf("Validate: %v", verr)
			}
			v, err := st.ComponentVersion(tc.component)
			if err != nil {
				t.Fatal(err)
			}
			if v.String() != tc.want {
				t.Errorf("ComponentVersion(%s) = %s, want %s", tc.component, v, tc.want)
			}
		})
	}
}
