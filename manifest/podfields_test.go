package manifest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ciq/stratum-upgrade/nodestate"
)

func volumeNames(pod *corev1.Pod) (vols, mounts []string) {
	for _, v := range pod.Spec.Volumes {
		vols = append(vols, v.Name)
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounts = append(mounts, m.Name)
	}
	return vols, mounts
}

func mountOf(pod *corev1.Pod, name string) (corev1.Volume, corev1.VolumeMount, bool) {
	var vol corev1.Volume
	var mount corev1.VolumeMount
	okV, okM := false, false
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			vol, okV = v, true
		}
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == name {
			mount, okM = m, true
		}
	}
	return vol, mount, okV && okM
}

// Extra volumes are the one component's, merged by name and sorted as
// kubeadm writes them, with the given type and read-only flag.
func TestRenderExtraVolumes(t *testing.T) {
	audit := nodestate.HostPathMount{Name: "audit-log", HostPath: "/var/log/kubernetes/audit", MountPath: "/var/log/kubernetes/audit", PathType: corev1.HostPathDirectoryOrCreate}
	policy := nodestate.HostPathMount{Name: "audit-policy", HostPath: "/etc/kubernetes/audit/policy.yaml", MountPath: "/etc/kubernetes/audit/policy.yaml", ReadOnly: true, PathType: corev1.HostPathFile}
	untyped := nodestate.HostPathMount{Name: "zz-untyped", HostPath: "/srv/a", MountPath: "/a"}
	for _, tc := range []struct {
		name       string
		comp       string
		vols       []nodestate.HostPathMount
		wantMounts []string // mount names, in order
		check      func(t *testing.T, pod *corev1.Pod)
	}{
		{"apiserver audit", nodestate.KubeAPIServer, []nodestate.HostPathMount{policy, audit},
			[]string{"audit-log", "audit-policy", "ca-certs", "etc-ca-certificates", "etc-pki", "k8s-certs", "usr-local-share-ca-certificates", "usr-share-ca-certificates"},
			func(t *testing.T, pod *corev1.Pod) {
				v, m, ok := mountOf(pod, "audit-log")
				if !ok || m.ReadOnly || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate || m.MountPath != audit.MountPath {
					t.Errorf("audit-log: %+v %+v", v, m)
				}
				v, m, _ = mountOf(pod, "audit-policy")
				if !m.ReadOnly || *v.HostPath.Type != corev1.HostPathFile {
					t.Errorf("audit-policy: %+v %+v", v, m)
				}
			}},
		{"mount path differs from host path, no type", nodestate.Scheduler, []nodestate.HostPathMount{untyped},
			[]string{"kubeconfig", "zz-untyped"},
			func(t *testing.T, pod *corev1.Pod) {
				v, m, _ := mountOf(pod, "zz-untyped")
				if v.HostPath.Path != "/srv/a" || m.MountPath != "/a" || v.HostPath.Type == nil || *v.HostPath.Type != "" {
					t.Errorf("zz-untyped: %+v %+v", v, m)
				}
			}},
		{"replaces a rendered volume of its name", nodestate.ControllerManager,
			[]nodestate.HostPathMount{{Name: "ca-certs", HostPath: "/etc/ssl/mycerts", MountPath: "/etc/ssl/certs", ReadOnly: true, PathType: corev1.HostPathDirectory}},
			[]string{"ca-certs", "etc-ca-certificates", "etc-pki", "k8s-certs", "kubeconfig", "usr-local-share-ca-certificates", "usr-share-ca-certificates"},
			func(t *testing.T, pod *corev1.Pod) {
				v, _, _ := mountOf(pod, "ca-certs")
				if v.HostPath.Path != "/etc/ssl/mycerts" {
					t.Errorf("ca-certs not replaced: %+v", v)
				}
			}},
		{"etcd keeps data then certs first", nodestate.Etcd, []nodestate.HostPathMount{untyped, {Name: "a-backup", HostPath: "/backup", MountPath: "/backup"}},
			[]string{"etcd-data", "etcd-certs", "zz-untyped", "a-backup"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := loadState(t, "current")
			st.ExtraVolumes = map[string][]nodestate.HostPathMount{tc.comp: tc.vols}
			pod, err := Render(st, Profile{}, tc.comp, "")
			if err != nil {
				t.Fatal(err)
			}
			vols, mounts := volumeNames(pod)
			if !slices.Equal(mounts, tc.wantMounts) {
				t.Errorf("mounts %v, want %v", mounts, tc.wantMounts)
			}
			if !slices.IsSorted(vols) {
				t.Errorf("volumes not sorted by name: %v", vols)
			}
			if tc.check != nil {
				tc.check(t, pod)
			}
			// Only the component that has them mounts them.
			for _, other := range NamesFor(st) {
				if other == tc.comp {
					continue
				}
				op, err := Render(st, Profile{}, other, "")
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range tc.vols {
					if _, _, ok := mountOf(op, v.Name); ok && v.Name != "ca-certs" && v.Name != "kubeconfig" {
						t.Errorf("%s mounts %s's extra volume %s", other, tc.comp, v.Name)
					}
				}
			}
		})
	}
}

func TestRenderExtraVolumeMountedTwiceRefused(t *testing.T) {
	st := loadState(t, "current")
	st.ExtraVolumes = map[string][]nodestate.HostPathMount{nodestate.KubeAPIServer: {{Name: "mine", HostPath: "/x", MountPath: "/etc/ssl/certs"}}}
	_, err := Render(st, Profile{}, nodestate.KubeAPIServer, "")
	if err == nil || !strings.Contains(err.Error(), "both mounted at /etc/ssl/certs") {
		t.Fatalf("err = %v", err)
	}
}

// Extra envs are sorted by name (kubeadm's MergeKubeadmEnvVars); kube-vip's
// rendered env keeps its order, an extra of the same name replacing in place.
func TestRenderExtraEnvs(t *testing.T) {
	fieldRef := &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}
	for _, tc := range []struct {
		name string
		comp string
		envs []nodestate.EnvVar
		want []string // name=value in order
	}{
		{"sorted", nodestate.KubeAPIServer, []nodestate.EnvVar{{Name: "NO_PROXY", Value: "10.0.0.0/8"}, {Name: "HTTPS_PROXY", Value: "http://proxy:3128"}},
			[]string{"HTTPS_PROXY=http://proxy:3128", "NO_PROXY=10.0.0.0/8"}},
		{"valueFrom", nodestate.Etcd, []nodestate.EnvVar{{Name: "HOST_IP", ValueFrom: fieldRef}, {Name: "ETCD_X", Value: "1"}},
			[]string{"ETCD_X=1", "HOST_IP=<status.hostIP>"}},
		{"kube-vip in place", nodestate.KubeVIP, []nodestate.EnvVar{{Name: "vip_leaseduration", Value: "15"}, {Name: "a_extra", Value: "x"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := loadState(t, "default-vip")
			st.ExtraEnvs = map[string][]nodestate.EnvVar{tc.comp: tc.envs}
			pod, err := Render(st, Profile{}, tc.comp, "")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range pod.Spec.Containers[0].Env {
				v := e.Value
				if e.ValueFrom != nil {
					v = "<" + e.ValueFrom.FieldRef.FieldPath + ">"
				}
				got = append(got, e.Name+"="+v)
			}
			if tc.comp == nodestate.KubeVIP {
				i := slices.Index(got, "vip_leaseduration=15")
				if i < 0 || got[i-1] != "vip_leasename=plndr-cp-lock" || got[len(got)-1] != "a_extra=x" || slices.Contains(got, "vip_leaseduration=5") {
					t.Errorf("kube-vip env %v", got)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("env %v, want %v", got, tc.want)
			}
		})
	}
}

// Resources replace the rendered ones, quantities as written.
func TestRenderResources(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  nodestate.Resources
		want corev1.ResourceRequirements
	}{
		{"requests and limits", nodestate.Resources{Requests: map[string]string{"cpu": "500m", "memory": "512Mi"}, Limits: map[string]string{"memory": "2Gi"}},
			corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("512Mi")}, Limits: corev1.ResourceList{"memory": resource.MustParse("2Gi")}}},
		{"none", nodestate.Resources{}, corev1.ResourceRequirements{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := loadState(t, "current")
			st.Resources = map[string]nodestate.Resources{nodestate.KubeAPIServer: tc.res}
			pod, err := Render(st, Profile{}, nodestate.KubeAPIServer, "")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Encode(pod)
			got := pod.Spec.Containers[0].Resources
			if len(got.Requests) != len(tc.want.Requests) || len(got.Limits) != len(tc.want.Limits) {
				t.Fatalf("resources %+v, want %+v", got, tc.want)
			}
			for k, q := range tc.want.Requests {
				if g := got.Requests[k]; g.String() != q.String() {
					t.Errorf("requests.%s = %s, want %s", k, g.String(), q.String())
				}
			}
			if tc.name == "none" && strings.Contains(string(b), "250m") {
				t.Errorf("rendered request kept:\n%s", b)
			}
			sched, _ := Render(st, Profile{}, nodestate.Scheduler, "")
			if q := sched.Spec.Containers[0].Resources.Requests["cpu"]; q.String() != "100m" {
				t.Errorf("kube-scheduler's request changed: %s", q.String())
			}
		})
	}
}

// Patches of each type apply in list order to their target only; a patch
// that does not apply, or changes what another field owns, is an error.
func TestRenderPatches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   []nodestate.PatchFile
		check   func(t *testing.T, pod *corev1.Pod)
		wantErr string
	}{
		{"strategic resources", []nodestate.PatchFile{{Name: "kube-apiserver.yaml", Content: "spec:\n  containers:\n  - name: kube-apiserver\n    resources:\n      limits:\n        memory: 4Gi\n"}},
			func(t *testing.T, pod *corev1.Pod) {
				r := pod.Spec.Containers[0].Resources
				if q := r.Limits["memory"]; q.String() != "4Gi" {
					t.Errorf("limits %v", r.Limits)
				}
				if q := r.Requests["cpu"]; q.String() != "250m" {
					t.Errorf("the strategic patch lost the request: %v", r.Requests)
				}
			}, ""},
		{"merge label", []nodestate.PatchFile{{Name: "kube-apiserver0+merge.yaml", Content: "metadata:\n  labels:\n    team: infra\n"}},
			func(t *testing.T, pod *corev1.Pod) {
				if pod.Labels["team"] != "infra" || pod.Labels["component"] != "kube-apiserver" {
					t.Errorf("labels %v", pod.Labels)
				}
			}, ""},
		{"json ops in order, two files, two documents", []nodestate.PatchFile{
			{Name: "kube-apiserver+json.json", Content: `[{"op":"add","path":"/metadata/labels/a","value":"1"}]`},
			{Name: "kube-apiserver1+json.yaml", Content: "- op: replace\n  path: /metadata/labels/a\n  value: \"2\"\n---\n- op: add\n  path: /metadata/labels/b\n  value: x\n"},
			{Name: "kube-scheduler+merge.yaml", Content: "metadata:\n  labels:\n    a: sched\n"},
		}, func(t *testing.T, pod *corev1.Pod) {
			if pod.Labels["a"] != "2" || pod.Labels["b"] != "x" {
				t.Errorf("labels %v", pod.Labels)
			}
		}, ""},
		{"does not apply", []nodestate.PatchFile{{Name: "kube-apiserver+json.yaml", Content: "- op: replace\n  path: /spec/nothere/x\n  value: 1\n"}}, nil, "does not apply"},
		{"image", []nodestate.PatchFile{{Name: "kube-apiserver.yaml", Content: "spec:\n  containers:\n  - name: kube-apiserver\n    image: evil:1\n"}}, nil, "set images.kube-apiserver"},
		{"command", []nodestate.PatchFile{{Name: "kube-apiserver+merge.json", Content: `{"spec":{"containers":[{"name":"kube-apiserver","image":"registry.k8s.io/kube-apiserver:v1.37.2","command":["kube-apiserver"]}]}}`}}, nil, "extraArgs"},
		{"unknown field", []nodestate.PatchFile{{Name: "kube-apiserver+merge.yaml", Content: "spec:\n  hostNetwrk: true\n"}}, nil, "not a Pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := loadState(t, "current")
			st.Patches = &nodestate.Patches{Files: tc.files}
			pod, err := Render(st, Profile{}, nodestate.KubeAPIServer, "")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, pod)
			// Render stays pure: the same state gives the same bytes.
			a, _ := RenderBytes(st, Profile{}, nodestate.KubeAPIServer, "")
			b, _ := RenderBytes(st, Profile{}, nodestate.KubeAPIServer, "")
			if string(a) != string(b) {
				t.Error("two renders differ")
			}
			if ctrl, _ := Render(st, Profile{}, nodestate.ControllerManager, ""); ctrl.Labels["team"] != "" || ctrl.Labels["a"] != "" {
				t.Errorf("kube-apiserver's patch reached kube-controller-manager: %v", ctrl.Labels)
			}
		})
	}
}
