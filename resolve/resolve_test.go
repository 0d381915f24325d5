package resolve

import (
	"errors"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

const (
	etcd  = nodestate.Etcd
	api   = nodestate.KubeAPIServer
	kcm   = nodestate.ControllerManager
	sched = nodestate.Scheduler
	vip   = nodestate.KubeVIP
)

// unpinned is a node state that pins no image.
const unpinned = `apiVersion: stratum.ciq.com/v1
kind: NodeState
nodeName: cp-1
advertiseAddress: 10.0.0.11
kubernetesVersion: v1.36.3
`

// pinned pins every image, the scheduler's by digest alone.
const pinned = `apiVersion: stratum.ciq.com/v1
kind: NodeState
nodeName: cp-1
advertiseAddress: 10.0.0.11
kubernetesVersion: v1.34.4
images:
  etcd: registry.k8s.io/etcd:3.5.35-0
  kube-apiserver: registry.k8s.io/kube-apiserver:v1.34.4
  kube-controller-manager: registry.k8s.io/kube-controller-manager:v1.34.4
  kube-scheduler: registry.k8s.io/kube-scheduler@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
etcd:
  dataDir: /var/lib/etcd
`

func parse(t *testing.T, doc string) *nodestate.NodeState {
	t.Helper()
	st, err := nodestate.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(st); err != nil {
		t.Fatal(err)
	}
	return st
}

// want is one component's expected resolution: "image version minor
// pinned", version and minor "-" when unknown.
type want map[string]string

func TestResolve(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      want
		paired    string // kubeadm's etcd tag, or "error: substring"
	}{
		{"kubeadm's default repository", unpinned, want{
			etcd:  "registry.k8s.io/etcd:3.6.8-0 3.6.8 3.6 false",
			api:   "registry.k8s.io/kube-apiserver:v1.36.3 1.36.3 1.36 false",
			kcm:   "registry.k8s.io/kube-controller-manager:v1.36.3 1.36.3 1.36 false",
			sched: "registry.k8s.io/kube-scheduler:v1.36.3 1.36.3 1.36 false",
		}, "3.6.8-0"},
		{"a mirror with a port, another minor", strings.Replace(unpinned, "v1.36.3", "v1.35.4", 1) + "imageRepository: mirror.example.com:5000/k8s\n", want{
			etcd:  "mirror.example.com:5000/k8s/etcd:3.6.6-0 3.6.6 3.6 false",
			api:   "mirror.example.com:5000/k8s/kube-apiserver:v1.35.4 1.35.4 1.35 false",
			sched: "mirror.example.com:5000/k8s/kube-scheduler:v1.35.4 1.35.4 1.35 false",
		}, "3.6.6-0"},
		{"pins win over the repository", unpinned + "imageRepository: mirror.example.com/k8s\nimages:\n  etcd: registry.k8s.io/etcd:3.6.16-0\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.35.4\n", want{
			etcd:  "registry.k8s.io/etcd:3.6.16-0 3.6.16 3.6 true",
			api:   "mirror.example.com/k8s/kube-apiserver:v1.36.3 1.36.3 1.36 false",
			kcm:   "mirror.example.com/k8s/kube-controller-manager:v1.36.3 1.36.3 1.36 false",
			sched: "registry.k8s.io/kube-scheduler:v1.35.4 1.35.4 1.35 true",
		}, "3.6.8-0"},
		{"a build version's + becomes _ in the tag", strings.Replace(unpinned, "v1.36.3", "v1.37.2+stratum.1", 1), want{
			etcd: "registry.k8s.io/etcd:3.7.0-0 3.7.0 3.7 false",
			api:  "registry.k8s.io/kube-apiserver:v1.37.2_stratum.1 1.37.2+stratum.1 1.37 false",
		}, "3.7.0-0"},
		{"kube-vip pinned, its tag a version", unpinned + "vip:\n  address: 10.0.0.100\n  interface: eth0\nimages:\n  kube-vip: ghcr.io/kube-vip/kube-vip:v0.8.9\n", want{
			vip: "ghcr.io/kube-vip/kube-vip:v0.8.9 0.8.9 0.8 true",
		}, "3.6.8-0"},
		{"kube-vip pinned, its tag no version", unpinned + "vip:\n  address: 10.0.0.100\n  interface: eth0\nimages:\n  kube-vip: ghcr.io/kube-vip/kube-vip:latest\n", want{
			vip: "ghcr.io/kube-vip/kube-vip:latest - - true",
		}, "3.6.8-0"},
		{"digest alone falls back to kubernetesVersion", pinned, want{
			etcd:  "registry.k8s.io/etcd:3.5.35-0 3.5.35 3.5 true",
			sched: "registry.k8s.io/kube-scheduler@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef 1.34.4 1.34 true",
		}, "3.6.5-0"},
		{"digest and versions", pinned + "versions:\n  kube-scheduler: v1.34.3\n", want{
			sched: "registry.k8s.io/kube-scheduler@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef 1.34.3 1.34 true",
		}, "3.6.5-0"},
		{"a minor kubeadm's table lacks, etcd pinned", strings.Replace(unpinned, "v1.36.3", "v1.38.0", 1) + "images:\n  etcd: registry.k8s.io/etcd:3.7.3-0\n", want{
			etcd: "registry.k8s.io/etcd:3.7.3-0 3.7.3 3.7 true",
			api:  "registry.k8s.io/kube-apiserver:v1.38.0 1.38.0 1.38 false",
		}, "error: no etcd version is paired with its minor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := Resolve(parse(t, c.doc))
			for comp, w := range c.want {
				rc := n.Components[comp]
				v, minor := "-", "-"
				if rc.Version != nil {
					v, minor = rc.Version.String(), rc.Minor()
				}
				if got := strings.Join([]string{rc.Image, v, minor, map[bool]string{true: "true", false: "false"}[rc.Pinned]}, " "); got != w || rc.Err != nil {
					t.Errorf("%s: got %q (err %v), want %q", comp, got, rc.Err, w)
				}
				if n.Image(comp) != Image(n.State, comp) {
					t.Errorf("%s: Node.Image %q, Image %q", comp, n.Image(comp), Image(n.State, comp))
				}
			}
			if msg, isErr := strings.CutPrefix(c.paired, "error: "); isErr {
				if n.PairedErr == nil || !strings.Contains(n.PairedErr.Error(), msg) || !errors.Is(n.PairedErr, ErrUnknownMinor) {
					t.Errorf("paired etcd: %q, %v; want an error containing %q", n.PairedEtcdTag, n.PairedErr, msg)
				}
			} else if n.PairedEtcdTag != c.paired || n.PairedErr != nil {
				t.Errorf("paired etcd: %q, %v; want %q", n.PairedEtcdTag, n.PairedErr, c.paired)
			}
		})
	}
}

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
		{"etcd tag", nil, nil, etcd, "3.5.35"},
		{"etcd tag without revision", map[string]string{etcd: "registry.k8s.io/etcd:3.7.3"}, nil, etcd, "3.7.3"},
		{"etcd tag with v", map[string]string{etcd: "registry.k8s.io/etcd:v3.6.16"}, nil, etcd, "3.6.16"},
		{"etcd digest and versions", map[string]string{etcd: "registry.k8s.io/etcd" + digest}, map[string]string{etcd: "3.6.16"}, etcd, "3.6.16"},
		{"etcd tag and digest", map[string]string{etcd: "registry.k8s.io/etcd:3.6.16-0" + digest}, nil, etcd, "3.6.16"},
		{"etcd tag agrees", nil, map[string]string{etcd: "3.5.35"}, etcd, "3.5.35"},
		{"etcd tag disagrees", nil, map[string]string{etcd: "3.6.16"}, etcd, "error: versions.etcd: 3.6.16 disagrees with the tag of images.etcd"},
		{"etcd digest alone", map[string]string{etcd: "registry.k8s.io/etcd" + digest}, nil, etcd, "error: versions.etcd: required"},
		{"etcd latest", map[string]string{etcd: "registry.k8s.io/etcd:latest"}, nil, etcd, "error: versions.etcd: required"},
		{"etcd bad versions", nil, map[string]string{etcd: "three"}, etcd, "error: versions.etcd: must be a version like 3.6.16"},
		{"apiserver tag", nil, nil, api, "1.34.4"},
		{"scheduler digest falls back", map[string]string{sched: "registry.k8s.io/kube-scheduler" + digest}, nil, sched, "1.34.4"},
		{"scheduler digest and versions", map[string]string{sched: "registry.k8s.io/kube-scheduler" + digest}, map[string]string{sched: "v1.34.3"}, sched, "1.34.3"},
		{"apiserver disagrees", nil, map[string]string{api: "v1.35.0"}, api, "error: versions.kube-apiserver: v1.35.0 disagrees"},
		{"unknown component", nil, map[string]string{"kube-proxy": "v1.34.4"}, api, "error: versions.kube-proxy: not a component this node runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := parse(t, pinned)
			for k, v := range tc.images {
				st.Images[k] = v
			}
			st.Versions = tc.versions
			verr := Validate(st)
			if want, ok := strings.CutPrefix(tc.want, "error: "); ok {
				if verr == nil || !strings.Contains(verr.Error(), want) {
					t.Fatalf("Validate() = %v, want an error containing %q", verr, want)
				}
				return
			}
			if verr != nil {
				t.Fatalf("Validate: %v", verr)
			}
			v, err := Resolve(st).Version(tc.component)
			if err != nil {
				t.Fatal(err)
			}
			if v.String() != tc.want {
				t.Errorf("Version(%s) = %s, want %s", tc.component, v, tc.want)
			}
		})
	}
}

// TestValidateImages: what the node's versions say about its images is
// checked by Validate, field by field.
func TestValidateImages(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"etcd of a minor kubeadm's table lacks", strings.Replace(unpinned, "v1.36.3", "v1.38.0", 1), "images.etcd: required: Kubernetes v1.38.0: no etcd version is paired with its minor (the table of versions/kubeadm knows 1.34, 1.35, 1.36, 1.37); pin etcd's image"},
		{"an empty pin", unpinned + "images:\n  kube-apiserver: \"\"\n", "images.kube-apiserver: empty: pin an image reference, or leave kube-apiserver out"},
		{"a repository with a tag", unpinned + "imageRepository: registry.k8s.io/kube:v1\n", `imageRepository: must be an image repository without tag or digest`},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := nodestate.Parse([]byte(c.doc))
			if err == nil {
				err = Validate(st)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestCheckKubernetesVersion(t *testing.T) {
	st := parse(t, pinned)
	if err := CheckKubernetesVersion(Resolve(st)); err != nil {
		t.Fatalf("agreeing: %v", err)
	}
	st.KubernetesVersion = "v1.34.3"
	var kve *KubernetesVersionError
	if err := CheckKubernetesVersion(Resolve(st)); !errors.As(err, &kve) || kve.ImageVersion != "v1.34.4" {
		t.Fatalf("disagreeing: %v", err)
	}
}

// TestResolveRecordsWhatItCannotTell: a component whose version is known
// from nowhere carries its error; the others resolve all the same, so each
// caller reports only what it needs.
func TestResolveRecordsWhatItCannotTell(t *testing.T) {
	st := parse(t, pinned)
	st.Images[etcd] = "registry.k8s.io/etcd@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	n := Resolve(st)
	if v, err := n.Version(etcd); v != nil || err == nil || !strings.Contains(err.Error(), "set versions.etcd") {
		t.Errorf("etcd: %v, %v; want an error asking for versions.etcd", v, err)
	}
	if n.Image(etcd) != st.Images[etcd] {
		t.Errorf("etcd's image %q, want its pin", n.Image(etcd))
	}
	if v, err := n.Version(api); err != nil || v.String() != "1.34.4" {
		t.Errorf("kube-apiserver: %v, %v", v, err)
	}
	if _, err := n.Version("kube-proxy"); err == nil {
		t.Error("kube-proxy: no error for a component that does not exist")
	}
	if Validate(st) == nil {
		t.Error("Validate accepted an etcd whose version is unknown")
	}
}
