package kubeapi

import (
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// uploaded is a ClusterConfiguration as kubeadm's uploadconfig phase
// stores it (the fields kubeadm v1.36 writes, defaults included), with
// fields a cluster's operator set.
const uploaded = `apiServer:
  certSANs:
  - cp.example.com
  extraArgs:
  - name: audit-log-maxage
    value: "30"
apiVersion: kubeadm.k8s.io/v1beta4
caCertificateValidityPeriod: 87600h0m0s
certificateValidityPeriod: 8760h0m0s
certificatesDir: /etc/kubernetes/pki
clusterName: prod
controlPlaneEndpoint: cp.example.com:6443
controllerManager: {}
dns: {}
encryptionAlgorithm: RSA-2048
etcd:
  local:
    dataDir: /var/lib/etcd
imageRepository: registry.k8s.io
kind: ClusterConfiguration
kubernetesVersion: v1.36.3
networking:
  dnsDomain: cluster.local
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/12
proxy: {}
scheduler: {}
`

func decode(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return m
}

// TestEditClusterConfiguration: the versions are set where kubeadm reads
// them, every other field and the apiVersion kept, other documents kept;
// nothing to change leaves the bytes alone.
func TestEditClusterConfiguration(t *testing.T) {
	v := ClusterVersions{KubernetesVersion: "v1.37.2", ImageRepository: "registry.k8s.io", EtcdImage: "registry.k8s.io/etcd:3.7.3-0"}
	ed, err := EditClusterConfiguration(uploaded, v)
	if err != nil || !ed.Changed || len(ed.Notes) != 0 {
		t.Fatalf("edit: %+v %v", ed, err)
	}
	want := decode(t, uploaded)
	want["kubernetesVersion"] = "v1.37.2"
	want["etcd"] = map[string]any{"local": map[string]any{"dataDir": "/var/lib/etcd", "imageTag": "3.7.3-0"}}
	got := decode(t, ed.Data)
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("edited:\n%s\nwant:\n%s", g, w)
	}
	again, err := EditClusterConfiguration(ed.Data, v)
	if err != nil || again.Changed || again.Data != ed.Data {
		t.Errorf("a second edit with the same versions: %+v %v, want unchanged bytes", again, err)
	}

	t.Run("another repository, and a stream of documents", func(t *testing.T) {
		stream := "apiVersion: v1\nkind: Other\nkept: [1, 2]\n---\n" + strings.Replace(uploaded, "apiVersion: kubeadm.k8s.io/v1beta4", "apiVersion: kubeadm.k8s.io/v1beta3", 1)
		v := ClusterVersions{KubernetesVersion: "v1.37.2", ImageRepository: "mirror.example.com/k8s", EtcdImage: "mirror.example.com/k8s/etcd:3.7.3-0"}
		ed, err := EditClusterConfiguration(stream, v)
		if err != nil || !ed.Changed {
			t.Fatalf("edit: %+v %v", ed, err)
		}
		docs := strings.Split(ed.Data, "\n---\n")
		if len(docs) != 2 {
			t.Fatalf("%d documents, want 2:\n%s", len(docs), ed.Data)
		}
		if o := decode(t, docs[0]); o["kind"] != "Other" || len(o["kept"].([]any)) != 2 {
			t.Errorf("the other document changed: %v", o)
		}
		cc := decode(t, docs[1])
		if cc["apiVersion"] != "kubeadm.k8s.io/v1beta3" || cc["imageRepository"] != "mirror.example.com/k8s" || cc["clusterName"] != "prod" {
			t.Errorf("ClusterConfiguration: %v", cc)
		}
		// The same repository as imageRepository: kubeadm derives etcd's.
		if local := cc["etcd"].(map[string]any)["local"].(map[string]any); local["imageRepository"] != nil || local["imageTag"] != "3.7.3-0" {
			t.Errorf("etcd.local %v: want imageTag only", local)
		}
	})
	t.Run("etcd from another repository than the rest", func(t *testing.T) {
		v := v
		v.EtcdImage = "quay.io/coreos/etcd:v3.7.3"
		ed, err := EditClusterConfiguration(uploaded, v)
		if err != nil {
			t.Fatal(err)
		}
		local := decode(t, ed.Data)["etcd"].(map[string]any)["local"].(map[string]any)
		if local["imageRepository"] != "quay.io/coreos" || local["imageTag"] != "v3.7.3" {
			t.Errorf("etcd.local %v", local)
		}
	})
	t.Run("no etcd section, and a null one", func(t *testing.T) {
		for _, doc := range []string{"apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\netcd:\n"} {
			ed, err := EditClusterConfiguration(doc, v)
			if err != nil {
				t.Fatal(err)
			}
			cc := decode(t, ed.Data)
			if cc["kubernetesVersion"] != "v1.37.2" || cc["etcd"].(map[string]any)["local"].(map[string]any)["imageTag"] != "3.7.3-0" {
				t.Errorf("%q edited to %v", doc, cc)
			}
		}
	})
	t.Run("what kubeadm cannot say is left, with a note", func(t *testing.T) {
		for _, c := range []struct{ doc, image, note string }{
			{strings.Replace(uploaded, "  local:\n    dataDir: /var/lib/etcd\n", "  external:\n    endpoints: [https://10.0.0.1:2379]\n", 1), v.EtcdImage, "external"},
			{uploaded, "registry.k8s.io/etcd-custom:3.7.3", "etcd-custom"},
			{uploaded, "registry.k8s.io/etcd@sha256:0123", "@sha256"},
		} {
			ed, err := EditClusterConfiguration(c.doc, ClusterVersions{KubernetesVersion: "v1.37.2", ImageRepository: "registry.k8s.io", EtcdImage: c.image})
			if err != nil || len(ed.Notes) != 1 || !strings.Contains(ed.Notes[0], c.note) {
				t.Errorf("etcd image %s: %+v %v, want a note naming %q", c.image, ed, err, c.note)
				continue
			}
			if etcd := decode(t, ed.Data)["etcd"]; mustJSON(t, etcd) != mustJSON(t, decode(t, c.doc)["etcd"]) {
				t.Errorf("etcd changed to %v", etcd)
			}
		}
	})
	t.Run("bad input is refused", func(t *testing.T) {
		for _, doc := range []string{"", "kind: InitConfiguration\n", "a: [\n", uploaded + "---\n" + uploaded} {
			if _, err := EditClusterConfiguration(doc, v); !errors.Is(err, ErrClusterConfiguration) {
				t.Errorf("%q: %v, want ErrClusterConfiguration", doc, err)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
