package adopt

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// checkKeeps runs Check on src and fails on any restart; then it checks
// that the state as the journal stores it (Marshal, Parse) renders every
// running pod again.
func checkKeeps(t *testing.T, src *Source) *Plan {
	t.Helper()
	p, err := Check(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range p.Components {
		if v.Restarts {
			t.Errorf("%s would restart: %s", v.Name, strings.Join(v.Why, "; "))
		}
	}
	b, err := p.State.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := nodestate.Parse(b)
	if err != nil {
		t.Fatalf("the adopted state does not parse: %v\n%s", err, b)
	}
	prof, err := manifest.LoadProfile(stored)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range src.Components() {
		pod, err := manifest.Render(stored, prof, c, "")
		if err != nil {
			t.Fatal(err)
		}
		if !kubeletpod.Same(src.Pods[c], pod) {
			t.Errorf("the stored state renders another %s: %v", c, kubeletpod.Diff(src.Pods[c], pod))
		}
	}
	return p
}

// kubeadm's CIS audit setup adopts without a restart; the volumes are
// kube-apiserver's extra volumes, the log directory written.
func TestAdoptAuditExtraVolumes(t *testing.T) {
	p := checkKeeps(t, auditFixture(t))
	st := p.State
	want := []nodestate.HostPathMount{
		{Name: "admission", HostPath: "/etc/kubernetes/admission", MountPath: "/etc/kubernetes/admission", ReadOnly: true},
		{Name: "audit-log", HostPath: "/var/log/kubernetes/audit", MountPath: "/var/log/kubernetes/audit", PathType: corev1.HostPathDirectoryOrCreate},
		{Name: "audit-policy", HostPath: "/etc/kubernetes/audit/policy.yaml", MountPath: "/etc/kubernetes/audit/policy.yaml", ReadOnly: true, PathType: corev1.HostPathFile},
	}
	if got := st.ExtraVolumes; len(got) != 1 || !reflect.DeepEqual(got[nodestate.KubeAPIServer], want) {
		t.Errorf("extraVolumes = %+v, want kube-apiserver's %+v", got, want)
	}
	if st.Patches != nil {
		t.Errorf("patches %+v: the extra volumes say it all", st.Patches)
	}
}

// kubeadm's extraEnvs (a proxy), on every component, sorted by name as
// kubeadm writes them.
func TestAdoptExtraEnvs(t *testing.T) {
	dir, cfg := copyFixture(t, "v1.37.2", "defaults")
	proxy := []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy.example:3128"}, {Name: "NO_PROXY", Value: "10.0.0.0/8,.svc"}}
	for _, c := range []string{nodestate.Etcd, nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		mutatePod(t, filepath.Join(dir, c+".yaml"), func(pod *corev1.Pod) {
			pod.Spec.Containers[0].Env = proxy
			if c == nodestate.Etcd {
				pod.Spec.Containers[0].Env = append(slices.Clone(proxy), corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}})
			}
		})
	}
	src, err := ReadKubeadm(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := checkKeeps(t, src).State
	if got := st.ExtraEnvs[nodestate.Scheduler]; !reflect.DeepEqual(got, []nodestate.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy.example:3128"}, {Name: "NO_PROXY", Value: "10.0.0.0/8,.svc"}}) {
		t.Errorf("extraEnvs.kube-scheduler = %+v", got)
	}
	if got := st.ExtraEnvs[nodestate.Etcd]; len(got) != 3 || got[2].ValueFrom == nil || got[2].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("extraEnvs.etcd = %+v", got)
	}
	if st.Patches != nil {
		t.Errorf("patches %+v", st.Patches)
	}
}

// What kubeadm's patches did: resources (a strategic patch) become the
// resources field, spelled as written; a label (a merge patch), a
// termination grace period and a removed CA volume are kept as one patch
// per component, which the state then renders.
func TestAdoptKubeadmPatches(t *testing.T) {
	dir, cfg := copyFixture(t, "v1.37.2", "custom-paths")
	mutatePod(t, filepath.Join(dir, "kube-apiserver.yaml"), func(pod *corev1.Pod) {
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{"memory": resource.MustParse("4Gi")},
		}
	})
	mutatePod(t, filepath.Join(dir, "kube-scheduler.yaml"), func(pod *corev1.Pod) {
		pod.Labels["team"] = "infra"
		grace := int64(45)
		pod.Spec.TerminationGracePeriodSeconds = &grace
	})
	mutatePod(t, filepath.Join(dir, "kube-controller-manager.yaml"), func(pod *corev1.Pod) {
		pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "etc-pki-tls-certs" })
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "etc-pki-tls-certs" })
	})
	// A quantity spelled otherwise than its canonical form: kubelet's
	// hash sees the spelling.
	edit(t, filepath.Join(dir, "etcd.yaml"), "        cpu: 100m\n        memory: 100Mi\n", "        cpu: 0.1\n        memory: 1073741824\n")
	src, err := ReadKubeadm(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := checkKeeps(t, src).State
	if got := st.Resources[nodestate.KubeAPIServer]; !reflect.DeepEqual(got, nodestate.Resources{Requests: map[string]string{"cpu": "500m", "memory": "1Gi"}, Limits: map[string]string{"memory": "4Gi"}}) {
		t.Errorf("resources.kube-apiserver = %+v", got)
	}
	if got := st.Resources[nodestate.Etcd].Requests; got["cpu"] != "0.1" || got["memory"] != "1073741824" {
		t.Errorf("resources.etcd requests = %v, want them as written: cpu 0.1, memory 1073741824", got)
	}
	var names []string
	for _, f := range st.Patches.Files {
		names = append(names, f.Name)
	}
	if want := []string{"kube-controller-manager-adopted+strategic.yaml", "kube-scheduler-adopted+strategic.yaml"}; !slices.Equal(names, want) {
		t.Fatalf("patches %v, want %v", names, want)
	}
	if c := st.Patches.Files[1].Content; !strings.Contains(c, "team: infra") || !strings.Contains(c, "terminationGracePeriodSeconds: 45") || strings.Contains(c, "command") {
		t.Errorf("kube-scheduler's patch:\n%s", c)
	}
	// The patch survives an upgrade: the next version's render keeps the
	// label and the new image.
	up := st.Clone()
	up.KubernetesVersion = "v1.37.3"
	up.Images[nodestate.Scheduler] = "registry.k8s.io/kube-scheduler:v1.37.3"
	pod, err := manifest.Render(up, manifest.Profile{}, nodestate.Scheduler, "")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels["team"] != "infra" || pod.Spec.Containers[0].Image != up.Images[nodestate.Scheduler] {
		t.Errorf("upgraded render: labels %v image %s", pod.Labels, pod.Spec.Containers[0].Image)
	}
}

// A kubeadm configuration without extraVolumes, extraEnvs or patches
// adopts without a pod field: the render is kubeadm's pod as it is. One
// with them gets some.
func TestKubeadmFixturesPodFields(t *testing.T) {
	for _, dir := range fixtures(t) {
		b, err := os.ReadFile(filepath.Join(dir, "kubeadm.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cfg := string(b)
		wants := strings.Contains(cfg, "extraVolumes:") || strings.Contains(cfg, "extraEnvs:") || strings.Contains(cfg, "patches:")
		st := check(t, dir).State
		has := st.ExtraVolumes != nil || st.ExtraEnvs != nil || st.Resources != nil || st.Patches != nil
		if has != wants {
			t.Errorf("%s: volumes %v envs %v resources %v patches %v; the configuration sets pod fields: %v", dir, st.ExtraVolumes, st.ExtraEnvs, st.Resources, st.Patches, wants)
		}
	}
}

// A dual-stack cluster, as kubeadm writes one (networking.serviceSubnet
// and podSubnet with one range of each family), adopts with both ranges.
func TestAdoptDualStack(t *testing.T) {
	dir, cfg := copyFixture(t, "v1.37.2", "custom-paths")
	edit(t, cfg, "serviceSubnet: 10.112.0.0/16", "serviceSubnet: 10.112.0.0/16,fd00:10:96::/112")
	edit(t, cfg, "podSubnet: 192.168.0.0/16", "podSubnet: 192.168.0.0/16,fd00:10:244::/56")
	edit(t, filepath.Join(dir, "kube-apiserver.yaml"), "--service-cluster-ip-range=10.112.0.0/16\n", "--service-cluster-ip-range=10.112.0.0/16,fd00:10:96::/112\n")
	cm := filepath.Join(dir, "kube-controller-manager.yaml")
	edit(t, cm, "--service-cluster-ip-range=10.112.0.0/16\n", "--service-cluster-ip-range=10.112.0.0/16,fd00:10:96::/112\n")
	edit(t, cm, "--cluster-cidr=192.168.0.0/16\n", "--cluster-cidr=192.168.0.0/16,fd00:10:244::/56\n")
	src, err := ReadKubeadm(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := checkKeeps(t, src)
	if n := p.State.Networking; n.ServiceCIDR != "10.112.0.0/16,fd00:10:96::/112" || n.PodCIDR != "192.168.0.0/16,fd00:10:244::/56" || len(p.State.ExtraArgs) != 0 || len(p.Notes) != 0 {
		t.Errorf("networking %+v, extra args %v, notes %v", n, p.State.ExtraArgs, p.Notes)
	}
}

// A volume the extraVolumes field refuses (its name is no DNS label) is
// kept by the component's patch instead: still no restart.
func TestAdoptUnexpressibleVolumeAsPatch(t *testing.T) {
	dir, cfg := copyFixture(t, "v1.37.2", "defaults")
	mutatePod(t, filepath.Join(dir, "kube-apiserver.yaml"), func(pod *corev1.Pod) {
		kubeadmExtraVolume(pod, "Audit_Log", "/var/log/audit", "/var/log/audit", false, corev1.HostPathDirectoryOrCreate)
		pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
	})
	src, err := ReadKubeadm(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := checkKeeps(t, src).State
	if st.ExtraVolumes != nil || st.ExtraEnvs != nil || st.Patches == nil || len(st.Patches.Files) != 1 ||
		!strings.Contains(st.Patches.Files[0].Content, "Audit_Log") || !strings.Contains(st.Patches.Files[0].Content, "name: A") {
		t.Errorf("volumes %v envs %v patches %+v", st.ExtraVolumes, st.ExtraEnvs, st.Patches)
	}
}
